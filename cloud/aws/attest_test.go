package aws

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/aws/agentid"
	"github.com/mooring-dev/mooring/cloud/aws/awstest"
	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/nodeid/nodeidtest"
	"github.com/mooring-dev/mooring/cloud/view"
	"github.com/mooring-dev/mooring/internal/evidence"
)

// testRole is the node role of the test worlds' instances.
const testRole = "mooring-node"

// t0 is the test worlds' start time.
var t0 = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

// clock is a settable clock shared by a test cloud, its agents and the
// verifier's now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// world is one AWS stand-in with one node instance, its agent and an
// approver's verifier.
type world struct {
	t     *testing.T
	clk   *clock
	cloud *awstest.Cloud
	in    awstest.Instance
	agent *agentid.NodeIdentity
	v     *Verifier
}

func newWorld(t *testing.T, opts awstest.Options) *world {
	t.Helper()
	w := &world{t: t, clk: &clock{t: t0}}
	opts.Now = w.clk.Now
	w.cloud = awstest.NewStarted(t, opts)
	w.in = w.cloud.Put(awstest.Instance{PrivateIP: "127.0.0.10", Role: testRole, Tags: map[string]string{"Name": "node-a"}, MetadataTags: true})
	w.agent = w.agentOf(w.in.ID, map[string]string{agentid.SettingSTSEndpoint: w.cloud.Endpoint()})
	w.v = w.verifier(func(*VerifierOptions) {})
	return w
}

// verifier is a verifier of the world's STS, its options changed by edit.
func (w *world) verifier(edit func(*VerifierOptions)) *Verifier {
	w.t.Helper()
	o := VerifierOptions{STSEndpoint: w.cloud.Endpoint(), Region: w.cloud.Region(), Account: w.cloud.Account(), NodeRoles: []string{testRole}}
	edit(&o)
	v, err := NewVerifier(o)
	if err != nil {
		w.t.Fatal(err)
	}
	return v
}

// agentOf is the node agent of an instance, on the world's clock.
func (w *world) agentOf(id string, settings map[string]string) *agentid.NodeIdentity {
	w.t.Helper()
	return w.agentOn(id, settings, w.clk.Now)
}

// agentOn is the node agent of an instance, on the clock now.
func (w *world) agentOn(id string, settings map[string]string, now func() time.Time) *agentid.NodeIdentity {
	w.t.Helper()
	url, err := w.cloud.IMDS(id)
	if err != nil {
		w.t.Fatal(err)
	}
	a, err := agentid.NewNodeIdentity(nodeid.Config{MetadataURL: url, Settings: settings}, agentid.WithClock(now))
	if err != nil {
		w.t.Fatal(err)
	}
	return a
}

// evidenceOf is an agent's evidence for binding.
func (w *world) evidenceOf(a *agentid.NodeIdentity, binding string) []byte {
	w.t.Helper()
	b, err := a.Evidence(context.Background(), binding)
	if err != nil {
		w.t.Fatal(err)
	}
	if b.Type != agentid.EvidenceType {
		w.t.Fatalf("evidence type %q", b.Type)
	}
	return b.Data
}

// stsCalls is how many GetCallerIdentity calls reached the stand-in, and
// how many it refused for a bad signature.
func (w *world) stsCalls() (answered, refused int) {
	return w.cloud.Calls(awstest.ActionGetCallerIdentity),
		w.cloud.Refused("SignatureDoesNotMatch") + w.cloud.Refused("IncompleteSignature") + w.cloud.Refused("InvalidClientTokenId") + w.cloud.Refused("ExpiredToken")
}

// approvedWithoutChecks proves that evidence would have been approved by a
// verifier without the local checks: STS itself accepts the request the
// verifier rebuilds, for a node role session of the account.
func (w *world) approvedWithoutChecks(v *Verifier, data []byte) {
	w.t.Helper()
	r, err := agentid.DecodeSTSRequest(data)
	if err != nil {
		r = mustDecodeLoose(w.t, data)
	}
	arn, _, err := v.callerIdentity(context.Background(), r)
	if err != nil {
		w.t.Fatalf("control: STS refused the request: %v", err)
	}
	if _, _, err := v.instanceOf(arn); err != nil {
		w.t.Fatalf("control: STS answered %s: %v", arn, err)
	}
}

// mustDecodeLoose reads evidence that the strict decoder refuses.
func mustDecodeLoose(t *testing.T, data []byte) agentid.STSRequest {
	t.Helper()
	var r agentid.STSRequest
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func wantReject(t *testing.T, err error, reason string) {
	t.Helper()
	r, ok := cloud.IsRejection(err)
	if !ok || r.Reason != reason {
		t.Fatalf("err = %v, want a %s rejection", err, reason)
	}
}

func wantTransient(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("approved; want a transient error")
	}
	if r, ok := cloud.IsRejection(err); ok {
		t.Fatalf("rejected (%s: %v); want a transient error", r.Reason, r.Err)
	}
}

// signed is a GetCallerIdentity-like request signed with the SDK's signer,
// each part of it chosen by the test.
type signed struct {
	creds    aws.Credentials
	endpoint string
	region   string
	service  string
	body     string
	binding  string // "" signs no binding header
	extra    map[string]string
	at       time.Time
}

// sign signs s and returns its header values as evidence, unchecked.
func sign(t *testing.T, s signed, binding string) []byte {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.endpoint+"/", strings.NewReader(s.body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", agentid.STSContentType)
	if s.binding != "" {
		req.Header.Set(agentid.BindingHeader, s.binding)
	}
	for k, v := range s.extra {
		req.Header.Set(k, v)
	}
	sum := sha256.Sum256([]byte(s.body))
	if err := v4.NewSigner().SignHTTP(context.Background(), s.creds, req, hex.EncodeToString(sum[:]), s.service, s.region, s.at); err != nil {
		t.Fatal(err)
	}
	return raw(t, agentid.STSRequest{
		Authorization: req.Header.Get("Authorization"),
		Date:          req.Header.Get("X-Amz-Date"),
		SecurityToken: req.Header.Get("X-Amz-Security-Token"),
		Binding:       binding,
	})
}

// raw encodes evidence without checking it.
func raw(t *testing.T, r agentid.STSRequest) []byte {
	t.Helper()
	data, err := json.Marshal(struct {
		V int `json:"v"`
		agentid.STSRequest
	}{1, r})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// asNode is a signed request as the node's agent would make it.
func (w *world) asNode(binding string) signed {
	w.t.Helper()
	creds, err := w.cloud.RoleCredentials(w.in.ID)
	if err != nil {
		w.t.Fatal(err)
	}
	return signed{creds: creds, endpoint: w.cloud.Endpoint(), region: w.cloud.Region(), service: "sts", body: agentid.STSBody, binding: binding, at: w.clk.Now()}
}

// TestRoundTrip: the agent's evidence, carried in a CSR, verifies at the
// approver through STS and names the instance.
func TestRoundTrip(t *testing.T) {
	w := newWorld(t, awstest.Options{})
	key, binding := nodeidtest.BoundKey(t)
	block, err := w.agent.Evidence(context.Background(), binding)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:x", Organization: []string{"system:nodes"}}}, key)
	if err != nil {
		t.Fatal(err)
	}
	request, err := evidence.Encode(csr, block)
	if err != nil {
		t.Fatal(err)
	}
	_, blocks, err := evidence.Decode(request)
	if err != nil || len(blocks) != 1 || blocks[0].Type != w.v.Type() {
		t.Fatalf("decode: %v, %d blocks", err, len(blocks))
	}

	att, err := w.v.Verify(context.Background(), blocks[0].Data, binding, w.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	want := cloud.Attestation{InstanceID: w.in.ID, IssuedAt: t0, ExpiresAt: t0.Add(15 * time.Minute)}
	if att.InstanceID != want.InstanceID || att.ProviderID != "" || !att.IssuedAt.Equal(want.IssuedAt) || !att.ExpiresAt.Equal(want.ExpiresAt) ||
		!strings.HasPrefix(att.ReplayKey, ReplayKeyPrefix) || len(att.ReplayKey) != len(ReplayKeyPrefix)+64 {
		t.Fatalf("attestation %+v, want %+v and a replay key", att, want)
	}
	key2, b2, err := w.v.Peek(blocks[0].Data)
	if err != nil || key2 != att.ReplayKey || b2 != binding {
		t.Fatalf("Peek = %q, %q, %v; want %q, %q", key2, b2, err, att.ReplayKey, binding)
	}
	// The machine it claims: the access key id of its instance's session.
	signer := authOf(t, blocks[0].Data)
	if m, err := w.v.PeekMachine(blocks[0].Data); err != nil || m != signer.AccessKeyID || m == "" {
		t.Fatalf("PeekMachine = %q, %v; want %q", m, err, signer.AccessKeyID)
	}
	if _, err := w.v.PeekMachine([]byte("{}")); err == nil {
		t.Fatal("PeekMachine of evidence without an authorization")
	}
	if n, _ := w.stsCalls(); n != 1 {
		t.Fatalf("%d GetCallerIdentity calls, want 1", n)
	}
	// The evidence holds nothing the approver makes itself.
	var fields map[string]any
	if err := json.Unmarshal(blocks[0].Data, &fields); err != nil {
		t.Fatal(err)
	}
	for k := range fields {
		switch k {
		case "v", "authorization", "x-amz-date", "x-amz-security-token", "x-mooring-binding":
		default:
			t.Errorf("evidence carries %q", k)
		}
	}
	// What the node signed: the headers the approver sends, binding included.
	auth, err := agentid.ParseAuthorization(fields["authorization"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(auth.SignedHeaders, ";"); got != "content-length;content-type;host;x-amz-date;x-amz-security-token;x-mooring-binding" {
		t.Errorf("signed headers %s", got)
	}
}

// TestAttacks: each piece of evidence an attacker can make is denied with
// its reason; those that STS itself would accept show it (a verifier
// without the check would have approved them).
func TestAttacks(t *testing.T) {
	ctx := context.Background()

	t.Run("bound to another key, re-signed with the attacker's own role credentials", func(t *testing.T) {
		w := newWorld(t, awstest.Options{})
		theirs, csrs := nodeidtest.NewBinding(t), nodeidtest.NewBinding(t)
		data := w.evidenceOf(w.agent, theirs)
		_, err := w.v.Verify(ctx, data, csrs, w.clk.Now())
		wantReject(t, err, cloud.RejectBinding)
		if n, r := w.stsCalls(); n+r != 0 {
			t.Fatalf("STS was called (%d, %d)", n, r)
		}
		w.approvedWithoutChecks(w.v, data)
	})

	t.Run("binding header changed after signing", func(t *testing.T) {
		w := newWorld(t, awstest.Options{})
		signedFor, csrs := nodeidtest.NewBinding(t), nodeidtest.NewBinding(t)
		r, err := agentid.DecodeSTSRequest(w.evidenceOf(w.agent, signedFor))
		if err != nil {
			t.Fatal(err)
		}
		r.Binding = csrs
		_, err = w.v.Verify(ctx, raw(t, r), csrs, w.clk.Now())
		wantReject(t, err, cloud.RejectSignature)
		if _, refused := w.stsCalls(); refused != 1 {
			t.Fatalf("STS refused %d requests, want 1", refused)
		}
	})

	t.Run("signed 16 minutes ago", func(t *testing.T) {
		w := newWorld(t, awstest.Options{})
		b := nodeidtest.NewBinding(t)
		data := w.evidenceOf(w.agent, b)
		_, err := w.v.Verify(ctx, data, b, t0.Add(16*time.Minute))
		wantReject(t, err, cloud.RejectExpired)
		w.approvedWithoutChecks(w.v, data) // STS's clock still at t0
	})

	t.Run("signed 10 minutes in the future", func(t *testing.T) {
		w := newWorld(t, awstest.Options{})
		b := nodeidtest.NewBinding(t)
		ahead := w.agentOn(w.in.ID, map[string]string{agentid.SettingSTSEndpoint: w.cloud.Endpoint()}, func() time.Time { return t0.Add(10 * time.Minute) })
		data := w.evidenceOf(ahead, b)
		_, err := w.v.Verify(ctx, data, b, t0)
		wantReject(t, err, cloud.RejectExpired)
		w.approvedWithoutChecks(w.v, data) // within STS's 15 minutes
	})

	t.Run("scope date not x-amz-date's", func(t *testing.T) {
		w := newWorld(t, awstest.Options{})
		b := nodeidtest.NewBinding(t)
		r, err := agentid.DecodeSTSRequest(w.evidenceOf(w.agent, b))
		if err != nil {
			t.Fatal(err)
		}
		r.Authorization = strings.Replace(r.Authorization, "/20261123/", "/20261122/", 1)
		_, err = w.v.Verify(ctx, raw(t, r), b, w.clk.Now())
		wantReject(t, err, cloud.RejectExpired)
	})

	t.Run("signed for another region", func(t *testing.T) {
		// The node's cloud is eu-west-1; the approver trusts us-east-1 only.
		w := newWorld(t, awstest.Options{Region: "eu-west-1"})
		b := nodeidtest.NewBinding(t)
		data := w.evidenceOf(w.agent, b)
		v := w.verifier(func(o *VerifierOptions) { o.Region = "us-east-1" })
		_, err := v.Verify(ctx, data, b, w.clk.Now())
		wantReject(t, err, cloud.RejectIssuer)
		if n, r := w.stsCalls(); n+r != 0 {
			t.Fatalf("STS was called (%d, %d)", n, r)
		}
		w.approvedWithoutChecks(v, data)
	})

	t.Run("signed for another service", func(t *testing.T) {
		w := newWorld(t, awstest.Options{})
		b := nodeidtest.NewBinding(t)
		s := w.asNode(b)
		s.service = "ec2"
		_, err := w.v.Verify(ctx, sign(t, s, b), b, w.clk.Now())
		wantReject(t, err, cloud.RejectIssuer)
		if n, r := w.stsCalls(); n+r != 0 {
			t.Fatalf("STS was called (%d, %d)", n, r)
		}
	})

	t.Run("an instance of another account", func(t *testing.T) {
		w := newWorld(t, awstest.Options{Account: "999999999999"})
		b := nodeidtest.NewBinding(t)
		data := w.evidenceOf(w.agent, b)
		v := w.verifier(func(o *VerifierOptions) { o.Account = awstest.DefaultAccount })
		_, err := v.Verify(ctx, data, b, w.clk.Now())
		wantReject(t, err, cloud.RejectIssuer)
		if n, _ := w.stsCalls(); n != 1 {
			t.Fatalf("%d GetCallerIdentity calls, want 1", n)
		}
		if _, err := w.verifier(func(*VerifierOptions) {}).Verify(ctx, data, b, w.clk.Now()); err != nil {
			t.Fatalf("control: the account's own verifier: %v", err)
		}
	})

	t.Run("an instance whose role is not a node role", func(t *testing.T) {
		w := newWorld(t, awstest.Options{})
		other := w.cloud.Put(awstest.Instance{PrivateIP: "127.0.0.11", Role: "web-server"})
		b := nodeidtest.NewBinding(t)
		data := w.evidenceOf(w.agentOf(other.ID, map[string]string{agentid.SettingSTSEndpoint: w.cloud.Endpoint()}), b)
		_, err := w.v.Verify(ctx, data, b, w.clk.Now())
		wantReject(t, err, cloud.RejectIssuer)
		v := w.verifier(func(o *VerifierOptions) { o.NodeRoles = append(o.NodeRoles, "web-server") })
		if _, err := v.Verify(ctx, data, b, w.clk.Now()); err != nil {
			t.Fatalf("control: a verifier that trusts web-server: %v", err)
		}
	})

	t.Run("an IAM user's credentials", func(t *testing.T) {
		user := awstest.User{Name: "mallory", AccessKeyID: "AKIAMALLORYEXAMPLE1", SecretAccessKey: "mallory-secret"}
		w := newWorld(t, awstest.Options{Users: []awstest.User{user}})
		b := nodeidtest.NewBinding(t)
		s := w.asNode(b)
		s.creds = aws.Credentials{AccessKeyID: user.AccessKeyID, SecretAccessKey: user.SecretAccessKey}
		_, err := w.v.Verify(ctx, sign(t, s, b), b, w.clk.Now())
		wantReject(t, err, cloud.RejectIssuer)
		if n, _ := w.stsCalls(); n != 1 {
			t.Fatalf("%d GetCallerIdentity calls, want 1", n)
		}
	})

	t.Run("expired session token", func(t *testing.T) {
		w := newWorld(t, awstest.Options{CredentialLifetime: 10 * time.Minute})
		b := nodeidtest.NewBinding(t)
		data := w.evidenceOf(w.agent, b)
		w.clk.Set(t0.Add(11 * time.Minute))
		_, err := w.v.Verify(ctx, data, b, w.clk.Now())
		wantReject(t, err, cloud.RejectExpired)
	})

	t.Run("another action signed", func(t *testing.T) {
		w := newWorld(t, awstest.Options{})
		b := nodeidtest.NewBinding(t)
		for _, body := range []string{
			"Action=AssumeRole&Version=2011-06-15&RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fadmin&RoleSessionName=i-0123456789abcdef0",
			agentid.STSBody + "&Extra=1",
			"Version=2011-06-15&Action=GetCallerIdentity",
		} {
			s := w.asNode(b)
			s.body = body
			_, err := w.v.Verify(ctx, sign(t, s, b), b, w.clk.Now())
			wantReject(t, err, cloud.RejectSignature) // the approver sends only its own body
		}
		if n, refused := w.stsCalls(); n != 0 || refused != 3 {
			t.Fatalf("STS answered %d and refused %d requests, want 0 and 3", n, refused)
		}
	})

	t.Run("a body, URL or host in the evidence", func(t *testing.T) {
		w := newWorld(t, awstest.Options{})
		var hits atomic.Int32
		attacker := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
		defer attacker.Close()
		b := nodeidtest.NewBinding(t)
		good := string(w.evidenceOf(w.agent, b))
		for _, extra := range []string{
			`"body":"Action=AssumeRole&Version=2011-06-15"`,
			`"url":"` + attacker.URL + `/"`,
			`"host":"` + strings.TrimPrefix(attacker.URL, "http://") + `"`,
			`"endpoint":"` + attacker.URL + `"`,
		} {
			data := []byte(strings.TrimSuffix(good, "}") + "," + extra + "}")
			_, err := w.v.Verify(ctx, data, b, w.clk.Now())
			wantReject(t, err, cloud.RejectMalformed)
		}
		// Signed for the attacker's endpoint: still sent to STS only,
		// whose host differs from the signed one.
		a := w.agentOf(w.in.ID, map[string]string{agentid.SettingSTSEndpoint: attacker.URL})
		_, err := w.v.Verify(ctx, w.evidenceOf(a, b), b, w.clk.Now())
		wantReject(t, err, cloud.RejectSignature)
		if hits.Load() != 0 {
			t.Fatalf("the attacker's endpoint got %d requests", hits.Load())
		}
		if _, refused := w.stsCalls(); refused != 1 {
			t.Fatalf("STS refused %d requests, want 1", refused)
		}
	})

	t.Run("binding header not signed", func(t *testing.T) {
		w := newWorld(t, awstest.Options{})
		b := nodeidtest.NewBinding(t)
		data := sign(t, w.asNode(""), b)
		_, err := w.v.Verify(ctx, data, b, w.clk.Now())
		wantReject(t, err, cloud.RejectMalformed)
		w.approvedWithoutChecks(w.v, data) // STS ignores the unsigned header
	})

	t.Run("signed headers edited", func(t *testing.T) {
		w := newWorld(t, awstest.Options{})
		b := nodeidtest.NewBinding(t)
		good, err := agentid.DecodeSTSRequest(w.evidenceOf(w.agent, b))
		if err != nil {
			t.Fatal(err)
		}
		rep := func(old, new string) func(string) string {
			return func(s string) string { return strings.Replace(s, old, new, 1) }
		}
		for name, edit := range map[string]func(string) string{
			"no host":            rep("content-type;host;", "content-type;"),
			"no x-amz-date":      rep("host;x-amz-date;", "host;"),
			"no security token":  rep(";x-amz-security-token;", ";"),
			"unsorted":           rep("content-length;content-type;", "content-type;content-length;"),
			"repeated":           rep("host;", "host;host;"),
			"upper case":         rep("host;", "Host;"),
			"other algorithm":    rep("AWS4-HMAC-SHA256", "AWS4-ECDSA-P256-SHA256"),
			"no terminator":      rep("/aws4_request", "/aws4"),
			"a scope with slash": rep("/sts/", "/sts/x/"),
			"x-forwarded-host":   rep("x-mooring-binding", "x-forwarded-host;x-mooring-binding"),
			"x-amz-content-sha":  rep("x-amz-date", "x-amz-content-sha256;x-amz-date"),
			"no space":           rep(", Signature=", ",Signature="),
			"extra part":         func(s string) string { return s + ", Foo=bar" },
			"upper-case hex":     func(s string) string { return s[:len(s)-64] + strings.ToUpper(s[len(s)-64:]) },
			"reordered":          func(s string) string { p := strings.Split(s, ", "); return p[0] + ", " + p[2] + ", " + p[1] },
		} {
			r := good
			r.Authorization = edit(r.Authorization)
			if r.Authorization == good.Authorization {
				t.Fatalf("%s: edit changed nothing", name)
			}
			_, err := w.v.Verify(ctx, raw(t, r), b, w.clk.Now())
			wantReject(t, err, cloud.RejectMalformed)
		}
		// A token sent but not signed, and a token signed but not sent.
		s := w.asNode(b)
		tok := s.creds.SessionToken
		s.creds.SessionToken = ""
		r := mustDecodeLoose(t, sign(t, s, b))
		r.SecurityToken = tok
		_, err = w.v.Verify(ctx, raw(t, r), b, w.clk.Now())
		wantReject(t, err, cloud.RejectMalformed)
		r = good
		r.SecurityToken = ""
		_, err = w.v.Verify(ctx, raw(t, r), b, w.clk.Now())
		wantReject(t, err, cloud.RejectMalformed)
		if n, refused := w.stsCalls(); n+refused != 0 {
			t.Fatalf("STS was called (%d, %d)", n, refused)
		}
	})

	t.Run("a signed header the approver does not send", func(t *testing.T) {
		w := newWorld(t, awstest.Options{})
		b := nodeidtest.NewBinding(t)
		s := w.asNode(b)
		s.extra = map[string]string{"X-Forwarded-Host": "attacker.example"}
		_, err := w.v.Verify(ctx, sign(t, s, b), b, w.clk.Now())
		wantReject(t, err, cloud.RejectMalformed)
	})
}

// TestMalformedEvidence: the decoder refuses anything but the one format.
func TestMalformedEvidence(t *testing.T) {
	w := newWorld(t, awstest.Options{})
	b := nodeidtest.NewBinding(t)
	good := w.evidenceOf(w.agent, b)
	r, err := agentid.DecodeSTSRequest(good)
	if err != nil {
		t.Fatal(err)
	}
	body := strings.TrimPrefix(strings.TrimSuffix(string(good), "}"), "{")
	cases := map[string]string{
		"empty":                "",
		"not JSON":             "AWS4-HMAC-SHA256 Credential=...",
		"an array":             "[" + string(good) + "]",
		"unknown key":          "{" + body + `,"extra":"x"}`,
		"key of another case":  "{" + strings.Replace(body, `"authorization"`, `"Authorization"`, 1) + "}",
		"duplicate key":        "{" + body + `,"x-mooring-binding":"` + b + `"}`,
		"duplicate version":    "{" + body + `,"v":1}`,
		"no version":           "{" + strings.Replace(body, `"v":1,`, "", 1) + "}",
		"version 2":            "{" + strings.Replace(body, `"v":1`, `"v":2`, 1) + "}",
		"version 1.0":          "{" + strings.Replace(body, `"v":1`, `"v":1.0`, 1) + "}",
		"version as string":    "{" + strings.Replace(body, `"v":1`, `"v":"1"`, 1) + "}",
		"nested value":         "{" + strings.Replace(body, `"x-mooring-binding":"`+b+`"`, `"x-mooring-binding":{"b":"`+b+`"}`, 1) + "}",
		"number value":         "{" + strings.Replace(body, `"x-mooring-binding":"`+b+`"`, `"x-mooring-binding":5`, 1) + "}",
		"null value":           "{" + strings.Replace(body, `"x-mooring-binding":"`+b+`"`, `"x-mooring-binding":null`, 1) + "}",
		"trailing bytes":       string(good) + "x",
		"second object":        string(good) + "{}",
		"no binding":           string(raw(t, agentid.STSRequest{Authorization: r.Authorization, Date: r.Date, SecurityToken: r.SecurityToken})),
		"no date":              string(raw(t, agentid.STSRequest{Authorization: r.Authorization, SecurityToken: r.SecurityToken, Binding: b})),
		"empty token":          "{" + strings.Replace(body, r.SecurityToken, "", 1) + "}",
		"control character":    "{" + strings.Replace(body, b, b[:10]+`\u0000`+b[11:], 1) + "}",
		"newline in authz":     "{" + strings.Replace(body, "AWS4-HMAC-SHA256 ", `AWS4-HMAC-SHA256\n`, 1) + "}",
		"invalid UTF-8":        "{" + strings.Replace(body, b, b[:10]+"\xff"+b[11:], 1) + "}",
		"non-ASCII":            "{" + strings.Replace(body, b, b[:10]+"é"+b[11:], 1) + "}",
		"date of another form": "{" + strings.Replace(body, r.Date, "2026-11-23T10:00:00Z", 1) + "}",
		"date out of range":    "{" + strings.Replace(body, r.Date, "20261123T250000Z", 1) + "}",
		"oversized token":      string(raw(t, agentid.STSRequest{Authorization: r.Authorization, Date: r.Date, SecurityToken: strings.Repeat("A", 7<<10), Binding: b})),
		"oversized binding":    string(raw(t, agentid.STSRequest{Authorization: r.Authorization, Date: r.Date, SecurityToken: r.SecurityToken, Binding: strings.Repeat("A", 200)})),
		"oversized evidence":   "{" + body + strings.Repeat(" ", agentid.MaxEvidenceSize) + "}",
	}
	for name, data := range cases {
		_, err := w.v.Verify(context.Background(), []byte(data), b, w.clk.Now())
		r, ok := cloud.IsRejection(err)
		if !ok || r.Reason != cloud.RejectMalformed {
			t.Errorf("%s: err = %v, want %s", name, err, cloud.RejectMalformed)
		}
		if _, _, err := w.v.Peek([]byte(data)); err == nil {
			t.Errorf("%s: Peek accepted it", name)
		}
	}
	if n, refused := w.stsCalls(); n+refused != 0 {
		t.Fatalf("STS was called (%d, %d)", n, refused)
	}
}

// TestSTSFailuresAreTransient: an STS that fails, throttles, answers
// nonsense or redirects, or cannot be reached, never yields a verdict.
func TestSTSFailuresAreTransient(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, awstest.Options{})
	b := nodeidtest.NewBinding(t)
	data := w.evidenceOf(w.agent, b)

	w.cloud.Fail(awstest.ActionGetCallerIdentity, 1, http.StatusInternalServerError, "InternalFailure")
	_, err := w.v.Verify(ctx, data, b, w.clk.Now())
	wantTransient(t, err)
	w.cloud.Fail(awstest.ActionGetCallerIdentity, 1, http.StatusServiceUnavailable, "ServiceUnavailable")
	_, err = w.v.Verify(ctx, data, b, w.clk.Now())
	wantTransient(t, err)
	w.cloud.Fail(awstest.ActionGetCallerIdentity, 1, http.StatusBadRequest, "Throttling")
	_, err = w.v.Verify(ctx, data, b, w.clk.Now())
	wantTransient(t, err)
	if _, err := w.v.Verify(ctx, data, b, w.clk.Now()); err != nil {
		t.Fatalf("after the faults: %v", err)
	}

	// Nothing listens.
	ln := httptest.NewServer(http.NotFoundHandler())
	gone := ln.URL
	ln.Close()
	v := w.verifier(func(o *VerifierOptions) { o.STSEndpoint = gone })
	_, err = v.Verify(ctx, data, b, w.clk.Now())
	wantTransient(t, err)
}

// fakeSTS answers every request with one status and body.
func fakeSTS(t *testing.T, status int, body string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	s := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if status >= 300 && status < 400 {
			rw.Header().Set("Location", body)
			rw.WriteHeader(status)
			return
		}
		rw.Header().Set("Content-Type", "text/xml")
		rw.WriteHeader(status)
		_, _ = rw.Write([]byte(body))
	}))
	t.Cleanup(s.Close)
	return s, &hits
}

// fakeEvidence is well-formed evidence for an STS at endpoint, signed with
// credentials no STS knows.
func fakeEvidence(t *testing.T, endpoint, binding string, at time.Time) []byte {
	t.Helper()
	creds := aws.Credentials{AccessKeyID: "ASIAEXAMPLEEXAMPLE01", SecretAccessKey: "secret", SessionToken: "token"}
	r, err := agentid.SignCallerIdentity(context.Background(), v4.NewSigner(), creds, endpoint, "us-east-1", binding, at)
	if err != nil {
		t.Fatal(err)
	}
	data, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func identityXML(arn, account string) string {
	return identityXMLOf(arn, "<UserId>AROAEXAMPLE:x</UserId>", account)
}

// identityXMLOf is an answer with the UserId elements given.
func identityXMLOf(arn, userIDs, account string) string {
	return `<GetCallerIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><GetCallerIdentityResult>` +
		`<Arn>` + arn + `</Arn>` + userIDs + `<Account>` + account + `</Account>` +
		`</GetCallerIdentityResult><ResponseMetadata><RequestId>1</RequestId></ResponseMetadata></GetCallerIdentityResponse>`
}

func errorXML(code string) string {
	return `<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type><Code>` + code +
		`</Code><Message>m</Message></Error><RequestId>1</RequestId></ErrorResponse>`
}

// TestSTSAnswers: how each answer of STS is judged.
func TestSTSAnswers(t *testing.T) {
	const acct = "123456789012"
	node := "arn:aws:sts::" + acct + ":assumed-role/" + testRole + "/"
	// In the cases named "pinned: ...", the node role's unique id is
	// configured: the UserId's role id must be it; "other-node", a node
	// role without one, is trusted by name.
	const roleID = "AROAPINNEDROLEID00001"
	pinned := func(userIDs string) string { return identityXMLOf(node+"i-0123abcd", userIDs, acct) }
	other := "arn:aws:sts::" + acct + ":assumed-role/other-node/i-0123abcd"
	cases := []struct {
		name   string
		status int
		body   string
		want   string // a reason, "" approve, "transient"
		id     string
	}{
		{"pinned: the role's id", 200, pinned("<UserId>" + roleID + ":i-0123abcd</UserId>"), "", "i-0123abcd"},
		{"pinned: another id (the role created again)", 200, pinned("<UserId>AROAOTHERROLEID000001:i-0123abcd</UserId>"), cloud.RejectIssuer, ""},
		{"pinned: no UserId", 200, pinned(""), "transient", ""},
		{"pinned: UserId of another session", 200, pinned("<UserId>" + roleID + ":i-9999abcd</UserId>"), "transient", ""},
		{"pinned: UserId without a session", 200, pinned("<UserId>" + roleID + "</UserId>"), "transient", ""},
		{"pinned: two UserIds", 200, pinned("<UserId>" + roleID + ":i-0123abcd</UserId><UserId>" + roleID + ":i-0123abcd</UserId>"), "transient", ""},
		{"pinned: another node role, itself unpinned", 200, identityXMLOf(other, "<UserId>AROAANYID000000000001:i-0123abcd</UserId>", acct), "", "i-0123abcd"},
		{"unpinned: any role id", 200, pinned("<UserId>AROAOTHERROLEID000001:i-0123abcd</UserId>"), "", "i-0123abcd"},
		{"node session", 200, identityXML(node+"i-0123456789abcdef0", acct), "", "i-0123456789abcdef0"},
		{"old instance id", 200, identityXML(node+"i-0123abcd", acct), "", "i-0123abcd"},
		{"another partition", 200, identityXML("arn:aws-cn:sts::"+acct+":assumed-role/"+testRole+"/i-0123abcd", acct), "", "i-0123abcd"},
		{"session not an instance id", 200, identityXML(node+"web-1", acct), cloud.RejectIssuer, ""},
		{"session of 7 hex", 200, identityXML(node+"i-0123abc", acct), cloud.RejectIssuer, ""},
		{"session in upper case", 200, identityXML(node+"i-0123ABCD", acct), cloud.RejectIssuer, ""},
		{"session with a path", 200, identityXML(node+"i-0123abcd/x", acct), cloud.RejectIssuer, ""},
		{"another role", 200, identityXML("arn:aws:sts::"+acct+":assumed-role/admin/i-0123abcd", acct), cloud.RejectIssuer, ""},
		{"role name case", 200, identityXML("arn:aws:sts::"+acct+":assumed-role/Mooring-Node/i-0123abcd", acct), cloud.RejectIssuer, ""},
		{"another account in the ARN", 200, identityXML("arn:aws:sts::999999999999:assumed-role/"+testRole+"/i-0123abcd", acct), cloud.RejectIssuer, ""},
		{"another account in Account", 200, identityXML(node+"i-0123abcd", "999999999999"), cloud.RejectIssuer, ""},
		{"IAM user", 200, identityXML("arn:aws:iam::"+acct+":user/"+testRole, acct), cloud.RejectIssuer, ""},
		{"federated user named like a role session", 200, identityXML("arn:aws:sts::"+acct+":federated-user/"+testRole+"/i-0123abcd", acct), cloud.RejectIssuer, ""},
		{"federated user", 200, identityXML("arn:aws:sts::"+acct+":federated-user/i-0123abcd", acct), cloud.RejectIssuer, ""},
		{"root", 200, identityXML("arn:aws:iam::"+acct+":root", acct), cloud.RejectIssuer, ""},
		{"odd partition", 200, identityXML("arn:evil:sts::"+acct+":assumed-role/"+testRole+"/i-0123abcd", acct), cloud.RejectIssuer, ""},
		{"two Arns", 200, strings.Replace(identityXML(node+"i-0123abcd", acct), "<UserId>", "<Arn>"+node+"i-0000abcd</Arn><UserId>", 1), "transient", ""},
		{"no Account", 200, strings.Replace(identityXML(node+"i-0123abcd", acct), "<Account>"+acct+"</Account>", "", 1), "transient", ""},
		{"not XML", 200, "{}", "transient", ""},
		{"another document", 200, errorXML("SignatureDoesNotMatch"), "transient", ""},
		{"oversized", 200, identityXML(node+"i-0123abcd", acct) + strings.Repeat(" ", maxSTSResponse), "transient", ""},
		{"SignatureDoesNotMatch", 403, errorXML("SignatureDoesNotMatch"), cloud.RejectSignature, ""},
		{"IncompleteSignature", 400, errorXML("IncompleteSignature"), cloud.RejectSignature, ""},
		{"InvalidClientTokenId", 403, errorXML("InvalidClientTokenId"), cloud.RejectSignature, ""},
		{"AccessDenied", 403, errorXML("AccessDenied"), cloud.RejectSignature, ""},
		{"ExpiredToken", 400, errorXML("ExpiredToken"), cloud.RejectExpired, ""},
		{"RequestExpired", 400, errorXML("RequestExpired"), cloud.RejectExpired, ""},
		{"Throttling", 400, errorXML("Throttling"), "transient", ""},
		{"a verdict code with HTTP 500", 500, errorXML("SignatureDoesNotMatch"), "transient", ""},
		{"HTTP 403 without a document", 403, "Forbidden", "transient", ""},
		{"HTTP 404", 404, errorXML("AccessDenied"), "transient", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, hits := fakeSTS(t, c.status, c.body)
			o := VerifierOptions{STSEndpoint: s.URL, Region: "us-east-1", Account: acct, NodeRoles: []string{testRole, "other-node"}}
			if strings.HasPrefix(c.name, "pinned:") {
				o.NodeRoleIDs = map[string]string{testRole: roleID}
			}
			v, err := NewVerifier(o)
			if err != nil {
				t.Fatal(err)
			}
			b := nodeidtest.NewBinding(t)
			att, err := v.Verify(context.Background(), fakeEvidence(t, s.URL, b, t0), b, t0)
			switch c.want {
			case "":
				if err != nil || att.InstanceID != c.id {
					t.Fatalf("Verify = %+v, %v; want instance %s", att, err, c.id)
				}
			case "transient":
				wantTransient(t, err)
			default:
				wantReject(t, err, c.want)
			}
			if hits.Load() != 1 {
				t.Fatalf("STS got %d requests, want 1", hits.Load())
			}
		})
	}
}

// TestRebuiltRequest: what the approver sends is its own request, with
// the evidence's header values only.
func TestRebuiltRequest(t *testing.T) {
	var got *http.Request
	var gotBody string
	s := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		got = r.Clone(context.Background())
		body, _ := io.ReadAll(r.Body)
		gotBody = string(body)
		_, _ = rw.Write([]byte(identityXML("arn:aws:sts::123456789012:assumed-role/"+testRole+"/i-0123abcd", "123456789012")))
	}))
	defer s.Close()
	v, err := NewVerifier(VerifierOptions{STSEndpoint: s.URL + "/", Region: "us-east-1", Account: "123456789012", NodeRoles: []string{testRole}})
	if err != nil {
		t.Fatal(err)
	}
	b := nodeidtest.NewBinding(t)
	data := fakeEvidence(t, s.URL, b, t0)
	if _, err := v.Verify(context.Background(), data, b, t0); err != nil {
		t.Fatal(err)
	}
	r := mustDecodeLoose(t, data)
	u, _ := url.Parse(s.URL)
	switch {
	case got.Method != http.MethodPost || got.URL.Path != "/" || got.URL.RawQuery != "" || got.Host != u.Host:
		t.Errorf("sent %s %s to host %s", got.Method, got.URL, got.Host)
	case gotBody != agentid.STSBody || got.Header.Get("Content-Type") != agentid.STSContentType:
		t.Errorf("sent body %q of type %q", gotBody, got.Header.Get("Content-Type"))
	case got.Header.Get("Authorization") != r.Authorization || got.Header.Get("X-Amz-Date") != r.Date ||
		got.Header.Get("X-Amz-Security-Token") != r.SecurityToken || got.Header.Get(agentid.BindingHeader) != b:
		t.Errorf("sent headers %v", got.Header)
	}
}

// TestRedirectNotFollowed: an STS redirect is a transient failure, and its
// target gets nothing, even with a caller's client that follows redirects.
func TestRedirectNotFollowed(t *testing.T) {
	attacker, attackerHits := fakeSTS(t, 200, identityXML("arn:aws:sts::123456789012:assumed-role/"+testRole+"/i-0123abcd", "123456789012"))
	for _, code := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		s, hits := fakeSTS(t, code, attacker.URL+"/")
		for _, client := range []*http.Client{nil, {}} {
			v, err := NewVerifier(VerifierOptions{STSEndpoint: s.URL, Region: "us-east-1", Account: "123456789012", NodeRoles: []string{testRole}, HTTPClient: client})
			if err != nil {
				t.Fatal(err)
			}
			b := nodeidtest.NewBinding(t)
			_, err = v.Verify(context.Background(), fakeEvidence(t, s.URL, b, t0), b, t0)
			wantTransient(t, err)
		}
		if hits.Load() != 2 {
			t.Fatalf("STS got %d requests, want 2", hits.Load())
		}
	}
	if attackerHits.Load() != 0 {
		t.Fatalf("the redirect target got %d requests", attackerHits.Load())
	}
}

// TestReplayKey: the same evidence has one key, other evidence another.
func TestReplayKey(t *testing.T) {
	w := newWorld(t, awstest.Options{})
	b := nodeidtest.NewBinding(t)
	data := w.evidenceOf(w.agent, b)
	k1, b1, err := w.v.Peek(data)
	if err != nil || b1 != b {
		t.Fatalf("Peek = %q, %q, %v", k1, b1, err)
	}
	k2, _, _ := w.v.Peek(append([]byte(nil), data...))
	att, err := w.v.Verify(context.Background(), data, b, w.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	if k2 != k1 || att.ReplayKey != k1 {
		t.Fatalf("keys of the same evidence: %q, %q, %q", k1, k2, att.ReplayKey)
	}
	w.clk.Set(t0.Add(time.Second))
	later, _, _ := w.v.Peek(w.evidenceOf(w.agent, b))
	other, _, _ := w.v.Peek(w.evidenceOf(w.agent, nodeidtest.NewBinding(t)))
	if later == k1 || other == k1 || later == other || later == "" || other == "" {
		t.Fatalf("keys of different evidence: %q, %q, %q", k1, later, other)
	}
}

func TestNewVerifierOptions(t *testing.T) {
	good := VerifierOptions{STSEndpoint: "https://sts.us-east-1.amazonaws.com", Region: "us-east-1", Account: "123456789012", NodeRoles: []string{testRole}}
	if v, err := NewVerifier(good); err != nil || v.Type() != agentid.EvidenceType || v.host != "sts.us-east-1.amazonaws.com" {
		t.Fatalf("NewVerifier = %+v, %v", v, err)
	}
	if v, err := NewVerifier(VerifierOptions{STSEndpoint: "https://sts.us-east-1.amazonaws.com:443/", Region: "us-east-1", Account: "123456789012", NodeRoles: []string{testRole}}); err != nil || v.host != "sts.us-east-1.amazonaws.com" {
		t.Fatalf("the default port is not signed: %+v, %v", v, err)
	}
	for name, edit := range map[string]func(*VerifierOptions){
		"no endpoint":       func(o *VerifierOptions) { o.STSEndpoint = "" },
		"ftp endpoint":      func(o *VerifierOptions) { o.STSEndpoint = "ftp://sts.example" },
		"endpoint path":     func(o *VerifierOptions) { o.STSEndpoint = "https://sts.example/x" },
		"endpoint query":    func(o *VerifierOptions) { o.STSEndpoint = "https://sts.example/?Action=AssumeRole" },
		"endpoint user":     func(o *VerifierOptions) { o.STSEndpoint = "https://u:p@sts.example" },
		"endpoint fragment": func(o *VerifierOptions) { o.STSEndpoint = "https://sts.example/#x" },
		"no host":           func(o *VerifierOptions) { o.STSEndpoint = "https:///" },
		"global endpoint outside us-east-1": func(o *VerifierOptions) {
			o.STSEndpoint, o.Region = "https://sts.amazonaws.com", "eu-west-1"
		},
		"another region's endpoint": func(o *VerifierOptions) { o.STSEndpoint = "https://sts.eu-west-1.amazonaws.com" },
		"no region":                 func(o *VerifierOptions) { o.Region = "" },
		"bad region":                func(o *VerifierOptions) { o.Region = "US East" },
		"no account":                func(o *VerifierOptions) { o.Account = "" },
		"short account":             func(o *VerifierOptions) { o.Account = "12345" },
		"no roles":                  func(o *VerifierOptions) { o.NodeRoles = nil },
		"role ARN":                  func(o *VerifierOptions) { o.NodeRoles = []string{"arn:aws:iam::123456789012:role/x"} },
		"empty role":                func(o *VerifierOptions) { o.NodeRoles = []string{""} },
		"profile ARN": func(o *VerifierOptions) {
			o.NodeInstanceProfiles = []string{"arn:aws:iam::123456789012:instance-profile/x"}
		},
		"empty profile":      func(o *VerifierOptions) { o.NodeInstanceProfiles = []string{""} },
		"id of another role": func(o *VerifierOptions) { o.NodeRoleIDs = map[string]string{"admin": "AROAEXAMPLEEXAMPLE01"} },
		"user id":            func(o *VerifierOptions) { o.NodeRoleIDs = map[string]string{testRole: "AIDAEXAMPLEEXAMPLE01"} },
		"short role id":      func(o *VerifierOptions) { o.NodeRoleIDs = map[string]string{testRole: "AROAEXAMPLE"} },
		"session's UserId": func(o *VerifierOptions) {
			o.NodeRoleIDs = map[string]string{testRole: "AROAEXAMPLEEXAMPLE01:i-0123abcd"}
		},
	} {
		o := good
		o.NodeRoles = append([]string(nil), good.NodeRoles...)
		edit(&o)
		if _, err := NewVerifier(o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// CheckInstance reads EC2's instance profile ARN: the profile's name (after
// any path) must be a node instance profile of the account; no profile is a
// denial, an ARN it cannot read an unknown answer.
func TestCheckInstance(t *testing.T) {
	verifier := func(profiles ...string) *Verifier {
		v, err := NewVerifier(VerifierOptions{STSEndpoint: "https://sts.us-east-1.amazonaws.com", Region: "us-east-1", Account: "123456789012",
			NodeRoles: []string{"nodes"}, NodeInstanceProfiles: profiles})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	v := verifier("nodes-profile", "gpu")
	att := cloud.Attestation{InstanceID: "i-0123456789abcdef0", Principal: "arn:aws:sts::123456789012:assumed-role/nodes/i-0123456789abcdef0"}
	for _, tc := range []struct {
		profile string
		want    string // "" allowed, "transient", or a rejection reason
	}{
		{"arn:aws:iam::123456789012:instance-profile/nodes-profile", ""},
		{"arn:aws:iam::123456789012:instance-profile/team/k8s/gpu", ""},
		{"arn:aws-cn:iam::123456789012:instance-profile/gpu", ""},
		{"", cloud.RejectInstanceIdentity},
		{"arn:aws:iam::123456789012:instance-profile/admin", cloud.RejectInstanceIdentity},
		{"arn:aws:iam::123456789012:instance-profile/nodes", cloud.RejectInstanceIdentity}, // the role's name is not its profile's here
		{"arn:aws:iam::210987654321:instance-profile/nodes-profile", cloud.RejectInstanceIdentity},
		{"arn:aws:iam::123456789012:instance-profile/team/nodes-profile/admin", cloud.RejectInstanceIdentity},
		{"arn:aws:iam::123456789012:role/nodes-profile", "transient"},
		{"arn:aws:sts::123456789012:instance-profile/nodes-profile", "transient"},
		{"arn:aws:iam::123456789012:instance-profile/", "transient"},
		{"nodes-profile", "transient"},
	} {
		err := v.CheckInstance(att, view.Instance{ID: att.InstanceID, Identity: tc.profile})
		switch tc.want {
		case "":
			if err != nil {
				t.Errorf("%q: %v", tc.profile, err)
			}
		case "transient":
			wantTransient(t, err)
		default:
			wantReject(t, err, tc.want)
		}
	}
	// Without NodeInstanceProfiles, the node roles' names.
	v = verifier()
	if err := v.CheckInstance(att, view.Instance{Identity: "arn:aws:iam::123456789012:instance-profile/nodes"}); err != nil {
		t.Fatal(err)
	}
	wantReject(t, v.CheckInstance(att, view.Instance{Identity: "arn:aws:iam::123456789012:instance-profile/nodes-profile"}), cloud.RejectInstanceIdentity)
}

// The global STS endpoint is us-east-1's: a verifier of us-east-1 may send
// there, and evidence the agent signed for it verifies; AWS (the stand-in
// answering for sts.amazonaws.com) checks the scope against the endpoint.
func TestGlobalSTSEndpointInUSEast1(t *testing.T) {
	w := newWorld(t, awstest.Options{})
	global := "https://" + agentid.GlobalSTSHost
	b := nodeidtest.NewBinding(t)
	data := w.evidenceOf(w.agentOf(w.in.ID, map[string]string{agentid.SettingSTSEndpoint: global}), b)
	v := w.verifier(func(o *VerifierOptions) { o.STSEndpoint, o.HTTPClient = global, w.cloud.AWSNamesClient() })
	if att, err := v.Verify(context.Background(), data, b, w.clk.Now()); err != nil || att.InstanceID != w.in.ID {
		t.Fatalf("Verify = %+v, %v", att, err)
	}
	if _, err := NewVerifier(VerifierOptions{STSEndpoint: global, Region: "eu-west-1", Account: w.cloud.Account(), NodeRoles: []string{testRole}}); err == nil ||
		!strings.Contains(err.Error(), "https://sts.eu-west-1.amazonaws.com") {
		t.Fatalf("global endpoint for eu-west-1: %v", err)
	}
}

// authOf is the authorization the evidence's request was signed with.
func authOf(t *testing.T, data []byte) agentid.SigV4Auth {
	t.Helper()
	r, err := agentid.DecodeSTSRequest(data)
	if err != nil {
		t.Fatal(err)
	}
	a, err := agentid.ParseAuthorization(r.Authorization)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
