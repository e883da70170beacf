package csrapprover

import (
	"context"
	"fmt"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/local/attest"
	"github.com/mooring-dev/mooring/internal/evidence"
)

type running struct {
	client *fake.Clientset
	ctrl   *Controller
}

func startController(t *testing.T, w *world, opts Options, csrs ...*certificatesv1.CertificateSigningRequest) *running {
	t.Helper()
	client := fake.NewClientset()
	for _, c := range csrs {
		if _, err := client.CertificatesV1().CertificateSigningRequests().Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	ctrl, err := New(client, factory.Certificates().V1().CertificateSigningRequests(),
		Config{Cluster: cluster}, []cloud.EvidenceVerifier{w.decider.verifiers[attest.Type]}, w.instances, w.nodes, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() { ctrl.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; factory.Shutdown() })
	return &running{client: client, ctrl: ctrl}
}

func named(c *certificatesv1.CertificateSigningRequest, name string, created time.Time) *certificatesv1.CertificateSigningRequest {
	c = c.DeepCopy()
	c.Name, c.UID, c.CreationTimestamp = name, types.UID("uid-"+name), metav1.NewTime(created)
	return c
}

func (r *running) waitReason(t *testing.T, name string) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		c, err := r.client.CertificatesV1().CertificateSigningRequests().Get(context.Background(), name, metav1.GetOptions{})
		if err == nil && len(c.Status.Conditions) > 0 {
			cond := c.Status.Conditions[0]
			return string(cond.Type) + "/" + cond.Reason
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("CSR %s not decided", name)
	return ""
}

func TestReplayedEvidenceIsDeniedOnTheLaterCSR(t *testing.T) {
	w := newWorld(t)
	orig := w.csr(t, w.joinSpec(t))
	now := time.Now()
	r := startController(t, w, Options{}, named(orig, "first", now.Add(-time.Second)), named(orig, "second", now))
	if got := r.waitReason(t, "first"); got != "Approved/"+ReasonApproved {
		t.Fatalf("first: %s", got)
	}
	if got := r.waitReason(t, "second"); got != "Denied/"+ReasonEvidenceReplayed {
		t.Fatalf("second: %s", got)
	}
}

func TestCopiedEvidenceCannotBlockItsOwner(t *testing.T) {
	w := newWorld(t)
	victim := w.csr(t, w.joinSpec(t))
	// An attacker copies the victim's token onto a CSR of its own key and
	// files it first.
	_, blocks, err := evidence.Decode(victim.Spec.Request)
	if err != nil {
		t.Fatal(err)
	}
	s := w.joinSpec(t)
	s.evidence = func(string) []evidence.Block { return blocks }
	attacker := w.csr(t, s)
	now := time.Now()
	r := startController(t, w, Options{}, named(attacker, "attacker", now.Add(-time.Second)), named(victim, "victim", now))
	if got := r.waitReason(t, "attacker"); got != "Denied/"+ReasonEvidenceNotBound {
		t.Fatalf("attacker: %s", got)
	}
	if got := r.waitReason(t, "victim"); got != "Approved/"+ReasonApproved {
		t.Fatalf("victim: %s", got)
	}
}

func TestOtherSignersAreIgnored(t *testing.T) {
	w := newWorld(t)
	other := w.csr(t, w.joinSpec(t))
	other.Spec.SignerName = "kubernetes.io/kube-apiserver-client"
	r := startController(t, w, Options{}, named(other, "other", time.Now()), named(w.csr(t, w.joinSpec(t)), "ours", time.Now()))
	r.waitReason(t, "ours")
	c, _ := r.client.CertificatesV1().CertificateSigningRequests().Get(context.Background(), "other", metav1.GetOptions{})
	if len(c.Status.Conditions) != 0 {
		t.Fatalf("a CSR of another signer was decided: %+v", c.Status.Conditions)
	}
}

func TestDryRunDecidesNothing(t *testing.T) {
	w := newWorld(t)
	r := startController(t, w, Options{DryRun: true}, named(w.csr(t, w.joinSpec(t)), "csr", time.Now()))
	time.Sleep(300 * time.Millisecond)
	c, _ := r.client.CertificatesV1().CertificateSigningRequests().Get(context.Background(), "csr", metav1.GetOptions{})
	if len(c.Status.Conditions) != 0 {
		t.Fatalf("dry run decided: %+v", c.Status.Conditions)
	}
}

func TestFloodGuard(t *testing.T) {
	w := newWorld(t)
	var csrs []*certificatesv1.CertificateSigningRequest
	base := time.Now().Add(-time.Minute)
	for i := range 12 {
		csrs = append(csrs, named(w.csr(t, w.joinSpec(t)), fmt.Sprintf("csr-%02d", i), base.Add(time.Duration(i)*time.Second)))
	}
	// Not started: judge the guard against the informer's view alone.
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	ctrl, err := New(client, factory.Certificates().V1().CertificateSigningRequests(), Config{Cluster: cluster},
		nil, w.instances, w.nodes, Options{MaxPendingPerRequester: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range csrs {
		if err := ctrl.indexer.Add(c); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range csrs {
		d, err := ctrl.floodGuard(c)
		if err != nil {
			t.Fatal(err)
		}
		if limited := d != nil; limited != (i >= 10) {
			t.Fatalf("CSR %d: flood guard %+v", i, d)
		}
		if d != nil && d.Reason != ReasonTooManyPending {
			t.Fatalf("reason %s", d.Reason)
		}
	}
}
