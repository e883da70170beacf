package attest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/client"
	"github.com/mooring-dev/mooring/cloud/local/localtest"
	"github.com/mooring-dev/mooring/cloud/local/server"
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
	if att.InstanceID != in.ID || att.ProviderID != "local://"+in.ID || att.ReplayKey == "" || !att.ExpiresAt.After(att.IssuedAt) {
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
	_, err = v.Verify(context.Background(), []byte("a.b.c"), "b", time.Now())
	if _, isVerdict := cloud.IsRejection(err); err == nil || isVerdict {
		t.Fatalf("an outage must be a retryable error, got %v", err)
	}
	if _, err := New(nil, Options{}); err == nil {
		t.Fatal("a verifier without an issuer was made")
	}
}
