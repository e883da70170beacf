package identity

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

const (
	testIssuer   = "https://cloud.test"
	testAudience = "binding-abc"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func testInstance() InstanceClaims {
	return InstanceClaims{
		ID: "i-0001", Name: "node-a", Zone: "local-1a", Region: "local-1", InstanceType: "small",
		Cluster:   "c1",
		Addresses: []Address{{Type: "InternalIP", Address: "127.10.0.2"}},
	}
}

func mustKeySet(t testing.TB) *KeySet {
	t.Helper()
	k, err := NewKey(t0)
	if err != nil {
		t.Fatal(err)
	}
	return NewKeySet(k)
}

func mustVerifier(t testing.TB, s *KeySet) *Verifier {
	t.Helper()
	data, err := s.JWKS()
	if err != nil {
		t.Fatal(err)
	}
	keys, err := ParseJWKS(data)
	if err != nil {
		t.Fatal(err)
	}
	return NewVerifier(keys)
}

func mustToken(t testing.TB, s *KeySet, aud string, at time.Time, ttl time.Duration) string {
	t.Helper()
	c, err := NewClaims(testIssuer, aud, testInstance(), at, ttl)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := s.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func opts(now time.Time) VerifyOptions {
	return VerifyOptions{Issuer: testIssuer, Audience: testAudience, Now: now}
}

// signRaw signs arbitrary header and payload JSON with k, so tests can build
// tokens the package itself would never issue.
func signRaw(t testing.TB, k *Key, hdr, payload string) string {
	t.Helper()
	input := b64url.EncodeToString([]byte(hdr)) + "." + b64url.EncodeToString([]byte(payload))
	sum := sha256.Sum256([]byte(input))
	der, err := ecdsa.SignASN1(rand.Reader, k.Private, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	var rs struct{ R, S *big.Int }
	if _, err := asn1.Unmarshal(der, &rs); err != nil {
		t.Fatal(err)
	}
	sig := make([]byte, 64)
	rs.R.FillBytes(sig[:32])
	rs.S.FillBytes(sig[32:])
	return input + "." + b64url.EncodeToString(sig)
}

func payloadJSON(t testing.TB, c Claims) string {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSignVerifyRoundTrip(t *testing.T) {
	s := mustKeySet(t)
	tok := mustToken(t, s, testAudience, t0, 5*time.Minute)
	c, err := mustVerifier(t, s).Verify(tok, opts(t0.Add(time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	want := testInstance()
	if c.Subject != want.ID || c.Instance.Name != want.Name || c.Instance.Addresses[0] != want.Addresses[0] ||
		c.Audience != testAudience || c.Expiry-c.IssuedAt != 300 || len(c.ID) != 32 {
		t.Fatalf("claims: %+v", c)
	}
	// Token ids differ between tokens.
	c2, err := mustVerifier(t, s).Verify(mustToken(t, s, testAudience, t0, 5*time.Minute), opts(t0))
	if err != nil || c2.ID == c.ID {
		t.Fatalf("second token: jti %q vs %q, err %v", c2.ID, c.ID, err)
	}
}

func TestVerifyRefuses(t *testing.T) {
	s := mustKeySet(t)
	other := mustKeySet(t)
	v := mustVerifier(t, s)
	k := s.Active()
	good := func() Claims {
		c, err := NewClaims(testIssuer, testAudience, testInstance(), t0, 5*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	hdr := `{"alg":"ES256","kid":"` + k.ID + `","typ":"JWT"}`
	valid := mustToken(t, s, testAudience, t0, 5*time.Minute)
	parts := strings.Split(valid, ".")

	cases := []struct {
		name  string
		token string
		now   time.Time
		want  error
	}{
		{"wrong audience", mustToken(t, s, "someone-else", t0, 5*time.Minute), t0, ErrAudience},
		{"expired", valid, t0.Add(6 * time.Minute), ErrExpired},
		{"issued in the future", valid, t0.Add(-2 * time.Minute), ErrNotYetValid},
		{"another key", mustToken(t, other, testAudience, t0, 5*time.Minute), t0, ErrUnknownKey},
		{"lifetime too long", mustToken(t, s, testAudience, t0, time.Hour), t0, ErrLifetime},
		{"wrong issuer", func() string {
			c := good()
			c.Issuer = "https://evil.test"
			return signRaw(t, k, hdr, payloadJSON(t, c))
		}(), t0, ErrIssuer},
		{"tampered payload", func() string {
			c := good()
			c.Instance.Name = "control-plane"
			return parts[0] + "." + b64url.EncodeToString([]byte(payloadJSON(t, c))) + "." + parts[2]
		}(), t0, ErrBadSignature},
		{"signature of another token", parts[0] + "." + parts[1] + "." +
			strings.Split(mustToken(t, s, testAudience, t0, 5*time.Minute), ".")[2], t0, ErrBadSignature},
		{"alg none", b64url.EncodeToString([]byte(`{"alg":"none","kid":"`+k.ID+`"}`)) + "." + parts[1] + ".", t0, ErrAlgorithm},
		{"alg HS256", signRaw(t, k, `{"alg":"HS256","kid":"`+k.ID+`"}`, payloadJSON(t, good())), t0, ErrAlgorithm},
		{"embedded jwk", signRaw(t, k, `{"alg":"ES256","kid":"`+k.ID+`","jwk":{}}`, payloadJSON(t, good())), t0, ErrMalformed},
		{"jku", signRaw(t, k, `{"alg":"ES256","kid":"`+k.ID+`","jku":"https://evil.test/keys"}`, payloadJSON(t, good())), t0, ErrMalformed},
		{"crit", signRaw(t, k, `{"alg":"ES256","kid":"`+k.ID+`","crit":["exp"]}`, payloadJSON(t, good())), t0, ErrMalformed},
		{"embedded public jwk", signRaw(t, k, `{"alg":"ES256","kid":"`+k.ID+`","jwk":`+publicJWKJSON(t, k)+`}`, payloadJSON(t, good())), t0, ErrMalformed},
		{"x5u", signRaw(t, k, `{"alg":"ES256","kid":"`+k.ID+`","x5u":"https://evil.test/chain.pem"}`, payloadJSON(t, good())), t0, ErrMalformed},
		{"x5c", signRaw(t, k, `{"alg":"ES256","kid":"`+k.ID+`","x5c":["`+selfSignedCertB64(t, k)+`"]}`, payloadJSON(t, good())), t0, ErrMalformed},
		{"x5t", signRaw(t, k, `{"alg":"ES256","kid":"`+k.ID+`","x5t":"`+b64url.EncodeToString(make([]byte, 20))+`"}`, payloadJSON(t, good())), t0, ErrMalformed},
		{"x5t#S256", signRaw(t, k, `{"alg":"ES256","kid":"`+k.ID+`","x5t#S256":"`+b64url.EncodeToString(make([]byte, 32))+`"}`, payloadJSON(t, good())), t0, ErrMalformed},
		{"b64 false", signRaw(t, k, `{"alg":"ES256","kid":"`+k.ID+`","b64":false}`, payloadJSON(t, good())), t0, ErrMalformed},
		{"escaped jwk name", signRaw(t, k, `{"alg":"ES256","kid":"`+k.ID+`","\u006awk":`+publicJWKJSON(t, k)+`}`, payloadJSON(t, good())), t0, ErrMalformed},
		{"alg RS256", signRaw(t, k, `{"alg":"RS256","kid":"`+k.ID+`"}`, payloadJSON(t, good())), t0, ErrAlgorithm},
		{"alg ES384", signRaw(t, k, `{"alg":"ES384","kid":"`+k.ID+`"}`, payloadJSON(t, good())), t0, ErrAlgorithm},
		{"alg missing", signRaw(t, k, `{"kid":"`+k.ID+`"}`, payloadJSON(t, good())), t0, ErrAlgorithm},
		{"kid not a string", signRaw(t, k, `{"alg":"ES256","kid":1}`, payloadJSON(t, good())), t0, ErrMalformed},
		{"kid twice", signRaw(t, k, `{"alg":"ES256","kid":"`+other.Active().ID+`","kid":"`+k.ID+`"}`, payloadJSON(t, good())), t0, ErrMalformed},
		{"trailing data in header", signRaw(t, k, hdr+`{}`, payloadJSON(t, good())), t0, ErrMalformed},
		{"claim twice", signRaw(t, k, hdr, strings.Replace(payloadJSON(t, good()),
			`"iss":"`+testIssuer+`"`, `"iss":"https://evil.test","iss":"`+testIssuer+`"`, 1)), t0, ErrMalformed},
		{"nested member twice", signRaw(t, k, hdr, strings.Replace(payloadJSON(t, good()),
			`"name":"node-a"`, `"name":"control-plane","name":"node-a"`, 1)), t0, ErrMalformed},
		{"JSON serialization", `{"payload":"` + parts[1] + `","protected":"` + parts[0] + `","signature":"` + parts[2] + `"}`, t0, ErrMalformed},
		{"typ not a string", signRaw(t, k, `{"alg":"ES256","kid":"`+k.ID+`","typ":7}`, payloadJSON(t, good())), t0, ErrMalformed},
		{"non-canonical base64 signature", parts[0] + "." + parts[1] + "." + flipLastBits(parts[2]), t0, ErrMalformed},
		{"no kid", signRaw(t, k, `{"alg":"ES256"}`, payloadJSON(t, good())), t0, ErrUnknownKey},
		{"typ not JWT", signRaw(t, k, `{"alg":"ES256","kid":"`+k.ID+`","typ":"at+jwt"}`, payloadJSON(t, good())), t0, ErrMalformed},
		{"subject is not the instance", func() string {
			c := good()
			c.Subject = "i-9999"
			return signRaw(t, k, hdr, payloadJSON(t, c))
		}(), t0, ErrMalformed},
		{"no jti", func() string {
			c := good()
			c.ID = ""
			return signRaw(t, k, hdr, payloadJSON(t, c))
		}(), t0, ErrMalformed},
		{"exp before iat", func() string {
			c := good()
			c.Expiry = c.IssuedAt - 1
			return signRaw(t, k, hdr, payloadJSON(t, c))
		}(), t0, ErrMalformed},
		{"not before later", func() string {
			c := good()
			c.NotBefore = c.IssuedAt + 120
			return signRaw(t, k, hdr, payloadJSON(t, c))
		}(), t0, ErrNotYetValid},
		{"audience as a list", signRaw(t, k, hdr, strings.Replace(payloadJSON(t, good()),
			`"aud":"`+testAudience+`"`, `"aud":["`+testAudience+`"]`, 1)), t0, ErrMalformed},
		{"trailing data in payload", signRaw(t, k, hdr, payloadJSON(t, good())+"{}"), t0, ErrMalformed},
		{"two parts", parts[0] + "." + parts[1], t0, ErrMalformed},
		{"four parts", valid + ".x", t0, ErrMalformed},
		{"padded base64", parts[0] + "=." + parts[1] + "." + parts[2], t0, ErrMalformed},
		{"short signature", parts[0] + "." + parts[1] + "." + b64url.EncodeToString(make([]byte, 63)), t0, ErrMalformed},
		{"oversized", parts[0] + "." + strings.Repeat("A", MaxTokenSize) + "." + parts[2], t0, ErrMalformed},
		{"empty", "", t0, ErrMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := v.Verify(tc.token, opts(tc.now))
			if !errors.Is(err, tc.want) {
				t.Fatalf("Verify = %v, want %v", err, tc.want)
			}
			if c.Subject != "" || c.Instance.ID != "" {
				t.Fatalf("claims returned with an error: %+v", c)
			}
		})
	}
}

func TestVerifySkew(t *testing.T) {
	s := mustKeySet(t)
	v := mustVerifier(t, s)
	tok := mustToken(t, s, testAudience, t0, 5*time.Minute)
	if _, err := v.Verify(tok, opts(t0.Add(5*time.Minute+20*time.Second))); err != nil {
		t.Fatalf("within skew after exp: %v", err)
	}
	if _, err := v.Verify(tok, opts(t0.Add(-20*time.Second))); err != nil {
		t.Fatalf("within skew before iat: %v", err)
	}
	o := opts(t0.Add(5*time.Minute + 20*time.Second))
	o.Skew = 5 * time.Second
	if _, err := v.Verify(tok, o); !errors.Is(err, ErrExpired) {
		t.Fatalf("tighter skew: %v", err)
	}
	if _, err := v.Verify(tok, VerifyOptions{Issuer: testIssuer, Now: t0}); err == nil {
		t.Fatal("a verifier without an audience must refuse")
	}
}

func TestKeyPEMRoundTrip(t *testing.T) {
	k, err := NewKey(t0)
	if err != nil {
		t.Fatal(err)
	}
	data, err := k.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseKeyPEM(data, t0)
	if err != nil {
		t.Fatal(err)
	}
	if back.ID != k.ID || !back.Private.Equal(k.Private) || !back.Created.Equal(t0) {
		t.Fatalf("round trip changed the key: %s vs %s", back.ID, k.ID)
	}
	if len(k.ID) != 43 {
		t.Fatalf("kid %q is not a base64url SHA-256", k.ID)
	}

	if _, err := ParseKeyPEM([]byte("not pem"), t0); err == nil {
		t.Fatal("garbage parsed")
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(rsaKey)
	if _, err := ParseKeyPEM(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), t0); err == nil {
		t.Fatal("RSA key accepted")
	}
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	der, _ = x509.MarshalPKCS8PrivateKey(p384)
	if _, err := ParseKeyPEM(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), t0); err == nil {
		t.Fatal("P-384 key accepted")
	}
}

func TestRotateAndPrune(t *testing.T) {
	s := mustKeySet(t)
	first := s.Active()
	old := mustToken(t, s, testAudience, t0, 5*time.Minute)

	second, err := s.Rotate(t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if s.Active() != second || len(s.Keys()) != 2 || s.Keys()[1] != first {
		t.Fatalf("after rotate: active %s, keys %d", s.Active().ID, len(s.Keys()))
	}
	v := mustVerifier(t, s)
	if _, err := v.Verify(old, opts(t0.Add(time.Minute))); err != nil {
		t.Fatalf("token of the retired key: %v", err)
	}
	fresh := mustToken(t, s, testAudience, t0.Add(time.Hour), 5*time.Minute)
	if h := strings.Split(fresh, ".")[0]; !strings.Contains(decode(t, h), second.ID) {
		t.Fatal("new tokens are not signed by the new key")
	}

	// The first key retired at t0+1h; a cutoff before that keeps it.
	s.Prune(t0.Add(30 * time.Minute))
	if len(s.Keys()) != 2 {
		t.Fatal("pruned a key that retired after the cutoff")
	}
	s.Prune(t0.Add(2 * time.Hour))
	if len(s.Keys()) != 1 || s.Active() != second {
		t.Fatalf("prune kept %d keys", len(s.Keys()))
	}
	if _, err := mustVerifier(t, s).Verify(old, opts(t0.Add(time.Minute))); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("token of a pruned key: %v", err)
	}
	// NewKeySet orders previous keys newest first and drops the active one.
	third, _ := NewKey(t0.Add(2 * time.Hour))
	set := NewKeySet(third, first, second, third)
	if ks := set.Keys(); len(ks) != 3 || ks[1] != second || ks[2] != first {
		t.Fatal("NewKeySet order")
	}
}

func decode(t *testing.T, s string) string {
	t.Helper()
	b, err := b64url.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseJWKS(t *testing.T) {
	s := mustKeySet(t)
	data, _ := s.JWKS()
	var set map[string][]map[string]any
	if err := json.Unmarshal(data, &set); err != nil {
		t.Fatal(err)
	}
	k := set["keys"][0]
	if k["kty"] != "EC" || k["crv"] != "P-256" || k["alg"] != "ES256" || k["kid"] != s.Active().ID {
		t.Fatalf("JWKS entry: %v", k)
	}
	withRSA := `{"keys":[{"kty":"RSA","n":"AQAB","e":"AQAB","kid":"r"},` + string(data)[len(`{"keys":[`):]
	keys, err := ParseJWKS([]byte(withRSA))
	if err != nil || len(keys) != 1 {
		t.Fatalf("RSA keys must be skipped: %d keys, %v", len(keys), err)
	}
	x, y := k["x"].(string), k["y"].(string)
	bad := []struct{ name, jwks string }{
		{"not JSON", `{`},
		{"P-384", `{"keys":[{"kty":"EC","crv":"P-384","x":"` + x + `","y":"` + y + `","kid":"a"}]}`},
		{"point off the curve", `{"keys":[{"kty":"EC","crv":"P-256","x":"` + x + `","y":"` + x + `","kid":"a"}]}`},
		{"short coordinate", `{"keys":[{"kty":"EC","crv":"P-256","x":"AAAA","y":"` + y + `","kid":"a"}]}`},
		{"no kid", `{"keys":[{"kty":"EC","crv":"P-256","x":"` + x + `","y":"` + y + `"}]}`},
		{"duplicate kid", `{"keys":[{"kty":"EC","crv":"P-256","x":"` + x + `","y":"` + y + `","kid":"a"},` +
			`{"kty":"EC","crv":"P-256","x":"` + x + `","y":"` + y + `","kid":"a"}]}`},
		{"other alg", `{"keys":[{"kty":"EC","crv":"P-256","x":"` + x + `","y":"` + y + `","kid":"a","alg":"ES384"}]}`},
	}
	for _, tc := range bad {
		if _, err := ParseJWKS([]byte(tc.jwks)); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

func TestNewClaimsRefuses(t *testing.T) {
	for name, f := range map[string]func() error{
		"no issuer":   func() error { _, err := NewClaims("", "a", testInstance(), t0, time.Minute); return err },
		"no audience": func() error { _, err := NewClaims("i", "", testInstance(), t0, time.Minute); return err },
		"no instance": func() error { _, err := NewClaims("i", "a", InstanceClaims{}, t0, time.Minute); return err },
		"no lifetime": func() error { _, err := NewClaims("i", "a", testInstance(), t0, 0); return err },
	} {
		if f() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// FuzzVerify checks that no input panics the verifier and that whatever it
// accepts really is a valid token for the options.
func FuzzVerify(f *testing.F) {
	s := mustKeySet(f)
	v := mustVerifier(f, s)
	k := s.Active()
	valid := mustToken(f, s, testAudience, t0, 5*time.Minute)
	parts := strings.Split(valid, ".")
	f.Add(valid)
	f.Add("")
	f.Add("..")
	f.Add(parts[0] + "." + parts[1] + ".")
	f.Add(b64url.EncodeToString([]byte(`{"alg":"none"}`)) + "." + parts[1] + ".")
	f.Add(signRaw(f, k, `{"alg":"ES256","kid":"`+k.ID+`","jwk":{"kty":"EC"}}`, `{}`))
	f.Add(signRaw(f, k, `{"alg":"ES256","kid":"`+k.ID+`"}`, `{"iss":1}`))
	f.Add(signRaw(f, k, `{"alg":"ES256","kid":"`+k.ID+`"}`, `null`))
	f.Add(signRaw(f, k, `{"alg":"ES256","kid":"`+k.ID+`","kid":"`+k.ID+`"}`, `{}`))
	f.Add(signRaw(f, k, `{"alg":"ES256","kid":"`+k.ID+`","b64":false,"crit":["b64"]}`, `{}`))
	f.Add(signRaw(f, k, `{"alg":"RS256","kid":"`+k.ID+`"}`, `{}`))
	f.Add(`{"payload":"","protected":"","signature":""}`)
	f.Add(legacyToken)
	f.Fuzz(func(t *testing.T, token string) {
		c, err := v.Verify(token, opts(t0.Add(time.Minute)))
		if err != nil {
			return
		}
		if c.Audience != testAudience || c.Issuer != testIssuer || c.Subject != c.Instance.ID || c.ID == "" {
			t.Fatalf("accepted a token with claims %+v", c)
		}
	})
}

// publicJWKJSON is k's public half as a JWK, for tokens that embed it.
func publicJWKJSON(t testing.TB, k *Key) string {
	t.Helper()
	b, err := json.Marshal(jose.JSONWebKey{Key: &k.Private.PublicKey})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// selfSignedCertB64 is a certificate for k's public key, standard base64 DER
// as the x5c header carries it.
func selfSignedCertB64(t testing.TB, k *Key) string {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "evil"},
		NotBefore:    t0.Add(-time.Hour),
		NotAfter:     t0.Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.Private.PublicKey, k.Private)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(der)
}

// flipLastBits sets an unused low bit of the last base64url character: the
// same bytes to a lenient decoder, a non-canonical encoding to a strict one.
func flipLastBits(s string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	i := strings.IndexByte(alphabet, s[len(s)-1])
	return s[:len(s)-1] + string(alphabet[i|1])
}

// rfc7515Key is the P-256 key of RFC 7515 appendix A.3.
func rfc7515Key(t testing.TB) *Key {
	t.Helper()
	d, err := b64url.DecodeString("jpsQnnGQmL-YBIffH1136cspYG6-0iY7X1fCE9-E9LI")
	if err != nil {
		t.Fatal(err)
	}
	priv, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), d)
	if err != nil {
		t.Fatal(err)
	}
	k, err := newKey(priv, t0)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// The kid of the RFC 7515 A.3 key as the hand-written RFC 7638 code
// computed it before the package moved to go-jose.
const rfc7515KeyID = "oKIywvGUpTVTyxMQ3bwIIeQUudfr_CkLMjCE19ECD-U"

// legacyToken was signed with the RFC 7515 A.3 key by the hand-written
// signer (claims of testInstance at t0 for 5m, jti 0011...eeff).
const legacyToken = "eyJhbGciOiJFUzI1NiIsImtpZCI6Im9LSXl3dkdVcFRWVHl4TVEzYndJSWVRVXVkZnJfQ2tMTWpDRTE5RUNELVUiLCJ0eXAiOiJKV1QifQ." +
	"eyJpc3MiOiJodHRwczovL2Nsb3VkLnRlc3QiLCJzdWIiOiJpLTAwMDEiLCJhdWQiOiJiaW5kaW5nLWFiYyIsImlhdCI6MTc5NTM0MTYwMCwibmJmIjoxNzk1MzQxNjAwLCJleHAiOjE3OTUzNDE5MDAsImp0aSI6IjAwMTEyMjMzNDQ1NTY2Nzc4ODk5YWFiYmNjZGRlZWZmIiwiaW5zdGFuY2UiOnsiaWQiOiJpLTAwMDEiLCJuYW1lIjoibm9kZS1hIiwiem9uZSI6ImxvY2FsLTFhIiwicmVnaW9uIjoibG9jYWwtMSIsImluc3RhbmNlVHlwZSI6InNtYWxsIiwiY2x1c3RlciI6ImMxIiwiYWRkcmVzc2VzIjpbeyJ0eXBlIjoiSW50ZXJuYWxJUCIsImFkZHJlc3MiOiIxMjcuMTAuMC4yIn1dfX0." +
	"c0nL_yiUHAGav0YNB6TOdrL9NZ4nQLGJsBrZ4qci8EBufWk19GweoyHUy5MsKA0PlLHWtH_KGV27DAyMI-iyHQ"

func TestKeyIDIsRFC7638Thumbprint(t *testing.T) {
	k := rfc7515Key(t)
	if k.ID != rfc7515KeyID {
		t.Fatalf("kid %s, want %s", k.ID, rfc7515KeyID)
	}
	// The published JWK's own thumbprint is the kid it carries.
	data, err := NewKeySet(k).JWKS()
	if err != nil {
		t.Fatal(err)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(data, &set); err != nil || len(set.Keys) != 1 {
		t.Fatalf("JWKS %s: %v", data, err)
	}
	sum, err := set.Keys[0].Thumbprint(crypto.SHA256)
	if err != nil || b64url.EncodeToString(sum) != rfc7515KeyID || set.Keys[0].KeyID != rfc7515KeyID {
		t.Fatalf("published key: kid %s, thumbprint %x, %v", set.Keys[0].KeyID, sum, err)
	}
	if _, err := KeyID(&mustP384(t).PublicKey); err == nil {
		t.Fatal("a P-384 key got a kid")
	}
}

func mustP384(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestTokensInterchangeableWithLegacySigner(t *testing.T) {
	k := rfc7515Key(t)
	s := NewKeySet(k)
	v := mustVerifier(t, s)
	c, err := v.Verify(legacyToken, opts(t0.Add(time.Minute)))
	if err != nil {
		t.Fatalf("legacy token: %v", err)
	}
	if c.ID != "00112233445566778899aabbccddeeff" || c.Instance.Addresses[0].Address != "127.10.0.2" {
		t.Fatalf("legacy claims %+v", c)
	}
	// New tokens have the legacy header, byte for byte, and the legacy
	// payload encoding.
	fresh := mustToken(t, s, testAudience, t0, 5*time.Minute)
	parts := strings.Split(fresh, ".")
	if got, want := decode(t, parts[0]), `{"alg":"ES256","kid":"`+rfc7515KeyID+`","typ":"JWT"}`; got != want {
		t.Fatalf("header %s, want %s", got, want)
	}
	if legacyHeader := strings.Split(legacyToken, ".")[0]; parts[0] != legacyHeader {
		t.Fatalf("encoded header %s, legacy %s", parts[0], legacyHeader)
	}
	fc, err := Peek(fresh)
	if err != nil {
		t.Fatal(err)
	}
	if decode(t, parts[1]) != payloadJSON(t, fc) {
		t.Fatalf("payload %s is not the claims' JSON", decode(t, parts[1]))
	}
	if sig, err := b64url.DecodeString(parts[2]); err != nil || len(sig) != 64 {
		t.Fatalf("signature: %d bytes, %v", len(sig), err)
	}
	// A token the tests' own raw signer makes verifies too.
	if _, err := v.Verify(signRaw(t, k, `{"alg":"ES256","kid":"`+k.ID+`","typ":"JWT"}`, payloadJSON(t, fc)), opts(t0)); err != nil {
		t.Fatalf("raw-signed token: %v", err)
	}
}

// TestKeyOnlyByKid checks that the trusted keys, not the token, decide the
// verification key: a token signed by an untrusted key that names a trusted
// kid fails its signature, and one that carries its own key is refused.
func TestKeyOnlyByKid(t *testing.T) {
	s := mustKeySet(t)
	v := mustVerifier(t, s)
	attacker, err := NewKey(t0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClaims(testIssuer, testAudience, testInstance(), t0, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	forged := signRaw(t, attacker, `{"alg":"ES256","kid":"`+s.Active().ID+`"}`, payloadJSON(t, c))
	if _, err := v.Verify(forged, opts(t0)); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("trusted kid, untrusted key: %v", err)
	}
	own := signRaw(t, attacker, `{"alg":"ES256","kid":"`+attacker.ID+`","jwk":`+publicJWKJSON(t, attacker)+`}`, payloadJSON(t, c))
	if _, err := v.Verify(own, opts(t0)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("embedded key: %v", err)
	}
}

// TestCheckHeaderRefuses exercises the check on the header as go-jose
// parsed it, which precheck's raw check would otherwise always preempt.
func TestCheckHeaderRefuses(t *testing.T) {
	s := mustKeySet(t)
	k := s.Active()
	payload := `{"iss":"x"}`
	base := `{"alg":"ES256","kid":"` + k.ID + `"`
	cases := map[string]string{
		"jwk":      base + `,"jwk":` + publicJWKJSON(t, k) + `}`,
		"jku":      base + `,"jku":"https://evil.test/keys"}`,
		"x5u":      base + `,"x5u":"https://evil.test/chain.pem"}`,
		"x5c":      base + `,"x5c":["` + selfSignedCertB64(t, k) + `"]}`,
		"x5t":      base + `,"x5t":"` + b64url.EncodeToString(make([]byte, 20)) + `"}`,
		"x5t#S256": base + `,"x5t#S256":"` + b64url.EncodeToString(make([]byte, 32)) + `"}`,
		"crit":     base + `,"crit":["exp"],"exp":1}`,
		"b64":      base + `,"b64":false,"crit":["b64"]}`,
		"typ":      base + `,"typ":"at+jwt"}`,
	}
	for name, hdr := range cases {
		t.Run(name, func(t *testing.T) {
			tok := signRaw(t, k, hdr, payload)
			if err := precheck(tok); name != "typ" && !errors.Is(err, ErrMalformed) {
				t.Errorf("precheck = %v", err)
			}
			obj, err := jose.ParseSignedCompact(tok, allowedAlgorithms)
			if err != nil {
				t.Fatalf("go-jose refused it itself: %v", err)
			}
			if err := checkHeader(obj.Signatures[0]); !errors.Is(err, ErrMalformed) {
				t.Fatalf("checkHeader = %v, want %v", err, ErrMalformed)
			}
		})
	}
	obj, err := jose.ParseSignedCompact(mustToken(t, s, testAudience, t0, time.Minute), allowedAlgorithms)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkHeader(obj.Signatures[0]); err != nil {
		t.Fatalf("our own header: %v", err)
	}
}

func TestParseJWKSKeyChecks(t *testing.T) {
	k := rfc7515Key(t)
	pub := publicJWKJSON(t, k)
	priv, err := json.Marshal(jose.JSONWebKey{Key: k.Private, KeyID: "p"})
	if err != nil {
		t.Fatal(err)
	}
	withKid := `{"kid":"a",` + pub[1:]
	good := []struct {
		name, jwks string
		n          int
	}{
		{"one key", `{"keys":[` + withKid + `]}`, 1},
		{"encryption key skipped", `{"keys":[{"use":"enc",` + withKid[1:] + `]}`, 0},
		{"symmetric key skipped", `{"keys":[{"kty":"oct","k":"AAAA","kid":"s"},` + withKid + `]}`, 1},
		{"unknown key type skipped", `{"keys":[{"kty":"XYZ","kid":"z"},` + withKid + `]}`, 1},
		{"no keys", `{"keys":[]}`, 0},
	}
	for _, tc := range good {
		keys, err := ParseJWKS([]byte(tc.jwks))
		if err != nil || len(keys) != tc.n {
			t.Errorf("%s: %d keys, %v", tc.name, len(keys), err)
		}
	}
	bad := []struct{ name, jwks string }{
		{"private key", `{"keys":[` + string(priv) + `]}`},
		{"P-384 key", `{"keys":[` + `{"kid":"b",` + publicJWKJSON(t, &Key{Private: mustP384(t)})[1:] + `]}`},
		{"alg RS256", `{"keys":[{"alg":"RS256",` + withKid[1:] + `]}`},
		{"kty not a string", `{"keys":[{"kty":1}]}`},
	}
	for _, tc := range bad {
		if _, err := ParseJWKS([]byte(tc.jwks)); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

func TestPeek(t *testing.T) {
	s := mustKeySet(t)
	tok := mustToken(t, s, testAudience, t0, 5*time.Minute)
	c, err := Peek(tok)
	if err != nil || c.Audience != testAudience || len(c.ID) != 32 {
		t.Fatalf("Peek = %+v, %v", c, err)
	}
	for _, bad := range []string{"", "a.b", strings.Repeat("A", MaxTokenSize+1), "a.!.c"} {
		if _, err := Peek(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("Peek(%.20q) = %v", bad, err)
		}
	}
}
