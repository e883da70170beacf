package identity

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strings"
	"time"
)

const algES256 = "ES256"

// MaxTokenSize bounds the tokens Verify reads; ours are well under 2 KiB.
const MaxTokenSize = 8 << 10

// Reasons a token is refused. Verify wraps one of them with detail, so
// callers test with errors.Is and log the message.
var (
	ErrMalformed    = errors.New("malformed token")
	ErrAlgorithm    = errors.New("algorithm not allowed")
	ErrUnknownKey   = errors.New("unknown signing key")
	ErrBadSignature = errors.New("bad signature")
	ErrExpired      = errors.New("token expired")
	ErrNotYetValid  = errors.New("token not yet valid")
	ErrAudience     = errors.New("wrong audience")
	ErrIssuer       = errors.New("wrong issuer")
	ErrLifetime     = errors.New("token lifetime too long")
)

// header is the protected JOSE header of our tokens.
type header struct {
	Alg string `json:"alg"`
	Kid string `json:"kid"`
	Typ string `json:"typ,omitempty"`
}

// refusedHeaders would let a token name its own verification key or demand
// extensions; a verifier that trusts them trusts the attacker.
var refusedHeaders = []string{"jwk", "jku", "x5u", "x5c", "x5t", "x5t#S256", "crit"}

var b64url = base64.RawURLEncoding.Strict()

func sign(k *Key, c Claims) (string, error) {
	if k == nil {
		return "", errors.New("sign: no active key")
	}
	h, err := json.Marshal(header{Alg: algES256, Kid: k.ID, Typ: "JWT"})
	if err != nil {
		return "", err
	}
	p, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	input := b64url.EncodeToString(h) + "." + b64url.EncodeToString(p)
	sum := sha256.Sum256([]byte(input))
	der, err := ecdsa.SignASN1(rand.Reader, k.Private, sum[:])
	if err != nil {
		return "", fmt.Errorf("sign: %w", err)
	}
	var rs struct{ R, S *big.Int }
	if _, err := asn1.Unmarshal(der, &rs); err != nil {
		return "", fmt.Errorf("sign: %w", err)
	}
	// JWS wants R and S as fixed 32-byte big-endian halves (RFC 7518 3.4).
	sig := make([]byte, 64)
	rs.R.FillBytes(sig[:32])
	rs.S.FillBytes(sig[32:])
	return input + "." + b64url.EncodeToString(sig), nil
}

// Verifier checks identity tokens against a fixed set of published keys.
type Verifier struct {
	keys map[string]*ecdsa.PublicKey
}

// NewVerifier trusts exactly these keys, by key id.
func NewVerifier(keys map[string]*ecdsa.PublicKey) *Verifier {
	m := make(map[string]*ecdsa.PublicKey, len(keys))
	for id, k := range keys {
		m[id] = k
	}
	return &Verifier{keys: m}
}

// ParseJWKS reads the P-256 signing keys of a JSON Web Key Set, by key id.
// Keys of other types are skipped; a malformed EC key is an error.
func ParseJWKS(data []byte) (map[string]*ecdsa.PublicKey, error) {
	var set jwkSet
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("JWKS: %w", err)
	}
	keys := map[string]*ecdsa.PublicKey{}
	for i, j := range set.Keys {
		if j.Kty != "EC" || (j.Use != "" && j.Use != "sig") {
			continue
		}
		if j.Crv != "P-256" {
			return nil, fmt.Errorf("JWKS: key %d: curve %q, want P-256", i, j.Crv)
		}
		if j.Alg != "" && j.Alg != algES256 {
			return nil, fmt.Errorf("JWKS: key %d: alg %q, want %s", i, j.Alg, algES256)
		}
		x, errX := b64url.DecodeString(j.X)
		y, errY := b64url.DecodeString(j.Y)
		if errX != nil || errY != nil || len(x) != 32 || len(y) != 32 {
			return nil, fmt.Errorf("JWKS: key %d: coordinates are not 32-byte base64url", i)
		}
		pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
		if err != nil {
			return nil, fmt.Errorf("JWKS: key %d: %w", i, err)
		}
		if j.Kid == "" {
			return nil, fmt.Errorf("JWKS: key %d has no kid", i)
		}
		if _, dup := keys[j.Kid]; dup {
			return nil, fmt.Errorf("JWKS: kid %q appears twice", j.Kid)
		}
		keys[j.Kid] = pub
	}
	return keys, nil
}

// VerifyOptions says what a valid token looks like for this caller.
type VerifyOptions struct {
	Issuer   string // required: iss must equal it
	Audience string // required: aud must equal it (the binding value)
	Now      time.Time
	// Skew is the clock difference tolerated on iat, nbf and exp; 30s if zero.
	Skew time.Duration
	// MaxLifetime caps exp-iat; 15m if zero.
	MaxLifetime time.Duration
}

// Verify checks a compact ES256 token and returns its claims. The key is
// found only by kid among the trusted keys; anything the header says about
// keys or algorithms beyond "ES256" is refused.
func (v *Verifier) Verify(token string, opts VerifyOptions) (Claims, error) {
	if opts.Issuer == "" || opts.Audience == "" {
		return Claims{}, errors.New("verify: issuer and audience must be set")
	}
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	if opts.Skew == 0 {
		opts.Skew = 30 * time.Second
	}
	if opts.MaxLifetime == 0 {
		opts.MaxLifetime = 15 * time.Minute
	}
	if len(token) > MaxTokenSize {
		return Claims{}, fmt.Errorf("%w: %d bytes, limit %d", ErrMalformed, len(token), MaxTokenSize)
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return Claims{}, fmt.Errorf("%w: %d parts, want 3", ErrMalformed, len(parts))
	}
	pub, err := v.key(parts[0])
	if err != nil {
		return Claims{}, err
	}
	sig, err := b64url.DecodeString(parts[2])
	if err != nil || len(sig) != 64 {
		return Claims{}, fmt.Errorf("%w: signature is not 64 base64url bytes", ErrMalformed)
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	r, s := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])
	der, err := asn1.Marshal(struct{ R, S *big.Int }{r, s})
	if err != nil || !ecdsa.VerifyASN1(pub, sum[:], der) {
		return Claims{}, ErrBadSignature
	}
	payload, err := b64url.DecodeString(parts[1])
	if err != nil {
		return Claims{}, fmt.Errorf("%w: payload is not base64url", ErrMalformed)
	}
	var c Claims
	if err := decodeStrictJSON(payload, &c); err != nil {
		return Claims{}, fmt.Errorf("%w: payload: %v", ErrMalformed, err)
	}
	if err := check(c, opts); err != nil {
		return Claims{}, err
	}
	return c, nil
}

// key parses the header and returns the trusted key it names.
func (v *Verifier) key(encoded string) (*ecdsa.PublicKey, error) {
	raw, err := b64url.DecodeString(encoded)
	if err != nil {
		return nil, fmt.Errorf("%w: header is not base64url", ErrMalformed)
	}
	var fields map[string]json.RawMessage
	if err := decodeStrictJSON(raw, &fields); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrMalformed, err)
	}
	for _, name := range refusedHeaders {
		if _, ok := fields[name]; ok {
			return nil, fmt.Errorf("%w: header parameter %q is refused", ErrMalformed, name)
		}
	}
	var h header
	if err := decodeStrictJSON(raw, &h); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrMalformed, err)
	}
	if h.Alg != algES256 {
		return nil, fmt.Errorf("%w: %q, want %s", ErrAlgorithm, h.Alg, algES256)
	}
	if h.Typ != "" && h.Typ != "JWT" {
		return nil, fmt.Errorf("%w: typ %q", ErrMalformed, h.Typ)
	}
	pub, ok := v.keys[h.Kid]
	if !ok {
		return nil, fmt.Errorf("%w: kid %q", ErrUnknownKey, h.Kid)
	}
	return pub, nil
}

func check(c Claims, o VerifyOptions) error {
	now := o.Now.Unix()
	skew := int64(o.Skew / time.Second)
	switch {
	case c.Issuer != o.Issuer:
		return fmt.Errorf("%w: %q", ErrIssuer, c.Issuer)
	case c.Audience != o.Audience:
		return fmt.Errorf("%w: %q", ErrAudience, c.Audience)
	case c.Subject == "" || c.Subject != c.Instance.ID:
		return fmt.Errorf("%w: subject %q does not name the instance %q", ErrMalformed, c.Subject, c.Instance.ID)
	case c.ID == "":
		return fmt.Errorf("%w: no jti", ErrMalformed)
	case c.IssuedAt <= 0 || c.Expiry <= c.IssuedAt:
		return fmt.Errorf("%w: iat %d, exp %d", ErrMalformed, c.IssuedAt, c.Expiry)
	case c.Expiry-c.IssuedAt > int64(o.MaxLifetime/time.Second):
		return fmt.Errorf("%w: %ds, limit %s", ErrLifetime, c.Expiry-c.IssuedAt, o.MaxLifetime)
	case now > c.Expiry+skew:
		return fmt.Errorf("%w: at %s", ErrExpired, time.Unix(c.Expiry, 0).UTC().Format(time.RFC3339))
	case c.IssuedAt > now+skew:
		return fmt.Errorf("%w: issued at %s", ErrNotYetValid, time.Unix(c.IssuedAt, 0).UTC().Format(time.RFC3339))
	case c.NotBefore > now+skew:
		return fmt.Errorf("%w: not before %s", ErrNotYetValid, time.Unix(c.NotBefore, 0).UTC().Format(time.RFC3339))
	}
	return nil
}

// decodeStrictJSON decodes one JSON value and refuses trailing data.
func decodeStrictJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// Peek decodes a token's claims WITHOUT verifying it: for indexing only
// (such as finding which CSRs carry the same token id). Never trust them.
func Peek(token string) (Claims, error) {
	if len(token) > MaxTokenSize {
		return Claims{}, ErrMalformed
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return Claims{}, ErrMalformed
	}
	payload, err := b64url.DecodeString(parts[1])
	if err != nil {
		return Claims{}, ErrMalformed
	}
	var c Claims
	if err := decodeStrictJSON(payload, &c); err != nil {
		return Claims{}, ErrMalformed
	}
	return c, nil
}
