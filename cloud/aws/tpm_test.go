package aws

// VerifyTPM over the stand-in's EC2 (GetInstanceTpmEkPub, tpmSupport) with
// go-tpm-tools' TPM simulator as each instance's NitroTPM. The library
// runs one simulator per process at a time; a test's TPMs are seeded
// simulators opened in turn (a seed gives the same EK and AK each time).

import (
	"context"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-tpm-tools/client"
	"github.com/google/go-tpm-tools/simulator"
	"github.com/google/go-tpm/legacy/tpm2"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/aws/awstest"
	"github.com/mooring-dev/mooring/cloud/tpm"
	tpmnode "github.com/mooring-dev/mooring/cloud/tpm/node"
	"github.com/mooring-dev/mooring/cloud/view"
)

// The tests' TPMs.
const (
	tpmA int64 = 1001
	tpmB int64 = 1002
)

// withTPM runs f on the seeded simulator of a TPM.
func withTPM(t *testing.T, seed int64, f func(rw io.ReadWriter)) {
	t.Helper()
	sim, err := simulator.GetWithFixedSeedInsecure(seed)
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	f(sim)
}

// nitroTPM is a TPM's endorsement key as EC2 holds it for its instance.
func nitroTPM(t *testing.T, seed int64) *awstest.NitroTPM {
	t.Helper()
	var n *awstest.NitroTPM
	withTPM(t, seed, func(rw io.ReadWriter) {
		var err error
		if n, err = awstest.NitroTPMOf(rw); err != nil {
			t.Fatal(err)
		}
	})
	return n
}

// quoteWith is a TPM's evidence for binding at now, with key (nil: the
// key AWS's agentid names) and an answer.
func quoteWith(t *testing.T, seed int64, key *tpmnode.Key, binding string, now time.Time, answer *tpm.Activation) []byte {
	t.Helper()
	k := tpmnode.DefaultKey
	if key != nil {
		k = *key
	}
	var data []byte
	withTPM(t, seed, func(rw io.ReadWriter) {
		blk, err := tpmnode.Quote(rw, k, binding, now, answer)
		if err != nil {
			t.Fatal(err)
		}
		data = blk.Data
	})
	return data
}

// activate is a TPM's answer to a challenge (an error when the TPM
// cannot activate it).
func activate(t *testing.T, seed int64, challenge []byte) ([]byte, error) {
	t.Helper()
	var secret []byte
	var err error
	withTPM(t, seed, func(rw io.ReadWriter) { secret, err = tpmnode.Activate(rw, tpmnode.DefaultKey, challenge) })
	return secret, err
}

// tpmWorld is a Cloud over the stand-in with instances whose NitroTPMs
// are the tests' TPMs.
type tpmWorld struct {
	t     *testing.T
	env   *env
	cloud *Cloud
}

func newTPMWorld(t *testing.T, opts awstest.Options) *tpmWorld {
	t.Helper()
	e := newEnvWith(t, opts)
	c, err := NewWithClients(e.config(), e.ec2, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &tpmWorld{t: t, env: e, cloud: c}
}

// instance puts a running instance of the cluster with the NitroTPM of
// seed (0: none) and returns it as the view has it.
func (w *tpmWorld) instance(ip string, seed int64) view.Instance {
	w.t.Helper()
	in := awstest.Instance{PrivateIP: ip, Tags: map[string]string{clusterTag: "owned"}}
	if seed != 0 {
		in.NitroTPM = nitroTPM(w.t, seed)
	}
	id := w.env.put(w.t, in).ID
	vi, err := w.cloud.describeByID(context.Background(), id)
	if err != nil {
		w.t.Fatal(err)
	}
	return vi
}

// verify is VerifyTPM for a CSR (name and UID) whose key has binding, the
// cloud's evidence having named the instance.
func (w *tpmWorld) verify(in view.Instance, data []byte, binding, csr string, now time.Time, o tpm.QuoteOptions) error {
	return w.cloud.VerifyTPM(context.Background(), cloud.TPMRequest{
		Data: data, Binding: binding, CSR: csr, CSRUID: "uid-" + csr, Now: now, Quote: o,
	}, cloud.Attestation{InstanceID: in.ID}, in)
}

// challenge is the challenge of a first-round verdict.
func challengeOf(t *testing.T, err error) []byte {
	t.Helper()
	var c *tpm.ChallengeNeeded
	if !errors.As(err, &c) || len(c.Challenge) == 0 {
		t.Fatalf("err = %v, want a credential activation challenge", err)
	}
	return c.Challenge
}

// answerTo is the activation a TPM sends for the challenge on csr.
func answerTo(t *testing.T, seed int64, challenge []byte, csr string) *tpm.Activation {
	t.Helper()
	secret, err := activate(t, seed, challenge)
	if err != nil {
		t.Fatalf("activate: %v", err)
	}
	return &tpm.Activation{ChallengeCSR: csr, ChallengeUID: "uid-" + csr, Secret: secret}
}

// TestTPMJoin: an instance with NitroTPM proves its join in two rounds:
// its first CSR's evidence (quote, AK, EK) gets a challenge sealed to the
// EK EC2 reports, its TPM activates it, and the second CSR's evidence
// with the answer is proven. Each round asks EC2 once. An approver
// restarted between the rounds challenges again.
func TestTPMJoin(t *testing.T) {
	w := newTPMWorld(t, awstest.Options{})
	in := w.instance("127.0.0.10", tpmA)
	if !in.VTPM {
		t.Fatal("the view does not say the instance has a vTPM")
	}
	if other := w.instance("127.0.0.11", 0); other.VTPM {
		t.Fatal("the view says an instance without NitroTPM has a vTPM")
	}
	now := time.Now()
	err := w.verify(in, quoteWith(t, tpmA, nil, "binding-1", now, nil), "binding-1", "csr-1", now, tpm.QuoteOptions{})
	answer := answerTo(t, tpmA, challengeOf(t, err), "csr-1")
	if err := w.verify(in, quoteWith(t, tpmA, nil, "binding-1", now, answer), "binding-1", "csr-2", now, tpm.QuoteOptions{}); err != nil {
		t.Fatalf("second round: %v", err)
	}
	if n := w.env.aws.Calls(awstest.ActionGetInstanceTpmEkPub); n != 2 {
		t.Fatalf("%d GetInstanceTpmEkPub calls, want 2", n)
	}
	// An approver restarted between the rounds (a new process: another
	// challenger) asks again rather than deny: one more round.
	restarted, err := NewWithClients(w.env.config(), w.env.ec2, nil)
	if err != nil {
		t.Fatal(err)
	}
	w2 := &tpmWorld{t: t, env: w.env, cloud: restarted}
	again := w2.verify(in, quoteWith(t, tpmA, nil, "binding-1", now, answer), "binding-1", "csr-r2", now, tpm.QuoteOptions{})
	answer2 := answerTo(t, tpmA, challengeOf(t, again), "csr-r2")
	if err := w2.verify(in, quoteWith(t, tpmA, nil, "binding-1", now, answer2), "binding-1", "csr-r3", now, tpm.QuoteOptions{}); err != nil {
		t.Fatalf("after the restart, the third round: %v", err)
	}
	// Under a PCR policy the simulator's PCRs meet.
	e, err := tpm.Parse(quoteWith(t, tpmA, nil, "binding-1", now, answer))
	if err != nil {
		t.Fatal(err)
	}
	policy, err := tpm.ParsePCRPolicy("0=" + hex.EncodeToString(e.PCRs[0]))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.verify(in, quoteWith(t, tpmA, nil, "binding-1", now, answer), "binding-1", "csr-3", now, tpm.QuoteOptions{Policy: policy}); err != nil {
		t.Fatalf("under a PCR policy the quote meets: %v", err)
	}
}

// TestTPMAttacks: each way to pass another TPM, another TPM's answer,
// another CSR's answer or an old quote off as the instance's is denied;
// the TPMs stand for an attacker's own (B) and the instance's (A).
func TestTPMAttacks(t *testing.T) {
	w := newTPMWorld(t, awstest.Options{})
	x := w.instance("127.0.0.10", tpmA) // the victim instance, EC2 says TPM A
	y := w.instance("127.0.0.11", tpmB) // the attacker's own instance, TPM B
	now := time.Now()
	o := tpm.QuoteOptions{}

	// A genuine first round on x, and A's answer.
	challenge := challengeOf(t, w.verify(x, quoteWith(t, tpmA, nil, "binding-1", now, nil), "binding-1", "csr-1", now, o))
	answerA := answerTo(t, tpmA, challenge, "csr-1")

	t.Run("AnotherTPMsQuote", func(t *testing.T) {
		// B quotes with its own AK and claims x's EK: the challenge is
		// sealed to A's EK, which B does not hold.
		e, err := tpm.Parse(quoteWith(t, tpmB, nil, "binding-1", now, nil))
		if err != nil {
			t.Fatal(err)
		}
		var ekA []byte
		withTPM(t, tpmA, func(rw io.ReadWriter) { ekA = publicArea(t, rw, client.EndorsementKeyRSA) })
		e.EKPublic = ekA
		forged, _ := e.Marshal()
		ch := challengeOf(t, w.verify(x, forged, "binding-1", "csr-b1", now, o))
		if _, err := activate(t, tpmB, ch); err == nil {
			t.Fatal("TPM B activated a credential sealed to TPM A's EK")
		}
		// B's quote with A's genuine answer: the answer is for A's AK.
		e.Activation = answerA
		forged, _ = e.Marshal()
		wantReject(t, w.verify(x, forged, "binding-1", "csr-b2", now, o), tpm.RejectKey)
	})
	t.Run("AnotherTPMsEK", func(t *testing.T) {
		// Evidence wholly of TPM B on x, whose EC2 EK is A's.
		wantReject(t, w.verify(x, quoteWith(t, tpmB, nil, "binding-1", now, nil), "binding-1", "csr-b3", now, o), tpm.RejectKey)
	})
	t.Run("AnswerActivatedByAnotherTPM", func(t *testing.T) {
		// B answers a genuine challenge on its own instance y...
		chY := challengeOf(t, w.verify(y, quoteWith(t, tpmB, nil, "binding-1", now, nil), "binding-1", "csr-y1", now, o))
		answerB := answerTo(t, tpmB, chY, "csr-y1")
		if err := w.verify(y, quoteWith(t, tpmB, nil, "binding-1", now, answerB), "binding-1", "csr-y2", now, o); err != nil {
			t.Fatalf("control: y's own join: %v", err)
		}
		// ...and sends that answer with its quote claiming x's EK.
		e, _ := tpm.Parse(quoteWith(t, tpmB, nil, "binding-1", now, answerB))
		var ekA []byte
		withTPM(t, tpmA, func(rw io.ReadWriter) { ekA = publicArea(t, rw, client.EndorsementKeyRSA) })
		e.EKPublic = ekA
		forged, _ := e.Marshal()
		wantReject(t, w.verify(x, forged, "binding-1", "csr-b4", now, o), tpm.RejectKey)
	})
	t.Run("AnswerForAnotherCSR", func(t *testing.T) {
		// A's answer for the CSR key of binding-1 in a quote for another
		// key, and under another challenge's UID.
		wantReject(t, w.verify(x, quoteWith(t, tpmA, nil, "binding-2", now, answerA), "binding-2", "csr-4", now, o), tpm.RejectKey)
		moved := *answerA
		moved.ChallengeUID = "uid-csr-other"
		wantReject(t, w.verify(x, quoteWith(t, tpmA, nil, "binding-1", now, &moved), "binding-1", "csr-5", now, o), tpm.RejectKey)
	})
	t.Run("ReplayedQuote", func(t *testing.T) {
		round2 := quoteWith(t, tpmA, nil, "binding-1", now, answerA)
		if err := w.verify(x, round2, "binding-1", "csr-2", now, o); err != nil {
			t.Fatalf("control: %v", err)
		}
		// For another CSR key: the quote's nonce binds binding-1.
		wantReject(t, w.verify(x, round2, "binding-2", "csr-6", now, o), tpm.RejectQuote)
		// For the same key, after the quote's window.
		wantReject(t, w.verify(x, round2, "binding-1", "csr-7", now.Add(tpm.DefaultMaxAge+time.Minute), o), tpm.RejectExpired)
	})
	t.Run("PCRsOutsidePolicy", func(t *testing.T) {
		policy, err := tpm.ParsePCRPolicy("0=" + strings.Repeat("ab", 32))
		if err != nil {
			t.Fatal(err)
		}
		round2 := quoteWith(t, tpmA, nil, "binding-1", now, answerA)
		wantReject(t, w.verify(x, round2, "binding-1", "csr-8", now, tpm.QuoteOptions{Policy: policy}), tpm.RejectPCRs)
	})
	t.Run("AKNotRestricted", func(t *testing.T) {
		// A's own unrestricted signing key as the AK: its quotes are
		// signatures over anything, not the TPM's.
		data := unrestrictedQuote(t, tpmA, "binding-1", now)
		e, _ := tpm.Parse(data)
		if _, err := tpm.VerifyQuote(e, "binding-1", now, o); err != nil {
			t.Fatalf("control: the unrestricted key's quote verifies by itself: %v", err)
		}
		wantReject(t, w.verify(x, data, "binding-1", "csr-9", now, o), tpm.RejectKey)
	})
	t.Run("NoNitroTPM", func(t *testing.T) {
		// An instance EC2 shows without NitroTPM: a TPM of the attacker's
		// vouches for nothing, and EC2 is not asked.
		z := w.instance("127.0.0.12", 0)
		before := w.env.aws.Calls(awstest.ActionGetInstanceTpmEkPub)
		wantReject(t, w.verify(z, quoteWith(t, tpmB, nil, "binding-1", now, nil), "binding-1", "csr-z", now, o), tpm.RejectKey)
		if w.env.aws.Calls(awstest.ActionGetInstanceTpmEkPub) != before {
			t.Fatal("EC2 was asked for the EK of an instance without NitroTPM")
		}
	})
}

// TestTPMEC2Failures: EC2's failures to name the EK are transient, never
// a verdict and never an approval: throttling (after the SDK's retries
// are spent), an instance EC2 does not show yet after launch, and an
// instance EC2 says has no NitroTPM while the view said it had.
func TestTPMEC2Failures(t *testing.T) {
	w := newTPMWorld(t, awstest.Options{})
	x := w.instance("127.0.0.10", tpmA)
	now := time.Now()
	data := quoteWith(t, tpmA, nil, "binding-1", now, nil)

	w.env.aws.Fail(awstest.ActionGetInstanceTpmEkPub, 1, http.StatusServiceUnavailable, "RequestLimitExceeded")
	wantTransient(t, w.verify(x, data, "binding-1", "csr-1", now, tpm.QuoteOptions{}))

	w.env.aws.SetNewInstanceDelay(time.Hour)
	fresh := w.env.put(t, awstest.Instance{PrivateIP: "127.0.0.11", Tags: map[string]string{clusterTag: "owned"}, NitroTPM: nitroTPM(t, tpmA)})
	freshView := x
	freshView.ID = fresh.ID
	wantTransient(t, w.verify(freshView, data, "binding-1", "csr-2", now, tpm.QuoteOptions{}))
	w.env.aws.SetNewInstanceDelay(0)

	noTPM := w.env.put(t, awstest.Instance{PrivateIP: "127.0.0.12", Tags: map[string]string{clusterTag: "owned"}})
	stale := x
	stale.ID = noTPM.ID
	wantTransient(t, w.verify(stale, data, "binding-1", "csr-3", now, tpm.QuoteOptions{}))

	// And it works once EC2 answers.
	challengeOf(t, w.verify(x, data, "binding-1", "csr-4", now, tpm.QuoteOptions{}))
}

// TestTPMMalformed: evidence that does not parse, or lacks the EK.
func TestTPMMalformed(t *testing.T) {
	w := newTPMWorld(t, awstest.Options{})
	x := w.instance("127.0.0.10", tpmA)
	now := time.Now()
	wantReject(t, w.verify(x, []byte(`{"version":1}`), "b", "csr-1", now, tpm.QuoteOptions{}), tpm.RejectMalformed)
	noEK := tpmnode.Key{Load: client.AttestationKeyRSA}
	wantReject(t, w.verify(x, quoteWith(t, tpmA, &noEK, "b", now, nil), "b", "csr-2", now, tpm.QuoteOptions{}), tpm.RejectMalformed)
	if n := w.env.aws.Calls(awstest.ActionGetInstanceTpmEkPub); n != 0 {
		t.Fatalf("%d EC2 calls for malformed evidence", n)
	}
}

// publicArea is the TPMT_PUBLIC of the key load makes.
func publicArea(t *testing.T, rw io.ReadWriter, load func(io.ReadWriter) (*client.Key, error)) []byte {
	t.Helper()
	k, err := load(rw)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	b, err := k.PublicArea().Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// unrestrictedQuote is evidence whose quote is signed by an unrestricted
// signing key of the TPM (go-tpm-tools' client refuses to quote with one:
// go-tpm's TPM2_Quote makes it), with the TPM's EK.
func unrestrictedQuote(t *testing.T, seed int64, binding string, now time.Time) []byte {
	t.Helper()
	var data []byte
	withTPM(t, seed, func(rw io.ReadWriter) {
		tmpl := client.AKTemplateRSA()
		tmpl.Attributes &^= tpm2.FlagRestricted
		k, err := client.NewKey(rw, tpm2.HandleEndorsement, tmpl)
		if err != nil {
			t.Fatal(err)
		}
		defer k.Close()
		sel := tpm2.PCRSelection{Hash: tpm2.AlgSHA256, PCRs: []int{0, 1, 2, 3, 4, 5, 6, 7}}
		at := time.Unix(now.Unix(), 0)
		attest, sig, err := tpm2.QuoteRaw(rw, k.Handle(), "", "", tpm.Nonce(binding, at), sel, tpm2.AlgNull)
		if err != nil {
			t.Fatal(err)
		}
		values, err := tpm2.ReadPCRs(rw, sel)
		if err != nil {
			t.Fatal(err)
		}
		e := tpm.Evidence{Time: at.Unix(), Quote: attest, Signature: sig, PCRHash: uint16(tpm2.AlgSHA256), PCRs: map[uint32][]byte{}}
		for i, v := range values {
			e.PCRs[uint32(i)] = v
		}
		e.AKPublic = publicArea(t, rw, func(io.ReadWriter) (*client.Key, error) { return client.NewKey(rw, tpm2.HandleEndorsement, tmpl) })
		e.EKPublic = publicArea(t, rw, client.EndorsementKeyRSA)
		if data, err = e.Marshal(); err != nil {
			t.Fatal(err)
		}
	})
	return data
}
