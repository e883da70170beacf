package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/client"
	"github.com/mooring-dev/mooring/cloud/local/identity"
)

const testToken = "test-token"

// subnet hands each test cloud its own pools, so parallel tests and
// packages do not share addresses.
var subnet atomic.Int32

type testCloud struct {
	srv    *Server
	client *client.Client
	url    string
	cfg    Config
}

func newTestCloud(t *testing.T, mutate func(*Config)) *testCloud {
	t.Helper()
	n := 100 + subnet.Add(1)
	cfg := Config{
		StatePath:    filepath.Join(t.TempDir(), "state.db"),
		Token:        testToken,
		InternalCIDR: fmt.Sprintf("127.%d.1.0/24", n),
		ExternalCIDR: fmt.Sprintf("127.%d.2.0/24", n),
		VIPCIDR:      fmt.Sprintf("127.%d.3.0/24", n),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	tc := &testCloud{cfg: cfg}
	tc.start(t)
	return tc
}

// start (re)opens the cloud on cfg and serves it.
func (tc *testCloud) start(t *testing.T) {
	t.Helper()
	srv, err := New(tc.cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		srv.Close()
	})
	c, err := client.New(hs.URL, testToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	tc.srv, tc.client, tc.url = srv, c, hs.URL
}

func (tc *testCloud) stop(t *testing.T) {
	t.Helper()
	if err := tc.srv.Close(); err != nil {
		t.Fatal(err)
	}
}

func wantCode(t *testing.T, err error, code api.ErrorCode, status int) {
	t.Helper()
	var e *api.Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v, want an API error %s", err, code)
	}
	if e.Code != code || e.Status != status {
		t.Fatalf("err = %s (%d) %q, want %s (%d)", e.Code, e.Status, e.Message, code, status)
	}
}

func TestInstanceLifecycle(t *testing.T) {
	tc := newTestCloud(t, nil)
	ctx := context.Background()
	in, err := tc.client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "node-a", Cluster: "c1", Labels: map[string]string{"role": "worker"}})
	if err != nil {
		t.Fatal(err)
	}
	if in.State != api.StateRunning || in.Zone != "local-1a" || in.Region != "local-1" || in.InstanceType != "standard-2" {
		t.Fatalf("created %+v", in)
	}
	want := map[api.AddressType]string{
		api.InternalIP: "127.", api.ExternalIP: "127.", api.Hostname: "node-a", api.InternalDNS: "node-a.local-1.localcloud.internal",
	}
	for _, a := range in.Addresses {
		if !strings.HasPrefix(a.Address, want[a.Type]) {
			t.Errorf("address %v, want prefix %q", a, want[a.Type])
		}
		delete(want, a.Type)
	}
	if len(want) != 0 {
		t.Errorf("missing addresses %v", want)
	}

	_, err = tc.client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "node-a"})
	wantCode(t, err, api.CodeConflict, http.StatusConflict)

	got, err := tc.client.GetInstance(ctx, in.ID)
	if err != nil || got.Name != "node-a" {
		t.Fatalf("get: %v %+v", err, got)
	}
	if got, err = tc.client.StopInstance(ctx, in.ID); err != nil || got.State != api.StateStopped {
		t.Fatalf("stop: %v %+v", err, got)
	}
	if got, err = tc.client.StopInstance(ctx, in.ID); err != nil || got.State != api.StateStopped {
		t.Fatalf("stop again: %v %+v", err, got)
	}
	if got, err = tc.client.StartInstance(ctx, in.ID); err != nil || got.State != api.StateRunning {
		t.Fatalf("start: %v %+v", err, got)
	}
	if got, err = tc.client.TerminateInstance(ctx, in.ID); err != nil || got.State != api.StateTerminated {
		t.Fatalf("terminate: %v %+v", err, got)
	}
	_, err = tc.client.StartInstance(ctx, in.ID)
	wantCode(t, err, api.CodeConflict, http.StatusConflict)
	// The name is free again; the terminated instance stays listed.
	if _, err := tc.client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "node-a"}); err != nil {
		t.Fatal(err)
	}
	all, err := tc.client.ListAllInstances(ctx, client.ListOptions{})
	if err != nil || len(all) != 2 {
		t.Fatalf("list: %v, %d instances", err, len(all))
	}
	_, err = tc.client.GetInstance(ctx, "i-nope")
	wantCode(t, err, api.CodeNotFound, http.StatusNotFound)
}

func TestCreateInstanceRejectsBadInput(t *testing.T) {
	tc := newTestCloud(t, nil)
	ctx := context.Background()
	for _, req := range []api.CreateInstanceRequest{
		{Name: ""},
		{Name: "Upper"},
		{Name: "has_underscore"},
		{Name: strings.Repeat("a", 64)},
		{Name: "ok", Zone: "mars-1a"},
		{Name: "ok", InstanceType: "huge"},
		{Name: "ok", Cluster: "Bad Cluster"},
		{Name: "ok", Labels: map[string]string{"": "x"}},
	} {
		_, err := tc.client.CreateInstance(ctx, req)
		wantCode(t, err, api.CodeInvalid, http.StatusBadRequest)
	}
	for _, body := range []string{`{`, `{"name":"a","bogus":1}`, `{"name":"a"} {"name":"b"}`, `[]`, `{"name": 5}`} {
		resp := rawCall(t, tc, http.MethodPost, "/v1/instances", body, true)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("body %q: status %d", body, resp.StatusCode)
		}
	}
	big := `{"name":"a","labels":{"k":"` + strings.Repeat("x", 2<<20) + `"}}`
	if resp := rawCall(t, tc, http.MethodPost, "/v1/instances", big, true); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("2 MiB body: status %d", resp.StatusCode)
	}
	if all, _ := tc.client.ListAllInstances(ctx, client.ListOptions{}); len(all) != 0 {
		t.Errorf("bad requests left %d instances", len(all))
	}
}

func rawCall(t *testing.T, tc *testCloud, method, path, body string, auth bool) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(method, tc.url+path, strings.NewReader(body))
	if auth {
		req.Header.Set("Authorization", "Bearer "+testToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func TestAuthentication(t *testing.T) {
	tc := newTestCloud(t, nil)
	for _, auth := range []string{"", "Bearer wrong", "Basic " + testToken, "Bearer " + testToken + "x"} {
		req, _ := http.NewRequest(http.MethodGet, tc.url+"/v1/instances", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("Authorization %q: status %d", auth, resp.StatusCode)
		}
	}
	// Published keys need no token.
	if resp := rawCall(t, tc, http.MethodGet, "/v1/identity/jwks", "", false); resp.StatusCode != http.StatusOK {
		t.Errorf("jwks without token: %d", resp.StatusCode)
	}
}

func TestListPaginationAndFilters(t *testing.T) {
	tc := newTestCloud(t, nil)
	ctx := context.Background()
	ids := map[string]bool{}
	for i := range 7 {
		cluster := "blue"
		if i%2 == 1 {
			cluster = "green"
		}
		in, err := tc.client.CreateInstance(ctx, api.CreateInstanceRequest{Name: fmt.Sprintf("n%d", i), Cluster: cluster})
		if err != nil {
			t.Fatal(err)
		}
		ids[in.ID] = true
	}
	var pages int
	seen := map[string]bool{}
	opts := client.ListOptions{PageSize: 3}
	for {
		l, err := tc.client.ListInstances(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, in := range l.Items {
			if seen[in.ID] {
				t.Fatalf("%s on two pages", in.ID)
			}
			seen[in.ID] = true
		}
		if l.NextPageToken == "" {
			break
		}
		opts.PageToken = l.NextPageToken
	}
	if pages != 3 || len(seen) != 7 {
		t.Fatalf("%d pages, %d instances; want 3 and 7", pages, len(seen))
	}
	green, err := tc.client.ListAllInstances(ctx, client.ListOptions{Cluster: "green"})
	if err != nil || len(green) != 3 {
		t.Fatalf("green: %v %d", err, len(green))
	}
	some := []string{}
	for id := range ids {
		if len(some) < 2 {
			some = append(some, id)
		}
	}
	byID, err := tc.client.ListAllInstances(ctx, client.ListOptions{IDs: some})
	if err != nil || len(byID) != 2 {
		t.Fatalf("by id: %v %d", err, len(byID))
	}
	for _, q := range []string{"pageSize=0", "pageSize=1001", "pageSize=x", "pageToken=%25%25"} {
		if resp := rawCall(t, tc, http.MethodGet, "/v1/instances?"+q, "", true); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: status %d", q, resp.StatusCode)
		}
	}
}

func TestAddressPoolExhaustionPersistsNothing(t *testing.T) {
	tc := newTestCloud(t, func(c *Config) {
		c.InternalCIDR = "127.99.250.0/30" // two usable addresses
	})
	ctx := context.Background()
	for _, name := range []string{"a", "b"} {
		if _, err := tc.client.CreateInstance(ctx, api.CreateInstanceRequest{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := tc.client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "c"})
	wantCode(t, err, api.CodeExhausted, http.StatusInsufficientStorage)
	all, _ := tc.client.ListAllInstances(ctx, client.ListOptions{})
	if len(all) != 2 {
		t.Fatalf("%d instances after exhaustion, want 2", len(all))
	}
	// The external address taken for "c" was given back: two more
	// externals remain for later instances once internals free up.
	if got := len(tc.srv.external.used); got != 2 {
		t.Fatalf("external pool has %d used, want 2", got)
	}
}

func metadataGet(t *testing.T, url string, header bool) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if header {
		req.Header.Set(api.MetadataHeader, "true")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func verifierFor(t *testing.T, tc *testCloud) *identity.Verifier {
	t.Helper()
	jwks, err := tc.client.JWKS(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	keys, err := identity.ParseJWKS(jwks)
	if err != nil {
		t.Fatal(err)
	}
	return identity.NewVerifier(keys)
}

func TestMetadataAndIdentity(t *testing.T) {
	tc := newTestCloud(t, nil)
	ctx := context.Background()
	in, err := tc.client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "meta", Cluster: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(in.MetadataURL, "http://"+address(in, api.InternalIP)+":") {
		t.Fatalf("metadata URL %q is not on the instance's internal IP", in.MetadataURL)
	}
	if code, _ := metadataGet(t, in.MetadataURL+"/v1/instance", false); code != http.StatusBadRequest {
		t.Errorf("without the metadata header: %d", code)
	}
	md := client.NewMetadata(in.MetadataURL, nil)
	id, err := md.Instance(ctx)
	if err != nil || id.ID != in.ID || id.Cluster != "c1" {
		t.Fatalf("instance: %v %+v", err, id)
	}
	tok, err := md.IdentityToken(ctx, "binding-123")
	if err != nil {
		t.Fatal(err)
	}
	v := verifierFor(t, tc)
	claims, err := v.Verify(tok, identity.VerifyOptions{Issuer: DefaultIssuer, Audience: "binding-123", Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if claims.Subject != in.ID || claims.Instance.Name != "meta" || claims.Instance.Cluster != "c1" {
		t.Errorf("claims %+v", claims)
	}
	if _, err := v.Verify(tok, identity.VerifyOptions{Issuer: DefaultIssuer, Audience: "other", Now: time.Now()}); err == nil {
		t.Error("token verified for another audience")
	}
	for _, bad := range []string{"", strings.Repeat("a", 300)} {
		if _, err := md.IdentityToken(ctx, bad); err == nil {
			t.Errorf("audience %q accepted", bad)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, in.MetadataURL+"/v1/instance", nil)
	req.Header.Set(api.MetadataHeader, "true")
	req.Header.Set("X-Forwarded-For", "127.0.0.9")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("forwarded request: %v %v", err, resp)
	}

	// A stopped instance has no metadata service.
	if _, err := tc.client.StopInstance(ctx, in.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := md.Instance(ctx); err == nil {
		t.Error("metadata answered for a stopped instance")
	}
	started, err := tc.client.StartInstance(ctx, in.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.NewMetadata(started.MetadataURL, nil).Instance(ctx); err != nil {
		t.Errorf("metadata after start: %v", err)
	}
}

func TestMetadataAnswersOnlyForItsInstance(t *testing.T) {
	tc := newTestCloud(t, nil)
	ctx := context.Background()
	a, _ := tc.client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "a"})
	b, _ := tc.client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "b"})
	// Whatever the request says, a's service speaks of a.
	for _, path := range []string{"/v1/instance", "/v1/instance?id=" + b.ID, "/v1/instance/../instance"} {
		code, body := metadataGet(t, a.MetadataURL+path, true)
		if code == http.StatusOK && (!strings.Contains(body, a.ID) || strings.Contains(body, b.ID)) {
			t.Errorf("%s: %s", path, body)
		}
	}
}

func TestKeyRotationKeepsOldTokensValid(t *testing.T) {
	tc := newTestCloud(t, nil)
	ctx := context.Background()
	in, _ := tc.client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "rot"})
	md := client.NewMetadata(in.MetadataURL, nil)
	before, err := md.IdentityToken(ctx, "aud")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.client.RotateIdentityKey(ctx); err != nil {
		t.Fatal(err)
	}
	after, _ := md.IdentityToken(ctx, "aud")
	v := verifierFor(t, tc)
	for name, tok := range map[string]string{"before": before, "after": after} {
		if _, err := v.Verify(tok, identity.VerifyOptions{Issuer: DefaultIssuer, Audience: "aud", Now: time.Now()}); err != nil {
			t.Errorf("token %s rotation: %v", name, err)
		}
	}
	// Once every token of the old key has expired, the key is unpublished.
	tc.srv.mu.Lock()
	tc.srv.pruneKeysLocked(time.Now().Add(DefaultTokenTTL + 2*time.Minute))
	tc.srv.mu.Unlock()
	v = verifierFor(t, tc)
	if _, err := v.Verify(before, identity.VerifyOptions{Issuer: DefaultIssuer, Audience: "aud", Now: time.Now()}); err == nil {
		t.Error("token of a pruned key still verifies")
	}
}

// echoServer answers each line on a TCP connection with prefix + line.
func echoServer(t *testing.T, addr, prefix string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					fmt.Fprintf(c, "%s%s\n", prefix, sc.Text())
				}
			}()
		}
	}()
	return ln
}

func roundTrip(addr, msg string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := fmt.Fprintf(c, "%s\n", msg); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

func TestLoadBalancerForwardsAndPersistsNothingOnError(t *testing.T) {
	tc := newTestCloud(t, nil)
	ctx := context.Background()
	n := strings.Split(tc.cfg.InternalCIDR, ".")[1]
	backend := echoServer(t, "127."+n+".9.1:0", "b1:")
	port := backend.Addr().(*net.TCPAddr).Port
	spec := api.LoadBalancerSpec{
		Cluster: "c1",
		Listeners: []api.Listener{{
			Port: 8080, Protocol: api.TCP,
			Backends:    []api.Backend{{Address: "127." + n + ".9.1", Port: port}},
			HealthCheck: &api.HealthCheck{Protocol: api.TCP, IntervalSeconds: 1},
		}},
	}
	l, err := tc.client.EnsureLoadBalancer(ctx, "web", spec)
	if err != nil {
		t.Fatal(err)
	}
	vip := net.JoinHostPort(l.VIP, "8080")
	var got string
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if got, err = roundTrip(vip, "hello"); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got != "b1:hello" {
		t.Fatalf("through the VIP: %q, %v", got, err)
	}
	again, err := tc.client.GetLoadBalancer(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	if h := again.Listeners[0].Backends[0].Healthy; h == nil || !*h {
		t.Errorf("backend health = %v, want healthy", h)
	}

	// An update that the cloud must refuse changes nothing.
	bad := spec
	bad.Listeners = []api.Listener{{Port: 8080, Protocol: api.TCP, Backends: []api.Backend{{Address: "10.0.0.1", Port: 80}}}}
	_, err = tc.client.EnsureLoadBalancer(ctx, "web", bad)
	wantCode(t, err, api.CodeInvalid, http.StatusBadRequest)
	if got, err := roundTrip(vip, "still"); err != nil || got != "b1:still" {
		t.Fatalf("after a refused update: %q %v", got, err)
	}
	_, err = tc.client.EnsureLoadBalancer(ctx, "other", bad)
	wantCode(t, err, api.CodeInvalid, http.StatusBadRequest)
	if _, err := tc.client.GetLoadBalancer(ctx, "other"); !client.IsNotFound(err) {
		t.Errorf("a refused load balancer was kept: %v", err)
	}
	if used := len(tc.srv.vips.used); used != 1 {
		t.Errorf("%d VIPs in use, want 1", used)
	}

	if err := tc.client.DeleteLoadBalancer(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(vip, "gone"); err == nil {
		t.Error("VIP still forwards after delete")
	}
	err = tc.client.DeleteLoadBalancer(ctx, "web")
	wantCode(t, err, api.CodeNotFound, http.StatusNotFound)
}

func TestLoadBalancerSpecValidation(t *testing.T) {
	tc := newTestCloud(t, nil)
	ctx := context.Background()
	ok := api.Listener{Port: 80, Protocol: api.TCP, Backends: []api.Backend{{Address: "127.0.0.1", Port: 8080}}}
	for name, spec := range map[string]api.LoadBalancerSpec{
		"no listeners":      {},
		"bad port":          {Listeners: []api.Listener{{Port: 0, Protocol: api.TCP}}},
		"bad protocol":      {Listeners: []api.Listener{{Port: 80, Protocol: "SCTP"}}},
		"duplicate":         {Listeners: []api.Listener{ok, ok}},
		"public backend":    {Listeners: []api.Listener{{Port: 80, Protocol: api.TCP, Backends: []api.Backend{{Address: "8.8.8.8", Port: 53}}}}},
		"ipv6 backend":      {Listeners: []api.Listener{{Port: 80, Protocol: api.TCP, Backends: []api.Backend{{Address: "::1", Port: 53}}}}},
		"bad source range":  {Listeners: []api.Listener{ok}, SourceRanges: []string{"nope"}},
		"bad health check":  {Listeners: []api.Listener{{Port: 80, Protocol: api.TCP, HealthCheck: &api.HealthCheck{Protocol: "ICMP"}}}},
		"bad health path":   {Listeners: []api.Listener{{Port: 80, Protocol: api.TCP, HealthCheck: &api.HealthCheck{Protocol: api.HTTP, Path: "x"}}}},
		"bad cluster label": {Cluster: "Not OK", Listeners: []api.Listener{ok}},
	} {
		if _, err := tc.client.EnsureLoadBalancer(ctx, "lb", spec); !client.IsCode(err, api.CodeInvalid) {
			t.Errorf("%s: err = %v, want Invalid", name, err)
		}
	}
	if _, err := tc.client.EnsureLoadBalancer(ctx, "Bad_Name", api.LoadBalancerSpec{Listeners: []api.Listener{ok}}); !client.IsCode(err, api.CodeInvalid) {
		t.Errorf("bad name: %v", err)
	}
}

func TestRoutes(t *testing.T) {
	tc := newTestCloud(t, nil)
	ctx := context.Background()
	in, _ := tc.client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "r", Cluster: "c1"})
	r, err := tc.client.CreateRoute(ctx, api.Route{Name: "r1", Cluster: "c1", DestinationCIDR: "10.244.1.7/24", InstanceID: in.ID})
	if err != nil {
		t.Fatal(err)
	}
	if r.DestinationCIDR != "10.244.1.0/24" {
		t.Errorf("destination %q not normalised", r.DestinationCIDR)
	}
	_, err = tc.client.CreateRoute(ctx, api.Route{Name: "r1", Cluster: "c1", DestinationCIDR: "10.244.2.0/24", InstanceID: in.ID})
	wantCode(t, err, api.CodeConflict, http.StatusConflict)
	_, err = tc.client.CreateRoute(ctx, api.Route{Name: "r2", Cluster: "c1", DestinationCIDR: "10.244.1.0/24", InstanceID: in.ID})
	wantCode(t, err, api.CodeConflict, http.StatusConflict)
	_, err = tc.client.CreateRoute(ctx, api.Route{Name: "r3", DestinationCIDR: "nope", InstanceID: in.ID})
	wantCode(t, err, api.CodeInvalid, http.StatusBadRequest)
	_, err = tc.client.CreateRoute(ctx, api.Route{Name: "r4", DestinationCIDR: "10.1.0.0/16", InstanceID: "i-missing"})
	wantCode(t, err, api.CodeNotFound, http.StatusNotFound)
	list, err := tc.client.ListAllRoutes(ctx, client.ListOptions{Cluster: "c1"})
	if err != nil || len(list) != 1 {
		t.Fatalf("routes: %v %v", err, list)
	}
	if err := tc.client.DeleteRoute(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	err = tc.client.DeleteRoute(ctx, "r1")
	wantCode(t, err, api.CodeNotFound, http.StatusNotFound)
}

func TestRateLimit(t *testing.T) {
	tc := newTestCloud(t, func(c *Config) { c.RateLimit, c.RateBurst = 2, 3 })
	ctx := context.Background()
	var throttled int
	for range 10 {
		_, err := tc.client.ListInstances(ctx, client.ListOptions{})
		var e *api.Error
		if errors.As(err, &e) && e.Code == api.CodeThrottled {
			throttled++
			if e.Status != http.StatusTooManyRequests || e.RetryAfter < time.Second {
				t.Errorf("throttled answer: status %d, Retry-After %v", e.Status, e.RetryAfter)
			}
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if throttled < 6 {
		t.Errorf("%d of 10 calls throttled with burst 3, want at least 6", throttled)
	}
	st, err := tc.client.Stats(ctx) // admin calls are never throttled
	if err != nil {
		t.Fatal(err)
	}
	if st.Calls["ListInstances"] != 10 || st.Throttled != int64(throttled) {
		t.Errorf("stats %+v", st)
	}
}

func TestRateLimitChangedAtRunTime(t *testing.T) {
	tc := newTestCloud(t, nil)
	ctx := context.Background()
	list := func() error {
		_, err := tc.client.ListInstances(ctx, client.ListOptions{})
		return err
	}
	wantLimit := func(want api.RateLimit) {
		t.Helper()
		got, err := tc.client.RateLimit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if *got != want {
			t.Fatalf("rate limit %+v, want %+v", *got, want)
		}
	}
	wantLimit(api.RateLimit{})
	for i := range 50 {
		if err := list(); err != nil {
			t.Fatalf("unlimited call %d: %v", i, err)
		}
	}

	// Limited: the burst passes, the next call at once is throttled.
	if err := tc.client.SetRateLimit(ctx, api.RateLimit{Limit: 0.5, Burst: 1}); err != nil {
		t.Fatal(err)
	}
	wantLimit(api.RateLimit{Limit: 0.5, Burst: 1})
	if err := list(); err != nil {
		t.Fatalf("first call after limiting: %v", err)
	}
	err := list()
	wantCode(t, err, api.CodeThrottled, http.StatusTooManyRequests)
	if e := (*api.Error)(nil); errors.As(err, &e) && e.RetryAfter < time.Second {
		t.Errorf("Retry-After %v, want at least 1s", e.RetryAfter)
	}
	resp := rawCall(t, tc, http.MethodGet, "/v1/instances", "", true)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("raw call: status %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// Admin calls stay unlimited.
	for i := range 20 {
		if _, err := tc.client.Stats(ctx); err != nil {
			t.Fatalf("stats call %d: %v", i, err)
		}
		if _, err := tc.client.Faults(ctx); err != nil {
			t.Fatalf("faults call %d: %v", i, err)
		}
		wantLimit(api.RateLimit{Limit: 0.5, Burst: 1})
	}

	// The burst defaults as in Config.
	for _, c := range []struct{ set, want api.RateLimit }{
		{api.RateLimit{Limit: 10.7}, api.RateLimit{Limit: 10.7, Burst: 10}},
		{api.RateLimit{Limit: 0.25}, api.RateLimit{Limit: 0.25, Burst: 1}},
		{api.RateLimit{Limit: 3, Burst: 7}, api.RateLimit{Limit: 3, Burst: 7}},
		{api.RateLimit{Burst: 5}, api.RateLimit{}}, // unlimited: no burst
	} {
		if err := tc.client.SetRateLimit(ctx, c.set); err != nil {
			t.Fatalf("set %+v: %v", c.set, err)
		}
		wantLimit(c.want)
	}

	// Invalid limits are refused and change nothing.
	if err := tc.client.SetRateLimit(ctx, api.RateLimit{Limit: 2, Burst: 1}); err != nil {
		t.Fatal(err)
	}
	for _, l := range []api.RateLimit{{Limit: -1}, {Limit: 1, Burst: -1}, {Limit: -0.5, Burst: -2}} {
		err := tc.client.SetRateLimit(ctx, l)
		wantCode(t, err, api.CodeInvalid, http.StatusBadRequest)
		if !strings.Contains(err.Error(), "must not be negative") {
			t.Errorf("set %+v: message %q", l, err)
		}
	}
	for _, body := range []string{`{"limit":1e999}`, `{"limit":"fast"}`, `{"rate":1}`, `{"limit":-1}`, ``} {
		if resp := rawCall(t, tc, http.MethodPut, "/v1/ratelimit", body, true); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("PUT %s: status %d, want 400", body, resp.StatusCode)
		}
	}
	if resp := rawCall(t, tc, http.MethodPut, "/v1/ratelimit", `{"limit":0}`, false); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("PUT without a token: status %d, want 401", resp.StatusCode)
	}
	wantLimit(api.RateLimit{Limit: 2, Burst: 1})

	// Back to unlimited: calls pass again.
	if err := tc.client.SetRateLimit(ctx, api.RateLimit{}); err != nil {
		t.Fatal(err)
	}
	wantLimit(api.RateLimit{})
	for i := range 50 {
		if err := list(); err != nil {
			t.Fatalf("call %d after lifting the limit: %v", i, err)
		}
	}
	st, err := tc.client.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Throttled != 2 || st.Calls["ListInstances"] != 103 {
		t.Errorf("stats %+v, want 2 throttled of 103 ListInstances", st)
	}
	for _, op := range []string{"GetRateLimit", "SetRateLimit", "GetStats"} {
		if _, ok := st.Calls[op]; ok {
			t.Errorf("admin operation %s counted", op)
		}
	}
}

// Changing the limit while calls are being admitted is race-free (run with
// -race) and every answer is either served or throttled.
func TestRateLimitChangedUnderLoad(t *testing.T) {
	tc := newTestCloud(t, nil)
	ctx := context.Background()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := tc.client.ListInstances(ctx, client.ListOptions{})
				if err != nil && !client.IsCode(err, api.CodeThrottled) {
					errs <- err
					return
				}
			}
		})
	}
	for i := range 100 {
		l := api.RateLimit{}
		if i%2 == 0 {
			l = api.RateLimit{Limit: 100, Burst: 1}
		}
		if err := tc.client.SetRateLimit(ctx, l); err != nil {
			t.Error(err)
			break
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestCheckRateLimit(t *testing.T) {
	for _, l := range []api.RateLimit{
		{Limit: math.NaN()}, {Limit: math.Inf(1)}, {Limit: math.Inf(-1)}, {Limit: -1}, {Burst: -1},
	} {
		var e *api.Error
		if err := checkRateLimit(l); !errors.As(err, &e) || e.Code != api.CodeInvalid {
			t.Errorf("%+v: err = %v, want Invalid", l, err)
		}
	}
	for _, l := range []api.RateLimit{{}, {Limit: 0.1}, {Limit: 5000, Burst: 1}, {Burst: 3}} {
		if err := checkRateLimit(l); err != nil {
			t.Errorf("%+v refused: %v", l, err)
		}
	}
}

func TestRateBurst(t *testing.T) {
	for _, c := range []struct {
		limit       float64
		burst, want int
	}{
		{0, 0, 0}, {0, 5, 5}, {2, 0, 2}, {0.5, 0, 1}, {10.7, 0, 10}, {3, 7, 7},
		{1e300, 0, math.MaxInt32}, {math.NaN(), 0, 0},
	} {
		if got := (api.RateLimit{Limit: c.limit, Burst: c.burst}).EffectiveBurst(); got != c.want {
			t.Errorf("EffectiveBurst(%g, %d) = %d, want %d", c.limit, c.burst, got, c.want)
		}
	}
	cfg, err := Config{StatePath: "x", Token: "t", RateLimit: 7.9}.withDefaults()
	if err != nil || cfg.RateBurst != 7 {
		t.Errorf("Config RateBurst = %d (%v), want 7", cfg.RateBurst, err)
	}
}

func TestFaultInjection(t *testing.T) {
	tc := newTestCloud(t, nil)
	ctx := context.Background()
	if err := tc.client.SetFaults(ctx, api.Faults{Operations: map[string]api.OperationFault{
		"ListInstances": {ErrorRate: 1, Status: 500},
		"GetInstance":   {Latency: api.Duration(200 * time.Millisecond)},
	}}); err != nil {
		t.Fatal(err)
	}
	_, err := tc.client.ListInstances(ctx, client.ListOptions{})
	wantCode(t, err, api.CodeUnavailable, http.StatusInternalServerError)
	in, err := tc.client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "f"})
	if err != nil {
		t.Fatalf("an operation without a fault failed: %v", err)
	}
	start := time.Now()
	if _, err := tc.client.GetInstance(ctx, in.ID); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("injected latency not applied: %v", d)
	}
	if err := tc.client.SetFaults(ctx, api.Faults{ErrorRate: 2}); !client.IsCode(err, api.CodeInvalid) {
		t.Errorf("error rate 2 accepted: %v", err)
	}
	if err := tc.client.ClearFaults(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.client.ListInstances(ctx, client.ListOptions{}); err != nil {
		t.Fatalf("after clear: %v", err)
	}
	st, _ := tc.client.Stats(ctx)
	if st.Faulted != 1 {
		t.Errorf("faulted = %d, want 1", st.Faulted)
	}
	if err := tc.client.ResetStats(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := tc.client.Stats(ctx); len(st.Calls) != 0 {
		t.Errorf("after reset: %+v", st)
	}
}

// TestErrorRateSpread: an error rate fails that share of the calls since
// the faults were set, evenly and from the first call on, per operation
// fault and for the faults' own rate apart; setting the faults again
// starts over. (With calls drawn at random, a 0.5 rate over two calls
// failed none a quarter of the time: the outage scenario's brown-out then
// tested nothing.)
func TestErrorRateSpread(t *testing.T) {
	tc := newTestCloud(t, nil)
	ctx := context.Background()
	pattern := func(n int, call func() error) string {
		var b strings.Builder
		for range n {
			if err := call(); err != nil {
				wantCode(t, err, api.CodeUnavailable, http.StatusServiceUnavailable)
				b.WriteByte('x')
			} else {
				b.WriteByte('.')
			}
		}
		return b.String()
	}
	list := func() error { _, err := tc.client.ListInstances(ctx, client.ListOptions{}); return err }
	lbs := func() error { _, err := tc.client.ListLoadBalancers(ctx, client.ListOptions{}); return err }
	if err := tc.client.SetFaults(ctx, api.Faults{ErrorRate: 0.5, Operations: map[string]api.OperationFault{
		"ListLoadBalancers": {ErrorRate: 0.25},
	}}); err != nil {
		t.Fatal(err)
	}
	if got := pattern(6, list); got != "x.x.x." {
		t.Errorf("ListInstances at 0.5: %s, want x.x.x.", got)
	}
	if got := pattern(8, lbs); got != "x...x..." {
		t.Errorf("ListLoadBalancers at its own 0.25: %s, want x...x...", got)
	}
	if err := tc.client.SetFaults(ctx, api.Faults{ErrorRate: 0.1}); err != nil {
		t.Fatal(err)
	}
	if got := pattern(20, list); got != "x.........x........." {
		t.Errorf("ListInstances at 0.1 after the faults were set again: %s", got)
	}
	if st, _ := tc.client.Stats(ctx); st.Faulted != 7 {
		t.Errorf("faulted = %d, want 7", st.Faulted)
	}
}

// TestStaleListFault: an instance named in Faults.StaleList is left out of
// lists (and counted) while GetInstance and a list by its id still serve it.
func TestStaleListFault(t *testing.T) {
	tc := newTestCloud(t, nil)
	ctx := context.Background()
	a, err := tc.client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := tc.client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tc.client.SetFaults(ctx, api.Faults{StaleList: []string{a.ID}}); err != nil {
		t.Fatal(err)
	}
	l, err := tc.client.ListInstances(ctx, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 1 || l.Items[0].ID != b.ID {
		t.Errorf("list under the fault: %+v, want only %s", l.Items, b.ID)
	}
	if got, err := tc.client.GetInstance(ctx, a.ID); err != nil || got.ID != a.ID {
		t.Errorf("GetInstance of the left-out instance: %v, %v", got, err)
	}
	if l, err := tc.client.ListInstances(ctx, client.ListOptions{IDs: []string{a.ID}}); err != nil || len(l.Items) != 1 {
		t.Errorf("list by the left-out instance's id: %+v, %v", l, err)
	}
	if st, _ := tc.client.Stats(ctx); st.StaleListed != 1 || st.Faulted != 0 {
		t.Errorf("stats %+v, want 1 left out, none faulted", st)
	}
	if err := tc.client.ClearFaults(ctx); err != nil {
		t.Fatal(err)
	}
	if l, err := tc.client.ListInstances(ctx, client.ListOptions{}); err != nil || len(l.Items) != 2 {
		t.Errorf("list after clear: %+v, %v", l, err)
	}
}

func TestMetricsEndpoint(t *testing.T) {
	tc := newTestCloud(t, nil)
	_, _ = tc.client.ListInstances(context.Background(), client.ListOptions{})
	resp, err := http.Get(tc.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`mooring_localcloud_api_requests_total{code="200",operation="ListInstances"} 1`,
		`mooring_localcloud_instances{state="running"} 0`,
		`mooring_build_info{build_date=`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestStateSurvivesRestart(t *testing.T) {
	tc := newTestCloud(t, nil)
	ctx := context.Background()
	in, _ := tc.client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "keep", Cluster: "c1"})
	stopped, _ := tc.client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "asleep"})
	if _, err := tc.client.StopInstance(ctx, stopped.ID); err != nil {
		t.Fatal(err)
	}
	n := strings.Split(tc.cfg.InternalCIDR, ".")[1]
	backend := echoServer(t, "127."+n+".9.2:0", "k:")
	l, err := tc.client.EnsureLoadBalancer(ctx, "keep", api.LoadBalancerSpec{Listeners: []api.Listener{{
		Port: 9000, Protocol: api.TCP,
		Backends: []api.Backend{{Address: "127." + n + ".9.2", Port: backend.Addr().(*net.TCPAddr).Port}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.client.CreateRoute(ctx, api.Route{Name: "keep", DestinationCIDR: "10.9.0.0/24", InstanceID: in.ID}); err != nil {
		t.Fatal(err)
	}
	jwksBefore, _ := tc.client.JWKS(ctx)
	tok, _ := client.NewMetadata(in.MetadataURL, nil).IdentityToken(ctx, "a")

	tc.stop(t)
	tc.start(t)

	got, err := tc.client.GetInstance(ctx, in.ID)
	if err != nil || got.State != api.StateRunning || got.Name != "keep" {
		t.Fatalf("instance after restart: %v %+v", err, got)
	}
	if _, err := client.NewMetadata(got.MetadataURL, nil).Instance(ctx); err != nil {
		t.Errorf("metadata after restart: %v", err)
	}
	if s, _ := tc.client.GetInstance(ctx, stopped.ID); s.State != api.StateStopped {
		t.Errorf("stopped instance came back %s", s.State)
	}
	if got, err := roundTrip(net.JoinHostPort(l.VIP, "9000"), "x"); err != nil || got != "k:x" {
		t.Errorf("VIP after restart: %q %v", got, err)
	}
	if _, err := tc.client.GetRoute(ctx, "keep"); err != nil {
		t.Errorf("route after restart: %v", err)
	}
	if jwksAfter, _ := tc.client.JWKS(ctx); string(jwksAfter) != string(jwksBefore) {
		t.Error("identity keys changed across restart")
	}
	if _, err := verifierFor(t, tc).Verify(tok, identity.VerifyOptions{Issuer: DefaultIssuer, Audience: "a", Now: time.Now()}); err != nil {
		t.Errorf("token from before the restart: %v", err)
	}
	// Pools remember what is taken.
	again, err := tc.client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "new"})
	if err != nil {
		t.Fatal(err)
	}
	if address(again, api.InternalIP) == address(got, api.InternalIP) {
		t.Error("an address in use was handed out again after restart")
	}
}

func TestBootDelay(t *testing.T) {
	tc := newTestCloud(t, func(c *Config) { c.BootDelay = 150 * time.Millisecond })
	ctx := context.Background()
	in, err := tc.client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "slow"})
	if err != nil || in.State != api.StatePending {
		t.Fatalf("%v %+v", err, in)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		got, _ := tc.client.GetInstance(ctx, in.ID)
		if got.State == api.StateRunning {
			if _, err := client.NewMetadata(got.MetadataURL, nil).Instance(ctx); err != nil {
				t.Fatalf("metadata once running: %v", err)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("instance never left pending")
}

func TestTerminatedInstancesAreCollected(t *testing.T) {
	now := time.Now()
	clock := func() time.Time { return now }
	tc := newTestCloud(t, func(c *Config) { c.Now = clock; c.TerminatedRetention = time.Minute })
	ctx := context.Background()
	in, _ := tc.client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "gone"})
	if _, err := tc.client.TerminateInstance(ctx, in.ID); err != nil {
		t.Fatal(err)
	}
	tc.srv.collectTerminated(now.Add(30 * time.Second))
	if _, err := tc.client.GetInstance(ctx, in.ID); err != nil {
		t.Fatalf("collected before its retention: %v", err)
	}
	tc.srv.collectTerminated(now.Add(2 * time.Minute))
	if _, err := tc.client.GetInstance(ctx, in.ID); !client.IsNotFound(err) {
		t.Fatalf("not collected after its retention: %v", err)
	}
	if len(tc.srv.internal.used) != 0 {
		t.Error("addresses of a collected instance stay taken")
	}
}

func TestConfigRefusesAddressesOffTheMachine(t *testing.T) {
	base := Config{StatePath: filepath.Join(t.TempDir(), "s.db"), Token: "t"}
	for name, mutate := range map[string]func(*Config){
		"internal pool off loopback": func(c *Config) { c.InternalCIDR = "10.0.0.0/24" },
		"vip pool off loopback":      func(c *Config) { c.VIPCIDR = "192.168.0.0/24" },
		"overlapping pools":          func(c *Config) { c.InternalCIDR = "127.30.0.0/24" },
		"no token":                   func(c *Config) { c.Token = "" },
	} {
		cfg := base
		mutate(&cfg)
		if s, err := New(cfg); err == nil {
			s.Close()
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestMetadataEndpointCanBeDisabled(t *testing.T) {
	tc := newTestCloud(t, nil)
	ctx := context.Background()
	listeners := func() int {
		tc.srv.mu.Lock()
		defer tc.srv.mu.Unlock()
		return len(tc.srv.metadata)
	}
	off, err := tc.client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "off", MetadataEndpoint: api.MetadataDisabled})
	if err != nil {
		t.Fatal(err)
	}
	if off.MetadataEndpoint != api.MetadataDisabled || off.MetadataURL != "" || listeners() != 0 {
		t.Fatalf("disabled at creation: %+v, %d listeners", off, listeners())
	}
	on, err := tc.client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "on"})
	if err != nil || on.MetadataEndpoint != api.MetadataEnabled || listeners() != 1 {
		t.Fatalf("enabled by default: %v %+v, %d listeners", err, on, listeners())
	}
	_, err = tc.client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "bad", MetadataEndpoint: "maybe"})
	wantCode(t, err, api.CodeInvalid, http.StatusBadRequest)
	_, err = tc.client.SetMetadataEndpoint(ctx, off.ID, "")
	wantCode(t, err, api.CodeInvalid, http.StatusBadRequest)

	// Enabled later, it answers for its own instance only.
	got, err := tc.client.SetMetadataEndpoint(ctx, off.ID, api.MetadataEnabled)
	if err != nil || got.MetadataEndpoint != api.MetadataEnabled ||
		!strings.HasPrefix(got.MetadataURL, "http://"+address(got, api.InternalIP)+":") {
		t.Fatalf("enabled: %v %+v", err, got)
	}
	md := client.NewMetadata(got.MetadataURL, nil)
	if id, err := md.Instance(ctx); err != nil || id.ID != off.ID {
		t.Fatalf("metadata once enabled: %v %+v", err, id)
	}
	// Disabled, its listener is gone, and it stays gone across a restart.
	if got, err = tc.client.SetMetadataEndpoint(ctx, off.ID, api.MetadataDisabled); err != nil || got.MetadataEndpoint != api.MetadataDisabled {
		t.Fatalf("disabled: %v %+v", err, got)
	}
	if _, err := md.Instance(ctx); err == nil {
		t.Error("metadata answered once disabled")
	}
	if listeners() != 1 {
		t.Errorf("%d listeners, want 1 (the enabled instance's)", listeners())
	}
	tc.stop(t)
	tc.start(t)
	if listeners() != 1 {
		t.Errorf("after a restart: %d listeners, want 1", listeners())
	}
	if _, err := md.Instance(ctx); err == nil {
		t.Error("metadata of a disabled instance answered after a restart")
	}
	// Enabling a stopped instance starts nothing until it runs.
	if _, err := tc.client.StopInstance(ctx, off.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.client.SetMetadataEndpoint(ctx, off.ID, api.MetadataEnabled); err != nil || listeners() != 1 {
		t.Fatalf("enabled while stopped: %v, %d listeners", err, listeners())
	}
	started, err := tc.client.StartInstance(ctx, off.ID)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := client.NewMetadata(started.MetadataURL, nil).Instance(ctx); err != nil || id.ID != off.ID || listeners() != 2 {
		t.Fatalf("metadata after start: %v %+v, %d listeners", err, id, listeners())
	}
	if _, err := tc.client.TerminateInstance(ctx, off.ID); err != nil {
		t.Fatal(err)
	}
	_, err = tc.client.SetMetadataEndpoint(ctx, off.ID, api.MetadataEnabled)
	wantCode(t, err, api.CodeConflict, http.StatusConflict)
	_, err = tc.client.SetMetadataEndpoint(ctx, "i-0000000000000000", api.MetadataEnabled)
	wantCode(t, err, api.CodeNotFound, http.StatusNotFound)
}

// BenchmarkListAllInstances pages through 50,000 instances (the largest
// scale benchmark's cloud), 1,000 a page, as mooring's view lists them.
func BenchmarkListAllInstances(b *testing.B) {
	const n = 50000
	srv, err := New(Config{
		StatePath: filepath.Join(b.TempDir(), "state.db"), Token: testToken,
		InternalCIDR: "127.240.0.0/16", ExternalCIDR: "127.241.0.0/16", VIPCIDR: "127.242.0.0/24",
	})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	srv.mu.Lock()
	for i := range n {
		in := &api.Instance{ID: newInstanceID(), Name: fmt.Sprintf("node-%05d", i), Cluster: "c", State: api.StateRunning,
			Zone: "local-1a", Region: "local-1", InstanceType: "standard-2", MetadataEndpoint: api.MetadataDisabled,
			Addresses: []api.Address{{Type: api.InternalIP, Address: "127.240.0.1"}, {Type: api.Hostname, Address: "node"}}}
		srv.instances[in.ID] = in
	}
	srv.mu.Unlock()
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	c, err := client.New(hs.URL, testToken, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		all, err := c.ListAllInstances(context.Background(), client.ListOptions{Cluster: "c", PageSize: 1000})
		if err != nil || len(all) != n {
			b.Fatalf("%d instances, %v", len(all), err)
		}
	}
}
