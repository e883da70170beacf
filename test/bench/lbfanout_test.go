package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/mooring-dev/mooring/cloud/local/client"
	"github.com/mooring-dev/mooring/cloud/local/provider"
	"github.com/mooring-dev/mooring/test/harness"
)

// BenchmarkLBFanout: 100 LoadBalancer Services, then 100 nodes join
// (MOORING_BENCH_LB sets other counts: lbSizes); it
// counts the cloud calls that put every node behind every load balancer,
// with mooring's batched service controller and then with the library's
// stock one (--load-balancer-controller=library) on the same provider.
func BenchmarkLBFanout(b *testing.B) {
	services, nodes := lbSizes(b, 100)
	var mooringUpdates int64
	b.Run("mooring", func(b *testing.B) {
		for range b.N {
			mooringUpdates = runLBFanout(b, "mooring", services, nodes)
		}
	})
	b.Run("library", func(b *testing.B) {
		for range b.N {
			library := runLBFanout(b, "library", services, nodes)
			if mooringUpdates > 0 {
				record("LB fan-out, library", "load balancer updates, library / mooring (same run)",
					fmt.Sprintf("%.1fx", float64(library)/float64(mooringUpdates)), "", false)
			}
		}
	})
}

// runLBFanout measures one run with the named service controller and
// returns the load balancer updates the joins took.
func runLBFanout(b *testing.B, controller string, services, nodes int) int64 {
	bench := "LB fan-out, " + controller
	w := newWorld(b, worldOptions{instances: nodes, ccmArgs: []string{"--load-balancer-controller=" + controller}})
	ctx, cancel := withTimeout(10 * time.Minute)
	defer cancel()

	for i := range services {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("lb-%03d", i),
				// Few health checks: 100 x 100 backends every 2 s would load
				// this 2-core machine more than the controller under test.
				Annotations: map[string]string{provider.AnnotationHealthCheckInterval: "60"}},
			Spec: corev1.ServiceSpec{
				Type:  corev1.ServiceTypeLoadBalancer,
				Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
			},
		}
		if _, err := w.fast.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	if err := waitFor(ctx, func() (bool, error) {
		list, err := w.c.Client.CoreV1().Services("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		ready := 0
		for _, s := range list.Items {
			if len(s.Status.LoadBalancer.Ingress) > 0 {
				ready++
			}
		}
		return ready == services, nil
	}); err != nil {
		b.Fatalf("load balancers: %v\n%s", err, w.ccm.LogTail(20))
	}
	created := time.Since(start)
	createStats, err := w.lc.Client.Stats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if err := w.lc.Client.ResetStats(ctx); err != nil {
		b.Fatal(err)
	}

	start = time.Now()
	joinNodes(b, w, nodes, 5*time.Minute)
	// Done when the load balancer calls have stopped for three node batches.
	quiet := 15 * time.Second
	var last int64 = -1
	lastChange := time.Now()
	if err := waitFor(ctx, func() (bool, error) {
		s, err := w.lc.Client.Stats(ctx)
		if err != nil {
			return false, err
		}
		if n := s.Calls["EnsureLoadBalancer"]; n != last {
			last, lastChange = n, time.Now()
		}
		return time.Since(lastChange) > quiet, nil
	}); err != nil {
		b.Fatal(err)
	}
	settled := lastChange.Sub(start)
	stats, err := w.lc.Client.Stats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	// Checked after the count: this listing is a cloud call too.
	lbs, err := w.lc.Client.ListAllLoadBalancers(ctx, client.ListOptions{Cluster: benchCluster})
	if err != nil {
		b.Fatal(err)
	}
	complete := 0
	for _, lb := range lbs {
		if len(lb.Listeners) > 0 && len(lb.Listeners[0].Backends) == nodes {
			complete++
		}
	}
	if complete != services {
		b.Errorf("%d of %d load balancers have all %d nodes", complete, services, nodes)
	}
	updates := stats.Calls["EnsureLoadBalancer"]
	b.ReportMetric(float64(updates), "lb-updates")
	record(bench, fmt.Sprintf("%d load balancers created", services),
		fmt.Sprintf("%s, %d calls (%s)", seconds(created), sum(createStats.Calls), harness.CallsString(createStats.Calls)), "", false)
	record(bench, fmt.Sprintf("%d nodes join: load balancer updates", nodes),
		fmt.Sprintf("%d (%.1f per load balancer)", updates, float64(updates)/float64(services)), "", false)
	record(bench, "every node behind every load balancer after", seconds(settled), "", false)
	record(bench, "all cloud calls while nodes joined", fmt.Sprintf("%d (%s)", sum(stats.Calls), harness.CallsString(stats.Calls)), "", false)
	return updates
}

// waitFor polls cond every half second until it holds or ctx ends.
func waitFor(ctx context.Context, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
