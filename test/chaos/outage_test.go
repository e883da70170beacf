package chaos

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/test/harness"
)

// outageFreshness is how old the approver lets the cloud's record be (its
// --instance-max-age default, 10 s), plus the second granularity of
// condition times and a second of scheduling: an approval later than this
// after the cloud stopped answering was made without a fresh record.
const outageFreshness = 10*time.Second + 2*time.Second

// outageMaxCallRate bounds the cloud calls per second mooring-ccm may make
// while the cloud fails: its view refreshes and per-instance lookups back
// off, whatever the number of Nodes and CSRs waiting.
const outageMaxCallRate = 10

// metadataUp keeps the instances' metadata services answering while the
// cloud's API fails, as on real clouds, where they are separate services.
var metadataUp = map[string]api.OperationFault{"MetadataGetInstance": {}, "MetadataGetIdentity": {}}

// TestCloudOutageAndBrownOut (scenario 2): Nodes register, kubelets ask
// for serving certificates and new machines join while the cloud (a)
// refuses every call, (b) fails half of them slowly, (c) lists stale data
// (instances left out of lists but served by id). A third of the Nodes are
// NotReady, so mooring's cloud node lifecycle controller asks the cloud
// about them all along. Invariants: no Node is deleted; no CSR is approved
// without a record fresher than the approver's limit; nothing invalid is
// approved and nothing valid is denied; the faults really happened; the
// calls made during a fault stay under a bound (no retry storm). Figures:
// time to converge after each fault ends, calls made during it.
func TestCloudOutageAndBrownOut(t *testing.T) {
	o := report(t, "2. cloud outage, brown-out and stale lists")
	ctx, cancel := context.WithTimeout(context.Background(), span(12*time.Minute, 60*time.Minute))
	defer cancel()
	var (
		preCount = size(30, 500) // Nodes initialized before the faults
		perPhase = size(10, 170) // Nodes registering during each fault
		serving  = size(9, 160)  // serving CSRs of initialized Nodes per fault
		joins    = size(3, 30)   // attested joins per fault
		faultFor = span(30*time.Second, 2*time.Minute)
	)
	w := newWorld(t, ctx)
	pre := w.createInstances(t, ctx, "pre", preCount)
	preNames := instanceNames(pre)
	notReady := func(name string) bool { return slices.Index(preNames, name)%3 == 0 }
	if err := harness.RegisterNodes(ctx, w.fast, preNames, harness.RegisterOptions{NotReady: notReady}); err != nil {
		t.Fatal(err)
	}
	harness.WaitUntil(ctx, t, "the first Nodes initialized", func() (bool, error) {
		n, err := w.initializedCount(ctx, preNames)
		return n == len(preNames), err
	})
	registered := slices.Clone(preNames)

	var hidden []string // instances of NotReady Nodes, left out of lists in (c)
	for i, in := range pre {
		if i%3 == 0 && len(hidden) < 5 {
			hidden = append(hidden, in.ID)
		}
	}
	phases := []struct {
		key, label string
		faults     api.Faults
		mustWait   bool // nothing may be approved once the record is stale
	}{
		{"a", "every call refused", api.Faults{ErrorRate: 1, Operations: metadataUp}, true},
		{"b", "half the calls fail, 2 s latency", api.Faults{ErrorRate: 0.5, Latency: api.Duration(2 * time.Second), Operations: metadataUp}, false},
		{"c", "stale lists", api.Faults{StaleList: hidden}, false},
	}
	for k, ph := range phases {
		label := fmt.Sprintf("(%s) %s for %v", ph.key, ph.label, faultFor)
		fresh := w.createInstances(t, ctx, "node-"+ph.key, perPhase)
		joiners := w.createInstances(t, ctx, "join-"+ph.key, joins)
		reqs := outageServingCSRs(t, ctx, w, preNames[k*serving:(k+1)*serving], ph.key)
		if err := w.lc.Client.ResetStats(ctx); err != nil {
			t.Fatal(err)
		}
		if err := w.lc.Client.SetFaults(ctx, ph.faults); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		freshNames := instanceNames(fresh)
		if err := harness.RegisterNodes(ctx, w.fast, freshNames, harness.RegisterOptions{}); err != nil {
			t.Fatal(err)
		}
		registered = append(registered, freshNames...)
		for _, r := range reqs {
			if err := r.Post(ctx, w.fast); err != nil {
				t.Fatal(err)
			}
		}
		var joinCSRs []string
		for _, in := range joiners {
			j, err := harness.Join(ctx, w.c, in.Name, in.MetadataURL)
			if err != nil {
				t.Fatalf("%s: join of %s: %v", label, in.Name, err)
			}
			joinCSRs = append(joinCSRs, j.Name)
		}
		time.Sleep(time.Until(start.Add(faultFor)))
		stats, err := w.lc.Client.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		faultEnd := time.Now()

		// During the fault.
		decisions, err := w.csrDecisions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ph.mustWait {
			for name, d := range decisions {
				if d.approved && d.at.After(start.Add(outageFreshness)) {
					t.Errorf("%s: CSR %s approved at %v, %v into the outage: without a fresh record", label, name,
						d.at.Format(time.TimeOnly), d.at.Sub(start).Round(time.Second))
				}
			}
			o.check("(a) no CSR approved later than %v into the outage", outageFreshness)
		}
		switch {
		case ph.faults.ErrorRate > 0 && stats.Faulted == 0:
			t.Errorf("%s: no cloud call failed: the fault did not happen (%+v)", label, stats)
		case len(ph.faults.StaleList) > 0 && stats.StaleListed == 0:
			t.Errorf("%s: no list left an instance out: the fault did not happen (%+v)", label, stats)
		}
		calls := int64(0)
		for _, n := range stats.Calls {
			calls += n
		}
		rate := float64(calls) / faultEnd.Sub(start).Seconds()
		if ph.faults.ErrorRate > 0 && rate > outageMaxCallRate {
			t.Errorf("%s: %d cloud calls in %v (%.1f/s, bound %d/s): a retry storm (%v)", label, calls,
				faultEnd.Sub(start).Round(time.Second), rate, outageMaxCallRate, stats.Calls)
		}
		o.figure(t, "cloud calls during "+label, "%d (%.1f/s; %d failed by the fault, %d instances left out of lists): %s",
			calls, rate, stats.Faulted, stats.StaleListed, harness.CallsString(stats.Calls))

		// After it.
		if err := w.lc.Client.ClearFaults(ctx); err != nil {
			t.Fatal(err)
		}
		recovered := time.Now()
		want := append(slices.Clone(joinCSRs), servingNames(reqs)...)
		harness.WaitUntil(ctx, t, label+": every Node initialized and every CSR decided after recovery", func() (bool, error) {
			n, err := w.initializedCount(ctx, freshNames)
			if err != nil || n < len(freshNames) {
				return false, err
			}
			return w.allDecided(ctx, want)
		})
		o.figure(t, "converged after "+label, "%.1f s (%d Nodes initialized, %d serving CSRs and %d joins decided)",
			time.Since(recovered).Seconds(), len(freshNames), len(reqs), len(joinCSRs))
		decisions, err = w.csrDecisions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range reqs {
			d := decisions[r.CSR.Name]
			if d.approved != r.Valid || d.conditions != 1 {
				t.Errorf("%s: serving CSR %s (valid %v %s): %+v", label, r.CSR.Name, r.Valid, r.Flaw, d)
			}
		}
		for _, name := range joinCSRs {
			if d := decisions[name]; !d.approved || d.reason != "MooringApproved" || d.conditions != 1 {
				t.Errorf("%s: attested join %s: %+v, want approved by mooring", label, name, d)
			}
		}
		missing, err := w.missingNodes(ctx, registered)
		if err != nil {
			t.Fatal(err)
		}
		if len(missing) > 0 {
			t.Fatalf("%s: Nodes deleted: %v", label, missing)
		}
	}
	o.check("no Node deleted (%d registered, a third of the first NotReady)", len(registered))
	o.check("the faults happened: calls failed in (a) and (b), instances left out of lists in (c)")
	o.check("no more than %d cloud calls/s while the cloud failed", outageMaxCallRate)
	o.check("after each fault: every Node initialized, every valid CSR approved, every invalid one denied, each with one condition")

	// Two more lifecycle periods without faults: still nothing deleted.
	time.Sleep(12 * time.Second)
	if missing, err := w.missingNodes(ctx, registered); err != nil || len(missing) > 0 {
		t.Fatalf("Nodes deleted after the faults: %v (%v)", missing, err)
	}
}

func instanceNames(ins []*api.Instance) []string {
	out := make([]string, len(ins))
	for i, in := range ins {
		out[i] = in.Name
	}
	return out
}

// outageServingCSRs makes a serving CSR for each named (initialized) Node,
// the last one claiming another Node's address (invalid), named after the
// phase.
func outageServingCSRs(t *testing.T, ctx context.Context, w *world, names []string, phase string) []harness.ServingCSR {
	t.Helper()
	var nodes []*corev1.Node
	for _, name := range names {
		n, err := w.c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	var out []harness.ServingCSR
	for i, n := range nodes {
		flaw := 0 // valid
		if i == len(nodes)-1 {
			flaw = 250 // an address of another node
		}
		r, err := harness.MakeServingCSR(n, nodes[(i+1)%len(nodes)], flaw)
		if err != nil {
			t.Fatal(err)
		}
		r.CSR.Name = "serving-" + phase + "-" + n.Name
		out = append(out, r)
	}
	return out
}

func servingNames(reqs []harness.ServingCSR) []string {
	out := make([]string, len(reqs))
	for i, r := range reqs {
		out[i] = r.CSR.Name
	}
	return out
}
