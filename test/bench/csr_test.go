package bench

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
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

// servingCSR is one simulated kubelet's request.
type servingCSR struct {
	node, requester string
	csr             *certificatesv1.CertificateSigningRequest
	valid           bool
	flaw            string
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
		reqs := make([]servingCSR, 0, n)
		for i := range nodes.Items {
			r, err := makeServingCSR(&nodes.Items[i], &nodes.Items[(i+1)%len(nodes.Items)], i)
			if err != nil {
				b.Fatal(err)
			}
			r.csr.Name = strings.ReplaceAll(round.label, "/", "-per-") + "-" + r.csr.Name
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
func csrRound(ctx context.Context, b *testing.B, w *world, d *decisions, reqs []servingCSR, rate float64, bench string) {
	if err := w.lc.Client.ResetStats(ctx); err != nil {
		b.Fatal(err)
	}
	names := make([]string, len(reqs))
	for i, r := range reqs {
		names[i] = r.csr.Name
	}
	created := newStamps()
	start := time.Now()
	err := parallel(ctx, len(reqs), 32, func(ctx context.Context, i int) error {
		if rate > 0 {
			// Each CSR at its slot of the steady schedule.
			time.Sleep(time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))))
		}
		r := reqs[i]
		created.set(r.csr.Name, time.Now())
		// As the node itself: the apiserver fills in spec.username and groups.
		return w.fast.CertificatesV1().RESTClient().Post().Resource("certificatesigningrequests").
			SetHeader("Impersonate-User", r.requester).
			SetHeader("Impersonate-Group", "system:nodes", "system:authenticated").
			Body(r.csr).Do(ctx).Error()
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
		if !r.valid {
			invalid++
		}
		if d.approved[r.csr.Name] != r.valid {
			wrong++
			b.Errorf("CSR %s (%s): approved=%v, want %v", r.csr.Name, r.flaw, d.approved[r.csr.Name], r.valid)
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
	record(bench, "cloud API calls", fmt.Sprintf("%d (%s)", calls, callsString(stats.Calls)), "", false)
}

// makeServingCSR is node's serving CSR as its kubelet makes it: CN
// system:node:NAME, O system:nodes, its hostname and addresses as SANs.
// One in a hundred is invalid in one of three ways; next is another node.
func makeServingCSR(node, next *corev1.Node, i int) (servingCSR, error) {
	r := servingCSR{node: node.Name, requester: "system:node:" + node.Name, valid: true}
	dns := []string{node.Name}
	var ips []net.IP
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP {
			ips = append(ips, net.ParseIP(a.Address))
		}
	}
	if i%100 == 50 {
		r.valid = false
		switch (i / 100) % 3 {
		case 0:
			r.flaw = "IP SAN of another machine"
			ips = append(ips, net.ParseIP("127.0.0.1"))
		case 1:
			r.flaw = "the cluster's own DNS name"
			dns = append(dns, "kubernetes.default.svc")
		case 2:
			// (A CSR for another node's name never gets this far: the
			// apiserver refuses a node's CSR whose CN is not its own.)
			r.flaw = "an address of another node"
			for _, a := range next.Status.Addresses {
				if a.Type == corev1.NodeInternalIP {
					ips = append(ips, net.ParseIP(a.Address))
				}
			}
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return r, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: "system:node:" + node.Name, Organization: []string{"system:nodes"}},
		DNSNames:    dns,
		IPAddresses: ips,
	}, key)
	if err != nil {
		return r, err
	}
	r.csr = &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "serving-" + node.Name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeletServingSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
		},
	}
	return r, nil
}
