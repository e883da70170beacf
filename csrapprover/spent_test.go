package csrapprover

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/component-base/metrics/testutil"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/local/attest"
	"github.com/mooring-dev/mooring/csrapprover/spent"
	"github.com/mooring-dev/mooring/internal/evidence"
)

// withShards makes the spent-ticket ConfigMaps in the client's
// kube-system, as the installer ships them (the approver does not create
// them).
func withShards(t *testing.T, client *fake.Clientset) *fake.Clientset {
	t.Helper()
	for _, name := range spent.ShardNames() {
		cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system"}}
		if _, err := client.CoreV1().ConfigMaps("kube-system").Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return client
}

// TestTicketStaysSpentAfterItsCSRIsDeleted: kube-controller-manager's CSR
// cleaner deletes a decided CSR after an hour, and a ticket may live a day.
// Whoever read the ticket (from user-data) presents it again under a new key
// once the first CSR is gone, while the Node is not Ready: the ticket is
// spent, across a restart of the approver too. Before the spent-ticket
// record, the second join was approved.
func TestTicketStaysSpentAfterItsCSRIsDeleted(t *testing.T) {
	w := newWorld(t)
	tok := w.ticketOf(t, "node-1")
	s := w.ticketJoinSpec(t)
	s.evidenceT = func(*world, *testing.T, string) []evidence.Block { return ticketEvidence(tok) }
	tv := NewTicketVerifier(staticTicketKeys(w.tickets.PublicKeys()), cluster)
	client := withShards(t, fake.NewClientset())
	ctx := context.Background()

	first := named(w.csr(t, s), "mooring-node-1-first", time.Now().Add(-2*time.Hour))
	r := startControllerWith(t, w, controllerSetup{client: client, verifier: tv, spentTickets: true}, first)
	if got := r.waitReason(t, first.Name); got != "Approved/"+ReasonApproved {
		t.Fatalf("first use: %s", got)
	}
	// The cleaner deletes it.
	if err := client.CertificatesV1().CertificateSigningRequests().Delete(ctx, first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	again := named(w.csr(t, s), "mooring-node-1-again", time.Now()) // a new key
	if _, err := client.CertificatesV1().CertificateSigningRequests().Create(ctx, again, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := r.waitReason(t, again.Name); got != "Denied/"+ReasonTicketSpent {
		t.Fatalf("the ticket again after its CSR was deleted: %s", got)
	}
	// The record keeps the spender's UID, not its name: the message says
	// which CSR it was, gone as it is.
	c, err := client.CertificatesV1().CertificateSigningRequests().Get(ctx, again.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if msg := c.Status.Conditions[0].Message; !strings.Contains(msg, "spent by CSR of UID "+string(spent.SpenderID(first.UID))+", deleted since") {
		t.Errorf("the denial says %q", msg)
	}

	// A new approver (a restart, a new leader) on the same apiserver, once
	// the cleaner deleted the denied CSR too.
	if err := client.CertificatesV1().CertificateSigningRequests().Delete(ctx, again.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	restarted := startControllerWith(t, w, controllerSetup{client: client, verifier: tv, spentTickets: true})
	third := named(w.csr(t, s), "mooring-node-1-third", time.Now())
	if _, err := client.CertificatesV1().CertificateSigningRequests().Create(ctx, third, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := restarted.waitReason(t, third.Name); got != "Denied/"+ReasonTicketSpent {
		t.Fatalf("after a restart: %s", got)
	}
}

// TestTicketNotRecordedIsNotApproved: a ticket the approver cannot record as
// spent (the apiserver refuses the write, or no record is set) is not
// approved; it is approved once the record can be written.
func TestTicketNotRecordedIsNotApproved(t *testing.T) {
	w := newWorld(t)
	tv := NewTicketVerifier(staticTicketKeys(w.tickets.PublicKeys()), cluster)
	client := withShards(t, fake.NewClientset())
	var refuse atomic.Bool
	refuse.Store(true)
	refused := make(chan struct{}, 100)
	client.PrependReactor("*", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if refuse.Load() {
			refused <- struct{}{}
			return true, nil, errors.New("etcdserver: request timed out")
		}
		return false, nil, nil
	})
	csr := named(w.csr(t, w.ticketJoinSpec(t)), "mooring-node-1-a", time.Now())
	r := startControllerWith(t, w, controllerSetup{client: client, verifier: tv, spentTickets: true}, csr)
	<-refused
	time.Sleep(300 * time.Millisecond)
	if got := r.reason(t, csr.Name); got != "" {
		t.Fatalf("decided while the ticket could not be recorded: %s", got)
	}
	refuse.Store(false)
	if got := r.waitReasonFor(t, csr.Name, 10*time.Second); got != "Approved/"+ReasonApproved {
		t.Fatalf("once recorded: %s", got)
	}

	// No record at all: never approved.
	w2 := newWorld(t)
	csr2 := named(w2.csr(t, w2.ticketJoinSpec(t)), "mooring-node-1-b", time.Now())
	r2 := startControllerWith(t, w2, controllerSetup{verifier: NewTicketVerifier(staticTicketKeys(w2.tickets.PublicKeys()), cluster)}, csr2)
	time.Sleep(500 * time.Millisecond)
	if got := r2.reason(t, csr2.Name); got != "" {
		t.Fatalf("decided without a spent-ticket record: %s", got)
	}
}

// stuckVerifier fails, as a transient error, the evidence of every CSR
// key but good's: evidence that can never verify, retried.
type stuckVerifier struct {
	cloud.EvidenceVerifier
	good string
}

func (s *stuckVerifier) Verify(ctx context.Context, data []byte, binding string, now time.Time) (cloud.Attestation, error) {
	if binding != s.good {
		return cloud.Attestation{}, errors.New("the keys of the cloud cannot be fetched")
	}
	return s.EvidenceVerifier.Verify(ctx, data, binding, now)
}

// TestFailingCSRsGiveTheirPlaceBack: CSRs whose evidence fails again and
// again (retried, never approved) fill their requester's places in the
// gate; they give them back, so a good join of the same bootstrap token
// behind them is decided. Before, it waited for ever.
func TestFailingCSRsGiveTheirPlaceBack(t *testing.T) {
	w := newWorld(t)
	goodSpec := w.joinSpec(t)
	good := named(w.csr(t, goodSpec), "z-good", time.Now())
	req, _, err := evidence.Decode(good.Spec.Request)
	if err != nil {
		t.Fatal(err)
	}
	binding, err := evidence.Binding(req.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	var stuck []string
	var csrs []*certificatesv1.CertificateSigningRequest
	for i := range 4 {
		c := named(w.csr(t, w.joinSpec(t)), fmt.Sprintf("a-stuck-%d", i), time.Now())
		csrs = append(csrs, c)
		stuck = append(stuck, c.Name)
	}
	sv := &stuckVerifier{EvidenceVerifier: w.decider.verifiers[attest.Type], good: binding}
	r := startControllerWith(t, w, controllerSetup{verifier: sv, opts: Options{MaxPendingPerRequester: 2}}, csrs...)
	deadline := time.Now().Add(5 * time.Second)
	for r.ctrl.gate.held() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := r.client.CertificatesV1().CertificateSigningRequests().Create(context.Background(), good, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := r.waitReasonFor(t, good.Name, 20*time.Second); got != "Approved/"+ReasonApproved {
		t.Fatalf("the good join behind failing ones: %s", got)
	}
	for _, n := range stuck {
		if got := r.reason(t, n); got != "" {
			t.Errorf("%s, whose evidence never verifies, was decided: %s", n, got)
		}
	}
	if names := strings.Join(r.ctrl.gate.names(), ","); !strings.Contains(names, "a-stuck-") {
		t.Errorf("the failing CSRs are not woken on recovery (gate names %q)", names)
	}
}

// TestDryRunSpendsNoTicket: a dry run reads the spent-ticket record but
// writes nothing to it, so the real run after it can still approve.
func TestDryRunSpendsNoTicket(t *testing.T) {
	w := newWorld(t)
	tv := NewTicketVerifier(staticTicketKeys(w.tickets.PublicKeys()), cluster)
	registerMetrics() // an unregistered vector hands out counters that count nothing
	counter := decisions.WithLabelValues(certificatesv1.KubeAPIServerClientKubeletSignerName, "dry-run-approved", ReasonApproved)
	before, _ := testutil.GetCounterMetricValue(counter)
	client := withShards(t, fake.NewClientset())
	csr := named(w.csr(t, w.ticketJoinSpec(t)), "mooring-node-1-dry", time.Now())
	startControllerWith(t, w, controllerSetup{client: client, verifier: tv, spentTickets: true, opts: Options{DryRun: true}}, csr)
	deadline := time.Now().Add(5 * time.Second)
	for after, _ := testutil.GetCounterMetricValue(counter); after <= before; after, _ = testutil.GetCounterMetricValue(counter) {
		if time.Now().After(deadline) {
			t.Fatal("the dry run computed no decision")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cms, err := client.CoreV1().ConfigMaps("kube-system").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range cms.Items {
		if len(cm.Data) != 0 {
			t.Fatalf("the dry run wrote to %s: %v", cm.Name, cm.Data)
		}
	}
}

// TestSpentTicketNamesItsCSR: a denial names the CSR that spent the ticket
// while the apiserver still holds it, though the record keeps its UID only.
func TestSpentTicketNamesItsCSR(t *testing.T) {
	w := newWorld(t)
	spender := named(w.csr(t, w.ticketJoinSpec(t)), "node-csr-"+strings.Repeat("x", 200), time.Now())
	r := startControllerWith(t, w, controllerSetup{client: withShards(t, fake.NewClientset()), spentTickets: true,
		verifier: NewTicketVerifier(staticTicketKeys(w.tickets.PublicKeys()), cluster)}, spender)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := r.ctrl.csrs.Get(spender.Name); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the CSR is not in the cache")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got, want := r.ctrl.spender(spent.SpenderID(spender.UID)), spender.Name+" (UID "+string(spender.UID)+")"; got != want {
		t.Errorf("spender: %q, want %q", got, want)
	}
	if got := r.ctrl.spender(spent.UnknownSpender); got == "" {
		t.Error("an unreadable entry names nobody: the ticket would read as not spent")
	}
}

// TestMissingSpentTicketRecordIsNotApproved: the approver does not create
// the spent-ticket ConfigMaps. Without them a ticket join is not approved:
// it waits, and an Event on its CSR names the missing ConfigMap and how to
// make it. Once they exist, the join is approved.
func TestMissingSpentTicketRecordIsNotApproved(t *testing.T) {
	w := newWorld(t)
	client := fake.NewClientset()
	csr := named(w.csr(t, w.ticketJoinSpec(t)), "mooring-node-1-a", time.Now())
	r := startControllerWith(t, w, controllerSetup{client: client, spentTickets: true,
		verifier: NewTicketVerifier(staticTicketKeys(w.tickets.PublicKeys()), cluster)}, csr)
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	var event *v1.Event
	for event == nil {
		events, err := client.CoreV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range events.Items {
			if e := &events.Items[i]; e.Reason == ReasonSpentTicketsMissing && e.InvolvedObject.Name == csr.Name {
				event = e
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s Event on the CSR; Events: %v", ReasonSpentTicketsMissing, events.Items)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if event.Type != v1.EventTypeWarning || !strings.Contains(event.Message, "kube-system/"+spent.NamePrefix) || !strings.Contains(event.Message, "deploy/components/join-tickets") {
		t.Errorf("Event %s: %s", event.Type, event.Message)
	}
	if got := r.reason(t, csr.Name); got != "" {
		t.Fatalf("decided without the spent-ticket record: %s", got)
	}
	cms, err := client.CoreV1().ConfigMaps("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cms.Items) != 0 {
		t.Fatalf("the approver created %d ConfigMaps", len(cms.Items))
	}
	withShards(t, client)
	if got := r.waitReasonFor(t, csr.Name, 20*time.Second); got != "Approved/"+ReasonApproved {
		t.Fatalf("once the record exists: %s", got)
	}
}
