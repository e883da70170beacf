package bench

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooring-dev/mooring/test/harness"
)

// BenchmarkNodeInit registers N Nodes the way kubelets with
// --cloud-provider=external do, for N local-cloud instances, and measures
// how long mooring-ccm takes to initialize them, what it costs the cloud
// and the apiserver, and then what steady state costs the cloud.
//
// mooring: mooring's cloud-node controller (ccm/nodeinit: patches without a
// resourceVersion) over mooring's provider, whose lookups share one cached,
// paginated List of the cloud.
// stock: the library's cloud-node controller (--node-init-controller=library)
// over the same provider in instanceLookup=direct mode: one cloud call per
// node per lookup, as stock providers make.
//
// go test -count=N runs each mode N times in turn (mooring's runs first):
// the k-th stock run is compared with the k-th mooring run, and only each
// mode's first run measures the steady state (a fixed window of calls).
func BenchmarkNodeInit(b *testing.B) {
	n := nodeCount(b)
	var mooringTotals []time.Duration
	b.Run("mooring", func(b *testing.B) {
		for range b.N {
			mooringTotals = append(mooringTotals, runNodeInit(b, n, "mooring", "", len(mooringTotals) == 0))
		}
	})
	stockRuns := 0
	b.Run("stock", func(b *testing.B) {
		for range b.N {
			stock := runNodeInit(b, n, "stock", "instanceLookup: direct\n", stockRuns == 0)
			if stockRuns < len(mooringTotals) && mooringTotals[stockRuns] > 0 && stock > 0 {
				ratio := stock.Seconds() / mooringTotals[stockRuns].Seconds()
				b.ReportMetric(ratio, "stock/mooring")
				record("node init, stock", "time to initialize all, stock / mooring (the same run's)", fmt.Sprintf("%.1fx", ratio), "", false)
			}
			stockRuns++
		}
	})
	b.Run("registered", func(b *testing.B) {
		for range b.N {
			runNodeInitRegistered(b, n)
		}
	})
}

// runNodeInitRegistered measures the init of n Nodes registered before
// mooring-ccm starts, from its start until all are initialized, and in the
// same run the time the unthrottled client takes to make the same writes
// on n other registered Nodes (bare-0000 ..., made first, then deleted
// before mooring-ccm's Nodes register), at each of bareNodeInitWorkers:
// the faster is the apiserver's own capacity.
func runNodeInitRegistered(b *testing.B, n int) {
	const bench = "node init, registered first"
	w := newWorld(b, worldOptions{instances: n, deferCCM: true})
	ctx, cancel := withTimeout(20*time.Minute + time.Duration(n)*200*time.Millisecond)
	defer cancel()
	bare := make([]string, n)
	names := make([]string, n)
	for i := range names {
		bare[i], names[i] = fmt.Sprintf("bare-%04d", i), nodeName(i)
	}
	// The benchmark's own watch of Nodes and the nodes' Lease renewals run
	// through every round, so that the bare client's writes meet the same
	// load besides as mooring's do.
	done, all := watchNodes(b, w, names)
	leases := startLeaseProbe(ctx, b, w, names)
	var bareRan bareRun
	for _, workers := range bareNodeInitWorkers {
		if err := harness.RegisterNodes(ctx, w.fast, bare, harness.RegisterOptions{}); err != nil {
			b.Fatal(err)
		}
		leases.Reset()
		apf := apfNow(ctx, b, w)
		at := fmt.Sprintf("%d at a time", workers)
		prof := profileAPIServer(ctx, w, bench+", unthrottled client "+at)
		ran, err := bareNodeInit(ctx, w, bare, workers)
		if err != nil {
			b.Fatal(err)
		}
		if prof != nil {
			b.Log(<-prof)
		}
		recordBare(bench, fmt.Sprintf("the same writes on %d other Nodes, %s", n, at), ran)
		recordAPF(ctx, b, w, bench, "the unthrottled client", ", "+at, apf)
		recordLeases(b, bench, leases, ", during the unthrottled client's writes "+at, false)
		if bareRan.took == 0 || ran.took < bareRan.took {
			bareRan = ran
		}
		if err := harness.Parallel(ctx, n, 32, func(ctx context.Context, i int) error {
			return w.fast.CoreV1().Nodes().Delete(ctx, bare[i], metav1.DeleteOptions{})
		}); err != nil {
			b.Fatal(err)
		}
	}
	regStart := time.Now()
	if err := harness.RegisterNodes(ctx, w.fast, names, harness.RegisterOptions{}); err != nil {
		b.Fatal(err)
	}
	registered := time.Since(regStart)
	writesBefore, err := apiserverWrites(ctx, w.c.Client)
	if err != nil {
		b.Fatal(err)
	}
	if err := w.lc.Client.ResetStats(ctx); err != nil {
		b.Fatal(err)
	}
	leases.Reset()
	apf := apfNow(ctx, b, w)
	start := w.startCCM(b)
	m := startMeter(ctx, b, w, bench)
	select {
	case <-all:
	case <-ctx.Done():
		b.Fatalf("%d of %d nodes initialized\n%s", done.len(), n, w.ccm.LogTail(20))
	}
	total := time.Since(start)
	leases.Stop()
	leader, err := leaderAt(ctx, w.c.Client)
	if err != nil {
		b.Fatal(err)
	}
	writesAfter, err := apiserverWrites(ctx, w.c.Client)
	if err != nil {
		b.Fatal(err)
	}
	stats, err := w.lc.Client.Stats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	writes, byResource := writesSince(writesBefore, writesAfter)
	b.ReportMetric(total.Seconds(), "init-s")
	b.ReportMetric(bareRan.took.Seconds(), "bare-s")
	record(bench, fmt.Sprintf("%d nodes registered before mooring-ccm starts", n), seconds(registered), "", false)
	record(bench, "mooring-ccm's start to all initialized", fmt.Sprintf("%s (lease taken after %s)", seconds(total), seconds(leader.Sub(start))), "", false)
	recordRatio(b, bench, "the same writes (the faster)", total, leader.Sub(start), bareRan.took)
	recordLeases(b, bench, leases, "", true)
	recordAPF(ctx, b, w, bench, "mooring-ccm", "", apf)
	record(bench, "apiserver writes during init (all clients)", fmt.Sprintf("%.0f (%s)", writes, byResource), "", false)
	record(bench, "Node writes refused with 409 Conflict", fmt.Sprintf("%.0f", writesAfter[nodeConflicts]-writesBefore[nodeConflicts]), "0",
		writesAfter[nodeConflicts] == writesBefore[nodeConflicts])
	record(bench, "cloud API calls during init", fmt.Sprintf("%d (%s)", sum(stats.Calls), harness.CallsString(stats.Calls)), "", false)
	m.stop(bench, n, "node", false)
}

// runNodeInit runs one node init measurement and returns the time until
// every Node was initialized.
func runNodeInit(b *testing.B, n int, mode, cloudConfig string, steady bool) time.Duration {
	bench := "node init, " + mode
	opts := worldOptions{instances: n, cloudConfig: cloudConfig}
	if mode == "stock" {
		// Stock is the library's cloud-node controller too.
		opts.ccmArgs = []string{"--node-init-controller=library"}
	}
	w := newWorld(b, opts)
	// Stock pays one call per node: at 10 calls/s that alone is n/10 s.
	timeout := 5*time.Minute + time.Duration(n)*400*time.Millisecond
	ctx, cancel := withTimeout(timeout)
	defer cancel()

	names := make([]string, n)
	for i := range names {
		names[i] = nodeName(i)
	}
	created := newStamps()
	done, all := watchNodes(b, w, names)

	writesBefore, err := apiserverWrites(ctx, w.c.Client)
	if err != nil {
		b.Fatal(err)
	}
	usageBefore, err := usage(w.ccm.PID())
	if err != nil {
		b.Fatal(err)
	}
	leases := startLeaseProbe(ctx, b, w, names)
	apf := apfNow(ctx, b, w)
	m := startMeter(ctx, b, w, bench)
	start := time.Now()
	regErr := make(chan error, 1)
	go func() {
		regErr <- harness.RegisterNodes(ctx, w.fast, names, harness.RegisterOptions{Created: created.set})
	}()
	registered := time.Duration(0)
	select {
	case err := <-regErr:
		if err != nil {
			b.Fatal(err)
		}
		registered = time.Since(start)
	case <-all:
	}
	select {
	case <-all:
	case <-ctx.Done():
		b.Fatalf("%s: %d of %d nodes initialized within %v\n%s", mode, done.len(), n, timeout, w.ccm.LogTail(20))
	}
	total := time.Since(start)
	leases.Stop()
	if registered == 0 {
		if err := <-regErr; err != nil {
			b.Fatal(err)
		}
		registered = total
	}
	stats, err := w.lc.Client.Stats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	writesAfter, err := apiserverWrites(ctx, w.c.Client)
	if err != nil {
		b.Fatal(err)
	}
	usageAfter, err := usage(w.ccm.PID())
	if err != nil {
		b.Fatal(err)
	}
	lat := latencies(created, done)
	calls := sum(stats.Calls)
	writes, byResource := writesSince(writesBefore, writesAfter)
	cpu := usageAfter.cpu - usageBefore.cpu

	b.ReportMetric(total.Seconds(), "init-s")
	b.ReportMetric(float64(calls), "cloud-calls")
	record(bench, fmt.Sprintf("%d nodes registered (simulated kubelets)", n), seconds(registered), "", false)
	if mode == "mooring" {
		record(bench, "all initialized after", seconds(total), "< 60 s at 5,000 nodes", total < time.Minute)
		share := beyondRegistration(registered, total)
		record(bench, "time beyond registration alone", fmt.Sprintf("%.1f s, %.0f%% of registration's %s", (total-registered).Seconds(), 100*share,
			seconds(registered)), "< 10%", share < 0.1)
		record(bench, "cloud API calls during init", fmt.Sprintf("%d (%s)", calls, harness.CallsString(stats.Calls)), "< 50 at 5,000 nodes", calls < 50)
	} else {
		record(bench, "all initialized after", seconds(total), "", false)
		record(bench, "cloud API calls during init", fmt.Sprintf("%d (%s)", calls, harness.CallsString(stats.Calls)), "", false)
	}
	if mode == "mooring" {
		record(bench, "per node, registration to initialized", fmt.Sprintf("p50 %s, p99 %s", ms(harness.Percentile(lat, 50)), ms(harness.Percentile(lat, 99))),
			"p99 < 2 s", harness.Percentile(lat, 99) < 2*time.Second)
	} else {
		record(bench, "per node, registration to initialized", fmt.Sprintf("p50 %s, p99 %s", ms(harness.Percentile(lat, 50)), ms(harness.Percentile(lat, 99))), "", false)
	}
	recordLeases(b, bench, leases, "", mode == "mooring")
	record(bench, "cloud calls refused by the limit (429)", fmt.Sprint(stats.Throttled), "", false)
	record(bench, "apiserver writes during init (all clients)", fmt.Sprintf("%.0f (%s)", writes, byResource), "", false)
	conflicts := writesAfter[nodeConflicts] - writesBefore[nodeConflicts]
	b.ReportMetric(conflicts, "node-409s")
	if mode == "mooring" {
		record(bench, "Node writes refused with 409 Conflict", fmt.Sprintf("%.0f", conflicts), "0", conflicts == 0)
	} else {
		record(bench, "Node writes refused with 409 Conflict", fmt.Sprintf("%.0f", conflicts), "", false)
	}
	recordNodeQueue(ctx, b, w, bench)
	recordAPF(ctx, b, w, bench, "mooring-ccm", "", apf)
	m.stop(bench, n, "node", mode == "mooring")
	record(bench, "mooring-ccm CPU during init", fmt.Sprintf("%.1f s (%.0f%% of one core), %.2f ms per node", cpu.Seconds(),
		100*cpu.Seconds()/total.Seconds(), float64(cpu.Microseconds())/1000/float64(n)), "", false)
	record(bench, "mooring-ccm memory (RSS now, peak)", fmt.Sprintf("%.0f MB, %.0f MB; %.1f MB per 1,000 nodes", usageAfter.rssMB, usageAfter.hwmMB,
		usageAfter.rssMB*1000/float64(n)), "", false)
	b.Logf("%s: %d nodes initialized in %v with %d cloud calls", mode, n, total, calls)

	if steady {
		measureSteady(b, w, n, bench)
	}
	return total
}

// steadyWindow is MOORING_BENCH_STEADY (a duration), default 5m: as long
// as the default address sweep period, so the window holds one sweep. 0
// skips the steady-state measurement.
func steadyWindow(b *testing.B) time.Duration {
	v := os.Getenv("MOORING_BENCH_STEADY")
	if v == "" {
		return 5 * time.Minute
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		b.Fatalf("MOORING_BENCH_STEADY=%q: want a duration", v)
	}
	return d
}

// measureSteady counts mooring-ccm's cloud calls over the steady window
// with every node initialized and Ready, at its default periods: the
// address sweep (5 min), node lifecycle (5 s) and the load balancer drift
// sweep (1 min).
func measureSteady(b *testing.B, w *world, n int, bench string) {
	window := steadyWindow(b)
	if window == 0 {
		return
	}
	ctx, cancel := withTimeout(window + time.Minute)
	defer cancel()
	if err := w.lc.Client.ResetStats(ctx); err != nil {
		b.Fatal(err)
	}
	time.Sleep(window)
	stats, err := w.lc.Client.Stats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if exited, _ := w.ccm.Exited(); exited {
		b.Fatalf("mooring-ccm exited during the steady window\n%s", w.ccm.LogTail(20))
	}
	calls := sum(stats.Calls)
	per5m := float64(calls) / float64(n) * (5 * time.Minute).Seconds() / window.Seconds()
	b.ReportMetric(per5m, "steady-calls/node/5m")
	record(bench, fmt.Sprintf("steady state: cloud calls in %v at default periods", window),
		fmt.Sprintf("%d (%s)", calls, harness.CallsString(stats.Calls)), "", false)
	record(bench, "steady state: calls per node per 5 min", fmt.Sprintf("%.4f (%.3f per node per hour)", per5m, per5m*12),
		"< 0.01", per5m < 0.01)
}
