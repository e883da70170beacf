package gce

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/gce/gcetest"
)

// keysWorld is a fake GCE, a verifier of its tokens on a test clock, and
// an instance.
type keysWorld struct {
	gc    *gcetest.Cloud
	in    gcetest.Instance
	v     *Verifier
	clock time.Time
}

func newKeysWorld(t *testing.T) *keysWorld {
	t.Helper()
	w := &keysWorld{clock: time.Now()}
	w.gc = gcetest.NewStarted(t, gcetest.Options{})
	w.in = w.gc.Put(gcetest.Instance{Name: "node-1", InternalIP: "127.0.79.10", Labels: map[string]string{DefaultClusterLabel: testCluster}})
	v, err := NewVerifier(VerifierOptions{Issuer: w.gc.Issuer(), CertsURL: w.gc.CertsURL(),
		Projects: []string{gcetest.DefaultProject}, Now: func() time.Time { return w.clock }})
	if err != nil {
		t.Fatal(err)
	}
	w.v = v
	return w
}

// token is a real token of the instance, issued at the test clock.
func (w *keysWorld) token(t *testing.T) []byte {
	t.Helper()
	tok, err := w.gc.Token(w.in, gcetest.TokenOptions{Audience: binding, Full: true, IssuedAt: w.clock})
	if err != nil {
		t.Fatal(err)
	}
	return []byte(tok)
}

func (w *keysWorld) verify(data []byte) error {
	_, err := w.v.Verify(context.Background(), data, binding, w.clock)
	return err
}

// forged re-signs a real token's claims, edited, with a key Google never
// published, under kid.
func (w *keysWorld) forged(t *testing.T, kid string, edit func(map[string]any)) []byte {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	real, err := jwt.ParseSigned(string(w.token(t)), []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		t.Fatal(err)
	}
	claims := map[string]any{}
	if err := real.UnsafeClaimsWithoutVerification(&claims); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(claims)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		t.Fatal(err)
	}
	out, err := jwt.Signed(s).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return []byte(out)
}

func wantReason(t *testing.T, what string, err error, want string) {
	t.Helper()
	if got := reason(err); got != want {
		t.Fatalf("%s: got %s (%v), want %s", what, got, err, want)
	}
}

// Issue 28: a token under an unknown key id and without iat was looked up
// before its times were checked, and the failed lookup left it retried for
// ever. Its times are checked first: denied, and Google is not asked.
func TestUnverifiableTimesDeniedBeforeKeyLookup(t *testing.T) {
	w := newKeysWorld(t)
	for name, edit := range map[string]func(map[string]any){
		"no iat": func(c map[string]any) { delete(c, "iat") },
		"no exp": func(c map[string]any) { delete(c, "exp") },
		"expired": func(c map[string]any) {
			c["iat"], c["exp"] = w.clock.Add(-3*time.Hour).Unix(), w.clock.Add(-2*time.Hour).Unix()
		},
		"lifetime of a day":   func(c map[string]any) { c["exp"] = w.clock.Add(24 * time.Hour).Unix() },
		"not valid yet (nbf)": func(c map[string]any) { c["nbf"] = w.clock.Add(time.Hour).Unix() },
		"another issuer":      func(c map[string]any) { c["iss"] = "https://evil.example" },
	} {
		err := w.verify(w.forged(t, "never-published", edit))
		if _, rejected := cloud.IsRejection(err); !rejected {
			t.Errorf("%s: %v, want a denial", name, err)
		}
	}
	if n := w.gc.Calls("certs"); n != 0 {
		t.Fatalf("%d key fetches for tokens whose claims cannot pass, want 0", n)
	}
}

// An unknown key id costs one fetch of Google's keys, then is denied, not
// retried; more of them within MinKeyRefresh fetch nothing.
func TestUnknownKidOneFetchThenDenied(t *testing.T) {
	w := newKeysWorld(t)
	if err := w.verify(w.token(t)); err != nil {
		t.Fatal(err)
	}
	w.clock = w.clock.Add(time.Minute)
	for i := range 10 {
		// Issued after the keys were fetched (within the clock skew): it
		// used to wait for a refetch that could never hold its key.
		err := w.verify(w.forged(t, "never-published", func(c map[string]any) { c["iat"] = w.clock.Add(30 * time.Second).Unix() }))
		wantReason(t, "unknown kid", err, cloud.RejectSignature)
		if !strings.Contains(err.Error(), "not among") {
			t.Fatalf("unknown kid: %v does not say the key id is not published", err)
		}
		if n := w.gc.Calls("certs"); n != 2 {
			t.Fatalf("unknown kid %d: %d key fetches, want 2 (the first, one refetch)", i, n)
		}
	}
}

// Issue 28: a key Google withdrew stayed trusted until the cached keys were
// an hour old. The keys are refetched before use once DefaultKeyRefresh
// old, and the fetched set replaces the old one: the withdrawn key's tokens
// are denied then, with no unknown key id to trigger the refetch.
func TestWithdrawnKeyDeniedWithinKeyRefresh(t *testing.T) {
	w := newKeysWorld(t)
	old := w.gc.KeyIDs()[0]
	if err := w.verify(w.token(t)); err != nil {
		t.Fatal(err)
	}
	// A token of the old key, for use after the refresh interval.
	later := w.clock.Add(withdrawalBound)
	stale, err := w.gc.Token(w.in, gcetest.TokenOptions{Audience: binding, Full: true, IssuedAt: later})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.gc.Rotate(); err != nil {
		t.Fatal(err)
	}
	w.gc.Retire(old)
	w.clock = later
	wantReason(t, "withdrawn key", w.verify([]byte(stale)), cloud.RejectSignature)
	if n := w.gc.Calls("certs"); n != 2 {
		t.Fatalf("%d key fetches, want 2", n)
	}
	if err := w.verify(w.token(t)); err != nil {
		t.Fatalf("the new key: %v", err)
	}
}

// withdrawalBound is how long a withdrawn key may go on verifying while
// Google answers, as docs/gce.md states it.
const withdrawalBound = 5 * time.Minute

// A rotation in Google's order (gcetest.Publish, Activate, Retire): the
// new key is published before it signs, so a verifier that fetched since
// knows it when the first token it signed arrives (no fetch); tokens of
// the old key verify while it stays published; once withdrawn they are
// denied within the refresh interval, whatever max-age the certs allow.
func TestGoogleRotationOrder(t *testing.T) {
	w := newKeysWorld(t)
	old := w.gc.SigningKeyID()
	next, err := w.gc.Publish()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.verify(w.token(t)); err != nil {
		t.Fatal(err)
	}
	byOld := w.token(t)
	if err := w.gc.Activate(next); err != nil {
		t.Fatal(err)
	}
	fetches := w.gc.Calls("certs")
	if err := w.verify(w.token(t)); err != nil {
		t.Fatalf("first token of the new key: %v", err)
	}
	if err := w.verify(byOld); err != nil {
		t.Fatalf("the old key, still published: %v", err)
	}
	if n := w.gc.Calls("certs"); n != fetches {
		t.Fatalf("%d key fetches for a key published ahead, want %d", n, fetches)
	}
	later := w.clock.Add(withdrawalBound)
	if err := w.gc.Activate(old); err != nil {
		t.Fatal(err)
	}
	stale, err := w.gc.Token(w.in, gcetest.TokenOptions{Audience: binding, Full: true, IssuedAt: later})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.gc.Activate(next); err != nil {
		t.Fatal(err)
	}
	w.gc.Retire(old)
	w.clock = later
	wantReason(t, "withdrawn key", w.verify([]byte(stale)), cloud.RejectSignature)
	if err := w.verify(w.token(t)); err != nil {
		t.Fatalf("the new key after the withdrawal: %v", err)
	}
}
