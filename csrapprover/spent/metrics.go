package spent

import (
	"strconv"
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	spends = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "mooring", Subsystem: "csr_approver", Name: "ticket_spends_total",
		Help: "Join tickets the approver tried to record as spent before approving them, by result: recorded, spent (by another CSR first: denied TicketSpent) or error (not recorded, so not approved; retried).",
	}, []string{"result"})
	entries = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "mooring", Subsystem: "csr_approver", Name: "spent_tickets",
		Help: "Entries in each spent-ticket ConfigMap after the approver's last write to it.",
	}, []string{"configmap"})
	shardBytes = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "mooring", Subsystem: "csr_approver", Name: "spent_tickets_bytes",
		Help: "Encoded size of each spent-ticket ConfigMap after the approver's last write to it (protobuf, as stored, managedFields included); a ConfigMap refuses new tickets past " + strconv.Itoa(MaxShardBytes) + " bytes.",
	}, []string{"configmap"})
	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(spends, entries, shardBytes) })
}
