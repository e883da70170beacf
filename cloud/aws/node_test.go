package aws

// The node agent's side (cloud/aws/agentid) against the approver's: these
// tests make evidence on a node and verify it with the Verifier.

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

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/aws/agentid"
	"github.com/mooring-dev/mooring/cloud/aws/awstest"
	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/nodeid/nodeidtest"
)

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
	n, err := agentid.NewNodeIdentity(nodeid.Config{MetadataURL: proxy, Settings: map[string]string{agentid.SettingSTSEndpoint: w.cloud.Endpoint()}},
		agentid.WithClock(w.clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Instance(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := nodeidtest.NewBinding(t)
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
	n, err = agentid.NewNodeIdentity(nodeid.Config{MetadataURL: v1.URL})
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
	b := nodeidtest.NewBinding(t)
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

// TestEvidenceUsesCurrentCredentials: each evidence is signed with the
// credentials metadata serves at the time.
func TestEvidenceUsesCurrentCredentials(t *testing.T) {
	w := newWorld(t, awstest.Options{CredentialLifetime: 6 * time.Minute})
	b := nodeidtest.NewBinding(t)
	keyOf := func() string {
		r, err := agentid.DecodeSTSRequest(w.evidenceOf(w.agent, b))
		if err != nil {
			t.Fatal(err)
		}
		auth, err := agentid.ParseAuthorization(r.Authorization)
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
