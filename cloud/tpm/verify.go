package tpm

import (
	"crypto"
	"crypto/subtle"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-attestation/attest"
	"github.com/google/go-tpm/legacy/tpm2"

	"github.com/mooring-dev/mooring/internal/csrreason"
)

// Rejection reasons of TPM evidence (the CSR approver's deny reasons).
const (
	// RejectRequired: the approver's policy wants TPM evidence and the
	// request carries none.
	RejectRequired = csrreason.TPMEvidenceRequired
	// RejectMalformed: the evidence does not parse.
	RejectMalformed = csrreason.EvidenceMalformed
	// RejectQuote: the quote's signature, nonce or PCR digest is wrong.
	RejectQuote = csrreason.TPMQuoteInvalid
	// RejectExpired: the quote's time is outside the accepted window.
	RejectExpired = csrreason.EvidenceExpired
	// RejectKey: the attestation key is not proven to be the instance's
	// (its certificate names another instance or chains to no trusted
	// root, the cloud's API names another key, the activation failed).
	RejectKey = csrreason.TPMKeyNotOfInstance
	// RejectPCRs: the quoted PCR values are outside the operator's policy.
	RejectPCRs = csrreason.TPMPCRsOutsidePolicy
)

// Rejection is a verdict on bad TPM evidence; cloud.IsRejection knows it
// by its RejectReason method. Any other error is transient.
type Rejection struct {
	Reason string
	Err    error
}

func (r *Rejection) Error() string        { return fmt.Sprintf("%s: %v", r.Reason, r.Err) }
func (r *Rejection) Unwrap() error        { return r.Err }
func (r *Rejection) RejectReason() string { return r.Reason }

// Reject makes a Rejection.
func Reject(reason string, format string, args ...any) error {
	return &Rejection{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// Default quote window.
const (
	DefaultMaxAge       = 10 * time.Minute
	DefaultMaxClockSkew = time.Minute
)

// QuoteOptions configure VerifyQuote.
type QuoteOptions struct {
	// MaxAge is how old a quote may be (default DefaultMaxAge) and
	// MaxClockSkew how far in the future (default DefaultMaxClockSkew).
	MaxAge, MaxClockSkew time.Duration
	// Policy, when set, must allow the quoted PCRs.
	Policy *PCRPolicy
}

// VerifyQuote checks what the evidence proves by itself: the quote was
// signed by the key of AKPublic, over Nonce(binding, Time), with Time in
// the window, and the PCR values match the quote's digest and the policy.
// It returns the AK's public key. It does not say whose AK it is: the
// caller proves that (an AK certificate, the cloud's API, credential
// activation). A *Rejection is a verdict.
func VerifyQuote(e *Evidence, binding string, now time.Time, o QuoteOptions) (crypto.PublicKey, error) {
	if o.MaxAge <= 0 {
		o.MaxAge = DefaultMaxAge
	}
	if o.MaxClockSkew <= 0 {
		o.MaxClockSkew = DefaultMaxClockSkew
	}
	at := e.At()
	if at.Before(now.Add(-o.MaxAge)) || at.After(now.Add(o.MaxClockSkew)) {
		return nil, Reject(RejectExpired, "the TPM quote was made at %s, outside [now-%s, now+%s]", at.UTC().Format(time.RFC3339), o.MaxAge, o.MaxClockSkew)
	}
	ak, err := attest.ParseAKPublic(e.AKPublic)
	if err != nil {
		return nil, Reject(RejectMalformed, "attestation key: %v", err)
	}
	alg, err := attest.FromTPMAlg(tpm2.Algorithm(e.PCRHash))
	if err != nil || alg == attest.HashSHA1 {
		return nil, Reject(RejectMalformed, "PCR bank 0x%04x: want SHA-256 or stronger", e.PCRHash)
	}
	h, _ := tpm2.Algorithm(e.PCRHash).Hash()
	pcrs := make([]attest.PCR, 0, len(e.PCRs))
	for i, v := range e.PCRs {
		pcrs = append(pcrs, attest.PCR{Index: int(i), Digest: v, DigestAlg: h})
	}
	sort.Slice(pcrs, func(a, b int) bool { return pcrs[a].Index < pcrs[b].Index })
	if err := ak.VerifyAll([]attest.Quote{{Quote: e.Quote, Signature: e.Signature}}, pcrs, Nonce(binding, at)); err != nil {
		return nil, Reject(RejectQuote, "the TPM quote does not verify for this CSR's key with the attestation key it carries: %v", err)
	}
	if o.Policy != nil {
		if err := o.Policy.Allows(e.PCRHash, e.PCRs); err != nil {
			return nil, Reject(RejectPCRs, "%v", err)
		}
	}
	return ak.Public, nil
}

// SameKey reports whether two public keys are the same key (an AK
// certificate's and the evidence's AKPublic, the cloud API's and the
// evidence's).
func SameKey(a, b crypto.PublicKey) bool {
	da, err1 := x509.MarshalPKIXPublicKey(a)
	db, err2 := x509.MarshalPKIXPublicKey(b)
	return err1 == nil && err2 == nil && subtle.ConstantTimeCompare(da, db) == 1
}

// CheckAKAttributes checks that a TPMT_PUBLIC is an attestation key a TPM
// made and keeps: a restricted signing key, fixedTPM, fixedParent and
// sensitiveDataOrigin. Only a restricted key's quotes are proven to be
// the TPM's own (a restricted key signs no outside data that starts like
// a quote). For AKs the cloud did not certify (those proven by credential
// activation); a certified AK is the cloud's word.
func CheckAKAttributes(public []byte) error {
	pub, err := tpm2.DecodePublic(public)
	if err != nil {
		return Reject(RejectMalformed, "attestation key: %v", err)
	}
	want := tpm2.FlagRestricted | tpm2.FlagSign | tpm2.FlagFixedTPM | tpm2.FlagFixedParent | tpm2.FlagSensitiveDataOrigin
	if pub.Attributes&want != want {
		return Reject(RejectKey, "the attestation key's attributes %#x lack restricted, sign, fixedTPM, fixedParent or sensitiveDataOrigin", uint32(pub.Attributes))
	}
	if pub.Attributes&tpm2.FlagDecrypt != 0 {
		return Reject(RejectKey, "the attestation key is also a decryption key")
	}
	return nil
}

// PCRPolicy is the operator's policy on quoted PCR values: for each listed
// PCR of the SHA-256 bank, the values it may have. The quote must cover
// every listed PCR.
type PCRPolicy struct {
	allowed map[uint32][][]byte
}

// ParsePCRPolicy reads a policy of the form "7=HEX|HEX,4=HEX": PCR index,
// then the allowed SHA-256 values in hex, separated by |.
func ParsePCRPolicy(s string) (*PCRPolicy, error) {
	p := &PCRPolicy{allowed: map[uint32][][]byte{}}
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		idx, vals, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("PCR policy %q: want INDEX=HEX[|HEX...]", part)
		}
		i, err := strconv.ParseUint(idx, 10, 32)
		if err != nil || i >= MaxPCRs {
			return nil, fmt.Errorf("PCR policy %q: index %q is not 0-%d", part, idx, MaxPCRs-1)
		}
		if _, dup := p.allowed[uint32(i)]; dup {
			return nil, fmt.Errorf("PCR policy: PCR %d listed twice", i)
		}
		for _, v := range strings.Split(vals, "|") {
			b, err := hex.DecodeString(strings.TrimSpace(v))
			if err != nil || len(b) != 32 {
				return nil, fmt.Errorf("PCR policy: PCR %d value %q is not a SHA-256 digest in hex", i, v)
			}
			p.allowed[uint32(i)] = append(p.allowed[uint32(i)], b)
		}
	}
	return p, nil
}

// Allows checks quoted PCR values (of the bank hash) against the policy.
func (p *PCRPolicy) Allows(hash uint16, pcrs map[uint32][]byte) error {
	if p == nil || len(p.allowed) == 0 {
		return nil
	}
	if tpm2.Algorithm(hash) != tpm2.AlgSHA256 {
		return fmt.Errorf("the PCR policy is on the SHA-256 bank; the quote is over bank 0x%04x", hash)
	}
	idx := make([]uint32, 0, len(p.allowed))
	for i := range p.allowed {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	for _, i := range idx {
		v, ok := pcrs[i]
		if !ok {
			return fmt.Errorf("the quote does not cover PCR %d, which the PCR policy lists", i)
		}
		if !slices.ContainsFunc(p.allowed[i], func(a []byte) bool { return subtle.ConstantTimeCompare(a, v) == 1 }) {
			return fmt.Errorf("PCR %d is %x, which the PCR policy does not allow", i, v)
		}
	}
	return nil
}

// ChallengeNeeded is VerifyTPM's answer when the AK is to be proven by
// credential activation and the evidence carries no answer yet: the
// approver writes Challenge (tpm2 ActivateCredential's credential blob and
// encrypted secret, encoded by the Challenger) on the CSR and denies it
// with TPMCredentialChallenge; the agent activates the credential and
// answers with a new CSR whose evidence carries the secret (Activation).
type ChallengeNeeded struct {
	Challenge []byte
}

func (c *ChallengeNeeded) Error() string {
	return "the attestation key is proven by credential activation: challenge issued"
}
