package node_test

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/google/go-tpm-tools/client"
	"github.com/google/go-tpm-tools/simulator"
	"github.com/google/go-tpm/legacy/tpm2"

	"github.com/mooring-dev/mooring/cloud/tpm"
	"github.com/mooring-dev/mooring/cloud/tpm/node"
)

// evidenceOf makes DefaultKey's evidence on rw and parses it.
func evidenceOf(t *testing.T, rw io.ReadWriter, binding string) *tpm.Evidence {
	t.Helper()
	blk, err := node.Quote(rw, node.DefaultKey, binding, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	e, err := tpm.Parse(blk.Data)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func wantReject(t *testing.T, what string, err error, reason string) {
	t.Helper()
	var r *tpm.Rejection
	if !errors.As(err, &r) || r.Reason != reason {
		t.Fatalf("%s: got %v, want a rejection %s", what, err, reason)
	}
}

// TestActivation: the approver's challenge for the simulator's AK and EK
// is answered by that TPM, and the answer checks for that CSR UID, binding,
// AK and EK only; another approver process, a changed secret, a challenge
// for another AK, a TPM that is not the EK's, and an AK that is not a
// restricted TPM-resident key all fail.
func TestActivation(t *testing.T) {
	sim, err := simulator.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	const uid, binding = "0b0f1c2e-uid-1", "binding-a"
	e := evidenceOf(t, sim, binding)
	ch, err := tpm.NewChallenger()
	if err != nil {
		t.Fatal(err)
	}
	challenge, err := ch.Challenge(e.EKPublic, e.AKPublic, uid, binding)
	if err != nil {
		t.Fatal(err)
	}
	// The annotation round trip the approver and the agent make.
	back, err := tpm.DecodeAnnotation(tpm.EncodeAnnotation(challenge))
	if err != nil {
		t.Fatal(err)
	}
	secret, err := node.Activate(sim, node.DefaultKey, back)
	if err != nil {
		t.Fatalf("activate: %v", err)
	}
	answer := &tpm.Activation{ChallengeCSR: "node-csr-1", ChallengeUID: uid, Secret: secret}
	if err := ch.Check(e.EKPublic, e.AKPublic, answer, binding); err != nil {
		t.Fatalf("check: %v", err)
	}

	t.Run("AnotherCSR", func(t *testing.T) {
		a := *answer
		a.ChallengeUID = "0b0f1c2e-uid-2"
		wantReject(t, "another CSR UID", ch.Check(e.EKPublic, e.AKPublic, &a, binding), tpm.RejectKey)
	})
	t.Run("AnotherBinding", func(t *testing.T) {
		wantReject(t, "another CSR key", ch.Check(e.EKPublic, e.AKPublic, answer, "binding-b"), tpm.RejectKey)
	})
	t.Run("Verify", func(t *testing.T) {
		if err := ch.Verify(e.EKPublic, e.AKPublic, answer, "0b0f1c2e-uid-9", binding); err != nil {
			t.Fatalf("the right answer: %v", err)
		}
		var need *tpm.ChallengeNeeded
		if err := ch.Verify(e.EKPublic, e.AKPublic, nil, uid, binding); !errors.As(err, &need) || len(need.Challenge) == 0 {
			t.Fatalf("no answer: %v, want a challenge", err)
		}
		a := *answer
		a.Secret = append([]byte(nil), secret...)
		a.Secret[len(a.Secret)-1] ^= 1
		wantReject(t, "a wrong answer to this approver's challenge", ch.Verify(e.EKPublic, e.AKPublic, &a, uid, binding), tpm.RejectKey)
	})
	t.Run("AnotherApprover", func(t *testing.T) {
		// The approver restarted between the rounds: Check refuses the
		// answer, Verify challenges again (for the CSR at hand), and the
		// TPM's answer to that passes.
		other, err := tpm.NewChallenger()
		if err != nil {
			t.Fatal(err)
		}
		wantReject(t, "another approver's key", other.Check(e.EKPublic, e.AKPublic, answer, binding), tpm.RejectKey)
		const uid2 = "0b0f1c2e-uid-3"
		var need *tpm.ChallengeNeeded
		if err := other.Verify(e.EKPublic, e.AKPublic, answer, uid2, binding); !errors.As(err, &need) {
			t.Fatalf("an answer to another approver's challenge: %v, want a new challenge", err)
		}
		s2, err := node.Activate(sim, node.DefaultKey, need.Challenge)
		if err != nil {
			t.Fatal(err)
		}
		if err := other.Verify(e.EKPublic, e.AKPublic, &tpm.Activation{ChallengeCSR: "node-csr-3", ChallengeUID: uid2, Secret: s2}, "x-"+uid2, binding); err != nil {
			t.Fatalf("the answer to the new challenge: %v", err)
		}
		// A secret of another shape is no other approver's: refused.
		a := *answer
		a.Secret = a.Secret[:16]
		wantReject(t, "a short secret", other.Verify(e.EKPublic, e.AKPublic, &a, uid2, binding), tpm.RejectKey)
	})
	t.Run("WrongSecret", func(t *testing.T) {
		a := *answer
		a.Secret = append([]byte(nil), secret...)
		a.Secret[0] ^= 1
		wantReject(t, "a changed secret", ch.Check(e.EKPublic, e.AKPublic, &a, binding), tpm.RejectKey)
		a.Secret = nil
		wantReject(t, "no secret", ch.Check(e.EKPublic, e.AKPublic, &a, binding), tpm.RejectKey)
		wantReject(t, "no answer", ch.Check(e.EKPublic, e.AKPublic, nil, binding), tpm.RejectKey)
	})
	t.Run("AnotherAK", func(t *testing.T) {
		// An ECC AK of the same TPM: restricted, so challengeable; the
		// answer for the RSA AK does not check for it, and the TPM
		// refuses to activate the RSA AK's challenge with it loaded.
		eccKey := node.Key{Load: client.AttestationKeyECC}
		blk, err := node.Quote(sim, eccKey, binding, time.Now(), nil)
		if err != nil {
			t.Fatal(err)
		}
		other, err := tpm.Parse(blk.Data)
		if err != nil {
			t.Fatal(err)
		}
		wantReject(t, "the answer for another AK", ch.Check(e.EKPublic, other.AKPublic, answer, binding), tpm.RejectKey)
		if _, err := node.Activate(sim, eccKey, challenge); err == nil {
			t.Fatal("the TPM activated a credential made for another AK's name")
		} else {
			t.Logf("another AK: %v", err)
		}
	})
	t.Run("NotAnAK", func(t *testing.T) {
		pub, err := tpm2.DecodePublic(e.AKPublic)
		if err != nil {
			t.Fatal(err)
		}
		for name, clear := range map[string]tpm2.KeyProp{
			"restricted": tpm2.FlagRestricted, "fixedTPM": tpm2.FlagFixedTPM,
			"sensitiveDataOrigin": tpm2.FlagSensitiveDataOrigin,
		} {
			p := pub
			p.Attributes &^= clear
			raw, err := p.Encode()
			if err != nil {
				t.Fatal(err)
			}
			_, err = ch.Challenge(e.EKPublic, raw, uid, binding)
			wantReject(t, "an AK without "+name, err, tpm.RejectKey)
			wantReject(t, "an answer for an AK without "+name, ch.Check(e.EKPublic, raw, answer, binding), tpm.RejectKey)
		}
		// A real unrestricted signing key of the TPM.
		tmpl := client.AKTemplateRSA()
		tmpl.Attributes &^= tpm2.FlagRestricted
		k, err := client.NewKey(sim, tpm2.HandleEndorsement, tmpl)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := k.PublicArea().Encode()
		k.Close()
		if err != nil {
			t.Fatal(err)
		}
		_, err = ch.Challenge(e.EKPublic, raw, uid, binding)
		wantReject(t, "an unrestricted signing key", err, tpm.RejectKey)
	})
	t.Run("NotAnEK", func(t *testing.T) {
		// The AK in the EK's place: a signing key, no protector.
		_, err := ch.Challenge(e.AKPublic, e.AKPublic, uid, binding)
		wantReject(t, "an AK as the EK", err, tpm.RejectKey)
		_, err = ch.Challenge(nil, e.AKPublic, uid, binding)
		wantReject(t, "no EK", err, tpm.RejectMalformed)
	})
	t.Run("BadChallenge", func(t *testing.T) {
		for name, c := range map[string][]byte{
			"empty": nil, "not JSON": []byte("x"), "unknown field": []byte(`{"credential":"AAEA","secret":"AAEA","x":1}`),
			"short": []byte(`{"credential":"AAA=","secret":"AAEA"}`), "size": []byte(`{"credential":"AAIA","secret":"AAEA"}`),
		} {
			if _, err := node.Activate(sim, node.DefaultKey, c); !errors.Is(err, tpm.ErrMalformed) {
				t.Errorf("%s: %v, want ErrMalformed", name, err)
			}
		}
	})
	// Last, as it changes the TPM: another TPM (the simulator made anew,
	// new seeds, so a new EK) cannot activate the first one's challenge,
	// even with an AK of the same template.
	t.Run("AnotherTPM", func(t *testing.T) {
		if err := sim.ManufactureReset(); err != nil {
			t.Fatal(err)
		}
		again := evidenceOf(t, sim, binding)
		if string(again.EKPublic) == string(e.EKPublic) {
			t.Fatal("the EK is the same after a manufacture reset")
		}
		if _, err := node.Activate(sim, node.DefaultKey, challenge); err == nil {
			t.Fatal("another TPM activated the credential sealed to the first TPM's EK")
		} else {
			t.Logf("another TPM: %v", err)
		}
		// And the answer of the first TPM does not check for the second's keys.
		wantReject(t, "the first TPM's answer for the second's keys", ch.Check(again.EKPublic, again.AKPublic, answer, binding), tpm.RejectKey)
	})
}
