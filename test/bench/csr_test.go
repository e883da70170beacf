package bench

import (
	"context"
	"fmt"
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
func BenchmarkCSRApproval(b *testing.B) {
	n := nodeCount(b)
	for range b.N {
		runCSRApproval(b, n)
	}
}

func runCSRApproval(b *testing.B, n int) {
	w := newWorld(b, worldOptions{instances: n})
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
	for _, round := range []struct {
		label string
		rate  float64
	}{{"burst", 0}, {"100/s", 100}} {
		reqs := make([]harness.ServingCSR, 0, n)
		for i := range nodes.Items {
			r, err := harness.MakeServingCSR(&nodes.Items[i], &nodes.Items[(i+1)%len(nodes.Items)], i)
			if err != nil {
				b.Fatal(err)
			}
			r.CSR.Name = strings.ReplaceAll(round.label, "/", "-per-") + "-" + r.CSR.Name
			reqs = append(reqs, r)
		}
		csrRound(ctx, b, w, d, reqs, round.rate, "serving CSR approval, "+round.label)
	}
}

// decisions are the first Approved or Denied condition seen on each CSR.
type decisions struct {
	at       *stamps
	mu       sync.Mutex
	approved map[string]bool
}

func watchDecisions(b *testing.B, w *world) *decisions {
	d := &decisions{at: newStamps(), approved: map[string]bool{}}
	observe := func(obj any) {
		csr, ok := obj.(*certificatesv1.CertificateSigningRequest)
		if !ok {
			return
		}
		for _, c := range csr.Status.Conditions {
			if c.Type == certificatesv1.CertificateApproved || c.Type == certificatesv1.CertificateDenied {
				if d.at.setFirst(csr.Name, time.Now()) > 0 {
					d.mu.Lock()
					d.approved[csr.Name] = c.Type == certificatesv1.CertificateApproved
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
		if _, ok := d.approved[name]; ok {
			n++
		}
	}
	return n
}

// csrRound creates reqs (at rate per second; 0: as fast as possible) and
// waits until every one is decided.
func csrRound(ctx context.Context, b *testing.B, w *world, d *decisions, reqs []harness.ServingCSR, rate float64, bench string) {
	if err := w.lc.Client.ResetStats(ctx); err != nil {
		b.Fatal(err)
	}
	names := make([]string, len(reqs))
	for i, r := range reqs {
		names[i] = r.CSR.Name
	}
	created := newStamps()
	start := time.Now()
	err := harness.Parallel(ctx, len(reqs), 32, func(ctx context.Context, i int) error {
		if rate > 0 {
			// Each CSR at its slot of the steady schedule.
			time.Sleep(time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))))
		}
		r := reqs[i]
		created.set(r.CSR.Name, time.Now())
		return r.Post(ctx, w.fast)
	})
	if err != nil {
		b.Fatal(err)
	}
	createdIn := time.Since(start)
	if err := waitFor(ctx, func() (bool, error) { return d.decided(names) == len(names), nil }); err != nil {
		b.Fatalf("%s: %d of %d CSRs decided\n%s", bench, d.decided(names), len(names), w.ccm.LogTail(20))
	}
	var last time.Time
	wrong, invalid := 0, 0
	d.mu.Lock()
	for _, r := range reqs {
		if !r.Valid {
			invalid++
		}
		if d.approved[r.CSR.Name] != r.Valid {
			wrong++
			b.Errorf("CSR %s (%s): approved=%v, want %v", r.CSR.Name, r.Flaw, d.approved[r.CSR.Name], r.Valid)
		}
	}
	d.mu.Unlock()
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
	lat := latencies(created, d.at)
	p50, p99 := percentile(lat, 50), percentile(lat, 99)
	calls := sum(stats.Calls)
	b.ReportMetric(total.Seconds(), "all-decided-s")
	b.ReportMetric(p99.Seconds(), "p99-s")
	record(bench, fmt.Sprintf("%d CSRs created (%d invalid), as %d nodes", len(reqs), invalid, len(reqs)), seconds(createdIn), "", false)
	record(bench, "all decided after", seconds(total), "< 60 s at 5,000", total < time.Minute)
	record(bench, "per CSR, created to decided", fmt.Sprintf("p50 %s, p99 %s", ms(p50), ms(p99)), "p99 < 2 s", p99 < 2*time.Second)
	record(bench, "wrong decisions", fmt.Sprint(wrong), "0", wrong == 0)
	record(bench, "cloud API calls", fmt.Sprintf("%d (%s)", calls, harness.CallsString(stats.Calls)), "", false)
}
