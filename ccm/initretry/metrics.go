package initretry

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	requeued = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "mooring", Subsystem: "ccm", Name: "init_requeued_total",
		Help: "Nodes waiting for initialization that were re-queued to the cloud-node controller because the cloud answered again.",
	})
	probes = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "mooring", Subsystem: "ccm", Name: "init_recovery_probes_total",
		Help: "Lists of the cloud made by the node-init-retry controller, while the view was failing and Nodes waited, to see the cloud answer again.",
	})
	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(requeued, probes) })
}
