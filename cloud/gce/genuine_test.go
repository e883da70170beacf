package gce

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/mooring-dev/mooring/cloud"
)

// genuineFixture is testdata/genuine-token.json: a token Google signed on
// a real instance and Google's published key of its kid, each with the
// public place it was taken from.
type genuineFixture struct {
	TokenSource string          `json:"token_source"`
	KeySource   string          `json:"key_source"`
	Token       string          `json:"token"`
	Certs       json.RawMessage `json:"certs"`
}

func loadGenuine(t *testing.T) genuineFixture {
	t.Helper()
	data, err := os.ReadFile("testdata/genuine-token.json")
	if err != nil {
		t.Fatal(err)
	}
	var f genuineFixture
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	if f.TokenSource == "" || f.KeySource == "" || f.Token == "" || len(f.Certs) == 0 {
		t.Fatal("the fixture must name its sources and hold a token and keys")
	}
	return f
}

// serveCerts publishes body as Google's certs endpoint would.
func serveCerts(t *testing.T, body []byte) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/oauth2/v3/certs"
}

// A genuine format=full identity token verifies through the verifier's
// whole path (form, claims, Google's key of its time, the claims as
// signed) with the clock pinned to a minute after its iat, and names the
// instance as the view would (id, zone, project, providerID). The binding
// is the token's own audience: it was not issued for a mooring CSR key.
func TestGenuineGCEToken(t *testing.T) {
	f := loadGenuine(t)
	var claims Claims
	tok, err := jwt.ParseSigned(f.Token, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		t.Fatal(err)
	}
	if err := tok.UnsafeClaimsWithoutVerification(&claims); err != nil {
		t.Fatal(err)
	}
	iat := claims.IssuedAt.Time()
	now := iat.Add(time.Minute)
	aud := claims.Audience[0]
	newVerifier := func(certs []byte) *Verifier {
		v, err := NewVerifier(VerifierOptions{Issuer: "https://accounts.google.com", CertsURL: serveCerts(t, certs),
			Projects: []string{"weipengpanda-project"}, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	v := newVerifier(f.Certs)
	ctx := context.Background()
	att, err := v.Verify(ctx, []byte(f.Token), aud, now)
	if err != nil {
		t.Fatalf("genuine token refused: %v", err)
	}
	if att.InstanceID != "2875949485074006138" || att.ProviderID != "gce://weipengpanda-project/europe-west1-b/wi-test-vm-1" ||
		!att.IssuedAt.Equal(iat) || att.ExpiresAt.Sub(att.IssuedAt) != time.Hour || !strings.HasPrefix(att.ReplayKey, ReplayKeyPrefix) {
		t.Fatalf("attestation %+v", att)
	}
	if _, b, err := v.Peek([]byte(f.Token)); err != nil || b != aud {
		t.Fatalf("peek: binding %q %v", b, err)
	}

	// The same genuine token, refused where it must be.
	// Its payload moved to another zone, under Google's signature.
	parts := strings.Split(f.Token, ".")
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	parts[1] = base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(payload), "europe-west1-b", "europe-west1-c", 1)))
	tampered := []byte(strings.Join(parts, "."))
	for name, c := range map[string]struct {
		data    []byte
		binding string
		at      time.Time
		want    string
	}{
		"another binding":                        {[]byte(f.Token), binding, now, cloud.RejectBinding},
		"expired (an hour later)":                {[]byte(f.Token), aud, iat.Add(time.Hour + 2*time.Minute), cloud.RejectExpired},
		"before it was issued":                   {[]byte(f.Token), aud, iat.Add(-5 * time.Minute), cloud.RejectExpired},
		"claims edited, Google's signature kept": {tampered, aud, now, cloud.RejectSignature},
	} {
		if _, err := v.Verify(ctx, c.data, c.binding, c.at); reason(err) != c.want {
			t.Errorf("%s: %s, want %s", name, reason(err), c.want)
		}
	}
	// Without Google's key of its kid it does not verify.
	other := newVerifier([]byte(`{"keys":[]}`))
	if _, err := other.Verify(ctx, []byte(f.Token), aud, now); err == nil {
		t.Error("verified with no published key")
	}
}
