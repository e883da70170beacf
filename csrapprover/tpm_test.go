package csrapprover

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/testutil"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/local/attest"
	"github.com/mooring-dev/mooring/cloud/tpm"
	"github.com/mooring-dev/mooring/cloud/view"
	"github.com/mooring-dev/mooring/internal/evidence"
)

// fakeTPM is a cloud.TPMVerifier for the approver's unit tests: it answers
// err, and records what it was asked. (The real verifiers are each
// backend's, tested on the TPM simulator.)
type fakeTPM struct {
	mu    sync.Mutex
	err   error
	calls int
	req   cloud.TPMRequest
	att   cloud.Attestation
	in    view.Instance
}

func (f *fakeTPM) VerifyTPM(_ context.Context, req cloud.TPMRequest, att cloud.Attestation, in view.Instance) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.req, f.att, f.in = req, att, in
	return f.err
}

func (f *fakeTPM) last() (cloud.TPMRequest, view.Instance) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.req, f.in
}

func (f *fakeTPM) called() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// tpmData is what the TPM blocks of these tests carry: the fake verifier
// reads nothing of it.
var tpmData = []byte(`{"version":1}`)

// withBlocks makes a join's evidence: the cloud's token for i-1, and TPM
// blocks placed by order ("c" the cloud's, "t" a TPM block, "k" a join
// ticket).
func withBlocks(w *world, t *testing.T, order string) func(string) []evidence.Block {
	return func(b string) []evidence.Block {
		var out []evidence.Block
		for _, c := range order {
			switch c {
			case 'c':
				out = append(out, evidence.Block{Type: attest.Type, Data: w.token(t, w.keys, "i-1", b, time.Now())})
			case 't':
				out = append(out, evidence.Block{Type: tpm.EvidenceType, Data: tpmData})
			case 'k':
				out = append(out, ticketEvidence(w.ticketOf(t, "node-1"))...)
			}
		}
		return out
	}
}

// TestTPMPolicy: the TPM policy's semantics in a join (docs/attestation.md,
// TPM-rooted identity), with a fake verifier. The attacks: the metadata
// evidence alone under required, and under preferred for an instance whose
// record says it has a vTPM (leaving the TPM block out is no downgrade);
// a TPM block that does not verify under preferred; two TPM blocks; the
// TPM block first.
func TestTPMPolicy(t *testing.T) {
	quoteBad := tpm.Reject(tpm.RejectQuote, "the quote does not verify")
	for _, tc := range []struct {
		name   string
		mode   string
		noTPM  bool // the backend verifies no TPM evidence
		vtpm   bool // the cloud's record says i-1 has a vTPM
		order  string
		ticket bool // a join ticket instead of the cloud's evidence
		err    error
		want   string
		called bool // the verifier is asked
		proven bool // the approval says TPM-proven
	}{
		{name: "required/metadata alone", mode: TPMRequired, order: "c", want: ReasonTPMEvidenceRequired},
		{name: "required/metadata alone, vTPM", mode: TPMRequired, vtpm: true, order: "c", want: ReasonTPMEvidenceRequired},
		{name: "required/ticket alone", mode: TPMRequired, ticket: true, want: ReasonTPMEvidenceRequired},
		{name: "required/proven", mode: TPMRequired, order: "ct", want: ReasonApproved, called: true, proven: true},
		{name: "required/quote invalid", mode: TPMRequired, order: "ct", err: quoteBad, want: ReasonTPMQuoteInvalid, called: true},
		{name: "required/backend verifies no TPM", mode: TPMRequired, noTPM: true, order: "ct", want: ReasonTPMEvidenceRequired},
		{name: "preferred/metadata alone, no vTPM", mode: TPMPreferred, order: "c", want: ReasonApproved},
		{name: "off is the default", mode: "", order: "ct", want: ReasonApproved},
		{name: "preferred/metadata alone, vTPM", mode: TPMPreferred, vtpm: true, order: "c", want: ReasonTPMEvidenceRequired},
		{name: "default/metadata alone, vTPM", mode: "", vtpm: true, order: "c", want: ReasonApproved},
		{name: "preferred/proven", mode: TPMPreferred, vtpm: true, order: "ct", want: ReasonApproved, called: true, proven: true},
		{name: "preferred/proven without vTPM record", mode: TPMPreferred, order: "ct", want: ReasonApproved, called: true, proven: true},
		{name: "preferred/quote invalid", mode: TPMPreferred, order: "ct", err: quoteBad, want: ReasonTPMQuoteInvalid, called: true},
		{name: "preferred/key not of instance", mode: TPMPreferred, order: "ct", err: tpm.Reject(tpm.RejectKey, "another instance's AK"), want: ReasonTPMKeyNotOfInstance, called: true},
		{name: "preferred/PCRs outside policy", mode: TPMPreferred, order: "ct", err: tpm.Reject(tpm.RejectPCRs, "PCR 7"), want: ReasonTPMPCRsOutsidePolicy, called: true},
		{name: "preferred/expired quote", mode: TPMPreferred, order: "ct", err: tpm.Reject(tpm.RejectExpired, "old"), want: ReasonEvidenceExpired, called: true},
		{name: "preferred/cloud rejection", mode: TPMPreferred, order: "ct", err: cloud.Reject(ReasonTPMKeyNotOfInstance, errors.New("the cloud names another key")), want: ReasonTPMKeyNotOfInstance, called: true},
		{name: "preferred/backend verifies no TPM", mode: TPMPreferred, noTPM: true, order: "ct", want: ReasonUnknownEvidence},
		{name: "preferred/backend verifies no TPM, none sent", mode: TPMPreferred, noTPM: true, order: "c", want: ReasonApproved},
		{name: "off/bad TPM block ignored", mode: TPMOff, order: "ct", err: quoteBad, want: ReasonApproved},
		{name: "off/vTPM, metadata alone", mode: TPMOff, vtpm: true, order: "c", want: ReasonApproved},
		// A type twice is refused by the evidence framing already.
		{name: "two TPM blocks", mode: TPMPreferred, order: "ctt", want: ReasonMalformedRequest},
		{name: "a third block", mode: TPMPreferred, order: "ctk", want: ReasonMalformedRequest},
		{name: "a ticket between", mode: TPMPreferred, order: "ckt", want: ReasonMalformedRequest},
		{name: "ticket, then TPM", mode: TPMPreferred, order: "kt", want: ReasonApproved, called: true, proven: true},
		{name: "TPM block first", mode: TPMPreferred, order: "tc", want: ReasonMalformedRequest},
		{name: "TPM block alone", mode: TPMPreferred, order: "t", want: ReasonMalformedRequest},
		{name: "off/TPM block first", mode: TPMOff, order: "tc", want: ReasonMalformedRequest},
		{name: "cloud evidence twice", mode: TPMPreferred, order: "cct", want: ReasonMalformedRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			in := w.instances["local://i-1"]
			in.VTPM = tc.vtpm
			w.instances["local://i-1"] = in
			f := &fakeTPM{err: tc.err}
			w.decider.cfg.TPM = TPMPolicy{Mode: tc.mode, Verifier: f}
			if tc.noTPM {
				w.decider.cfg.TPM.Verifier = nil
			}
			spec := w.joinSpec(t)
			if tc.ticket {
				spec = w.ticketJoinSpec(t)
			} else {
				spec.evidence = withBlocks(w, t, tc.order)
			}
			csr := w.csr(t, spec)
			d, err := w.decider.Decide(context.Background(), csr)
			if err != nil {
				t.Fatal(err)
			}
			if d.Reason != tc.want {
				t.Fatalf("%s (%s), want %s", d.Reason, d.Message, tc.want)
			}
			if got := f.called() > 0; got != tc.called {
				t.Errorf("verifier asked: %v, want %v", got, tc.called)
			}
			if got := strings.Contains(d.Message, "TPM-proven"); got != tc.proven {
				t.Errorf("message %q: TPM-proven %v, want %v", d.Message, got, tc.proven)
			}
			if d.Challenge != nil {
				t.Errorf("a challenge with %s", d.Reason)
			}
			if !d.Approve && d.Reason != ReasonMalformedRequest && d.Check != "tpm" {
				t.Errorf("decided by check %q, want tpm", d.Check)
			}
			if tc.called {
				b, _ := evidence.Binding(mustDecode(t, csr).PublicKey)
				if f.req.Binding != b || f.req.CSR != csr.Name || f.req.CSRUID != string(csr.UID) || string(f.req.Data) != string(tpmData) || f.in.ID != "i-1" {
					t.Errorf("the verifier was asked %+v for instance %s", f.req, f.in.ID)
				}
				// A ticket's attestation names the instance the lookup found.
				if f.att.InstanceID != "i-1" || f.att.ProviderID != "local://i-1" {
					t.Errorf("the verifier was given the attestation %+v", f.att)
				}
			}
		})
	}
}

func mustDecode(t *testing.T, csr *certificatesv1.CertificateSigningRequest) *x509.CertificateRequest {
	t.Helper()
	req, _, err := evidence.Decode(csr.Spec.Request)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestTPMCheckOrder: the TPM check runs once the instance is found and
// usable (a stopped instance is denied for that, the verifier not asked),
// and before the Node-name and takeover checks (bad TPM evidence is what
// a join with another node's name is denied for).
func TestTPMCheckOrder(t *testing.T) {
	w := newWorld(t)
	f := &fakeTPM{err: tpm.Reject(tpm.RejectKey, "another instance's AK")}
	w.decider.cfg.TPM = TPMPolicy{Mode: TPMRequired, Verifier: f}
	stopped := w.joinSpec(t)
	stopped.cn = "system:node:node-3"
	stopped.evidence = func(b string) []evidence.Block {
		return []evidence.Block{{Type: attest.Type, Data: w.token(t, w.keys, "i-3", b, time.Now())}, {Type: tpm.EvidenceType, Data: tpmData}}
	}
	if d, err := w.decider.Decide(context.Background(), w.csr(t, stopped)); err != nil || d.Reason != ReasonInstanceNotRunning || f.called() != 0 {
		t.Fatalf("stopped instance: %+v %v, verifier asked %d times", d, err, f.called())
	}
	otherName := w.joinSpec(t)
	otherName.cn = "system:node:node-2"
	otherName.evidence = withBlocks(w, t, "ct")
	if d, err := w.decider.Decide(context.Background(), w.csr(t, otherName)); err != nil || d.Reason != ReasonTPMKeyNotOfInstance {
		t.Fatalf("another node's name with bad TPM evidence: %+v %v", d, err)
	}
	w.nodes["node-1"] = readyNode("node-1", "local://i-1")
	f.err = nil
	joined := w.joinSpec(t)
	joined.evidence = withBlocks(w, t, "ct")
	if d, err := w.decider.Decide(context.Background(), w.csr(t, joined)); err != nil || d.Reason != ReasonNodeAlreadyJoined {
		t.Fatalf("a Ready node's instance with good TPM evidence: %+v %v", d, err)
	}
}

// TestTPMVerifierErrorDecidesNothing: an error that is no verdict (the
// cloud's API failing) is returned to be retried, never approved nor
// denied, under any policy that asks the verifier.
func TestTPMVerifierErrorDecidesNothing(t *testing.T) {
	for _, mode := range []string{TPMPreferred, TPMRequired} {
		w := newWorld(t)
		w.decider.cfg.TPM = TPMPolicy{Mode: mode, Verifier: &fakeTPM{err: errors.New("the cloud's API: 503")}}
		spec := w.joinSpec(t)
		spec.evidence = withBlocks(w, t, "ct")
		d, err := w.decider.Decide(context.Background(), w.csr(t, spec))
		if err == nil || d.Approve || d.Reason != "" {
			t.Fatalf("%s: %+v %v, want an error and no decision", mode, d, err)
		}
	}
}

// TestTPMChallengeDecision: a verifier asking for a credential activation
// round makes a TPMCredentialChallenge denial carrying the challenge; one
// without a challenge is an error, not a denial the agent could not answer.
func TestTPMChallengeDecision(t *testing.T) {
	w := newWorld(t)
	f := &fakeTPM{err: &tpm.ChallengeNeeded{Challenge: []byte("the challenge")}}
	w.decider.cfg.TPM = TPMPolicy{Mode: TPMPreferred, Verifier: f}
	spec := w.joinSpec(t)
	spec.evidence = withBlocks(w, t, "ct")
	d, err := w.decider.Decide(context.Background(), w.csr(t, spec))
	if err != nil || d.Approve || d.Reason != ReasonTPMChallenge || string(d.Challenge) != "the challenge" {
		t.Fatalf("%+v %v", d, err)
	}
	f.err = fmt.Errorf("wrapped: %w", &tpm.ChallengeNeeded{})
	if d, err := w.decider.Decide(context.Background(), w.csr(t, spec)); err == nil {
		t.Fatalf("a challenge round without a challenge: %+v", d)
	}
}

// TestTPMChallengeIsWrittenOnTheCSR: the controller writes the challenge
// on the CSR (annotation, base64) and then denies it with
// TPMCredentialChallenge, with an Event and the decision counted by reason;
// a dry run writes nothing.
func TestTPMChallengeIsWrittenOnTheCSR(t *testing.T) {
	w := newWorld(t)
	registerMetrics()
	counter := decisions.WithLabelValues(certificatesv1.KubeAPIServerClientKubeletSignerName, "denied", ReasonTPMChallenge)
	before, _ := testutil.GetCounterMetricValue(counter)
	spec := w.joinSpec(t)
	spec.evidence = withBlocks(w, t, "ct")
	f := &fakeTPM{err: &tpm.ChallengeNeeded{Challenge: []byte{0, 1, 2, 0xff}}}
	r := startControllerWith(t, w, controllerSetup{tpm: TPMPolicy{Mode: TPMPreferred, Verifier: f}}, named(w.csr(t, spec), "round-1", time.Now()))
	if got := r.waitReason(t, "round-1"); got != "Denied/"+ReasonTPMChallenge {
		t.Fatalf("round 1: %s", got)
	}
	c, err := r.client.CertificatesV1().CertificateSigningRequests().Get(context.Background(), "round-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := tpm.DecodeAnnotation(c.Annotations[tpm.ChallengeAnnotation])
	if err != nil || string(got) != string([]byte{0, 1, 2, 0xff}) {
		t.Fatalf("annotation %q: %v", c.Annotations[tpm.ChallengeAnnotation], err)
	}
	if req, _ := f.last(); req.CSRUID != "uid-round-1" {
		t.Errorf("challenge made for CSR UID %q", req.CSRUID)
	}
	// The approver's own write does not make it decide the CSR again.
	time.Sleep(200 * time.Millisecond)
	if n := f.called(); n != 1 {
		t.Errorf("the verifier was asked %d times, want 1", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		evs, err := r.client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, e := range evs.Items {
			found = found || (e.Reason == ReasonTPMChallenge && e.Type == v1.EventTypeNormal && e.InvolvedObject.Name == "round-1")
		}
		if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s Event: %+v", ReasonTPMChallenge, evs.Items)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if after, _ := testutil.GetCounterMetricValue(counter); after != before+1 {
		t.Errorf("decisions_total{reason=%s}: %v, was %v", ReasonTPMChallenge, after, before)
	}

	dry := startControllerWith(t, w, controllerSetup{opts: Options{DryRun: true}, tpm: TPMPolicy{Mode: TPMPreferred, Verifier: f}},
		named(w.csr(t, spec), "dry", time.Now()))
	dryCounter := decisions.WithLabelValues(certificatesv1.KubeAPIServerClientKubeletSignerName, "dry-run-denied", ReasonTPMChallenge)
	for deadline := time.Now().Add(5 * time.Second); ; {
		if n, _ := testutil.GetCounterMetricValue(dryCounter); n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the dry run computed no decision")
		}
		time.Sleep(10 * time.Millisecond)
	}
	c, err = dry.client.CertificatesV1().CertificateSigningRequests().Get(context.Background(), "dry", metav1.GetOptions{})
	if err != nil || len(c.Annotations) > 0 || len(c.Status.Conditions) > 0 {
		t.Fatalf("dry run wrote on the CSR: %+v %v", c, err)
	}
}

// noTPMAttester is a cloud backend that verifies no TPM evidence.
type noTPMAttester struct{ cloud.Attester }

func (noTPMAttester) ClusterTag() string { return cluster }

// tpmAttester is one that does.
type tpmAttester struct {
	noTPMAttester
	fakeTPM
}

// TestTPMFlags: the flags against the backend: required on a backend that
// verifies no TPM evidence fails at start, as do an unknown policy, a bad
// PCR policy and a PCR policy nothing would apply.
func TestTPMFlags(t *testing.T) {
	pcr7 := "7=" + strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name    string
		a       cloud.Attester
		f       Flags
		wantErr string
		mode    string
	}{
		{"default", noTPMAttester{}, Flags{}, "", TPMOff},
		{"required, no TPM backend", noTPMAttester{}, Flags{TPM: TPMRequired}, "verifies no TPM evidence", ""},
		{"required", &tpmAttester{}, Flags{TPM: TPMRequired, TPMPCRPolicy: pcr7}, "", TPMRequired},
		{"unknown policy", &tpmAttester{}, Flags{TPM: "always"}, "want off, preferred or required", ""},
		{"bad PCR policy", &tpmAttester{}, Flags{TPM: TPMPreferred, TPMPCRPolicy: "7=zz"}, "not a SHA-256 digest", ""},
		{"PCR policy with off", &tpmAttester{}, Flags{TPM: TPMOff, TPMPCRPolicy: pcr7}, "checks no TPM evidence", ""},
		{"PCR policy, no TPM backend", noTPMAttester{}, Flags{TPM: TPMPreferred, TPMPCRPolicy: pcr7}, "verifies no TPM evidence", ""},
		{"PCR policy under the default", &tpmAttester{}, Flags{TPMPCRPolicy: pcr7}, "checks no TPM evidence", ""},
		{"off", noTPMAttester{}, Flags{TPM: TPMOff}, "", TPMOff},
	} {
		p, err := tpmPolicy(tc.a, tc.f, false)
		if verr := tc.f.Validate(tc.a); (verr == nil) != (err == nil) {
			t.Errorf("%s: Validate %v, tpmPolicy %v", tc.name, verr, err)
		}
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.wantErr)
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.wantErr == "" && p.Mode != tc.mode:
			t.Errorf("%s: mode %q, want %q", tc.name, p.Mode, tc.mode)
		}
	}
	if _, err := NewFromCloud(nil, nil, nil, noTPMAttester{}, Flags{TPM: TPMRequired}); err == nil || !strings.Contains(err.Error(), "verifies no TPM evidence") {
		t.Errorf("NewFromCloud with required on a backend without TPM: %v", err)
	}
}
