package bench

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// face is one CCM on one cloud's API face (awstest, gcetest, azuretest),
// as a node-init run on it needs it.
type face struct {
	// provider is how the CCM is set up for the cloud (config, env).
	provider harness.Provider
	// bin is the CCM binary, name its process name, args its flags beyond
	// harness.RunCCM's.
	bin, name string
	args      []string
	// nodes are the Node names to register, one per instance made.
	nodes []string
	// calls are the cloud's API calls so far, by operation.
	calls func() map[string]int64
	// timeout bounds the run; strict makes a run that does not
	// initialize every Node within it fail the benchmark, else the run
	// is reported with the Nodes it did initialize.
	timeout time.Duration
	strict  bool
}

// faceRun is what one node-init run on a face measured.
type faceRun struct {
	n, done           int // Nodes registered, and initialized in time
	registered, total time.Duration
	lat               []time.Duration
	// calls are the API calls from the CCM's start until the last Node
	// was initialized (or the timeout), by operation.
	calls     map[string]int64
	conflicts float64 // Node writes refused with 409
	writes    float64 // apiserver writes (all clients)
	byWrite   string  // the largest of them by resource
	cpu       time.Duration
	rssMB     float64
	// lists are mooring-ccm's Lists of the cloud for its instance view,
	// with their time (all pages); none for another CCM.
	lists histogram
}

// runFace starts a bed, has build start the cloud with n instances and
// return the face, starts the CCM, registers the Nodes the way kubelets
// with --cloud-provider=external do (tainted, no providerID, Ready) from
// 32 clients at once, and measures until every one is initialized.
func runFace(b *testing.B, n int, build func(b *testing.B) face) faceRun {
	c := testbed.Start(b, testbed.Options{Controllers: []string{"-node-lifecycle-controller"}})
	f := build(b)
	ctx, cancel := withTimeout(f.timeout + 2*time.Minute)
	defer cancel()
	before := f.calls()
	args, ccmURL := f.args, ""
	if f.name == "mooring-ccm" {
		// Its secure port serves the view's metrics.
		var portArg string
		ccmURL, portArg = ccmSecurePort(b)
		args = append(slices.Clone(args), portArg)
	}
	ccm := harness.StartCCM(b, c, f.bin, f.provider, harness.CCMOptions{Cluster: benchCluster, Args: args, Name: f.name})
	if err := waitLeader(ctx, c.Client); err != nil {
		b.Fatalf("%s: %v\n%s", f.name, err, ccm.LogTail(30))
	}
	client, err := harness.FastClient(c)
	if err != nil {
		b.Fatal(err)
	}
	w := &world{c: c, ccm: ccm, fast: client, ccmURL: ccmURL}
	created := newStamps()
	done, all := watchNodes(b, w, f.nodes)
	writesBefore, err := apiserverWrites(ctx, c.Client)
	if err != nil {
		b.Fatal(err)
	}
	usageBefore, err := usage(ccm.PID())
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	regErr := make(chan error, 1)
	go func() {
		regErr <- harness.RegisterNodes(ctx, w.fast, f.nodes, harness.RegisterOptions{Created: created.set})
	}()
	r := faceRun{n: n}
	deadline := time.NewTimer(f.timeout)
	defer deadline.Stop()
	waiting := true
	for waiting {
		select {
		case err := <-regErr:
			if err != nil {
				b.Fatal(err)
			}
			r.registered = time.Since(start)
			regErr = nil
		case <-all:
			waiting = false
		case <-deadline.C:
			if f.strict {
				b.Fatalf("%s: %d of %d nodes initialized within %v\n%s", f.name, done.len(), n, f.timeout, ccm.LogTail(20))
			}
			b.Logf("%s: %d of %d nodes initialized within %v; measured as they are", f.name, done.len(), n, f.timeout)
			waiting = false
		}
	}
	r.total = time.Since(start)
	r.done = done.len()
	if regErr != nil {
		if err := <-regErr; err != nil {
			b.Fatal(err)
		}
		r.registered = time.Since(start)
	}
	after := f.calls()
	r.calls = map[string]int64{}
	for op, v := range after {
		if d := v - before[op]; d > 0 {
			r.calls[op] = d
		}
	}
	writesAfter, err := apiserverWrites(ctx, c.Client)
	if err != nil {
		b.Fatal(err)
	}
	usageAfter, err := usage(ccm.PID())
	if err != nil {
		b.Fatal(err)
	}
	r.lat = latencies(created, done)
	r.writes, r.byWrite = writesSince(writesBefore, writesAfter)
	r.conflicts = writesAfter[nodeConflicts] - writesBefore[nodeConflicts]
	r.cpu = usageAfter.cpu - usageBefore.cpu
	r.rssMB = usageAfter.hwmMB
	if ccmURL != "" {
		data, err := ccmGet(ctx, w, "/metrics", 30*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		r.lists = readHistogram(string(data), "mooring_cloud_view_list_duration_seconds", "")
	}
	return r
}

// record adds the figures every face reports to the table under bench;
// mooring's runs carry the targets.
func (r faceRun) record(bench, ccm string, mooring bool) {
	record(bench, fmt.Sprintf("%d nodes registered (simulated kubelets)", r.n), seconds(r.registered), "", false)
	initialized := seconds(r.total)
	if r.done < r.n {
		initialized = fmt.Sprintf("not all: %d of %d after %s", r.done, r.n, seconds(r.total))
	}
	perNode := fmt.Sprintf("p50 %s, p99 %s", ms(harness.Percentile(r.lat, 50)), ms(harness.Percentile(r.lat, 99)))
	if mooring {
		record(bench, "all initialized after", initialized, "< 60 s at 5,000 nodes", r.done == r.n && r.total < time.Minute)
		share := beyondRegistration(r.registered, r.total)
		record(bench, "time beyond registration alone", fmt.Sprintf("%.1f s, %.0f%% of registration's %s", (r.total-r.registered).Seconds(), 100*share,
			seconds(r.registered)), "< 10%", r.done == r.n && share < 0.1)
		record(bench, "per node, registration to initialized", perNode, "p99 < 2 s", r.done == r.n && harness.Percentile(r.lat, 99) < 2*time.Second)
		record(bench, "Node writes refused with 409 Conflict", fmt.Sprintf("%.0f", r.conflicts), "0", r.conflicts == 0)
	} else {
		record(bench, "all initialized after", initialized, "", false)
		record(bench, "per node, registration to initialized", perNode, "", false)
		record(bench, "Node writes refused with 409 Conflict", fmt.Sprintf("%.0f", r.conflicts), "", false)
	}
	record(bench, "apiserver writes during init (all clients)", fmt.Sprintf("%.0f (%s)", r.writes, r.byWrite), "", false)
	record(bench, ccm+" CPU during init", fmt.Sprintf("%.1f s, %.2f ms per node; peak RSS %.0f MB", r.cpu.Seconds(),
		float64(r.cpu.Microseconds())/1000/float64(r.n), r.rssMB), "", false)
	if r.lists.count > 0 {
		record(bench, "instance view: Lists of the cloud until all initialized, and their mean time (all pages)",
			fmt.Sprintf("%.0f, %s", r.lists.count, ms(time.Duration(r.lists.sum/r.lists.count*float64(time.Second)))), "", false)
	}
	record(bench, "load average at the end (1, 5, 15 min; 2 cores)", loadAverage(), "", false)
}

// loadAverage is the machine's load average now, from /proc/loadavg.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], ", ")
}

// beyondRegistration is how much longer than registration alone node init
// took, as a fraction of registration's time: what the CCM adds.
func beyondRegistration(registered, total time.Duration) float64 {
	if registered <= 0 {
		return 0
	}
	return max(0, (total-registered).Seconds()) / registered.Seconds()
}
