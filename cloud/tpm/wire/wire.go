// Package wire is the form of TPM evidence and of the credential activation
// challenge that both halves share: the node agent (cloud/tpm/node) makes
// and answers them, the approver (cloud/tpm and the backends) checks them.
// It links no verifier, so the agent stays small (docs/join.md, Footprint).
package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// EvidenceType is the PEM block type of TPM evidence in a CSR's
// spec.request (internal/evidence). It follows the cloud's own evidence
// block: the cloud's evidence names the instance, this proves its TPM.
const EvidenceType = "MOORING TPM QUOTE"

// Version is the wire version of Evidence this build makes and reads.
const Version = 1

// Limits of one Evidence (the block as a whole is bounded by
// internal/evidence.MaxBlockSize).
const (
	MaxCerts    = 4
	MaxPCRs     = 24
	nonceDomain = "mooring tpm quote v1"
)

// Evidence is what the node's TPM proves for one CSR: a quote over the
// selected PCRs whose qualifying data (extraData) is Nonce(binding, Time),
// signed by the attestation key (AK). Byte fields hold TPM structures in
// their TPM wire form, which go-tpm decodes; certificates are DER.
type Evidence struct {
	Version int `json:"version"`
	// Time is when the node made the quote (Unix seconds); it is inside
	// the nonce, so the quote cannot be moved to another time.
	Time int64 `json:"time"`
	// AKPublic is the AK's TPMT_PUBLIC.
	AKPublic []byte `json:"akPublic"`
	// AKCert is the certificate the cloud issued for the AK, when it has
	// one (GCE's Shielded VM AK certificate); Intermediates chain it.
	AKCert        []byte   `json:"akCert,omitempty"`
	Intermediates [][]byte `json:"intermediates,omitempty"`
	// EKPublic is the endorsement key's TPMT_PUBLIC and EKCert its
	// certificate, for backends that prove the AK through the EK by
	// credential activation (the cloud's API or CA vouches for the EK).
	EKPublic []byte `json:"ekPublic,omitempty"`
	EKCert   []byte `json:"ekCert,omitempty"`
	// Quote is the TPMS_ATTEST the TPM signed and Signature its
	// TPMT_SIGNATURE.
	Quote     []byte `json:"quote"`
	Signature []byte `json:"signature"`
	// PCRHash is the TPM_ALG_ID of the quoted PCR bank (SHA-256: 0x000B)
	// and PCRs its values by index, as the node read them; the quote's
	// digest proves them.
	PCRHash uint16            `json:"pcrHash"`
	PCRs    map[uint32][]byte `json:"pcrs"`
	// Activation answers the approver's credential activation challenge,
	// when the backend proves the AK through the EK (the approver's cloud/tpm.Challenger).
	Activation *Activation `json:"activation,omitempty"`
}

// Activation is a node's answer to a credential activation challenge: the
// secret its TPM recovered, and which challenge it answers (the CSR the
// challenge was written on).
type Activation struct {
	ChallengeCSR string `json:"challengeCSR"`
	ChallengeUID string `json:"challengeUID"`
	Secret       []byte `json:"secret"`
}

// Nonce is the quote's qualifying data for a CSR key's binding
// (internal/evidence.Binding) at t: SHA-256 over a domain string, the
// binding and t's Unix seconds.
func Nonce(binding string, t time.Time) []byte {
	h := sha256.New()
	h.Write([]byte(nonceDomain))
	h.Write([]byte{0})
	h.Write([]byte(binding))
	h.Write([]byte{0})
	h.Write([]byte(strconv.FormatInt(t.Unix(), 10)))
	return h.Sum(nil)
}

// Marshal encodes e for an evidence block.
func (e *Evidence) Marshal() ([]byte, error) {
	if e.Version == 0 {
		e.Version = Version
	}
	return json.Marshal(e)
}

// ErrNoTPM: the machine has no TPM the agent can use.
var ErrNoTPM = errors.New("no TPM")

// ErrMalformed wraps every error of Parse and of the challenge decoders.
var ErrMalformed = errors.New("malformed TPM evidence")

// Parse decodes an evidence block strictly: unknown fields, a version
// other than Version, missing parts and too many certificates or PCRs are
// refused. It verifies nothing.
func Parse(data []byte) (*Evidence, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var e Evidence
	if err := dec.Decode(&e); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: data after the JSON object", ErrMalformed)
	}
	switch {
	case e.Version != Version:
		return nil, fmt.Errorf("%w: version %d, this approver reads %d", ErrMalformed, e.Version, Version)
	case e.Time <= 0:
		return nil, fmt.Errorf("%w: no time", ErrMalformed)
	case len(e.AKPublic) == 0 || len(e.Quote) == 0 || len(e.Signature) == 0:
		return nil, fmt.Errorf("%w: akPublic, quote and signature are required", ErrMalformed)
	case len(e.Intermediates) > MaxCerts:
		return nil, fmt.Errorf("%w: %d intermediate certificates, limit %d", ErrMalformed, len(e.Intermediates), MaxCerts)
	case len(e.PCRs) == 0 || len(e.PCRs) > MaxPCRs:
		return nil, fmt.Errorf("%w: %d PCRs, want 1-%d", ErrMalformed, len(e.PCRs), MaxPCRs)
	}
	for i := range e.PCRs {
		if i >= MaxPCRs {
			return nil, fmt.Errorf("%w: PCR %d does not exist", ErrMalformed, i)
		}
	}
	return &e, nil
}

// At is the evidence's time.
func (e *Evidence) At() time.Time { return time.Unix(e.Time, 0) }

// ChallengeAnnotation is the annotation the CSR approver writes on a join
// CSR it denies with csrreason.TPMChallenge: the challenge (cloud/tpm.Challenger.
// Challenge's bytes) in standard base64 (EncodeAnnotation).
const ChallengeAnnotation = "tpm.mooring.dev/credential-challenge"

// maxChallenge bounds a challenge a node decodes (an RSA-4096 EK's
// encrypted seed is 512 bytes; the credential blob is under 100).
const maxChallenge = 4096

// Challenge is the wire form of a credential activation challenge: the
// TPM2B_ID_OBJECT (credential blob) and TPM2B_ENCRYPTED_SECRET that
// go-tpm's credactivation.Generate makes, each with its TPM2B size prefix,
// for TPM2_ActivateCredential with the AK as the activated object and the
// EK as its protector.
type Challenge struct {
	Credential []byte `json:"credential"`
	Secret     []byte `json:"secret"`
}

// ParseChallenge decodes a challenge (cloud/tpm.Challenger.Challenge's bytes).
func ParseChallenge(data []byte) (*Challenge, error) {
	if len(data) > maxChallenge {
		return nil, fmt.Errorf("%w: challenge of %d bytes, limit %d", ErrMalformed, len(data), maxChallenge)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c Challenge
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%w: challenge: %v", ErrMalformed, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: data after the challenge", ErrMalformed)
	}
	if len(c.Credential) < 3 || len(c.Secret) < 3 {
		return nil, fmt.Errorf("%w: the challenge lacks its credential or secret", ErrMalformed)
	}
	for _, b := range [][]byte{c.Credential, c.Secret} {
		if int(binary.BigEndian.Uint16(b)) != len(b)-2 {
			return nil, fmt.Errorf("%w: a challenge part's TPM2B size is not its length", ErrMalformed)
		}
	}
	return &c, nil
}

// EncodeAnnotation is the ChallengeAnnotation value of a challenge.
func EncodeAnnotation(challenge []byte) string {
	return base64.StdEncoding.EncodeToString(challenge)
}

// DecodeAnnotation reads a ChallengeAnnotation value back.
func DecodeAnnotation(v string) ([]byte, error) {
	if len(v) > base64.StdEncoding.EncodedLen(maxChallenge) {
		return nil, fmt.Errorf("%w: challenge annotation of %d bytes", ErrMalformed, len(v))
	}
	b, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return nil, fmt.Errorf("%w: challenge annotation: %v", ErrMalformed, err)
	}
	return b, nil
}
