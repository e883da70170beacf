package spent

import (
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
		Help: "Entries in each spent-ticket ConfigMap after the approver's last write to it (a shard refuses new entries at 6000).",
	}, []string{"configmap"})
	registerOnce sync.Once
)

func registerMetrics() { registerOnce.Do(func() { legacyregistry.MustRegister(spends, entries) }) }
