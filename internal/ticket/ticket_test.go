package ticket

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/mooring-dev/mooring/internal/ticket/tickettest"
)

const cluster = "c1"

var t0 = time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)

func newSet(t *testing.T) *KeySet {
	t.Helper()
	s := &KeySet{}
	if _, err := s.AddKey(); err != nil {
		t.Fatal(err)
	}
	return s
}

func issue(t *testing.T, s *KeySet, name string) (string, Claims) {
	t.Helper()
	tok, c, err := s.Issue(name, cluster, t0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return tok, c
}

func at(now time.Time) Expect { return Expect{Cluster: cluster, Now: now, Skew: 30 * time.Second} }

func TestIssueVerifyRoundTrip(t *testing.T) {
	s := newSet(t)
	tok, issued := issue(t, s, "web-1")
	if issued.Name != "web-1" || issued.Cluster != cluster || !issued.IssuedAt.Equal(t0) || !issued.Expiry.Equal(t0.Add(DefaultLifetime)) {
		t.Fatalf("issued %+v", issued)
	}
	got, err := Verify([]byte(tok), s.PublicKeys(), at(t0.Add(time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	if got != issued {
		t.Fatalf("verified %+v, issued %+v", got, issued)
	}
	peeked, err := Peek([]byte(tok))
	if err != nil || peeked != issued {
		t.Fatalf("peeked %+v, %v", peeked, err)
	}
	// Every ticket has its own id.
	other, _ := issue(t, s, "web-1")
	if c, _ := Peek([]byte(other)); c.ID == issued.ID {
		t.Fatal("two tickets share an id")
	}
}

func TestIssueRefusesBadInput(t *testing.T) {
	s := newSet(t)
	for _, tc := range []struct {
		name, cluster string
		life          time.Duration
	}{
		{"", cluster, 0}, {"web 1", cluster, 0}, {"-web", cluster, 0}, {strings.Repeat("a", 254), cluster, 0},
		{"web-1", "", 0}, {"web-1", "c 1", 0},
		{"web-1", cluster, 30 * time.Second}, {"web-1", cluster, 25 * time.Hour},
	} {
		if _, _, err := s.Issue(tc.name, tc.cluster, t0, tc.life); err == nil {
			t.Errorf("Issue(%q, %q, %s) succeeded", tc.name, tc.cluster, tc.life)
		}
	}
	if _, _, err := (&KeySet{}).Issue("web-1", cluster, t0, 0); err == nil {
		t.Error("an empty key set issued a ticket")
	}
}

// TestRotationWithOverlap: a new key verifies before it signs, both keys
// verify while tickets of the old one may be in flight, and a retired key's
// tickets stop verifying.
func TestRotationWithOverlap(t *testing.T) {
	s := newSet(t)
	oldKid := s.SigningKey()
	oldTicket, _ := issue(t, s, "web-1")
	newKid, err := s.AddKey()
	if err != nil {
		t.Fatal(err)
	}
	if s.SigningKey() != oldKid {
		t.Fatal("an added key signs before it is made to")
	}
	if err := s.Sign(newKid); err != nil {
		t.Fatal(err)
	}
	newTicket, _ := issue(t, s, "web-2")
	if kid := kidOf(t, newTicket); kid != newKid {
		t.Fatalf("new ticket signed by %q, want %q", kid, newKid)
	}
	now := at(t0.Add(time.Minute))
	for _, tok := range []string{oldTicket, newTicket} {
		if _, err := Verify([]byte(tok), s.PublicKeys(), now); err != nil {
			t.Fatalf("during the overlap: %v", err)
		}
	}
	if err := s.Retire(newKid); err == nil {
		t.Fatal("the signing key was retired")
	}
	if err := s.Retire(oldKid); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify([]byte(oldTicket), s.PublicKeys(), now); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("a retired key's ticket: %v, want ErrUnknownKey", err)
	}
	if _, err := Verify([]byte(newTicket), s.PublicKeys(), now); err != nil {
		t.Fatal(err)
	}
	if got := s.IDs(); !slices.Equal(got, []string{newKid}) {
		t.Fatalf("kids %v", got)
	}
}

func kidOf(t *testing.T, tok string) string {
	t.Helper()
	p, err := parse([]byte(tok))
	if err != nil {
		t.Fatal(err)
	}
	return p.kid
}

func TestSecretDataRoundTrip(t *testing.T) {
	s := newSet(t)
	if _, err := s.AddKey(); err != nil {
		t.Fatal(err)
	}
	data, err := s.Data()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseKeySet(data)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back.IDs(), s.IDs()) || back.SigningKey() != s.SigningKey() {
		t.Fatalf("decoded %v signing %q, encoded %v signing %q", back.IDs(), back.SigningKey(), s.IDs(), s.SigningKey())
	}
	tok, _ := issue(t, back, "web-1")
	pub, err := ParsePublicKeys(data[KeysFile])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Verify([]byte(tok), pub, at(t0)); err != nil {
		t.Fatal(err)
	}

	// A public key set verifies but cannot issue.
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(data[KeysFile], &set); err != nil {
		t.Fatal(err)
	}
	for i := range set.Keys {
		set.Keys[i] = set.Keys[i].Public()
	}
	public, _ := json.Marshal(set)
	if keys, err := ParsePublicKeys(public); err != nil || len(keys) != 2 {
		t.Fatalf("public keys: %d, %v", len(keys), err)
	}
	if _, err := ParseKeySet(map[string][]byte{KeysFile: public, SigningKeyFile: data[SigningKeyFile]}); err == nil {
		t.Fatal("an issuer key set of public keys was accepted")
	}

	bad := map[string]map[string][]byte{
		"no keys":             {SigningKeyFile: data[SigningKeyFile]},
		"no signing kid":      {KeysFile: data[KeysFile]},
		"unknown signing kid": {KeysFile: data[KeysFile], SigningKeyFile: []byte("nope")},
		"empty set":           {KeysFile: []byte(`{"keys":[]}`), SigningKeyFile: data[SigningKeyFile]},
		"not JSON":            {KeysFile: []byte(`keys`), SigningKeyFile: data[SigningKeyFile]},
	}
	for name, edit := range map[string]func(*jose.JSONWebKey){
		"repeated kid": func(k *jose.JSONWebKey) { k.KeyID = set.Keys[0].KeyID },
		"empty kid":    func(k *jose.JSONWebKey) { k.KeyID = "" },
		"alg RS256":    func(k *jose.JSONWebKey) { k.Algorithm = "RS256" },
		"use enc":      func(k *jose.JSONWebKey) { k.Use = "enc" },
		"P-384": func(k *jose.JSONWebKey) {
			p, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
			k.Key = p
		},
		"HMAC secret": func(k *jose.JSONWebKey) { k.Key = []byte("secret") },
	} {
		var priv jose.JSONWebKeySet
		_ = json.Unmarshal(data[KeysFile], &priv)
		edit(&priv.Keys[1])
		b, err := json.Marshal(priv)
		if err != nil {
			t.Fatal(err)
		}
		bad[name] = map[string][]byte{KeysFile: b, SigningKeyFile: data[SigningKeyFile]}
	}
	for name, d := range bad {
		if _, err := ParseKeySet(d); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestDirAndKeyFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	s := newSet(t)
	if err := s.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	back, err := ReadDir(dir)
	if err != nil || back.SigningKey() != s.SigningKey() {
		t.Fatalf("ReadDir: %v", err)
	}
	if st, err := os.Stat(filepath.Join(dir, KeysFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode: %v, %v", st.Mode(), err)
	}

	now := t0
	f := &KeyFile{Path: filepath.Join(dir, KeysFile), Reload: 10 * time.Second, Now: func() time.Time { return now }}
	keys, err := f.Keys()
	if err != nil || !slices.Equal(slices.Collect(maps.Keys(keys)), s.IDs()) {
		t.Fatalf("keys %v, %v", keys, err)
	}
	// A rotation is seen once the last read is Reload old.
	added, _ := s.AddKey()
	if err := s.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	now = now.Add(5 * time.Second)
	if keys, _ := f.Keys(); keys[added] != nil {
		t.Fatal("reread before Reload passed")
	}
	now = now.Add(5 * time.Second)
	if keys, _ := f.Keys(); keys[added] == nil {
		t.Fatal("the added key is not seen after Reload")
	}
	// A broken file is an error, not the keys read before it broke.
	if err := os.WriteFile(filepath.Join(dir, KeysFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	now = now.Add(10 * time.Second)
	if keys, err := f.Keys(); err == nil || keys != nil {
		t.Fatalf("broken key file: %v, %v", keys, err)
	}
}

// signed makes a token with the set's signing key through go-jose, with
// the header and claims a test chooses.
func signed(t *testing.T, key *ecdsa.PrivateKey, kid string, opts *jose.SignerOptions, claims map[string]any) string {
	t.Helper()
	tok, err := tickettest.Sign(key, jose.ES256, kid, opts, claims)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func typed() *jose.SignerOptions { return (&jose.SignerOptions{}).WithType(HeaderType) }

func goodClaims() map[string]any {
	return map[string]any{
		"jti": "AAAAAAAAAAAAAAAAAAAAAA", "sub": "web-1", "aud": cluster,
		"iat": t0.Unix(), "exp": t0.Add(time.Hour).Unix(),
	}
}

func with(edit func(map[string]any)) map[string]any {
	c := goodClaims()
	edit(c)
	return c
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// TestAttacks: each ticket an attacker could make, and the error that
// refuses it; the check named is the one that catches it.
func TestAttacks(t *testing.T) {
	s := newSet(t)
	kid := s.SigningKey()
	key := s.signingKey().Key.(*ecdsa.PrivateKey)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	good, _ := issue(t, s, "web-1")
	parts := strings.Split(good, ".")
	pubDER, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	hs256 := func() string {
		tok, err := tickettest.Sign(pubDER, jose.HS256, kid, typed(), goodClaims())
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	noneHeader, _ := json.Marshal(map[string]string{"alg": "none", "kid": kid, "typ": HeaderType})
	goodPayload, _ := json.Marshal(goodClaims())
	otherPayload, _ := json.Marshal(with(func(c map[string]any) { c["sub"] = "web-2" }))
	jwk := jose.JSONWebKey{Key: &other.PublicKey}

	cases := []struct {
		name string
		tok  string
		now  time.Time
		want error
	}{
		{"expired", good, t0.Add(time.Hour + time.Minute), ErrExpired},
		{"issued in the future", good, t0.Add(-time.Minute), ErrNotYetValid},
		{"forged: another key under the issuer's kid", signed(t, other, kid, typed(), goodClaims()), t0, ErrSignature},
		{"claims edited after signing", parts[0] + "." + b64(otherPayload) + "." + parts[2], t0, ErrSignature},
		{"signature of another ticket", parts[0] + "." + parts[1] + "." + strings.Split(signed(t, key, kid, typed(), goodClaims()), ".")[2], t0, ErrSignature},
		{"alg none", b64(noneHeader) + "." + b64(goodPayload) + ".", t0, ErrMalformed},
		{"alg none with a signature part", b64(noneHeader) + "." + b64(goodPayload) + "." + b64([]byte("x")), t0, ErrSignature},
		{"HS256 keyed with the issuer's public key", hs256(), t0, ErrSignature},
		{"unknown kid", signed(t, other, "someone-else", typed(), goodClaims()), t0, ErrUnknownKey},
		{"no kid", signed(t, key, "", typed(), goodClaims()), t0, ErrMalformed},
		{"another cluster", signed(t, key, kid, typed(), with(func(c map[string]any) { c["aud"] = "c2" })), t0, ErrCluster},
		{"two audiences", signed(t, key, kid, typed(), with(func(c map[string]any) { c["aud"] = []string{cluster, "c2"} })), t0, ErrMalformed},
		{"living two days", signed(t, key, kid, typed(), with(func(c map[string]any) { c["exp"] = t0.Add(48 * time.Hour).Unix() })), t0, ErrLifetime},
		{"expiring before issue", signed(t, key, kid, typed(), with(func(c map[string]any) { c["exp"] = t0.Add(-time.Hour).Unix() })), t0, ErrLifetime},
		{"no typ", signed(t, key, kid, &jose.SignerOptions{}, goodClaims()), t0, ErrMalformed},
		{"another typ", signed(t, key, kid, (&jose.SignerOptions{}).WithType("JWT"), goodClaims()), t0, ErrMalformed},
		{"header carries a key (jwk)", signed(t, key, kid, typed().WithHeader("jwk", jwk), goodClaims()), t0, ErrMalformed},
		{"header names a key URL (jku)", signed(t, key, kid, typed().WithHeader("jku", "https://evil.example/keys"), goodClaims()), t0, ErrMalformed},
		{"header with crit", signed(t, key, kid, typed().WithCritical("exp"), goodClaims()), t0, ErrMalformed},
		{"an extra claim", signed(t, key, kid, typed(), with(func(c map[string]any) { c["groups"] = []string{"system:masters"} })), t0, ErrMalformed},
		{"non-canonical base64", parts[0] + "=." + parts[1] + "." + parts[2], t0, ErrMalformed},
		{"JSON serialization", `{"payload":"` + parts[1] + `"}`, t0, ErrMalformed},
		{"four parts", good + ".x", t0, ErrMalformed},
		{"empty", "", t0, ErrMalformed},
		{"oversized", strings.Repeat("a", MaxSize+1), t0, ErrMalformed},
	}
	for _, name := range []string{"jti", "sub", "aud", "iat", "exp"} {
		cases = append(cases, struct {
			name string
			tok  string
			now  time.Time
			want error
		}{"claim " + name + " missing", signed(t, key, kid, typed(), with(func(c map[string]any) { delete(c, name) })), t0, ErrMalformed})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Verify([]byte(tc.tok), s.PublicKeys(), at(tc.now))
			t.Log(err)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	// The hand-made claims are the issuer's form: signed right, they pass.
	if _, err := Verify([]byte(signed(t, key, kid, typed(), goodClaims())), s.PublicKeys(), at(t0)); err != nil {
		t.Fatalf("the control case: %v", err)
	}
}
