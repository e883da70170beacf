package servicelb

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	syncs = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "mooring", Subsystem: "service_lb", Name: "syncs_total",
		Help: "Service load balancer syncs by result (ok, error, pending: the cloud is still building it).",
	}, []string{"result"})
	syncDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace: "mooring", Subsystem: "service_lb", Name: "sync_duration_seconds",
		Help:    "Time to sync one Service's load balancer.",
		Buckets: metrics.ExponentialBuckets(0.005, 3, 9),
	})
	sweeps = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "mooring", Subsystem: "service_lb", Name: "sweeps_total",
		Help: "Drift and leak sweeps of the cloud's load balancers by result (ok, error).",
	}, []string{"result"})
	drift = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "mooring", Subsystem: "service_lb", Name: "drift_repairs_total",
		Help: "Load balancers found missing or changed out of band and requeued, by kind.",
	}, []string{"kind"})
	collected = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "mooring", Subsystem: "service_lb", Name: "garbage_collected_total",
		Help: "Load balancers deleted because their Service is gone.",
	})
	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(syncs, syncDuration, sweeps, drift, collected) })
}
