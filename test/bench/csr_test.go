package bench

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/mooring-dev/mooring/test/harness"
)

// BenchmarkCSRApproval: with N Nodes initialized, N kubelet-serving CSRs
// are created as N different nodes (impersonation), 1% of them invalid;
// mooring's approver inside mooring-ccm decides them. It reports the time
// until all are decided, per-CSR latency, wrong decisions and cloud calls.
// With MOORING_BENCH_CCM_BASELINE naming another mooring-ccm binary (an
// earlier commit's, say), the benchmark measures that one and then this
// tree's, side by side in one run (go test -count repeats each in turn;
// see sideBySide).
func BenchmarkCSRApproval(b *testing.B) {
	n := nodeCount(b)
	sideBySide(b, func(b *testing.B, ccmBin, suffix string) { runCSRApproval(b, n, ccmBin, suffix) })
}

// sideBySide calls run b.N times with the mooring-ccm built from this tree
// (ccmBin ""). With MOORING_BENCH_CCM_BASELINE naming another mooring-ccm
// binary it runs sub-benchmarks: "baseline" with that binary, then
// "current" with this tree's; suffix ends their figures' labels.
func sideBySide(b *testing.B, run func(b *testing.B, ccmBin, suffix string)) {
	baseline := os.Getenv("MOORING_BENCH_CCM_BASELINE")
	if baseline == "" {
		for range b.N {
			run(b, "", "")
		}
		return
	}
	b.Run("baseline", func(b *testing.B) {
		for range b.N {
			run(b, baseline, " (baseline)")
		}
	})
	b.Run("current", func(b *testing.B) {
		for range b.N {
			run(b, "", " (current)")
		}
	})
}

// runCSRApproval measures one run with the mooring-ccm binary ccmBin (""
// for the one built from this tree); suffix ends the figures' labels.
func runCSRApproval(b *testing.B, n int, ccmBin, suffix string) {
	w := newWorld(b, worldOptions{instances: n, ccmBin: ccmBin})
	joined := joinNodes(b, w, n, 5*time.Minute+time.Duration(n)*100*time.Millisecond)
	b.Logf("%d nodes initialized in %v", n, joined)
	ctx, cancel := withTimeout(20 * time.Minute)
	defer cancel()
	nodes, err := w.c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	d := watchDecisions(b, w)
	// First every node at once, as fast as 32 clients can create them; then
	// a second certificate for each at a steady 100 per second.
	for _, round := range rounds() {
		reqs := make([]roundCSR, 0, n)
		for i := range nodes.Items {
			r, err := harness.MakeServingCSR(&nodes.Items[i], &nodes.Items[(i+1)%len(nodes.Items)], i)
			if err != nil {
				b.Fatal(err)
			}
			r.CSR.Name = strings.ReplaceAll(round.label, "/", "-per-") + "-" + r.CSR.Name
			reqs = append(reqs, roundCSR{name: r.CSR.Name, valid: r.Valid, flaw: r.Flaw, post: func(ctx context.Context, creating func()) error {
				creating()
				return r.Post(ctx, w.fast)
			}})
		}
		csrRound(ctx, b, w, d, reqs, round.rate, "serving CSR approval, "+round.label+suffix, fmt.Sprintf("as %d nodes", len(reqs)))
	}
}

// round is one round of CSRs: rate per second, or 0 for as fast as 32
// clients can create them.
type round struct {
	label string
	rate  float64
}

// rounds are the rounds of BenchmarkCSRApproval and BenchmarkAttestedJoin:
// first every node or machine at once, then every one again (a second
// certificate, or a join with a fresh key) at a steady 100 per second.
// MOORING_BENCH_PACED=0 leaves out the paced round (the tuning matrix,
// hack/bench-tuning.sh, compares bursts only).
func rounds() []round {
	all := []round{{"burst", 0}, {"100/s", 100}}
	if os.Getenv("MOORING_BENCH_PACED") == "0" {
		return all[:1]
	}
	return all
}

// roundCSR is one CSR of a round and the decision it should get.
type roundCSR struct {
	name  string
	valid bool
	// flaw says what is wrong with an invalid one; wantReason, when set, is
	// the reason it must be denied for.
	flaw, wantReason string
	// post makes and creates the CSR; it calls creating right before the
	// create, when the CSR's clock starts.
	post func(ctx context.Context, creating func()) error
}

// verdict is the first Approved or Denied condition of a CSR.
type verdict struct {
	approved bool
	reason   string
}

// decisions are the first Approved or Denied condition seen on each CSR.
type decisions struct {
	at       *stamps
	mu       sync.Mutex
	verdicts map[string]verdict
}

func watchDecisions(b *testing.B, w *world) *decisions {
	d := &decisions{at: newStamps(), verdicts: map[string]verdict{}}
	observe := func(obj any) {
		csr, ok := obj.(*certificatesv1.CertificateSigningRequest)
		if !ok {
			return
		}
		for _, c := range csr.Status.Conditions {
			if c.Type == certificatesv1.CertificateApproved || c.Type == certificatesv1.CertificateDenied {
				if d.at.setFirst(csr.Name, time.Now()) > 0 {
					d.mu.Lock()
					d.verdicts[csr.Name] = verdict{approved: c.Type == certificatesv1.CertificateApproved, reason: c.Reason}
					d.mu.Unlock()
				}
				return
			}
		}
	}
	follow(b, w, func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Certificates().V1().CertificateSigningRequests().Informer()
	}, observe)
	return d
}

func (d *decisions) decided(names []string) (n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, name := range names {
		if _, ok := d.verdicts[name]; ok {
			n++
		}
	}
	return n
}

// csrRound creates reqs (at rate per second; 0: as fast as possible) and
// waits until every one is decided. by says who created them.
func csrRound(ctx context.Context, b *testing.B, w *world, d *decisions, reqs []roundCSR, rate float64, bench, by string) {
	if err := w.lc.Client.ResetStats(ctx); err != nil {
		b.Fatal(err)
	}
	names := make([]string, len(reqs))
	for i, r := range reqs {
		names[i] = r.name
	}
	created := newStamps()
	listsBefore, err := viewLists(ctx, w)
	if err != nil {
		b.Fatal(err)
	}
	m := startMeter(ctx, b, w, bench)
	start := time.Now()
	err = harness.Parallel(ctx, len(reqs), 32, func(ctx context.Context, i int) error {
		if rate > 0 {
			// Each CSR at its slot of the steady schedule.
			time.Sleep(time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))))
		}
		r := reqs[i]
		if err := r.post(ctx, func() { created.set(r.name, time.Now()) }); err != nil {
			return fmt.Errorf("CSR %s: %w", r.name, err)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	createdIn := time.Since(start)
	if err := waitFor(ctx, func() (bool, error) { return d.decided(names) == len(names), nil }); err != nil {
		b.Fatalf("%s: %d of %d CSRs decided\n%s", bench, d.decided(names), len(names), w.ccm.LogTail(20))
	}
	defer m.stop(bench, len(reqs), "CSR", false)
	wrong, invalid := 0, 0
	// Invalid CSRs by flaw, in order of first appearance: how many, how
	// many denied, and the reasons given.
	type flawCount struct {
		n, denied int
		reasons   map[string]int64
	}
	var flaws []string
	byFlaw := map[string]*flawCount{}
	d.mu.Lock()
	for _, r := range reqs {
		v := d.verdicts[r.name]
		if !r.valid {
			invalid++
			f := byFlaw[r.flaw]
			if f == nil {
				f = &flawCount{reasons: map[string]int64{}}
				byFlaw[r.flaw] = f
				flaws = append(flaws, r.flaw)
			}
			f.n++
			if !v.approved {
				f.denied++
				f.reasons[v.reason]++
			}
		}
		if v.approved != r.valid || (!v.approved && r.wantReason != "" && v.reason != r.wantReason) {
			wrong++
			b.Errorf("CSR %s (%s): approved=%v (%s), want %v %s", r.name, r.flaw, v.approved, v.reason, r.valid, r.wantReason)
		}
	}
	d.mu.Unlock()
	var last time.Time
	d.at.mu.Lock()
	for _, name := range names {
		if t := d.at.m[name]; t.After(last) {
			last = t
		}
	}
	d.at.mu.Unlock()
	total := last.Sub(start)
	stats, err := w.lc.Client.Stats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	// The machines' own calls to their metadata services apart from the
	// cloud API calls (mooring's).
	calls, metadata := map[string]int64{}, map[string]int64{}
	for op, n := range stats.Calls {
		if strings.HasPrefix(op, "Metadata") {
			metadata[op] = n
		} else {
			calls[op] = n
		}
	}
	listsAfter, err := viewLists(ctx, w)
	if err != nil {
		b.Fatal(err)
	}
	lists := listsAfter - listsBefore
	lat := latencies(created, d.at)
	p50, p99 := harness.Percentile(lat, 50), harness.Percentile(lat, 99)
	b.Logf("%s: slowest CSRs: %s", bench, slowest(reqs, created, d.at, 3))
	b.ReportMetric(total.Seconds(), "all-decided-s")
	b.ReportMetric(p99.Seconds(), "p99-s")
	b.ReportMetric(lists, "cloud-lists")
	record(bench, fmt.Sprintf("%d CSRs created (%d invalid), %s", len(reqs), invalid, by), seconds(createdIn), "", false)
	record(bench, "all decided after", seconds(total), "< 60 s at 5,000", total < time.Minute)
	record(bench, "per CSR, created to decided", fmt.Sprintf("p50 %s, p99 %s", ms(p50), ms(p99)), "p99 < 2 s", p99 < 2*time.Second)
	record(bench, "wrong decisions", fmt.Sprint(wrong), "0", wrong == 0)
	if len(flaws) > 0 {
		parts := make([]string, 0, len(flaws))
		for _, f := range flaws {
			c := byFlaw[f]
			parts = append(parts, fmt.Sprintf("%s %d of %d (%s)", f, c.denied, c.n, harness.CallsString(c.reasons)))
		}
		record(bench, "invalid denied, by flaw (reasons)", strings.Join(parts, "; "), "", false)
	}
	record(bench, "cloud API calls", fmt.Sprintf("%d (%s), %.3f per CSR", sum(calls), harness.CallsString(calls), float64(sum(calls))/float64(len(reqs))), "", false)
	record(bench, "Lists of the cloud by the shared view (each as many ListInstances calls as it has pages)", fmt.Sprint(lists), "", false)
	if len(metadata) > 0 {
		record(bench, "metadata service calls (the machines')", fmt.Sprintf("%d (%s)", sum(metadata), harness.CallsString(metadata)), "", false)
	}
}

// slowest names the k CSRs of reqs that took longest from created to
// decided, with their flaws.
func slowest(reqs []roundCSR, created, decided *stamps, k int) string {
	type took struct {
		r roundCSR
		d time.Duration
	}
	var all []took
	created.mu.Lock()
	decided.mu.Lock()
	for _, r := range reqs {
		all = append(all, took{r, decided.m[r.name].Sub(created.m[r.name])})
	}
	decided.mu.Unlock()
	created.mu.Unlock()
	slices.SortFunc(all, func(a, b took) int { return cmp.Compare(b.d, a.d) })
	parts := make([]string, 0, k)
	for _, t := range all[:min(k, len(all))] {
		what := "valid"
		if !t.r.valid {
			what = t.r.flaw
		}
		parts = append(parts, fmt.Sprintf("%s (%s) %s", t.r.name, what, ms(t.d)))
	}
	return strings.Join(parts, ", ")
}

// approvedWithPrefix is when the first CSR named with prefix was seen
// approved.
func (d *decisions) approvedWithPrefix(prefix string) (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.at.mu.Lock()
	defer d.at.mu.Unlock()
	for name, v := range d.verdicts {
		if v.approved && strings.HasPrefix(name, prefix) {
			return d.at.m[name], true
		}
	}
	return time.Time{}, false
}
