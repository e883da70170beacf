package agentid

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// EvidenceVersion is the version of Evidence this code writes and reads.
const EvidenceVersion = 1

// MaxEvidenceSize bounds the JSON of Evidence: two certificates of OCI's
// size (about 2 KiB each, base64 in JSON) and an RSA signature fit well
// under it.
const MaxEvidenceSize = 12 << 10

// Evidence is the wire form of OCI evidence, JSON in an EvidenceType PEM
// block: the instance principal's leaf certificate and the intermediate
// that issued it, as the instance's metadata service serves them (DER),
// and a signature by the leaf's key over SignedMessage(binding,
// SignedAt). The verifier takes OCI's root from its configuration, never
// from here.
type Evidence struct {
	Version int `json:"v"`
	// Binding is the CSR key's binding (internal/evidence.Binding) the
	// signature is over.
	Binding string `json:"binding"`
	// SignedAt is when the node signed, Unix seconds.
	SignedAt int64 `json:"signedAt"`
	// Certificate and Intermediate are DER.
	Certificate  []byte `json:"certificate"`
	Intermediate []byte `json:"intermediate"`
	// Signature: RSA PKCS #1 v1.5 (or ECDSA, for an EC key) with SHA-256
	// over SignedMessage.
	Signature []byte `json:"signature"`
}

// signedMessagePrefix names what the signature is for, so that a signature
// of the instance principal's key made for anything else (OCI's own
// request signing signs HTTP signing strings) is never one over a binding.
const signedMessagePrefix = "mooring oci evidence v1\n"

// SignedMessage is what the leaf's key signs: the prefix, the binding and
// the signing time (Unix seconds), one a line.
func SignedMessage(binding string, signedAt int64) []byte {
	return []byte(signedMessagePrefix + binding + "\n" + strconv.FormatInt(signedAt, 10))
}

// Marshal writes e as JSON.
func (e Evidence) Marshal() ([]byte, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxEvidenceSize {
		return nil, fmt.Errorf("oci evidence is %d bytes, limit %d", len(b), MaxEvidenceSize)
	}
	return b, nil
}

// ParseEvidence reads Evidence strictly: bounded, one JSON object with
// known fields only, version EvidenceVersion, every field present.
func ParseEvidence(data []byte) (Evidence, error) {
	var e Evidence
	if len(data) > MaxEvidenceSize {
		return e, fmt.Errorf("oci evidence is %d bytes, limit %d", len(data), MaxEvidenceSize)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return e, fmt.Errorf("oci evidence: %w", err)
	}
	if dec.More() {
		return e, errors.New("oci evidence: bytes after the JSON object")
	}
	switch {
	case e.Version != EvidenceVersion:
		return e, fmt.Errorf("oci evidence: version %d, want %d", e.Version, EvidenceVersion)
	case e.Binding == "" || len(e.Binding) > 256:
		return e, errors.New("oci evidence: binding: want 1-256 characters")
	case e.SignedAt <= 0:
		return e, errors.New("oci evidence: no signedAt")
	case len(e.Certificate) == 0 || len(e.Intermediate) == 0 || len(e.Signature) == 0:
		return e, errors.New("oci evidence: certificate, intermediate and signature are required")
	}
	return e, nil
}
