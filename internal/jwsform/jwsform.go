// Package jwsform checks the form of a compact JWS before a JWS library
// (go-jose) reads it, for every verifier of compact tokens (GCE identity
// tokens, the local cloud's identity tokens, join tickets): three parts in
// canonical base64url, so that one token has one encoding (and one replay
// key), and a protected header of named members only, so that a token
// cannot name its own key or where to fetch one (jwk, jku, x5u, x5c),
// demand extensions (crit) or change what the signature covers (b64),
// whatever the library would make of them.
package jwsform

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strings"

	"github.com/mooring-dev/mooring/internal/strictjson"
)

// b64url is unpadded base64url that refuses stray bits in the last
// character.
var b64url = base64.RawURLEncoding.Strict()

// Parts are a compact JWS's parts, decoded.
type Parts struct {
	// Header is the protected header's JSON.
	Header []byte
	// Payload and Signature are as signed.
	Payload, Signature []byte
}

// Parse checks token's form: at most maxSize bytes, three parts each in
// canonical base64url, and a protected header that is one JSON object (no
// member twice, nothing after it) whose members are all among allowed. It
// verifies nothing.
func Parse(token string, maxSize int, allowed ...string) (Parts, error) {
	if len(token) > maxSize {
		return Parts{}, fmt.Errorf("%d bytes, limit %d", len(token), maxSize)
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return Parts{}, fmt.Errorf("%d parts, want 3 (a compact JWS)", len(parts))
	}
	var raw [3][]byte
	for i, part := range parts {
		b, err := b64url.DecodeString(part)
		if err != nil || b64url.EncodeToString(b) != part {
			return Parts{}, fmt.Errorf("%s is not canonical base64url", [...]string{"header", "payload", "signature"}[i])
		}
		raw[i] = b
	}
	var members map[string]any
	if err := strictjson.Unmarshal(raw[0], &members); err != nil {
		return Parts{}, fmt.Errorf("header: %w", err)
	}
	if members == nil {
		return Parts{}, fmt.Errorf("header is not a JSON object")
	}
	for name := range members {
		if !slices.Contains(allowed, name) {
			return Parts{}, fmt.Errorf("header member %.20q is not accepted", name)
		}
	}
	return Parts{Header: raw[0], Payload: raw[1], Signature: raw[2]}, nil
}
