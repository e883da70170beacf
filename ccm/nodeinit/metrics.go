package nodeinit

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// The library's cloud-node controller's two histograms, under mooring's
// names: the library registers its own (node_controller_*) when its package
// is linked, which it always is, so they stay at zero while this controller
// runs (docs/ccm.md). And the count of rebuilt writes.
var (
	taintRemovalDelay = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace:      "mooring",
		Subsystem:      "node_init",
		Name:           "taint_removal_delay_seconds",
		Help:           "Seconds from a Node's creation to the removal of its uninitialized taint by mooring's cloud-node controller (the library's node_controller_cloud_provider_taint_removal_delay_seconds).",
		Buckets:        metrics.ExponentialBuckets(1, 4, 6),
		StabilityLevel: metrics.ALPHA,
	})
	initialSyncDelay = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace:      "mooring",
		Subsystem:      "node_init",
		Name:           "initial_sync_delay_seconds",
		Help:           "Seconds from a Node's creation to the end of its initialization by mooring's cloud-node controller, addresses included (the library's node_controller_initial_node_sync_delay_seconds).",
		Buckets:        metrics.ExponentialBuckets(1, 4, 6),
		StabilityLevel: metrics.ALPHA,
	})
	rebuiltPatches = metrics.NewCounter(&metrics.CounterOpts{
		Namespace:      "mooring",
		Subsystem:      "node_init",
		Name:           "rebuilt_patches_total",
		Help:           "Node init patches the apiserver refused because what they tested had changed (another writer moved a taint, or a Node without labels changed), rebuilt from a fresh read.",
		StabilityLevel: metrics.ALPHA,
	})
	skippedStale = metrics.NewCounter(&metrics.CounterOpts{
		Namespace:      "mooring",
		Subsystem:      "node_init",
		Name:           "stale_skips_total",
		Help:           "Nodes queued again before the cache showed that mooring's cloud-node controller had removed their taint, left alone instead of judged from the stale copy.",
		StabilityLevel: metrics.ALPHA,
	})
)

var registerOnce sync.Once

func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(taintRemovalDelay, initialSyncDelay, rebuiltPatches, skippedStale)
	})
}
