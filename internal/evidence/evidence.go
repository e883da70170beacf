// Package evidence carries attestation evidence inside a Kubernetes CSR:
// the CERTIFICATE REQUEST PEM block first (the only block the apiserver
// parses), then one PEM block per piece of evidence. The node agent encodes
// with it and the CSR approver decodes with it. Decode is strict and
// bounded: it is the approver's first contact with attacker-chosen bytes.
package evidence

import (
	"bytes"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"regexp"
)

// Limits of a request Decode accepts.
const (
	// MaxRequestSize bounds spec.request as a whole.
	MaxRequestSize = 32 << 10
	// MaxBlocks bounds the evidence blocks.
	MaxBlocks = 4
	// MaxBlockSize bounds one evidence block's content.
	MaxBlockSize = 16 << 10
)

// CSRBlockType is the PEM type of the request itself.
const CSRBlockType = "CERTIFICATE REQUEST"

// Block is one piece of evidence: its kind is the PEM block type, such as
// "MOORING LOCAL IDENTITY TOKEN".
type Block struct {
	Type string
	Data []byte
}

// Errors Decode wraps, for machine-readable deny reasons.
var (
	ErrTooLarge  = errors.New("request too large")
	ErrMalformed = errors.New("malformed request")
	ErrNoCSR     = errors.New("first PEM block is not a CERTIFICATE REQUEST")
)

var typeRE = regexp.MustCompile(`^[A-Z0-9][A-Z0-9 ]{0,63}$`)

// Encode writes the CSR (DER) followed by the evidence blocks.
func Encode(csrDER []byte, blocks ...Block) ([]byte, error) {
	var buf bytes.Buffer
	if err := pem.Encode(&buf, &pem.Block{Type: CSRBlockType, Bytes: csrDER}); err != nil {
		return nil, err
	}
	if len(blocks) > MaxBlocks {
		return nil, fmt.Errorf("%w: %d evidence blocks, limit %d", ErrTooLarge, len(blocks), MaxBlocks)
	}
	for _, b := range blocks {
		if !typeRE.MatchString(b.Type) || b.Type == CSRBlockType {
			return nil, fmt.Errorf("evidence type %q: want 1-64 upper-case letters, digits and spaces", b.Type)
		}
		if len(b.Data) == 0 || len(b.Data) > MaxBlockSize {
			return nil, fmt.Errorf("%w: evidence %s is %d bytes, limit 1-%d", ErrTooLarge, b.Type, len(b.Data), MaxBlockSize)
		}
		if err := pem.Encode(&buf, &pem.Block{Type: b.Type, Bytes: b.Data}); err != nil {
			return nil, err
		}
	}
	if buf.Len() > MaxRequestSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, buf.Len(), MaxRequestSize)
	}
	return buf.Bytes(), nil
}

// Decode parses a CSR's spec.request: exactly one CERTIFICATE REQUEST block
// first, then evidence blocks, then nothing but whitespace. The CSR's own
// signature is checked. Blocks with PEM headers, empty or oversized blocks,
// a second CSR, duplicate evidence types and trailing bytes are refused.
func Decode(request []byte) (*x509.CertificateRequest, []Block, error) {
	csr, blocks, err := Claimed(request)
	if err != nil {
		return nil, nil, err
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, nil, fmt.Errorf("%w: CSR signature: %v", ErrMalformed, err)
	}
	return csr, blocks, nil
}

// Claimed parses spec.request as Decode does but does not check the CSR's
// signature: what a request claims (its key, its evidence), cheaply, to
// index it. Nothing it returns may be trusted; Decode is what judges a
// request. (An informer's index function runs on every add and on both
// sides of every update: the signature check was most of the approver's CPU
// in a boot wave.)
func Claimed(request []byte) (*x509.CertificateRequest, []Block, error) {
	der, blocks, err := split(request)
	if err != nil {
		return nil, nil, err
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return csr, blocks, nil
}

// Blocks reads the evidence blocks of spec.request with Decode's checks of
// the PEM framing, without parsing the CSR or checking its signature: what
// a request claims, cheaply, to sort it before it is judged (Decode is what
// judges it).
func Blocks(request []byte) ([]Block, error) {
	_, blocks, err := split(request)
	return blocks, err
}

// split checks the PEM framing of spec.request and returns the CSR's DER
// and the evidence blocks.
func split(request []byte) ([]byte, []Block, error) {
	if len(request) > MaxRequestSize {
		return nil, nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(request), MaxRequestSize)
	}
	first, rest := pem.Decode(request)
	if first == nil {
		return nil, nil, fmt.Errorf("%w: no PEM block", ErrMalformed)
	}
	if !startsHere(request, rest) {
		return nil, nil, fmt.Errorf("%w: bytes or a malformed block before the first PEM block", ErrMalformed)
	}
	if first.Type != CSRBlockType {
		return nil, nil, fmt.Errorf("%w (got %q)", ErrNoCSR, first.Type)
	}
	if len(first.Headers) > 0 {
		return nil, nil, fmt.Errorf("%w: headers in the CSR block", ErrMalformed)
	}
	var blocks []Block
	seen := map[string]bool{}
	for len(bytes.TrimSpace(rest)) > 0 {
		b, next := pem.Decode(rest)
		if b == nil {
			return nil, nil, fmt.Errorf("%w: trailing bytes after the PEM blocks", ErrMalformed)
		}
		if !startsHere(rest, next) {
			return nil, nil, fmt.Errorf("%w: bytes or a malformed block between PEM blocks", ErrMalformed)
		}
		switch {
		case len(blocks) == MaxBlocks:
			return nil, nil, fmt.Errorf("%w: more than %d evidence blocks", ErrTooLarge, MaxBlocks)
		case b.Type == CSRBlockType:
			return nil, nil, fmt.Errorf("%w: a second CERTIFICATE REQUEST", ErrMalformed)
		case !typeRE.MatchString(b.Type):
			return nil, nil, fmt.Errorf("%w: evidence type %q", ErrMalformed, b.Type)
		case len(b.Headers) > 0:
			return nil, nil, fmt.Errorf("%w: PEM headers in %s", ErrMalformed, b.Type)
		case len(b.Bytes) == 0 || len(b.Bytes) > MaxBlockSize:
			return nil, nil, fmt.Errorf("%w: evidence %s is %d bytes, limit 1-%d", ErrTooLarge, b.Type, len(b.Bytes), MaxBlockSize)
		case seen[b.Type]:
			return nil, nil, fmt.Errorf("%w: evidence %s appears twice", ErrMalformed, b.Type)
		}
		seen[b.Type] = true
		blocks = append(blocks, Block{Type: b.Type, Data: b.Bytes})
		rest = next
	}
	return first.Bytes, blocks, nil
}

// startsHere reports whether the block pem.Decode found in data, leaving
// rest, is the first thing in data after whitespace. pem.Decode skips any
// text before a block, malformed blocks included, so the block it returns
// is checked to be the one that begins data: the consumed part must start
// with a BEGIN line and hold no other.
func startsHere(data, rest []byte) bool {
	consumed := bytes.TrimLeft(data[:len(data)-len(rest)], " \t\r\n")
	return bytes.HasPrefix(consumed, []byte("-----BEGIN ")) && bytes.Count(consumed, []byte("-----BEGIN ")) == 1
}

// Binding is the value that ties evidence to a CSR key: the SHA-256 of the
// key's SubjectPublicKeyInfo (DER), base64url without padding (43
// characters, fits an audience or a nonce slot).
func Binding(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("binding: %w", err)
	}
	sum := sha256.Sum256(der)
	return base64.RawURLEncoding.EncodeToString(sum[:]), nil
}
