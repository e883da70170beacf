package csrapprover

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/testutil"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/local/attest"
	"github.com/mooring-dev/mooring/cloud/local/identity"
	"github.com/mooring-dev/mooring/cloud/view"
	"github.com/mooring-dev/mooring/csrapprover/spent"
	"github.com/mooring-dev/mooring/internal/evidence"
)

type running struct {
	client *fake.Clientset
	ctrl   *Controller
}

// controllerSetup changes what startController builds.
type controllerSetup struct {
	opts      Options
	instances Instances
	verifier  cloud.EvidenceVerifier
	// nodes replaces the factory's Node informer.
	nodes coreinformers.NodeInformer
	// client replaces a new fake clientset (to start a second controller
	// on the same apiserver).
	client *fake.Clientset
	// spentTickets records spent tickets in the client's ConfigMaps.
	spentTickets bool
	// apiNames are the apiserver's names, learned by Run.
	apiNames *APIServerNames
	// tpm is the TPM policy.
	tpm TPMPolicy
}

func startController(t *testing.T, w *world, opts Options, csrs ...*certificatesv1.CertificateSigningRequest) *running {
	return startControllerWith(t, w, controllerSetup{opts: opts}, csrs...)
}

func startControllerWith(t *testing.T, w *world, s controllerSetup, csrs ...*certificatesv1.CertificateSigningRequest) *running {
	t.Helper()
	client := s.client
	if client == nil {
		client = fake.NewClientset()
	}
	if s.spentTickets {
		s.opts.SpentTickets = spent.New(client.CoreV1(), "kube-system", TicketClockSkew)
	}
	ctx := context.Background()
	for _, c := range csrs {
		if _, err := client.CertificatesV1().CertificateSigningRequests().Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range w.nodes {
		if _, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if s.instances == nil {
		s.instances = w.instances
	}
	if s.verifier == nil {
		s.verifier = w.decider.verifiers[attest.Type]
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	if s.nodes == nil {
		s.nodes = factory.Core().V1().Nodes()
	}
	ctrl, err := New(client, factory.Certificates().V1().CertificateSigningRequests(), s.nodes,
		Config{Cluster: cluster, APIServerNames: s.apiNames, TPM: s.tpm}, []cloud.EvidenceVerifier{s.verifier}, s.instances, s.opts)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	factory.Start(runCtx.Done())
	done := make(chan struct{})
	go func() { ctrl.Run(runCtx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; factory.Shutdown() })
	return &running{client: client, ctrl: ctrl}
}

func named(c *certificatesv1.CertificateSigningRequest, name string, created time.Time) *certificatesv1.CertificateSigningRequest {
	c = c.DeepCopy()
	c.Name, c.UID, c.CreationTimestamp = name, types.UID("uid-"+name), metav1.NewTime(created)
	return c
}

// reason is "Type/Reason" of the CSR's first condition, "" while undecided.
func (r *running) reason(t *testing.T, name string) string {
	t.Helper()
	c, err := r.client.CertificatesV1().CertificateSigningRequests().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Status.Conditions) == 0 {
		return ""
	}
	return string(c.Status.Conditions[0].Type) + "/" + c.Status.Conditions[0].Reason
}

func (r *running) waitReason(t *testing.T, name string) string {
	t.Helper()
	return r.waitReasonFor(t, name, 5*time.Second)
}

func (r *running) waitReasonFor(t *testing.T, name string, d time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if got := r.reason(t, name); got != "" {
			return got
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

// A copy of the victim's whole request, filed in the same second under a
// name that sorts first, used to make the owner's CSR the "replay".
func TestSameSecondCopyCannotBlockItsOwner(t *testing.T) {
	w := newWorld(t)
	victim := w.csr(t, w.joinSpec(t))
	at := time.Now().Truncate(time.Second)
	r := startController(t, w, Options{}, named(victim, "aaa-copy", at), named(victim, "victim", at))
	if got := r.waitReason(t, "victim"); got != "Approved/"+ReasonApproved {
		t.Fatalf("victim: %s", got)
	}
}

// An unsigned token that names the victim's token id (and claims the
// attacker's own key) was indexed as a holder of the victim's replay key.
func TestUnverifiedEvidenceHoldsNoReplayKey(t *testing.T) {
	w := newWorld(t)
	victim := w.csr(t, w.joinSpec(t))
	_, blocks, err := evidence.Decode(victim.Spec.Request)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := identity.Peek(string(blocks[0].Data))
	if err != nil {
		t.Fatal(err)
	}
	s := w.joinSpec(t)
	s.evidence = func(b string) []evidence.Block {
		// Signed by the attacker's own key, same token id as the victim's.
		c, _ := identity.NewClaims(issuer, b, claims.Instance, time.Now(), 5*time.Minute)
		c.ID = claims.ID
		tok, err := w.otherKeys.Sign(c)
		if err != nil {
			t.Fatal(err)
		}
		return []evidence.Block{{Type: attest.Type, Data: []byte(tok)}}
	}
	attacker := w.csr(t, s)
	now := time.Now()
	r := startController(t, w, Options{}, named(attacker, "attacker", now.Add(-time.Second)), named(victim, "victim", now))
	if got := r.waitReason(t, "attacker"); got != "Denied/"+ReasonEvidenceSignature {
		t.Fatalf("attacker: %s", got)
	}
	if got := r.waitReason(t, "victim"); got != "Approved/"+ReasonApproved {
		t.Fatalf("victim: %s", got)
	}
}

// An error in the replay index used to read as "no earlier holder".
func TestReplayIndexErrorIsNotNoHolder(t *testing.T) {
	w := newWorld(t)
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	ctrl, err := New(client, factory.Certificates().V1().CertificateSigningRequests(), factory.Core().V1().Nodes(),
		Config{Cluster: cluster}, []cloud.EvidenceVerifier{w.decider.verifiers[attest.Type]}, w.instances, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctrl.indexer = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}) // no replay index: ByIndex fails
	csr := named(w.csr(t, w.joinSpec(t)), "csr", time.Now())
	if holder, err := ctrl.EarlierHolder(context.Background(), "local/x", csr); err == nil {
		t.Fatalf("an index error answered %q and no error", holder)
	}
}

// flakyVerifier fails Verify with a transient error from call failFrom on.
type flakyVerifier struct {
	cloud.EvidenceVerifier
	calls, failFrom atomic.Int32
}

func (f *flakyVerifier) Verify(ctx context.Context, data []byte, binding string, now time.Time) (cloud.Attestation, error) {
	if n := f.calls.Add(1); f.failFrom.Load() > 0 && n >= f.failFrom.Load() {
		return cloud.Attestation{}, errors.New("key fetch failed")
	}
	return f.EvidenceVerifier.Verify(ctx, data, binding, now)
}

// The earlier holder's evidence cannot be verified (the cloud's keys are
// out of reach): the replayed CSR stays pending rather than approved.
func TestReplayCheckErrorDecidesNothing(t *testing.T) {
	w := newWorld(t)
	orig := w.csr(t, w.joinSpec(t))
	fv := &flakyVerifier{EvidenceVerifier: w.decider.verifiers[attest.Type]}
	fv.failFrom.Store(2) // the CSR's own evidence verifies; the holder's cannot be
	now := time.Now()
	first := named(orig, "first", now.Add(-time.Second))
	first.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: "True", Reason: ReasonApproved}}
	r := startControllerWith(t, w, controllerSetup{verifier: fv}, first, named(orig, "second", now))
	time.Sleep(500 * time.Millisecond)
	if got := r.reason(t, "second"); got != "" {
		t.Fatalf("decided during a replay-check error: %s", got)
	}
	fv.failFrom.Store(0)
	if got := r.waitReasonFor(t, "second", 10*time.Second); got != "Denied/"+ReasonEvidenceReplayed {
		t.Fatalf("second, after recovery: %s", got)
	}
}

// unsyncedNodes is a Node informer whose cache is empty and unsynced until
// sync is called, as a real one is while its first List runs.
type unsyncedNodes struct {
	cache.SharedIndexInformer
	store  cache.Indexer
	synced atomic.Bool
}

func (u *unsyncedNodes) Informer() cache.SharedIndexInformer { return u }
func (u *unsyncedNodes) Lister() corelisters.NodeLister      { return corelisters.NewNodeLister(u.store) }
func (u *unsyncedNodes) HasSynced() bool                     { return u.synced.Load() }
func (u *unsyncedNodes) GetIndexer() cache.Indexer           { return u.store }
func (u *unsyncedNodes) AddIndexers(ix cache.Indexers) error { return u.store.AddIndexers(ix) }
func (u *unsyncedNodes) sync(nodes ...*v1.Node) {
	for _, n := range nodes {
		_ = u.store.Add(n)
	}
	u.synced.Store(true)
}

// The approver used to wait only for its CSR cache: a join decided before
// the Node cache synced skipped the takeover checks.
func TestNoDecisionBeforeTheNodeCacheSyncs(t *testing.T) {
	w := newWorld(t)
	ready := readyNode("node-1", "local://i-1")
	nodes := &unsyncedNodes{store: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})}
	r := startControllerWith(t, w, controllerSetup{nodes: nodes}, named(w.csr(t, w.joinSpec(t)), "join", time.Now()))
	time.Sleep(500 * time.Millisecond)
	if got := r.reason(t, "join"); got != "" {
		t.Fatalf("decided before the Node cache synced: %s", got)
	}
	select {
	case <-r.ctrl.Ready():
		t.Fatal("ready before the Node cache synced")
	default:
	}
	nodes.sync(ready)
	if got := r.waitReason(t, "join"); got != "Denied/"+ReasonNodeAlreadyJoined {
		t.Fatalf("after sync: %s", got)
	}
	<-r.ctrl.Ready()
}

func TestOtherSignersAreIgnored(t *testing.T) {
	w := newWorld(t)
	other := w.csr(t, w.joinSpec(t))
	other.Spec.SignerName = "kubernetes.io/kube-apiserver-client"
	r := startController(t, w, Options{}, named(other, "other", time.Now()), named(w.csr(t, w.joinSpec(t)), "ours", time.Now()))
	r.waitReason(t, "ours")
	if got := r.reason(t, "other"); got != "" {
		t.Fatalf("a CSR of another signer was decided: %s", got)
	}
}

func TestDryRunDecidesNothing(t *testing.T) {
	w := newWorld(t)
	registerMetrics() // an unregistered vector hands out counters that count nothing
	counter := decisions.WithLabelValues(certificatesv1.KubeAPIServerClientKubeletSignerName, "dry-run-approved", ReasonApproved)
	before, _ := testutil.GetCounterMetricValue(counter)
	r := startController(t, w, Options{DryRun: true}, named(w.csr(t, w.joinSpec(t)), "csr", time.Now()))
	deadline := time.Now().Add(5 * time.Second)
	for {
		after, _ := testutil.GetCounterMetricValue(counter)
		if after > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the dry run computed no decision")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := r.reason(t, "csr"); got != "" {
		t.Fatalf("dry run decided: %s", got)
	}
}

// switchedInstances fails like an outage while down is set; recover ends
// the outage and tells the OnRecovery callbacks, as the shared view does.
type switchedInstances struct {
	Instances
	down    atomic.Bool
	calls   atomic.Int32
	mu      sync.Mutex
	onFixed []func()
}

func (s *switchedInstances) OnRecovery(f func()) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onFixed = append(s.onFixed, f)
	return func() {}
}

func (s *switchedInstances) recover() {
	s.down.Store(false)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.onFixed {
		f()
	}
}

func (s *switchedInstances) ByProviderID(ctx context.Context, pid string, maxAge time.Duration) (view.Instance, error) {
	s.calls.Add(1)
	if s.down.Load() {
		return view.Instance{}, errors.New("cloud outage")
	}
	return s.Instances.ByProviderID(ctx, pid, maxAge)
}

func (s *switchedInstances) ByID(ctx context.Context, id string, maxAge time.Duration) (view.Instance, error) {
	s.calls.Add(1)
	if s.down.Load() {
		return view.Instance{}, errors.New("cloud outage")
	}
	return s.Instances.ByID(ctx, id, maxAge)
}

// A boot wave of one bootstrap token during a cloud outage used to be
// denied TooManyPendingRequests beyond the 10th CSR; now the excess waits,
// and every join is approved once the cloud answers.
func TestBootWaveDuringOutageWaitsInsteadOfDenying(t *testing.T) {
	w := newWorld(t)
	cloudAPI := &switchedInstances{Instances: w.instances}
	cloudAPI.down.Store(true)
	const n = 30
	at := time.Now().Truncate(time.Second) // all in one second, as a wave files them
	var csrs []*certificatesv1.CertificateSigningRequest
	for i := range n {
		csrs = append(csrs, named(w.csr(t, w.joinSpec(t)), fmt.Sprintf("join-%02d", i), at))
	}
	before, _ := testutil.GetCounterMetricValue(delayed.WithLabelValues("requester"))
	// Every join claims node-1's instance: the per-instance bound lets them
	// all in, the requester's bound for attested joins holds them back.
	r := startControllerWith(t, w, controllerSetup{opts: Options{MaxPendingAttestedPerRequester: 4, MaxPendingPerInstance: n}, instances: cloudAPI}, csrs...)
	time.Sleep(1500 * time.Millisecond)
	for _, c := range csrs {
		if got := r.reason(t, c.Name); got != "" {
			t.Fatalf("%s decided during the outage: %s", c.Name, got)
		}
	}
	if after, _ := testutil.GetCounterMetricValue(delayed.WithLabelValues("requester")); after <= before {
		t.Fatal("no CSR was held back by the per-requester limit")
	}
	// CSRs that failed three times give their place to the next in line,
	// so the places turn over during the outage; never more than 4.
	if held := r.ctrl.gate.held(); held > 4 {
		t.Fatalf("%d CSRs are being decided at once, limit 4", held)
	}
	cloudAPI.down.Store(false)
	for _, c := range csrs {
		if got := r.waitReasonFor(t, c.Name, 30*time.Second); got != "Approved/"+ReasonApproved {
			t.Fatalf("%s: %s", c.Name, got)
		}
	}
}

// After a long outage the CSRs retrying would each wait out a backoff of
// seconds to minutes; the cloud view's recovery wakes them at once.
func TestRecoveryWakesRetryingCSRs(t *testing.T) {
	w := newWorld(t)
	cloudAPI := &switchedInstances{Instances: w.instances}
	cloudAPI.down.Store(true)
	var csrs []*certificatesv1.CertificateSigningRequest
	for i := range 6 {
		csrs = append(csrs, named(w.csr(t, w.joinSpec(t)), fmt.Sprintf("join-%d", i), time.Now()))
	}
	r := startControllerWith(t, w, controllerSetup{opts: Options{MaxPendingAttestedPerRequester: 3, MaxPendingPerInstance: 6}, instances: cloudAPI}, csrs...)
	// Retries at about 0.2, 0.6, 1.4, 3, 6.2 and 12.6 s (200 ms doubling):
	// recovering at 8 s leaves the next one 4.6 s away.
	time.Sleep(8 * time.Second)
	recovered := time.Now()
	cloudAPI.recover()
	for _, c := range csrs {
		if got := r.waitReasonFor(t, c.Name, 10*time.Second); got != "Approved/"+ReasonApproved {
			t.Fatalf("%s: %s", c.Name, got)
		}
	}
	if d := time.Since(recovered); d > 2*time.Second {
		t.Fatalf("all decided %v after the recovery, want within 2s", d)
	}
}

// A serving CSR retrying because the apiserver's names were not known yet
// is woken once they are, not left to its backoff.
func TestLearnedAPIServerNamesWakeServingCSRs(t *testing.T) {
	w := newWorld(t)
	w.nodes["node-1"] = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Spec: v1.NodeSpec{ProviderID: "local://i-1"}}
	var up atomic.Bool
	names := newAPIServerNames("test", func(context.Context) (*x509.Certificate, error) {
		if !up.Load() {
			return nil, errors.New("apiserver not reachable yet")
		}
		return &x509.Certificate{DNSNames: []string{"api.example.internal"}}, nil
	})
	names.retry = 20 * time.Millisecond
	csr := named(w.csr(t, servingSpec()), "serving", time.Now())
	r := startControllerWith(t, w, controllerSetup{apiNames: names}, csr)
	// Retries at about 0.2, 0.6 and 1.4 s, the next at 3 s.
	time.Sleep(1500 * time.Millisecond)
	if got := r.reason(t, csr.Name); got != "" {
		t.Fatalf("decided before the apiserver's names were known: %s", got)
	}
	learned := time.Now()
	up.Store(true)
	if got := r.waitReasonFor(t, csr.Name, 5*time.Second); got != "Approved/"+ReasonApproved {
		t.Fatalf("serving CSR: %s", got)
	}
	if d := time.Since(learned); d > time.Second {
		t.Fatalf("decided %v after the names were learned, want within 1s", d)
	}
}

// unconfirmedInstances answers its first n lookups as the shared view
// answers a miss on a List younger than its refresh interval: not yet,
// ask again in retryAfter.
type unconfirmedInstances struct {
	Instances
	n          int32
	retryAfter time.Duration
	calls      atomic.Int32
}

func (u *unconfirmedInstances) ByID(ctx context.Context, id string, maxAge time.Duration) (view.Instance, error) {
	if u.calls.Add(1) <= u.n {
		return view.Instance{}, fmt.Errorf("instance of the evidence: %w", &view.UnconfirmedError{By: "id", Key: id, RetryAfter: u.retryAfter})
	}
	return u.Instances.ByID(ctx, id, maxAge)
}

// A CSR whose instance is not in the view's last List waits for the next
// List the view allows, not for an error backoff: six such answers used
// to cost 12.6 s of doubling retries (0.2 s to 6.4 s); asked again when
// the view lists, the CSR is decided after about six intervals.
func TestUnconfirmedInstanceIsAskedWhenTheViewListsAgain(t *testing.T) {
	w := newWorld(t)
	cloudAPI := &unconfirmedInstances{Instances: w.instances, n: 6, retryAfter: 300 * time.Millisecond}
	before, _ := testutil.GetCounterMetricValue(errorsTotal)
	start := time.Now()
	r := startControllerWith(t, w, controllerSetup{instances: cloudAPI}, named(w.csr(t, w.joinSpec(t)), "join", time.Now()))
	time.Sleep(time.Second)
	if got := r.reason(t, "join"); got != "" {
		t.Fatalf("decided before the view could answer: %s", got)
	}
	if got := r.waitReasonFor(t, "join", 4*time.Second); got != "Approved/"+ReasonApproved {
		t.Fatalf("join: %s", got)
	}
	if n := cloudAPI.calls.Load(); n != 7 {
		t.Fatalf("%d lookups, want 7 (6 unconfirmed, then the answer)", n)
	}
	if d := time.Since(start); d < 6*cloudAPI.retryAfter {
		t.Fatalf("decided after %v: sooner than the view allows", d)
	}
	if after, _ := testutil.GetCounterMetricValue(errorsTotal); after != before {
		t.Fatalf("errors_total rose by %v: waiting for the view is no error", after-before)
	}
}

func readyNode(name, providerID string) *v1.Node {
	n := &v1.Node{}
	n.Name, n.Spec.ProviderID = name, providerID
	n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}
	return n
}

// kube-controller-manager approves renewals where selfnodeclient is granted
// to system:nodes (kubeadm's default); the approver says so in a metric.
func TestCompetingApproverIsReported(t *testing.T) {
	w := newWorld(t)
	client := fake.NewClientset()
	var asked []string
	client.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		asked = append(asked, sar.Spec.ResourceAttributes.Subresource)
		sar.Status.Allowed = sar.Spec.ResourceAttributes.Subresource == "selfnodeclient" && slices.Contains(sar.Spec.Groups, "system:nodes")
		return true, sar, nil
	})
	factory := informers.NewSharedInformerFactory(client, 0)
	ctrl, err := New(client, factory.Certificates().V1().CertificateSigningRequests(), factory.Core().V1().Nodes(),
		Config{Cluster: cluster}, []cloud.EvidenceVerifier{w.decider.verifiers[attest.Type]}, w.instances, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctrl.checkCompetitors(context.Background())
	if !slices.Equal(asked, []string{"nodeclient", "selfnodeclient"}) {
		t.Fatalf("asked about %v", asked)
	}
	for kind, want := range map[string]float64{"join": 0, "renewal": 1} {
		if got, _ := testutil.GetGaugeMetricValue(competingApprovers.WithLabelValues(kind)); got != want {
			t.Errorf("competing_approvers{kind=%s} = %v, want %v", kind, got, want)
		}
	}
}

// An approval the approver did not make (kube-controller-manager's
// AutoApproved) is counted and recorded as an Event.
func TestApprovalByAnotherApproverIsReported(t *testing.T) {
	w := newWorld(t)
	renewal := w.joinSpec(t)
	renewal.username, renewal.groups, renewal.evidence = "system:node:node-1", []string{"system:nodes"}, nil
	counter := foreignApprovals.WithLabelValues(certificatesv1.KubeAPIServerClientKubeletSignerName, "AutoApproved")
	before, _ := testutil.GetCounterMetricValue(counter)
	cloudAPI := &switchedInstances{Instances: w.instances}
	cloudAPI.down.Store(true) // mooring cannot decide; another approver does
	r := startControllerWith(t, w, controllerSetup{instances: cloudAPI}, named(w.csr(t, renewal), "renewal", time.Now()))
	<-r.ctrl.Ready()
	ctx := context.Background()
	csr, err := r.client.CertificatesV1().CertificateSigningRequests().Get(ctx, "renewal", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: v1.ConditionTrue, Reason: "AutoApproved",
		Message: "Auto approving self kubelet client certificate after SubjectAccessReview."})
	if _, err := r.client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, "renewal", csr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		after, _ := testutil.GetCounterMetricValue(counter)
		events, _ := r.client.CoreV1().Events("").List(ctx, metav1.ListOptions{})
		var recorded bool
		for _, e := range events.Items {
			recorded = recorded || e.Reason == "ApprovedElsewhere"
		}
		if after == before+1 && recorded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("foreign approval: counter %v -> %v, event recorded %v", before, after, recorded)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
