package view

import (
	"sync"

	"k8s.io/klog/v2"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// The view's metrics go to the process-wide registry that the CCM and the
// approver serve on /metrics; several views in one process share them.
var (
	listCalls = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "mooring", Subsystem: "cloud_view", Name: "list_calls_total",
		Help: "Lists of the cloud's instances made to refresh the shared view, by result (ok, error; held-back: not made, because Lists back off while the cloud fails).",
	}, []string{"result"})
	listDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace: "mooring", Subsystem: "cloud_view", Name: "list_duration_seconds",
		Help:    "Time to list every instance of the cluster, all pages.",
		Buckets: metrics.ExponentialBuckets(0.005, 3, 9),
	})
	lookups = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "mooring", Subsystem: "cloud_view", Name: "lookups_total",
		Help: "Instance lookups by key kind and result (hit, refreshed, miss, error).",
	}, []string{"by", "result"})
	instances = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "mooring", Subsystem: "cloud_view", Name: "instances",
		Help: "Instances in the newest snapshot.",
	})
	recoveries = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "mooring", Subsystem: "cloud_view", Name: "recoveries_total",
		Help: "Lists that succeeded after one or more failed: the cloud answering again.",
	})
	ambiguousInstances = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "mooring", Subsystem: "cloud_view", Name: "ambiguous_instances",
		Help: "Instances not terminated that list under one providerID in the newest snapshot (a cloned VM that kept its BIOS UUID), by providerID and the instances' names, ids and states: mooring approves, initializes and deletes for none of them until one remains.",
	}, []string{"provider_id", "instances"})
	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(listCalls, listDuration, lookups, instances, recoveries, ambiguousInstances)
	})
}

// logTwins says which instances share a providerID, when that changes.
func logTwins(providerID, instances string) {
	klog.ErrorS(nil, "Instances share one providerID; mooring approves, initializes and deletes for none of them until one remains (a clone that kept its BIOS UUID: give it a new one)",
		"providerID", providerID, "instances", instances)
}
