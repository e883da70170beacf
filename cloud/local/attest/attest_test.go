package attest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/local/agentid"
	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/client"
	"github.com/mooring-dev/mooring/cloud/local/identity"
	"github.com/mooring-dev/mooring/cloud/local/localtest"
	"github.com/mooring-dev/mooring/cloud/local/server"
	"github.com/mooring-dev/mooring/internal/keyset"
)

func setup(t *testing.T) (*localtest.Cloud, *api.Instance, *Verifier) {
	t.Helper()
	lc := localtest.Start(t, func(c *server.Config) { c.MetadataPort = 0 })
	in, err := lc.Client.CreateInstance(context.Background(), api.CreateInstanceRequest{Name: "node-a", Cluster: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	v, err := New(lc.Client.JWKS, Options{Issuer: server.DefaultIssuer, MinRefresh: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return lc, in, v
}

func token(t *testing.T, in *api.Instance, audience string) []byte {
	t.Helper()
	tok, err := client.NewMetadata(in.MetadataURL, nil).IdentityToken(context.Background(), audience)
	if err != nil {
		t.Fatal(err)
	}
	return []byte(tok)
}

func wantReject(t *testing.T, err error, reason string) {
	t.Helper()
	r, ok := cloud.IsRejection(err)
	if !ok || r.Reason != reason {
		t.Fatalf("err = %v, want a %s rejection", err, reason)
	}
}

func TestVerify(t *testing.T) {
	lc, in, v := setup(t)
	ctx := context.Background()
	const binding = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFG"
	tok := token(t, in, binding)
	att, err := v.Verify(ctx, tok, binding, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if att.InstanceID != in.ID || att.ProviderID != agentid.ProviderID(in.ID) || att.ReplayKey == "" || !att.ExpiresAt.After(att.IssuedAt) {
		t.Fatalf("attestation %+v", att)
	}
	_, err = v.Verify(ctx, tok, "another-key-binding", time.Now())
	wantReject(t, err, cloud.RejectBinding)
	_, err = v.Verify(ctx, tok, binding, time.Now().Add(time.Hour))
	wantReject(t, err, cloud.RejectExpired)
	_, err = v.Verify(ctx, []byte("not a token"), binding, time.Now())
	wantReject(t, err, cloud.RejectMalformed)

	// A token of another cloud (another key) is a forgery here.
	other := localtest.Start(t, func(c *server.Config) { c.MetadataPort = 0 })
	oin, err := other.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "node-x"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = v.Verify(ctx, token(t, oin, binding), binding, time.Now())
	wantReject(t, err, cloud.RejectSignature)

	// After a rotation, tokens of the new key verify (the keys are refetched).
	if _, err := lc.Client.RotateIdentityKey(ctx); err != nil {
		t.Fatal(err)
	}
	// The forged token above just refetched the keys; refetches are at
	// most one per MinRefresh (1 ms here), and the new key's first token
	// can arrive sooner than that.
	time.Sleep(5 * time.Millisecond)
	if _, err := v.Verify(ctx, token(t, in, binding), binding, time.Now()); err != nil {
		t.Fatalf("after rotation: %v", err)
	}
}

func TestKeysUnavailableIsNotAVerdict(t *testing.T) {
	v, err := New(func(context.Context) ([]byte, error) { return nil, errors.New("cloud down") }, Options{Issuer: "x"})
	if err != nil {
		t.Fatal(err)
	}
	// A token that could pass but for its key, which cannot be fetched.
	now := time.Now()
	c, err := identity.NewClaims("x", "b", identity.InstanceClaims{ID: "i-0001", Name: "node-a"}, now, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := identity.NewKeySet(newKey(t, now)).Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	_, err = v.Verify(context.Background(), []byte(tok), "b", now)
	if _, isVerdict := cloud.IsRejection(err); err == nil || isVerdict {
		t.Fatalf("an outage must be a retryable error, got %v", err)
	}
	if _, err := New(nil, Options{}); err == nil {
		t.Fatal("a verifier without an issuer was made")
	}
}

// fakeClock is an injectable Options.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}

// keySource serves a KeySet's JWKS as the cloud would, counting fetches;
// it can be made to fail. (Concurrent fetches, and callers that stop
// waiting, are internal/keyset's tests.)
type keySource struct {
	mu      sync.Mutex
	set     *identity.KeySet
	fail    error
	fetches int
}

func (s *keySource) JWKS(context.Context) ([]byte, error) {
	s.mu.Lock()
	s.fetches++
	set, fail := s.set, s.fail
	s.mu.Unlock()
	if fail != nil {
		return nil, fail
	}
	return set.JWKS()
}

func (s *keySource) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fetches
}

func (s *keySource) setFail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = err
}

const (
	testIssuer  = "https://cloud.test"
	testBinding = "binding-0123456789"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func newKey(t *testing.T, at time.Time) *identity.Key {
	t.Helper()
	k, err := identity.NewKey(at)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// signedBy is a token signed by k alone, issued at at.
func signedBy(t *testing.T, k *identity.Key, at time.Time) []byte {
	t.Helper()
	c, err := identity.NewClaims(testIssuer, testBinding, identity.InstanceClaims{ID: "i-0001", Name: "node-a"}, at, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := identity.NewKeySet(k).Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	return []byte(tok)
}

func newFakeVerifier(t *testing.T, src *keySource, clk *fakeClock, o Options) *Verifier {
	t.Helper()
	o.Issuer = testIssuer
	o.Now = clk.Now
	v, err := New(src.JWKS, o)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestPrunedKeyRefusedAfterRefreshInterval(t *testing.T) {
	clk := &fakeClock{t: t0}
	first := newKey(t, t0)
	src := &keySource{set: identity.NewKeySet(first)}
	v := newFakeVerifier(t, src, clk, Options{RefreshInterval: 5 * time.Minute, MinRefresh: 10 * time.Second})
	ctx := context.Background()

	if _, err := v.Verify(ctx, signedBy(t, first, t0), testBinding, t0); err != nil {
		t.Fatalf("first key: %v", err)
	}
	// The cloud rotates and prunes the first key: it no longer publishes it.
	if _, err := src.set.Rotate(t0); err != nil {
		t.Fatal(err)
	}
	src.set.Prune(t0.Add(time.Hour))
	if n := len(src.set.Keys()); n != 1 {
		t.Fatalf("the cloud still publishes %d keys", n)
	}

	// Within RefreshInterval the fetched keys are used as they are.
	now := clk.Add(time.Minute)
	if _, err := v.Verify(ctx, signedBy(t, first, now), testBinding, now); err != nil {
		t.Fatalf("within RefreshInterval: %v", err)
	}
	if n := src.count(); n != 1 {
		t.Fatalf("%d fetches within RefreshInterval, want 1", n)
	}

	// Past it, Verify refetches first, and the pruned key is no longer
	// trusted, though its token is otherwise valid.
	now = clk.Add(5 * time.Minute)
	_, err := v.Verify(ctx, signedBy(t, first, now), testBinding, now)
	wantReject(t, err, cloud.RejectSignature)
	if !errors.Is(err, keyset.ErrUnknownKey) {
		t.Fatalf("err = %v, want the unknown key", err)
	}
	if n := src.count(); n != 2 {
		t.Fatalf("%d fetches, want 2 (one periodic refetch; the unknown kid is within MinRefresh)", n)
	}
	// The active key's tokens verify.
	if _, err := v.Verify(ctx, signedBy(t, src.set.Active(), now), testBinding, now); err != nil {
		t.Fatalf("new key: %v", err)
	}
}

func TestRefetchFailureAndMaxKeyAge(t *testing.T) {
	clk := &fakeClock{t: t0}
	k := newKey(t, t0)
	src := &keySource{set: identity.NewKeySet(k)}
	v := newFakeVerifier(t, src, clk, Options{RefreshInterval: 5 * time.Minute, MinRefresh: 10 * time.Second})
	if v.opts.MaxKeyAge != 15*time.Minute {
		t.Fatalf("default MaxKeyAge %s, want 3 × RefreshInterval", v.opts.MaxKeyAge)
	}
	ctx := context.Background()
	verify := func() error {
		now := clk.Now()
		_, err := v.Verify(ctx, signedBy(t, k, now), testBinding, now)
		return err
	}
	if err := verify(); err != nil {
		t.Fatal(err)
	}

	// The cloud is down. Past RefreshInterval but before MaxKeyAge, the
	// refetch fails and the keys we have still serve.
	src.setFail(errors.New("cloud down"))
	clk.Add(6 * time.Minute)
	if err := verify(); err != nil {
		t.Fatalf("refetch failed before MaxKeyAge: %v", err)
	}
	if n := src.count(); n != 2 {
		t.Fatalf("%d fetches, want 2", n)
	}
	// Retries of the refetch are at most one per MinRefresh.
	clk.Add(time.Second)
	if err := verify(); err != nil {
		t.Fatalf("within MinRefresh of the failure: %v", err)
	}
	if n := src.count(); n != 2 {
		t.Fatalf("%d fetches within MinRefresh of a failure, want 2", n)
	}

	// Past MaxKeyAge the keys are not used: a transient error, not a verdict.
	clk.Add(9 * time.Minute)
	err := verify()
	if _, isVerdict := cloud.IsRejection(err); err == nil || isVerdict {
		t.Fatalf("stale keys: err = %v, want a retryable error", err)
	}
	if n := src.count(); n != 3 {
		t.Fatalf("%d fetches, want 3", n)
	}
	// Nor within MinRefresh of that failure.
	clk.Add(time.Second)
	if err := verify(); err == nil {
		t.Fatal("stale keys used within MinRefresh of a failed refetch")
	}

	// The cloud is back: the next refetch restores service.
	src.setFail(nil)
	clk.Add(10 * time.Second)
	if err := verify(); err != nil {
		t.Fatalf("after recovery: %v", err)
	}
	if n := src.count(); n != 4 {
		t.Fatalf("%d fetches, want 4", n)
	}

	if _, err := New(src.JWKS, Options{Issuer: "x", RefreshInterval: time.Minute, MaxKeyAge: time.Second}); err == nil {
		t.Fatal("MaxKeyAge under RefreshInterval accepted")
	}
}

func TestUnknownKidRefetchRateLimited(t *testing.T) {
	clk := &fakeClock{t: t0}
	k := newKey(t, t0)
	src := &keySource{set: identity.NewKeySet(k)}
	v := newFakeVerifier(t, src, clk, Options{MinRefresh: 10 * time.Second})
	ctx := context.Background()
	if _, err := v.Verify(ctx, signedBy(t, k, t0), testBinding, t0); err != nil {
		t.Fatal(err)
	}
	stranger := newKey(t, t0)
	for i := range 5 {
		_, err := v.Verify(ctx, signedBy(t, stranger, t0), testBinding, t0)
		wantReject(t, err, cloud.RejectSignature)
		if n := src.count(); n != 1 {
			t.Fatalf("forged kid %d: %d fetches within MinRefresh, want 1", i, n)
		}
	}
	// After MinRefresh an unknown kid refetches once, and finds a rotated key.
	rotated, err := src.set.Rotate(t0)
	if err != nil {
		t.Fatal(err)
	}
	now := clk.Add(10 * time.Second)
	if _, err := v.Verify(ctx, signedBy(t, rotated, now), testBinding, now); err != nil {
		t.Fatalf("rotated key after MinRefresh: %v", err)
	}
	if n := src.count(); n != 2 {
		t.Fatalf("%d fetches, want 2", n)
	}

	// An unknown kid whose refetch fails is not a verdict: the key may be
	// published by the time the CSR is retried.
	src.setFail(errors.New("cloud down"))
	now = clk.Add(10 * time.Second)
	_, err = v.Verify(ctx, signedBy(t, stranger, now), testBinding, now)
	if _, isVerdict := cloud.IsRejection(err); err == nil || isVerdict {
		t.Fatalf("unknown kid, refetch failed: err = %v, want a retryable error", err)
	}
	// Known keys still verify meanwhile.
	if _, err := v.Verify(ctx, signedBy(t, rotated, now), testBinding, now); err != nil {
		t.Fatalf("known key while the cloud is down: %v", err)
	}
}

func TestPeek(t *testing.T) {
	v, err := New(func(context.Context) ([]byte, error) { return nil, errors.New("unused") }, Options{Issuer: testIssuer})
	if err != nil {
		t.Fatal(err)
	}
	tok := signedBy(t, newKey(t, t0), t0)
	replay, binding, err := v.Peek(tok)
	c, _ := identity.Peek(string(tok))
	if err != nil || binding != testBinding || replay != "local/"+c.ID {
		t.Fatalf("Peek = %q, %q, %v", replay, binding, err)
	}
	if _, _, err := v.Peek([]byte("not a token")); err == nil {
		t.Fatal("Peek accepted garbage")
	}
}

// Issue 28: evidence that can never verify was retried for ever when the
// keys could not be fetched, since the keys were fetched before anything
// else was checked. Times, lifetime, issuer and audience are checked first:
// such tokens are denied without a fetch, whether or not the cloud answers.
func TestClaimsCheckedBeforeKeys(t *testing.T) {
	clk := &fakeClock{t: t0}
	src := &keySource{set: identity.NewKeySet(newKey(t, t0)), fail: errors.New("cloud down")}
	v := newFakeVerifier(t, src, clk, Options{})
	stranger := newKey(t, t0)
	ctx := context.Background()
	cases := []struct {
		name  string
		token []byte
		at    time.Time
		want  string
	}{
		{"expired", signedBy(t, stranger, t0), t0.Add(time.Hour), cloud.RejectExpired},
		{"issued in the future", signedBy(t, stranger, t0.Add(time.Hour)), t0, cloud.RejectExpired},
		{"another audience", signedBy(t, stranger, t0), t0, cloud.RejectBinding},
	}
	for _, tc := range cases {
		b := testBinding
		if tc.name == "another audience" {
			b = "another-binding"
		}
		_, err := v.Verify(ctx, tc.token, b, tc.at)
		if r, ok := cloud.IsRejection(err); !ok || r.Reason != tc.want {
			t.Errorf("%s: %v, want a %s denial", tc.name, err, tc.want)
		}
	}
	if n := src.count(); n != 0 {
		t.Fatalf("%d key fetches for tokens whose claims cannot pass, want 0", n)
	}
}

// An unknown kid costs exactly one fetch, then is denied with a reason;
// more within MinRefresh cost none.
func TestUnknownKidOneFetchThenDenied(t *testing.T) {
	clk := &fakeClock{t: t0}
	src := &keySource{set: identity.NewKeySet(newKey(t, t0))}
	v := newFakeVerifier(t, src, clk, Options{})
	ctx := context.Background()
	stranger := newKey(t, t0)
	for range 10 {
		_, err := v.Verify(ctx, signedBy(t, stranger, t0), testBinding, t0)
		wantReject(t, err, cloud.RejectSignature)
	}
	if n := src.count(); n != 1 {
		t.Fatalf("%d fetches, want 1", n)
	}
}
