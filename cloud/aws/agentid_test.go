package aws

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/aws/awstest"
	"github.com/mooring-dev/mooring/cloud/nodeid"
)

// TestNewNodeIdentityMakesNoCall: the agent validates its config by
// building the identity, which must not touch the network.
func TestNewNodeIdentityMakesNoCall(t *testing.T) {
	var hits atomic.Int32
	md := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer md.Close()
	for _, cfg := range []nodeid.Config{
		{},
		{MetadataURL: md.URL},
		{MetadataURL: md.URL, NodeNamePolicy: "Tag:k8s-name", Settings: map[string]string{SettingSTSEndpoint: md.URL, SettingRegion: "eu-west-1"}},
	} {
		if _, err := NewNodeIdentity(cfg); err != nil {
			t.Fatalf("%+v: %v", cfg, err)
		}
	}
	if hits.Load() != 0 {
		t.Fatalf("construction made %d calls", hits.Load())
	}
}

func TestNewNodeIdentityRefusesBadConfig(t *testing.T) {
	for name, cfg := range map[string]nodeid.Config{
		"unknown setting":       {Settings: map[string]string{"stsendpoint": "https://sts.example"}},
		"another unknown":       {Settings: map[string]string{"metadataURL": "http://127.0.0.1:1"}},
		"endpoint with a path":  {Settings: map[string]string{SettingSTSEndpoint: "https://sts.example/v1"}},
		"endpoint not http":     {Settings: map[string]string{SettingSTSEndpoint: "sts.us-east-1.amazonaws.com"}},
		"bad region":            {Settings: map[string]string{SettingRegion: "us east 1"}},
		"empty region":          {Settings: map[string]string{SettingRegion: ""}},
		"bad policy":            {NodeNamePolicy: "Hostname"},
		"bad tag policy":        {NodeNamePolicy: "Tag:aws:name"},
		"metadata URL not http": {MetadataURL: "169.254.169.254"},
		"metadata URL query":    {MetadataURL: "http://169.254.169.254/?x=1"},
	} {
		if _, err := NewNodeIdentity(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestInstanceNamePolicies: each policy names the Node from metadata.
func TestInstanceNamePolicies(t *testing.T) {
	c := awstest.NewStarted(t, awstest.Options{})
	tagged := c.Put(awstest.Instance{PrivateIP: "127.0.0.20", PrivateDNSName: "IP-10-0-0-20.EC2.Internal", Role: testRole,
		Tags: map[string]string{"Name": "web one", "k8s-name": "Node-20"}, MetadataTags: true})
	untagged := c.Put(awstest.Instance{PrivateIP: "127.0.0.21", Role: testRole, Zone: "us-east-1c",
		Tags: map[string]string{"Name": "hidden", "k8s-name": "node-21"}})
	ctx := context.Background()
	instance := func(in awstest.Instance, policy string) (nodeid.Instance, error) {
		t.Helper()
		u, err := c.IMDS(in.ID)
		if err != nil {
			t.Fatal(err)
		}
		n, err := NewNodeIdentity(nodeid.Config{MetadataURL: u, NodeNamePolicy: policy})
		if err != nil {
			t.Fatal(err)
		}
		return n.Instance(ctx)
	}
	for _, tc := range []struct {
		in       awstest.Instance
		policy   string
		nodeName string
		name     string
	}{
		{tagged, "", "ip-10-0-0-20.ec2.internal", "web one"},
		{tagged, PolicyPrivateDNSName, "ip-10-0-0-20.ec2.internal", "web one"},
		{tagged, PolicyInstanceID, tagged.ID, "web one"},
		{tagged, "Tag:k8s-name", "node-20", "web one"},
		{tagged, "Tag:Name", "web one", "web one"},
		{untagged, "", "ip-127-0-0-21.ec2.internal", untagged.ID},
		{untagged, PolicyInstanceID, untagged.ID, untagged.ID},
	} {
		got, err := instance(tc.in, tc.policy)
		if err != nil {
			t.Fatalf("%s under %q: %v", tc.in.ID, tc.policy, err)
		}
		want := nodeid.Instance{ID: tc.in.ID, Name: tc.name, NodeName: tc.nodeName, ProviderID: "aws:///" + tc.in.Zone + "/" + tc.in.ID, InternalIP: tc.in.PrivateIP}
		if got != want {
			t.Errorf("under %q: %+v, want %+v", tc.policy, got, want)
		}
	}
	// A tag policy needs the tag, readable in metadata.
	for _, in := range []awstest.Instance{untagged, tagged} {
		if got, err := instance(in, "Tag:missing"); err == nil || !strings.Contains(err.Error(), "no node name") {
			t.Errorf("%s under Tag:missing: %+v, %v; want an error", in.ID, got, err)
		}
	}
	if _, err := instance(untagged, "Tag:k8s-name"); err == nil {
		t.Error("a tag policy without metadata tags: no error")
	}
}

// imdsLog records the requests a metadata service got through a proxy.
type imdsLog struct {
	mu   sync.Mutex
	reqs []string
}

func (l *imdsLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.reqs...)
}

// recordingProxy forwards to target and records each request as
// "METHOD PATH token|no-token".
func recordingProxy(t *testing.T, target string) (string, *imdsLog) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	log := &imdsLog{}
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := "no-token"
		if r.Header.Get("X-Aws-Ec2-Metadata-Token") != "" {
			tok = "token"
		} else if r.Header.Get("X-Aws-Ec2-Metadata-Token-Ttl-Seconds") != "" {
			tok = "ttl"
		}
		log.mu.Lock()
		log.reqs = append(log.reqs, r.Method+" "+r.URL.Path+" "+tok)
		log.mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return s.URL, log
}

// TestIMDSv2Only: the agent gets a session token first and sends it with
// every read; a metadata service that gives no token is not read.
func TestIMDSv2Only(t *testing.T) {
	w := newWorld(t, awstest.Options{})
	u, err := w.cloud.IMDS(w.in.ID)
	if err != nil {
		t.Fatal(err)
	}
	proxy, log := recordingProxy(t, u)
	n, err := NewNodeIdentity(nodeid.Config{MetadataURL: proxy, Settings: map[string]string{SettingSTSEndpoint: w.cloud.Endpoint()}})
	if err != nil {
		t.Fatal(err)
	}
	n.now = w.clk.Now
	if _, err := n.Instance(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := newBinding(t)
	block, err := n.Evidence(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.v.Verify(context.Background(), block.Data, b, w.clk.Now()); err != nil {
		t.Fatal(err)
	}
	reqs := log.all()
	if len(reqs) < 2 || reqs[0] != "PUT /latest/api/token ttl" {
		t.Fatalf("requests %q: want the token PUT first", reqs)
	}
	for _, r := range reqs[1:] {
		if !strings.HasPrefix(r, "GET /latest/") || !strings.HasSuffix(r, " token") {
			t.Errorf("request %q: want a GET with the token", r)
		}
	}
	for _, want := range []string{"meta-data/instance-id", "meta-data/placement/availability-zone", "meta-data/placement/region", "meta-data/iam/security-credentials/" + testRole} {
		if !strings.Contains(strings.Join(reqs, "\n"), "/latest/"+want+" ") {
			t.Errorf("no read of %s in %q", want, reqs)
		}
	}

	// A metadata service without IMDSv2 (the token PUT refused).
	var gets atomic.Int32
	v1 := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			http.Error(rw, "Forbidden", http.StatusForbidden)
			return
		}
		gets.Add(1)
		_, _ = rw.Write([]byte("i-0123456789abcdef0"))
	}))
	defer v1.Close()
	n, err = NewNodeIdentity(nodeid.Config{MetadataURL: v1.URL})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := n.Instance(context.Background()); err == nil {
		t.Fatalf("read %+v without a token", got)
	}
	if _, err := n.Evidence(context.Background(), b); err == nil {
		t.Fatal("evidence without a token")
	}
	if gets.Load() != 0 {
		t.Fatalf("%d reads without a token", gets.Load())
	}
}

// rewriteTransport sends every request to target over plain HTTP, keeping
// its Host header: the real STS host name, served by the stand-in.
type rewriteTransport struct{ target *url.URL }

func (rt rewriteTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if r.Host == "" {
		r.Host = r.URL.Host
	}
	r.URL.Scheme, r.URL.Host = rt.target.Scheme, rt.target.Host
	return http.DefaultTransport.RoundTrip(r)
}

// TestEvidenceWithNoSettings: with no setting at all, the agent signs for
// the regional STS endpoint of the region metadata names, and an approver
// configured for that endpoint verifies it.
func TestEvidenceWithNoSettings(t *testing.T) {
	w := newWorld(t, awstest.Options{})
	n := w.agentOf(w.in.ID, nil)
	b := newBinding(t)
	data := w.evidenceOf(n, b)
	target, err := url.Parse(w.cloud.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	v := w.verifier(func(o *VerifierOptions) {
		o.STSEndpoint = "https://sts.us-east-1.amazonaws.com"
		o.HTTPClient = &http.Client{Transport: rewriteTransport{target}}
	})
	att, err := v.Verify(context.Background(), data, b, w.clk.Now())
	if err != nil || att.InstanceID != w.in.ID {
		t.Fatalf("Verify = %+v, %v", att, err)
	}
	// The default port is not part of the signed host.
	v = w.verifier(func(o *VerifierOptions) {
		o.STSEndpoint = "https://sts.us-east-1.amazonaws.com:443/"
		o.HTTPClient = &http.Client{Transport: rewriteTransport{target}}
	})
	if _, err := v.Verify(context.Background(), data, b, w.clk.Now()); err != nil {
		t.Fatalf("with the default port: %v", err)
	}
	// The same evidence does not verify for another host.
	_, err = w.v.Verify(context.Background(), data, b, w.clk.Now())
	wantReject(t, err, cloud.RejectSignature)
}

// TestEvidenceRegionSetting: the region setting overrides metadata's.
func TestEvidenceRegionSetting(t *testing.T) {
	w := newWorld(t, awstest.Options{})
	n := w.agentOf(w.in.ID, map[string]string{SettingRegion: "eu-west-1", SettingSTSEndpoint: w.cloud.Endpoint()})
	r, err := decodeSTSRequest(w.evidenceOf(n, newBinding(t)))
	if err != nil {
		t.Fatal(err)
	}
	auth, err := parseAuthorization(r.Authorization)
	if err != nil || auth.Region != "eu-west-1" || auth.Service != "sts" {
		t.Fatalf("scope %+v, %v", auth, err)
	}
}

// TestEvidenceUsesCurrentCredentials: each evidence is signed with the
// credentials metadata serves at the time.
func TestEvidenceUsesCurrentCredentials(t *testing.T) {
	w := newWorld(t, awstest.Options{CredentialLifetime: 6 * time.Minute})
	b := newBinding(t)
	keyOf := func() string {
		r, err := decodeSTSRequest(w.evidenceOf(w.agent, b))
		if err != nil {
			t.Fatal(err)
		}
		auth, err := parseAuthorization(r.Authorization)
		if err != nil {
			t.Fatal(err)
		}
		return auth.AccessKeyID
	}
	first := keyOf()
	w.clk.Set(t0.Add(270 * time.Second)) // within a third of the lifetime of expiry: rotated
	second := keyOf()
	creds, err := w.cloud.RoleCredentials(w.in.ID)
	if err != nil {
		t.Fatal(err)
	}
	if first == second || second != creds.AccessKeyID {
		t.Fatalf("access keys %s then %s; metadata serves %s", first, second, creds.AccessKeyID)
	}
	data := w.evidenceOf(w.agent, b)
	if _, err := w.v.Verify(context.Background(), data, b, w.clk.Now()); err != nil {
		t.Fatal(err)
	}
}

func TestEvidenceErrors(t *testing.T) {
	w := newWorld(t, awstest.Options{})
	ctx := context.Background()
	for _, b := range []string{"", strings.Repeat("A", maxBinding+1), "with space", "new\nline"} {
		if _, err := w.agent.Evidence(ctx, b); err == nil {
			t.Errorf("binding %q: no error", b)
		}
	}
	noRole := w.cloud.Put(awstest.Instance{PrivateIP: "127.0.0.30"})
	if _, err := w.agentOf(noRole.ID, nil).Evidence(ctx, newBinding(t)); err == nil {
		t.Error("an instance without an instance profile: no error")
	}
	if err := w.cloud.SetState(w.in.ID, "stopped"); err != nil {
		t.Fatal(err)
	}
	u, err := w.cloud.IMDS(w.in.ID)
	if err != nil {
		t.Fatal(err)
	}
	n, err := newNodeIdentity(nodeid.Config{MetadataURL: u}, func(o *imds.Options) { o.Retryer = aws.NopRetryer{} })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Evidence(ctx, newBinding(t)); err == nil {
		t.Error("a stopped instance's metadata: no error")
	}
	if _, err := n.Instance(ctx); err == nil {
		t.Error("a stopped instance's metadata: no error")
	}
}
