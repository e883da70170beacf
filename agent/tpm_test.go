package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	"github.com/mooring-dev/mooring/cloud/tpm"
	"github.com/mooring-dev/mooring/cloud/tpm/node"
	"github.com/mooring-dev/mooring/cloud/tpm/tpmtest"
	"github.com/mooring-dev/mooring/internal/csrreason"
	"github.com/mooring-dev/mooring/internal/evidence"
	"github.com/mooring-dev/mooring/internal/pki"
)

// TestMain builds the tests' TPM simulator once for the package.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mooring-agent-test-bins-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tpmtest.ShareBuild(dir)
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// tpmIdentity is the identity of a backend that names a TPM key.
type tpmIdentity struct {
	*fakeIdentity
	key node.Key
}

func (i tpmIdentity) TPMKey() node.Key { return i.key }

// tpmApprover stands in for the approver's TPM check: it verifies the
// quote after the cloud's evidence and, when challenge is set, makes the
// agent prove its AK by credential activation (tpm.Challenger) before it
// approves.
type tpmApprover struct {
	ca         *pki.CA
	challenger *tpm.Challenger
	// challenge: deny a request without a good answer with TPMChallenge.
	challenge bool
	// alwaysChallenge: challenge every request, answered or not.
	alwaysChallenge atomic.Bool
	// pause leaves new requests undecided.
	pause atomic.Bool
	mu    sync.Mutex
	// blocks counts the evidence blocks of each request by CSR name.
	blocks map[string]int
}

func (e *env) withTPMApprover(challenge bool) *tpmApprover {
	e.t.Helper()
	ch, err := tpm.NewChallenger()
	if err != nil {
		e.t.Fatal(err)
	}
	ap := &tpmApprover{ca: e.ca, challenger: ch, challenge: challenge, blocks: map[string]int{}}
	e.approver.ignore.Store(true)
	// The apiserver gives each object a UID; the fake does not.
	var n atomic.Int32
	e.client.PrependReactor("create", "certificatesigningrequests", func(action k8stesting.Action) (bool, runtime.Object, error) {
		csr := action.(k8stesting.CreateAction).GetObject().(*certificatesv1.CertificateSigningRequest)
		csr.UID = types.UID(fmt.Sprintf("uid-%d", n.Add(1)))
		return false, nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { ap.run(ctx, e) })
	e.t.Cleanup(func() { cancel(); wg.Wait() })
	time.Sleep(20 * time.Millisecond)
	return ap
}

func (ap *tpmApprover) run(ctx context.Context, e *env) {
	w, err := e.client.CertificatesV1().CertificateSigningRequests().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Error(err)
		return
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-w.ResultChan():
			if ev.Type == watch.Added && !ap.pause.Load() {
				ap.decide(ctx, e, ev.Object.(*certificatesv1.CertificateSigningRequest))
			}
		}
	}
}

// decide judges one request: deny (reason, message), challenge, or approve.
func (ap *tpmApprover) decide(ctx context.Context, e *env, in *certificatesv1.CertificateSigningRequest) {
	csrs := e.client.CertificatesV1().CertificateSigningRequests()
	csr := in.DeepCopy()
	cond := certificatesv1.CertificateSigningRequestCondition{Type: certificatesv1.CertificateApproved, Status: v1.ConditionTrue, Reason: "MooringApproved"}
	deny := func(reason, msg string) {
		cond = certificatesv1.CertificateSigningRequestCondition{Type: certificatesv1.CertificateDenied, Status: v1.ConditionTrue, Reason: reason, Message: msg}
	}
	req, blocks, err := evidence.Decode(csr.Spec.Request)
	if err != nil {
		e.t.Error(err)
		return
	}
	ap.mu.Lock()
	ap.blocks[csr.Name] = len(blocks)
	ap.mu.Unlock()
	binding, err := evidence.Binding(req.PublicKey)
	if err != nil {
		e.t.Error(err)
		return
	}
	switch {
	case len(blocks) == 1:
		// The cloud's evidence alone (the fake's token): no TPM check.
	case len(blocks) != 2 || blocks[1].Type != tpm.EvidenceType:
		deny(csrreason.TPMQuoteInvalid, fmt.Sprintf("%d blocks", len(blocks)))
	default:
		ev, err := tpm.Parse(blocks[1].Data)
		if err != nil {
			deny(csrreason.TPMQuoteInvalid, err.Error())
			break
		}
		if _, err := tpm.VerifyQuote(ev, binding, time.Now(), tpm.QuoteOptions{}); err != nil {
			deny(csrreason.TPMQuoteInvalid, err.Error())
			break
		}
		if !ap.challenge {
			break
		}
		if ev.Activation != nil && !ap.alwaysChallenge.Load() {
			if err := ap.challenger.Check(ev.EKPublic, ev.AKPublic, ev.Activation, binding); err != nil {
				deny(csrreason.TPMKeyNotOfInstance, err.Error())
			}
			break
		}
		c, err := ap.challenger.Challenge(ev.EKPublic, ev.AKPublic, string(csr.UID), binding)
		if err != nil {
			deny(csrreason.TPMKeyNotOfInstance, err.Error())
			break
		}
		if csr.Annotations == nil {
			csr.Annotations = map[string]string{}
		}
		csr.Annotations[tpm.ChallengeAnnotation] = tpm.EncodeAnnotation(c)
		if csr, err = csrs.Update(ctx, csr, metav1.UpdateOptions{}); err != nil {
			e.t.Error(err)
			return
		}
		deny(csrreason.TPMChallenge, "prove the attestation key by credential activation")
	}
	csr.Status.Conditions = append(csr.Status.Conditions, cond)
	if cond.Type == certificatesv1.CertificateApproved {
		if csr.Status.Certificate, err = ap.ca.SignCSR(csr.Spec.Request, pki.ProfileClient); err != nil {
			e.t.Error(err)
		}
	}
	if _, err := csrs.UpdateStatus(ctx, csr, metav1.UpdateOptions{}); err != nil {
		e.t.Error(err)
	}
	go reannounce(ctx, e.client, csr.Name)
}

func (ap *tpmApprover) blockCounts() map[string]int {
	ap.mu.Lock()
	defer ap.mu.Unlock()
	return maps.Clone(ap.blocks)
}

// withTPM gives the env's machine a TPM (a simulator) and its backend a
// TPM key.
func (e *env) withTPM(key node.Key) *tpmtest.Sim {
	e.t.Helper()
	sim := tpmtest.Start(e.t, e.t.TempDir())
	e.cfg.TPMDevice = sim.Socket
	e.tpmKey = &key
	return sim
}

func (e *env) csrNames() []string {
	e.t.Helper()
	l, err := e.client.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var names []string
	for _, c := range l.Items {
		names = append(names, c.Name)
	}
	slices.Sort(names)
	return names
}

// TestTPMQuoteFollowsTheCloudsEvidence: with a TPM and a backend that
// names a key, the join's request carries the cloud's evidence and then a
// quote that verifies for the CSR key; tpm: off, or no TPM device under
// auto, leave the quote out.
func TestTPMQuoteFollowsTheCloudsEvidence(t *testing.T) {
	e := newEnv(t)
	ap := e.withTPMApprover(false)
	e.withTPM(node.DefaultKey)
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	e.checkJoined()
	if got := ap.blockCounts(); len(got) != 1 || slices.Collect(maps.Values(got))[0] != 2 {
		t.Fatalf("evidence blocks by CSR: %v, want one CSR with the cloud's evidence and the quote", got)
	}

	for _, c := range []struct {
		name   string
		mutate func(e *env)
	}{
		{"off", func(e *env) { e.cfg.TPM = TPMOff }},
		{"auto without a device", func(e *env) { e.cfg.TPMDevice = filepath.Join(e.dir, "no-tpm") }},
		{"auto with a backend that names no key", func(e *env) { e.tpmKey = nil }},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			ap := e.withTPMApprover(false)
			e.withTPM(node.DefaultKey)
			c.mutate(e)
			if err := e.run(); err != nil {
				t.Fatal(err)
			}
			e.checkJoined()
			if got := ap.blockCounts(); len(got) != 1 || slices.Collect(maps.Values(got))[0] != 1 {
				t.Fatalf("evidence blocks by CSR: %v, want the cloud's evidence alone", got)
			}
		})
	}
}

// TestTPMRequired: under tpm: required, a machine without a TPM device, or
// a backend that names no TPM key, stops the agent with a ConfigError
// naming the setting, before any CSR; with both it joins with the quote.
func TestTPMRequired(t *testing.T) {
	for _, c := range []struct {
		name, want string
		mutate     func(e *env)
	}{
		{"no device", "no TPM at", func(e *env) { e.cfg.TPMDevice = filepath.Join(e.dir, "no-tpm") }},
		{"no key", "names no attestation key", func(e *env) { e.tpmKey = nil }},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.withTPMApprover(false)
			e.withTPM(node.DefaultKey)
			e.cfg.TPM = TPMRequired
			c.mutate(e)
			err := e.run()
			var ce *ConfigError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), "tpm: required") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want a ConfigError: tpm: required ... %s", err, c.want)
			}
			if n := e.csrCount(); n != 0 {
				t.Fatalf("%d CSRs filed", n)
			}
		})
	}
	e := newEnv(t)
	ap := e.withTPMApprover(false)
	e.withTPM(node.DefaultKey)
	e.cfg.TPM = TPMRequired
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	e.checkJoined()
	if got := ap.blockCounts(); slices.Collect(maps.Values(got))[0] != 2 {
		t.Fatalf("evidence blocks: %v", got)
	}
}

// TestTPMCredentialActivation: the approver denies the first request with
// TPMCredentialChallenge and a challenge sealed to the TPM's EK for its
// AK; the agent activates it and files a second request with the same
// key, fresh evidence and the answer, which the approver checks and
// approves.
func TestTPMCredentialActivation(t *testing.T) {
	e := newEnv(t)
	e.withTPMApprover(true)
	e.withTPM(node.DefaultKey)
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	e.checkJoined()
	names := e.csrNames()
	if len(names) != 2 || names[1] != names[0]+"-tpm1" {
		t.Fatalf("CSRs %v, want the challenged one and its answer, -tpm1", names)
	}
	if n := e.identity.evidences.Load(); n != 2 {
		t.Fatalf("the cloud's evidence was asked %d times, want 2 (fresh for the answer)", n)
	}
}

// TestTPMChallengeRoundsAreBounded: an approver that keeps challenging
// gets MaxTPMRounds requests, then a clear error (not a denial to retry
// with a fresh key).
func TestTPMChallengeRoundsAreBounded(t *testing.T) {
	e := newEnv(t)
	ap := e.withTPMApprover(true)
	ap.alwaysChallenge.Store(true)
	e.withTPM(node.DefaultKey)
	err := e.run()
	var denied *DeniedError
	if err == nil || errors.As(err, &denied) || !strings.Contains(err.Error(), "credential activation 3 times") {
		t.Fatalf("err = %v, want giving up after 3 rounds", err)
	}
	if n := e.csrCount(); n != MaxTPMRounds {
		t.Fatalf("%d CSRs, want %d", n, MaxTPMRounds)
	}
}

// TestTPMChallengeOfAnotherTPM: a challenge sealed to another TPM's EK
// cannot be activated: the agent stops with an error naming the CSR.
func TestTPMChallengeOfAnotherTPM(t *testing.T) {
	e := newEnv(t)
	ap := e.withTPMApprover(true)
	e.withTPM(node.DefaultKey)
	other := tpmtest.Start(t, t.TempDir())
	otherEK, err := other.EKPublic()
	if err != nil {
		t.Fatal(err)
	}
	// Rewrite every challenge for the other TPM's EK.
	e.client.PrependReactor("update", "certificatesigningrequests", func(action k8stesting.Action) (bool, runtime.Object, error) {
		csr := action.(k8stesting.UpdateAction).GetObject().(*certificatesv1.CertificateSigningRequest)
		if _, ok := csr.Annotations[tpm.ChallengeAnnotation]; !ok || action.GetSubresource() != "" {
			return false, nil, nil
		}
		_, blocks, _ := evidence.Decode(csr.Spec.Request)
		ev, _ := tpm.Parse(blocks[1].Data)
		req, _, _ := evidence.Decode(csr.Spec.Request)
		binding, _ := evidence.Binding(req.PublicKey)
		c, err := ap.challenger.Challenge(otherEK, ev.AKPublic, string(csr.UID), binding)
		if err != nil {
			t.Error(err)
		}
		csr.Annotations[tpm.ChallengeAnnotation] = tpm.EncodeAnnotation(c)
		return false, nil, nil
	})
	err = e.run()
	if err == nil || !strings.Contains(err.Error(), "cannot answer the credential activation challenge") {
		t.Fatalf("err = %v, want the TPM unable to answer", err)
	}
	if n := e.csrCount(); n != 1 {
		t.Fatalf("%d CSRs, want the challenged one only", n)
	}
}

// TestTPMChallengeResumedAfterAKill: an agent killed after it filed its
// answer resumes with the same key: it finds the challenged request and
// its answer by their names, files nothing new, and joins when the answer
// is approved.
func TestTPMChallengeResumedAfterAKill(t *testing.T) {
	e := newEnv(t)
	ap := e.withTPMApprover(true)
	e.withTPM(node.DefaultKey)
	a := e.agent()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	// The challenge is decided; pause before the answer comes.
	deadline := time.Now().Add(10 * time.Second)
	for len(ap.blockCounts()) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("no request judged")
		}
		time.Sleep(5 * time.Millisecond)
	}
	ap.pause.Store(true)
	for e.csrCount() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no answer filed: %v", e.csrNames())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel() // killed while waiting for the answer's decision
	<-done
	ap.pause.Store(false)
	wait := e.runAsync(e.agent())
	names := e.csrNames()
	time.Sleep(100 * time.Millisecond)
	answer, err := e.client.CertificatesV1().CertificateSigningRequests().Get(context.Background(), names[1], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ap.decide(context.Background(), e, answer)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	e.checkJoined()
	if got := e.csrNames(); !slices.Equal(got, names) {
		t.Fatalf("CSRs %v after the restart, want %v", got, names)
	}
}
