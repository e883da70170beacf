package identity

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/mooring-dev/mooring/internal/jwsform"
	"github.com/mooring-dev/mooring/internal/strictjson"
)

// algES256 is the only signature algorithm of identity tokens.
const algES256 = jose.ES256

// allowedAlgorithms is the list handed to the JWS parser: ES256 and nothing
// else, so "none", HMAC and RSA tokens fail while parsing.
var allowedAlgorithms = []jose.SignatureAlgorithm{algES256}

// es256SignatureSize is R and S as fixed 32-byte big-endian halves
// (RFC 7518 section 3.4).
const es256SignatureSize = 64

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

// refusedHeaders would let a token name its own verification key, demand
// extensions, or change what the signature covers ("b64", which go-jose
// honours even without "crit"); a verifier that trusts them trusts the
// attacker.
var refusedHeaders = []string{"jwk", "jku", "x5u", "x5c", "x5t", "x5t#S256", "crit", "b64"}

// b64url is the canonical encoding of every token part: unpadded, and with
// no stray bits in the last character.
var b64url = base64.RawURLEncoding.Strict()

// sign makes a compact JWS of c with k: protected header
// {"alg":"ES256","kid":<k.ID>,"typ":"JWT"}, payload the JSON claims.
func sign(k *Key, c Claims) (string, error) {
	if k == nil {
		return "", errors.New("sign: no active key")
	}
	payload, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	signer, err := jose.NewSigner(
		jose.SigningKey{Algorithm: algES256, Key: jose.JSONWebKey{Key: k.Private, KeyID: k.ID}},
		(&jose.SignerOptions{}).WithType("JWT"),
	)
	if err != nil {
		return "", fmt.Errorf("sign: %w", err)
	}
	obj, err := signer.Sign(payload)
	if err != nil {
		return "", fmt.Errorf("sign: %w", err)
	}
	token, err := obj.CompactSerialize()
	if err != nil {
		return "", fmt.Errorf("sign: %w", err)
	}
	return token, nil
}

// Verifier checks identity tokens against a fixed set of published keys.
type Verifier struct {
	keys map[string]*ecdsa.PublicKey
}

// NewVerifier trusts exactly these keys, by key id. Keys that are not
// P-256 could never verify an ES256 token and are left out.
func NewVerifier(keys map[string]*ecdsa.PublicKey) *Verifier {
	m := make(map[string]*ecdsa.PublicKey, len(keys))
	for id, k := range keys {
		if k != nil && k.Curve == elliptic.P256() {
			m[id] = k
		}
	}
	return &Verifier{keys: m}
}

// ParseJWKS reads the P-256 signing keys of a JSON Web Key Set, by key id.
// Keys of other types, and keys for a use other than signing, are skipped
// (RFC 7517 section 5); a malformed EC key, an EC key on another curve or
// for another algorithm, a private key, a key without kid and a repeated
// kid are errors.
func ParseJWKS(data []byte) (map[string]*ecdsa.PublicKey, error) {
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("JWKS: %w", err)
	}
	keys := map[string]*ecdsa.PublicKey{}
	for i, raw := range set.Keys {
		kty, use, err := jwkTypeAndUse(raw)
		if err != nil {
			return nil, fmt.Errorf("JWKS: key %d: %w", i, err)
		}
		if kty != "EC" || (use != "" && use != "sig") {
			continue
		}
		var jwk jose.JSONWebKey
		if err := jwk.UnmarshalJSON(raw); err != nil {
			return nil, fmt.Errorf("JWKS: key %d: %w", i, err)
		}
		pub, ok := jwk.Key.(*ecdsa.PublicKey)
		if !ok || !jwk.IsPublic() {
			return nil, fmt.Errorf("JWKS: key %d is not an EC public key", i)
		}
		if pub.Curve != elliptic.P256() {
			return nil, fmt.Errorf("JWKS: key %d: curve %s, want P-256", i, pub.Curve.Params().Name)
		}
		if jwk.Algorithm != "" && jwk.Algorithm != string(algES256) {
			return nil, fmt.Errorf("JWKS: key %d: alg %q, want %s", i, jwk.Algorithm, algES256)
		}
		if jwk.KeyID == "" {
			return nil, fmt.Errorf("JWKS: key %d has no kid", i)
		}
		if _, dup := keys[jwk.KeyID]; dup {
			return nil, fmt.Errorf("JWKS: kid %q appears twice", jwk.KeyID)
		}
		keys[jwk.KeyID] = pub
	}
	return keys, nil
}

// jwkTypeAndUse reads the "kty" and "use" members of one JWK, exactly as
// spelled (member names are case-sensitive).
func jwkTypeAndUse(raw []byte) (kty, use string, err error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(raw, &members); err != nil {
		return "", "", err
	}
	for name, dst := range map[string]*string{"kty": &kty, "use": &use} {
		if v, ok := members[name]; ok {
			if err := json.Unmarshal(v, dst); err != nil {
				return "", "", fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	return kty, use, nil
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

// Verify checks a compact ES256 token against the verifier's keys and
// returns its claims; see VerifyWith.
func (v *Verifier) Verify(token string, opts VerifyOptions) (Claims, error) {
	return VerifyWith(token, opts, func(kid string) (*ecdsa.PublicKey, error) {
		if pub, ok := v.keys[kid]; ok {
			return pub, nil
		}
		return nil, fmt.Errorf("%w: kid %.64q", ErrUnknownKey, kid)
	})
}

// KeyLookup finds the trusted key a kid names. Its error is returned by
// VerifyWith as it is.
type KeyLookup func(kid string) (*ecdsa.PublicKey, error)

// VerifyWith checks a compact ES256 token and returns its claims. The form,
// the header and the claims as the token states them are checked first;
// only then is the key looked up, by kid alone, and the claims checked
// again as signed. Anything the header says about keys or algorithms
// beyond "ES256" is refused. Errors wrap the package's Err values, except
// lookup's, returned as they are.
func VerifyWith(token string, opts VerifyOptions, lookup KeyLookup) (Claims, error) {
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
	if err := precheck(token); err != nil {
		return Claims{}, err
	}
	obj, err := jose.ParseSignedCompact(token, allowedAlgorithms)
	if err != nil {
		var algErr *jose.ErrUnexpectedSignatureAlgorithm
		if errors.As(err, &algErr) {
			return Claims{}, fmt.Errorf("%w: %q, want %s", ErrAlgorithm, algErr.Got, algES256)
		}
		return Claims{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if len(obj.Signatures) != 1 {
		return Claims{}, fmt.Errorf("%w: %d signatures, want 1", ErrMalformed, len(obj.Signatures))
	}
	sig := obj.Signatures[0]
	if err := checkHeader(sig); err != nil {
		return Claims{}, err
	}
	if len(sig.Signature) != es256SignatureSize {
		return Claims{}, fmt.Errorf("%w: signature is not %d bytes", ErrMalformed, es256SignatureSize)
	}
	// The claims as stated, unverified: evidence that could never pass is
	// refused before any key is looked up (and fetched).
	var stated Claims
	if err := decodeStrictJSON(obj.UnsafePayloadWithoutVerification(), &stated); err != nil {
		return Claims{}, fmt.Errorf("%w: payload: %v", ErrMalformed, err)
	}
	if err := check(stated, opts); err != nil {
		return Claims{}, err
	}
	pub, err := lookup(sig.Protected.KeyID)
	if err != nil {
		return Claims{}, err
	}
	if pub == nil {
		return Claims{}, fmt.Errorf("%w: kid %.64q", ErrUnknownKey, sig.Protected.KeyID)
	}
	// The key passed is the one the kid named among ours, never a JWKS for
	// the library to choose from nor anything the token carries.
	payload, err := obj.Verify(pub)
	if err != nil {
		return Claims{}, fmt.Errorf("%w: %v", ErrBadSignature, err)
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

// precheck holds the token to the compact form with canonical encodings
// and a protected header of alg, kid and typ only (internal/jwsform),
// before the JWS library sees it: a header naming a key, where to get one,
// extensions or an unencoded payload is refused here whether or not the
// library would parse it.
func precheck(token string) error {
	if _, err := jwsform.Parse(token, MaxTokenSize, "alg", "kid", "typ"); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return nil
}

// checkHeader checks the header as the JWS library parsed it: the same
// refusals as precheck (so that neither layer alone is trusted), ES256, and
// typ JWT when present.
func checkHeader(sig jose.Signature) error {
	if u := sig.Unprotected; u.KeyID != "" || u.Algorithm != "" || u.JSONWebKey != nil || len(u.ExtraHeaders) > 0 {
		return fmt.Errorf("%w: unprotected header", ErrMalformed)
	}
	h := sig.Protected
	if h.JSONWebKey != nil {
		return fmt.Errorf("%w: header parameter %q is refused", ErrMalformed, "jwk")
	}
	// Certificates reports ErrMissingX5cHeader exactly when there is no
	// x5c; the empty root pool keeps it from consulting the system's.
	if _, err := h.Certificates(x509.VerifyOptions{Roots: x509.NewCertPool()}); !errors.Is(err, jose.ErrMissingX5cHeader) {
		return fmt.Errorf("%w: header parameter %q is refused", ErrMalformed, "x5c")
	}
	for _, name := range refusedHeaders {
		if _, ok := h.ExtraHeaders[jose.HeaderKey(name)]; ok {
			return fmt.Errorf("%w: header parameter %q is refused", ErrMalformed, name)
		}
	}
	if jose.SignatureAlgorithm(h.Algorithm) != algES256 {
		return fmt.Errorf("%w: %q, want %s", ErrAlgorithm, h.Algorithm, algES256)
	}
	if typ, ok := h.ExtraHeaders[jose.HeaderType]; ok {
		if s, isString := typ.(string); !isString || (s != "" && s != "JWT") {
			return fmt.Errorf("%w: typ %v", ErrMalformed, typ)
		}
	}
	return nil
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

// decodeStrictJSON decodes one JSON value, refusing trailing data and
// objects that name a member twice at any depth (parsers disagree on which
// one wins).
func decodeStrictJSON(data []byte, v any) error { return strictjson.Unmarshal(data, v) }

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
