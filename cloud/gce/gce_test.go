package gce

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	compute "google.golang.org/api/compute/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/gce/agentid"
	"github.com/mooring-dev/mooring/cloud/gce/gcetest"
	"github.com/mooring-dev/mooring/cloud/nodeid/nodeidtest"
	"github.com/mooring-dev/mooring/cloud/view"
)

const (
	testCluster = "c1"
	binding     = "q2bFq8mNYb3lPq0S9w2Jq0l5KMtDgFh5mBqH2zjYc1A"
)

type world struct {
	gc    *gcetest.Cloud
	cloud *Cloud
	cfg   Config
}

func newWorld(t *testing.T, opts gcetest.Options, edit func(*Config)) *world {
	t.Helper()
	gc := gcetest.NewStarted(t, opts)
	cfg := Config{Projects: []string{gcetest.DefaultProject}, ClusterID: testCluster, ComputeEndpoint: gc.Endpoint(),
		WithoutAuthentication: true, CertsURL: gc.CertsURL()}
	cfg.MinRefreshInterval.Duration = time.Millisecond
	if edit != nil {
		edit(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &world{gc: gc, cloud: c, cfg: c.Config()}
}

func (w *world) add(name, ip string, labels map[string]string) gcetest.Instance {
	if labels == nil {
		labels = map[string]string{DefaultClusterLabel: testCluster}
	}
	return w.gc.Put(gcetest.Instance{Name: name, InternalIP: ip, ExternalIP: strings.Replace(ip, "127.0.79.", "127.0.80.", 1), Labels: labels})
}

func (w *world) identity(t *testing.T, in gcetest.Instance) *agentid.NodeIdentity {
	t.Helper()
	return nodeidtest.Agent(t, agentid.NewNodeIdentity, nil)(w.gc.MetadataURL(in.Project, in.Zone, in.Name))
}

// The whole path: the agent's instance record and token, verified by the
// approver's verifier, name the instance the view lists.
func TestJoinPath(t *testing.T) {
	w := newWorld(t, gcetest.Options{}, nil)
	in := w.add("node-1", "127.0.79.10", nil)
	ctx := context.Background()
	id := w.identity(t, in)
	ni, err := id.Instance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantPID := "gce://mooring-test/us-central1-a/node-1"
	if ni.ProviderID != wantPID || ni.NodeName != "node-1" || ni.InternalIP != "127.0.79.10" || ni.ID != fmt.Sprint(in.ID) {
		t.Fatalf("instance %+v", ni)
	}
	ev, err := id.Evidence(ctx, binding)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type != agentid.EvidenceType {
		t.Fatal(ev.Type)
	}
	v := w.cloud.EvidenceVerifiers()[0]
	att, err := v.Verify(ctx, ev.Data, binding, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if att.ProviderID != wantPID || att.InstanceID != ni.ID || !strings.HasPrefix(att.ReplayKey, ReplayKeyPrefix) {
		t.Fatalf("attestation %+v", att)
	}
	rk, b, err := v.Peek(ev.Data)
	if err != nil || rk != att.ReplayKey || b != binding {
		t.Fatalf("peek %q %q %v", rk, b, err)
	}
	if m, err := v.(cloud.MachinePeeker).PeekMachine(ev.Data); err != nil || m != ni.ID {
		t.Fatalf("PeekMachine = %q, %v; want %q", m, err, ni.ID)
	}
	vi, err := w.cloud.InstanceView().ByID(ctx, att.InstanceID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if vi.ProviderID != att.ProviderID || vi.NodeName != ni.NodeName || vi.State != view.StateRunning {
		t.Fatalf("view %+v", vi)
	}
	want := []v1.NodeAddress{
		{Type: v1.NodeInternalIP, Address: "127.0.79.10"}, {Type: v1.NodeExternalIP, Address: "127.0.80.10"},
		{Type: v1.NodeInternalDNS, Address: "node-1.us-central1-a.c.mooring-test.internal"},
		{Type: v1.NodeHostName, Address: "node-1.us-central1-a.c.mooring-test.internal"},
	}
	if fmt.Sprint(vi.Addresses) != fmt.Sprint(want) || vi.Zone != "us-central1-a" || vi.Region != "us-central1" || vi.InstanceType != "e2-standard-2" {
		t.Fatalf("view %+v", vi)
	}
}

func reason(err error) string {
	if r, ok := cloud.IsRejection(err); ok {
		return r.Reason
	}
	if err == nil {
		return "ok"
	}
	return "transient: " + err.Error()
}

// Attacks on the verifier, each denied with its reason.
func TestVerifierAttacks(t *testing.T) {
	w := newWorld(t, gcetest.Options{}, nil)
	in := w.add("node-1", "127.0.79.10", nil)
	other := w.gc.Put(gcetest.Instance{Project: "another-project", Name: "node-1", InternalIP: "127.0.79.12",
		Labels: map[string]string{DefaultClusterLabel: testCluster}})
	v := w.cloud.EvidenceVerifiers()[0]
	now := time.Now()
	token := func(o gcetest.TokenOptions) string {
		if o.Audience == "" {
			o.Audience = binding
		}
		o.Full = true
		tok, err := w.gc.Token(in, o)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	attacker, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	realKid := w.gc.KeyIDs()[0]
	signWith := func(alg jose.SignatureAlgorithm, key any, opts *jose.SignerOptions) string {
		s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts)
		if err != nil {
			t.Fatal(err)
		}
		good := token(gcetest.TokenOptions{})
		var claims map[string]any
		parsed, err := jwt.ParseSigned(good, []jose.SignatureAlgorithm{jose.RS256})
		if err != nil {
			t.Fatal(err)
		}
		if err := parsed.UnsafeClaimsWithoutVerification(&claims); err != nil {
			t.Fatal(err)
		}
		out, err := jwt.Signed(s).Claims(claims).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: mustPKIX(t, &w.gcKey(t).PublicKey)})
	good := token(gcetest.TokenOptions{})
	parts := strings.Split(good, ".")
	otherTok, err := w.gc.Token(other, gcetest.TokenOptions{Audience: binding, Full: true})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, token, want string
	}{
		{"good", good, "ok"},
		{"token for another audience", token(gcetest.TokenOptions{Audience: "another-audience"}), cloud.RejectBinding},
		{"instance of another project", otherTok, cloud.RejectIssuer},
		{"expired", token(gcetest.TokenOptions{IssuedAt: now.Add(-2 * time.Hour)}), cloud.RejectExpired},
		{"issued in the future", token(gcetest.TokenOptions{IssuedAt: now.Add(10 * time.Minute)}), cloud.RejectExpired},
		{"lifetime over an hour", token(gcetest.TokenOptions{Lifetime: 3 * time.Hour}), cloud.RejectExpired},
		{"another issuer", token(gcetest.TokenOptions{Issuer: "https://evil.example"}), cloud.RejectIssuer},
		{"not format=full", func() string {
			tok, _ := w.gc.Token(in, gcetest.TokenOptions{Audience: binding})
			return tok
		}(), cloud.RejectMalformed},
		{"two audiences", token(gcetest.TokenOptions{Edit: func(c map[string]any) { c["aud"] = []string{binding, "x"} }}), cloud.RejectBinding},
		{"alg switched to HS256 keyed with the public key", signWith(jose.HS256, pubPEM,
			(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", realKid)), cloud.RejectSignature},
		{"alg none", base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","kid":"`+realKid+`"}`)) + "." + parts[1] + ".", cloud.RejectSignature},
		{"key injected in the header (jwk)", signWith(jose.RS256, attacker,
			(&jose.SignerOptions{EmbedJWK: true}).WithType("JWT")), cloud.RejectMalformed},
		{"key url injected in the header (jku)", signWith(jose.RS256, attacker,
			(&jose.SignerOptions{}).WithHeader("kid", "k1").WithHeader("jku", "http://127.0.0.1:9/keys")), cloud.RejectMalformed},
		{"certificate chain in the header (x5c)", headerWith(t, parts, `"x5c":["`+selfSigned(t, attacker)+`"]`), cloud.RejectMalformed},
		{"critical header (crit)", headerWith(t, parts, `"crit":["exp"],"exp":1`), cloud.RejectMalformed},
		{"signed by another key under Google's kid", signWith(jose.RS256, attacker,
			(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", realKid)), cloud.RejectSignature},
		{"signed by a key Google never published", signWith(jose.RS256, attacker,
			(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "attacker-kid")), cloud.RejectSignature},
		{"payload edited", parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(
			mustB64(t, parts[1]), `"node-1"`, `"node-9"`, 1))) + "." + parts[2], cloud.RejectSignature},
		{"non-canonical base64 (a second replay key)", nonCanonical(parts[0]) + "." + parts[1] + "." + parts[2], cloud.RejectMalformed},
		{"not a JWS", "garbage", cloud.RejectMalformed},
		{"oversized", strings.Repeat("a", agentid.MaxTokenSize+1), cloud.RejectMalformed},
	}
	for _, tc := range cases {
		_, err := v.Verify(context.Background(), []byte(tc.token), binding, now)
		if got := reason(err); got != tc.want {
			t.Errorf("%s: got %s (%v), want %s", tc.name, got, err, tc.want)
		}
	}
}

// headerWith adds fields to a real token's header, keeping its signature
// (which then no longer matches: the header must be refused before that).
func headerWith(t *testing.T, parts []string, fields string) string {
	h := mustB64(t, parts[0])
	h = strings.TrimSuffix(h, "}") + "," + fields + "}"
	return base64.RawURLEncoding.EncodeToString([]byte(h)) + "." + parts[1] + "." + parts[2]
}

// selfSigned is a certificate of key, standard base64 DER (an x5c entry).
func selfSigned(t *testing.T, key *rsa.PrivateKey) string {
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(der)
}

func (w *world) gcKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	// The real key's public half, from the published set.
	resp, err := http.Get(w.gc.CertsURL())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var set jose.JSONWebKeySet
	if err := json.NewDecoder(resp.Body).Decode(&set); err != nil {
		t.Fatal(err)
	}
	return &rsa.PrivateKey{PublicKey: *set.Keys[0].Key.(*rsa.PublicKey)}
}

func mustPKIX(t *testing.T, pub *rsa.PublicKey) []byte {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func mustB64(t *testing.T, s string) string {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// nonCanonical changes the unused low bits of the last base64 character,
// which lenient decoders ignore.
func nonCanonical(s string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	if len(s)%4 == 0 {
		return s + "A" // not reachable for a JSON header, kept simple
	}
	last := strings.IndexByte(alphabet, s[len(s)-1])
	return s[:len(s)-1] + string(alphabet[last|1])
}

// Keys: both of Google's formats verify; an unknown kid refetches at a
// bounded rate; a rotated key verifies after a refetch; a fetch failure is
// transient, never a verdict.
func TestKeys(t *testing.T) {
	clock := time.Now()
	now := func() time.Time { return clock }
	gc := gcetest.NewStarted(t, gcetest.Options{})
	in := gc.Put(gcetest.Instance{Name: "node-1", InternalIP: "127.0.79.10", Labels: map[string]string{DefaultClusterLabel: testCluster}})
	for _, url := range []string{gc.CertsURL(), gc.PEMCertsURL()} {
		v, err := NewVerifier(VerifierOptions{Issuer: gc.Issuer(), CertsURL: url, Projects: []string{gcetest.DefaultProject},
			MinKeyRefresh: 30 * time.Second, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		tok, _ := gc.Token(in, gcetest.TokenOptions{Audience: binding, Full: true})
		if _, err := v.Verify(context.Background(), []byte(tok), binding, clock); err != nil {
			t.Fatalf("%s: %v", url, err)
		}
	}
	before := gc.Calls("certs")
	v, _ := NewVerifier(VerifierOptions{Issuer: gc.Issuer(), CertsURL: gc.CertsURL(), Projects: []string{gcetest.DefaultProject},
		MinKeyRefresh: 30 * time.Second, Now: now})
	tok, _ := gc.Token(in, gcetest.TokenOptions{Audience: binding, Full: true})
	if _, err := v.Verify(context.Background(), []byte(tok), binding, clock); err != nil {
		t.Fatal(err)
	}
	// Google rotates: a token of a key that was not published when the
	// keys were fetched, under MinRefresh ago, is denied (Google publishes
	// keys ahead of use; the agent files a new CSR)...
	clock = clock.Add(time.Second)
	if _, err := gc.Rotate(); err != nil {
		t.Fatal(err)
	}
	tok2, _ := gc.Token(in, gcetest.TokenOptions{Audience: binding, Full: true, IssuedAt: clock.Add(2 * time.Minute)})
	for range 20 {
		_, err := v.Verify(context.Background(), []byte(tok2), binding, clock.Add(2*time.Minute))
		if reason(err) != cloud.RejectSignature {
			t.Fatalf("key not in the keys just fetched: %v", err)
		}
	}
	if n := gc.Calls("certs") - before; n != 1 {
		t.Fatalf("%d key fetches for 21 verifications within MinRefresh, want 1", n)
	}
	// ... and verifies once it may refetch.
	clock = clock.Add(31 * time.Second)
	if _, err := v.Verify(context.Background(), []byte(tok2), binding, clock.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	// A fetch failure is not a verdict.
	v3, _ := NewVerifier(VerifierOptions{Issuer: gc.Issuer(), CertsURL: gc.CertsURL(), Projects: []string{gcetest.DefaultProject}, Now: now})
	gc.Fail("certs", 5, http.StatusServiceUnavailable)
	_, err := v3.Verify(context.Background(), []byte(tok2), binding, clock.Add(2*time.Minute))
	if _, rejected := cloud.IsRejection(err); err == nil || rejected {
		t.Fatalf("keys unavailable: %v", err)
	}
	// Keys Google stopped publishing stop verifying after a refetch.
	for _, kid := range gc.KeyIDs()[:1] {
		gc.Retire(kid)
	}
	clock = clock.Add(2 * time.Hour)
	v4, _ := NewVerifier(VerifierOptions{Issuer: gc.Issuer(), CertsURL: gc.CertsURL(), Projects: []string{gcetest.DefaultProject}, Now: now})
	gc.Fail("certs", 0, 0)
	_, err = v4.Verify(context.Background(), []byte(tok), binding, clock.Add(-2*time.Hour))
	if reason(err) != cloud.RejectSignature {
		t.Fatalf("retired key: %s", reason(err))
	}
}

func TestParseKeysRefusesWeakAndForeign(t *testing.T) {
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &small.PublicKey, KeyID: "s", Algorithm: "RS256", Use: "sig"}}}
	data, _ := json.Marshal(set)
	if _, err := ParseKeys(data, time.Now()); err == nil {
		t.Error("1024-bit key accepted")
	}
	priv, _ := rsa.GenerateKey(rand.Reader, 2048)
	set = jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: priv, KeyID: "p", Algorithm: "RS256", Use: "sig"}}}
	data, _ = json.Marshal(set)
	if _, err := ParseKeys(data, time.Now()); err == nil {
		t.Error("private key accepted")
	}
	if _, err := ParseKeys([]byte(`{"keys":[]}`), time.Now()); err == nil {
		t.Error("empty set accepted")
	}
}

// The aggregated list covers every zone of the project: an instance of
// another zone is listed with its zone and region (metadata, Zones);
// another project's instance is left alone, not gone. (The conformance
// suite checks pages, membership, states, deletion and failures.)
func TestViewAcrossZonesAndProjects(t *testing.T) {
	w := newWorld(t, gcetest.Options{}, nil)
	w.add("node-1", "127.0.79.21", nil)
	w.gc.Put(gcetest.Instance{Name: "node-z", Zone: "europe-west4-b", InternalIP: "127.0.79.32",
		Labels: map[string]string{DefaultClusterLabel: testCluster}})
	ctx := context.Background()
	node := func(name, pid string) *v1.Node {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NodeSpec{ProviderID: pid}}
	}
	md, err := w.cloud.InstanceMetadata(ctx, node("node-1", ""))
	if err != nil || md.ProviderID != "gce://mooring-test/us-central1-a/node-1" || md.Zone != "us-central1-a" || md.Region != "us-central1" {
		t.Fatalf("%+v %v", md, err)
	}
	zones, ok := w.cloud.Zones()
	if !ok {
		t.Fatal("Zones is not implemented")
	}
	z, err := zones.GetZoneByProviderID(ctx, "gce://mooring-test/europe-west4-b/node-z")
	if err != nil || z.FailureDomain != "europe-west4-b" || z.Region != "europe-west4" {
		t.Fatalf("%+v %v", z, err)
	}
	if ok, err := w.cloud.InstanceExists(ctx, node("x", "gce://another-project/us-central1-a/x")); err != nil || !ok {
		t.Fatalf("another project's instance: exists %v %v (want left alone)", ok, err)
	}
}

func (c *Cloud) source() Source {
	return Source{Compute: c.compute, Projects: c.cfg.Projects, ClusterLabel: c.cfg.ClusterLabel, ClusterID: c.cfg.ClusterID}
}

func TestProviderID(t *testing.T) {
	for _, bad := range []string{"", "gce://p/z/n", "gce://mooring-test/us-central1-a", "gce://mooring-test/us-central1-a/n/x",
		"aws:///us-east-1a/i-1", "gce://mooring-test/us-central1-a/Node"} {
		if _, _, _, err := ParseProviderID(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	p, z, n, err := ParseProviderID("gce://mooring-test/us-central1-a/node-1")
	if err != nil || p != "mooring-test" || z != "us-central1-a" || n != "node-1" {
		t.Fatal(p, z, n, err)
	}
}

func TestConfig(t *testing.T) {
	good := "projects: [mooring-test]\nclusterID: c1\n"
	c, err := ParseConfig(strings.NewReader(good))
	if err != nil || c.CertsURL != DefaultCertsURL || c.TokenIssuer != DefaultTokenIssuer || c.ClusterFilter() != `labels.mooring-cluster = "c1"` {
		t.Fatalf("%+v %v", c, err)
	}
	for _, bad := range []string{
		"clusterID: c1\n", "projects: [mooring-test]\n", "projects: [Bad_Project]\nclusterID: c1\n",
		good + "nodeNamePolicy: InstanceID\n", good + "computeEndpoint: http://10.0.0.1/\n",
		good + "withoutAuthentication: true\n", good + "unknown: 1\n", good + "maxClockSkew: 1h\n",
		good + "clusterLabel: Bad\n",
	} {
		if _, err := ParseConfig(strings.NewReader(bad)); err == nil {
			t.Errorf("accepted:\n%s", bad)
		}
	}
}

// The view's creation time is the instance's creationTimestamp as the
// Google API client decodes it from gcetest: exactly the time set (in
// Google's Pacific offset here), Now by default, kept when the instance is
// put again. A timestamp that is not RFC 3339 leaves it zero (refused by a
// join ticket) and the instance listed.
func TestViewCreationTime(t *testing.T) {
	now := time.Date(2025, 3, 2, 8, 0, 0, 125e6, time.UTC)
	w := newWorld(t, gcetest.Options{Now: func() time.Time { return now }}, nil)
	made := time.Date(2025, 3, 1, 3, 20, 30, 0, time.FixedZone("PST", -8*3600))
	labels := map[string]string{DefaultClusterLabel: testCluster}
	w.gc.Put(gcetest.Instance{Name: "ticketed", InternalIP: "127.0.79.40", Labels: labels, Created: made})
	plain := w.add("plain", "127.0.79.41", nil)
	now = now.Add(time.Hour)
	w.add("plain", "127.0.79.41", nil) // put again: same creation time
	ctx := context.Background()
	named, err := w.cloud.InstanceView().Named(ctx, "ticketed", 0)
	if err != nil || len(named) != 1 || !named[0].Created.Equal(made) {
		t.Fatalf("Named(ticketed): %+v, %v; want created %v", named, err, made)
	}
	got, err := w.cloud.InstanceView().ByName(ctx, "plain", 0)
	if err != nil || !got.Created.Equal(plain.Created) || !plain.Created.Equal(now.Add(-time.Hour)) {
		t.Fatalf("default creation time %v (%v), want %v", got.Created, err, now.Add(-time.Hour))
	}

	src := w.cloud.source()
	for _, bad := range []string{"", "yesterday", "2025-03-01 03:20:30", "2025-03-01T03:20:30"} {
		in := &compute.Instance{Name: "odd", Zone: "zones/us-central1-a", Id: 7, Labels: labels, CreationTimestamp: bad}
		vi, ok := src.toView(gcetest.DefaultProject, in)
		if !ok || !vi.Created.IsZero() {
			t.Errorf("creationTimestamp %q: listed %v, created %v; want listed with no creation time", bad, ok, vi.Created)
		}
	}
}

// An instance in an AI zone (us-central1-ai1a, named in Google's "About AI
// zones") joins and is listed, in its region, as any other: the agent reads
// its zone, the verifier takes its token and the view keeps it.
func TestAIZoneInstanceJoins(t *testing.T) {
	w := newWorld(t, gcetest.Options{}, nil)
	in := w.gc.Put(gcetest.Instance{Name: "tpu-1", Zone: "us-central1-ai1a", InternalIP: "127.0.79.40",
		Labels: map[string]string{DefaultClusterLabel: testCluster}})
	ctx := context.Background()
	id := w.identity(t, in)
	ni, err := id.Instance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := id.Evidence(ctx, binding)
	if err != nil {
		t.Fatal(err)
	}
	att, err := w.cloud.EvidenceVerifiers()[0].Verify(ctx, ev.Data, binding, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	wantPID := "gce://mooring-test/us-central1-ai1a/tpu-1"
	if ni.ProviderID != wantPID || att.ProviderID != wantPID {
		t.Fatalf("agent %q, attestation %q, want %q", ni.ProviderID, att.ProviderID, wantPID)
	}
	vi, err := w.cloud.InstanceView().ByID(ctx, att.InstanceID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if vi.ProviderID != wantPID || vi.Zone != "us-central1-ai1a" || vi.Region != "us-central1" {
		t.Fatalf("view %+v", vi)
	}
	if _, zone, _, err := ParseProviderID(wantPID); err != nil || zone != "us-central1-ai1a" {
		t.Fatalf("ParseProviderID: %q %v", zone, err)
	}
}

// A listing with an unreachable zone is an error, never a shorter list
// (the view would take the zone's instances for gone), whether the API
// says so in the zone's scope or in unreachables.
func TestViewRefusesUnreachableZone(t *testing.T) {
	w := newWorld(t, gcetest.Options{}, nil)
	w.add("node-1", "127.0.79.10", nil)
	w.gc.Put(gcetest.Instance{Name: "node-2", Zone: "europe-west4-b", InternalIP: "127.0.79.11",
		Labels: map[string]string{DefaultClusterLabel: testCluster}})
	ctx := context.Background()
	if all, err := w.cloud.source().ListInstances(ctx); err != nil || len(all) != 2 {
		t.Fatalf("%d instances, %v", len(all), err)
	}
	w.gc.SetUnreachable("europe-west4-b", true)
	if all, err := w.cloud.source().ListInstances(ctx); err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("listed %d instances with a zone unreachable (err %v)", len(all), err)
	}
	w.gc.SetUnreachable("europe-west4-b", false)
	if all, err := w.cloud.source().ListInstances(ctx); err != nil || len(all) != 2 {
		t.Fatalf("reachable again: %d instances, %v", len(all), err)
	}
}
