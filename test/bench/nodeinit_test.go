// Package bench holds mooring's benchmarks on the real test bed: a real
// control plane, the local cloud and mooring-ccm as processes, figures
// printed and reported as benchmark metrics. Run them with `make bench`.
package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

const (
	benchCluster       = "bench"
	uninitializedTaint = "node.cloudprovider.kubernetes.io/uninitialized"
)

// nodeCount is MOORING_BENCH_NODES, default 100.
func nodeCount(b *testing.B) int {
	if v := os.Getenv("MOORING_BENCH_NODES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("MOORING_BENCH_NODES=%q", v)
		}
		return n
	}
	return 100
}

// BenchmarkCCMNodeInit registers N Nodes the way kubelets with
// --cloud-provider=external do (tainted uninitialized, no addresses) for N
// local-cloud instances, and measures how long mooring-ccm takes to
// initialize them and what it costs the cloud, then what the periodic
// address sweep and lifecycle checks cost in steady state.
func BenchmarkCCMNodeInit(b *testing.B) {
	n := nodeCount(b)
	ccmBin := harness.BuildBinary(b, "ccm/cmd/mooring-ccm")
	cloudBin := harness.BuildBinary(b, "cloud/local/cmd/mooring-localcloud")
	for range b.N {
		runNodeInit(b, n, ccmBin, cloudBin)
	}
}

func runNodeInit(b *testing.B, n int, ccmBin, cloudBin string) {
	c := testbed.Start(b, testbed.Options{})
	lc := harness.StartLocalCloud(b, c, cloudBin)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for i := range n {
		if _, err := lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: nodeName(i), Cluster: benchCluster}); err != nil {
			b.Fatal(err)
		}
	}
	const sweepPeriod = 10 * time.Second
	harness.StartCCM(b, c, ccmBin, lc, harness.CCMOptions{
		Cluster: benchCluster,
		Args:    []string{"--node-status-update-frequency=" + sweepPeriod.String(), "--concurrent-node-syncs=10"},
	})
	// Let the CCM take its lease and sync its informers before the clock runs.
	time.Sleep(3 * time.Second)
	if err := lc.Client.ResetStats(ctx); err != nil {
		b.Fatal(err)
	}

	created := make(map[string]time.Time, n)
	initialized := make(map[string]time.Duration, n)
	var mu sync.Mutex
	allDone := make(chan struct{})
	observe := func(obj any) {
		node, ok := obj.(*corev1.Node)
		if !ok || hasTaint(node, uninitializedTaint) || node.Spec.ProviderID == "" || len(node.Status.Addresses) < 2 {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if _, seen := initialized[node.Name]; seen {
			return
		}
		initialized[node.Name] = time.Since(created[node.Name])
		if len(initialized) == n {
			close(allDone)
		}
	}
	informerCtx, stopInformers := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactory(c.Client, 0)
	inf := factory.Core().V1().Nodes().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, cur any) { observe(cur) },
	}); err != nil {
		b.Fatal(err)
	}
	factory.Start(informerCtx.Done())
	defer factory.Shutdown() // after stopInformers: Shutdown waits for the informers to stop
	defer stopInformers()
	factory.WaitForCacheSync(ctx.Done())

	// Kubelets register in parallel; one client at client-go's default 5 QPS
	// would make the benchmark measure itself.
	fast := rest.CopyConfig(c.AdminConfig)
	fast.QPS, fast.Burst = 500, 500
	creator, err := kubernetes.NewForConfig(fast)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	go func() {
		for i := range n {
			node := &corev1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: nodeName(i), Labels: map[string]string{corev1.LabelHostname: nodeName(i)}},
				Spec: corev1.NodeSpec{Taints: []corev1.Taint{{
					Key: uninitializedTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule,
				}}},
			}
			mu.Lock()
			created[node.Name] = time.Now()
			mu.Unlock()
			if _, err := creator.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
				b.Error(err)
				return
			}
		}
	}()
	select {
	case <-allDone:
	case <-ctx.Done():
		mu.Lock()
		b.Fatalf("%d of %d nodes initialized before the timeout", len(initialized), n)
	}
	var latencies []time.Duration
	mu.Lock()
	for _, d := range initialized {
		latencies = append(latencies, d)
	}
	mu.Unlock()
	total := time.Since(start)
	initStats, err := lc.Client.Stats(ctx)
	if err != nil {
		b.Fatal(err)
	}

	// Steady state: every node is checked by the address sweep (every
	// sweepPeriod here, 5 min by default) and, having no kubelet, by the
	// lifecycle controller every 5 s.
	if err := lc.Client.ResetStats(ctx); err != nil {
		b.Fatal(err)
	}
	const window = 30 * time.Second
	time.Sleep(window)
	steady, err := lc.Client.Stats(ctx)
	if err != nil {
		b.Fatal(err)
	}

	slices.Sort(latencies)
	p50, p99 := percentile(latencies, 50), percentile(latencies, 99)
	initCalls, steadyCalls := sum(initStats.Calls), sum(steady.Calls)
	perNodePer5m := float64(steadyCalls) / float64(n) * (5 * time.Minute).Seconds() / window.Seconds()
	b.ReportMetric(total.Seconds(), "init-s")
	b.ReportMetric(p50.Seconds(), "p50-s")
	b.ReportMetric(p99.Seconds(), "p99-s")
	b.ReportMetric(float64(initCalls), "init-cloud-calls")
	b.ReportMetric(perNodePer5m, "steady-calls/node/5m")
	fmt.Printf("\nmooring-ccm node init, %d nodes\n", n)
	fmt.Printf("  %-34s %v\n", "all initialized after", total.Round(time.Millisecond))
	fmt.Printf("  %-34s p50 %v, p99 %v\n", "per node", p50.Round(time.Millisecond), p99.Round(time.Millisecond))
	fmt.Printf("  %-34s %d %v\n", "cloud calls during init", initCalls, initStats.Calls)
	fmt.Printf("  %-34s %d %v (sweep every %v, lifecycle every 5s)\n", fmt.Sprintf("cloud calls in %v steady state", window),
		steadyCalls, steady.Calls, sweepPeriod)
	fmt.Printf("  %-34s %.4f\n", "steady calls per node per 5 min", perNodePer5m)
}

func nodeName(i int) string { return fmt.Sprintf("node-%04d", i) }

func hasTaint(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[max(0, min(len(sorted)-1, i-1))]
}

func sum(m map[string]int64) int64 {
	var s int64
	for _, v := range m {
		s += v
	}
	return s
}
