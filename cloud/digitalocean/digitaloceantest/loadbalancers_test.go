package digitaloceantest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/digitalocean/godo"
	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// client is godo over the endpoint.
func client(t *testing.T, c *Cloud) *godo.Client {
	t.Helper()
	g, err := godo.New(&http.Client{Transport: bearer(c.Token())}, godo.SetBaseURL(c.Endpoint()))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// bearer sends the token with every request.
type bearer string

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

func apiStatus(err error) (int, string) {
	var e *godo.ErrorResponse
	if errors.As(err, &e) && e.Response != nil {
		return e.Response.StatusCode, e.Message
	}
	return 0, fmt.Sprint(err)
}

func goodRequest(droplets ...int) *godo.LoadBalancerRequest {
	return &godo.LoadBalancerRequest{Name: "a1234", Region: DefaultRegion, DropletIDs: droplets,
		ForwardingRules: []godo.ForwardingRule{{EntryProtocol: "tcp", EntryPort: 80, TargetProtocol: "tcp", TargetPort: 30080}},
		HealthCheck: &godo.HealthCheck{Protocol: "tcp", Port: 30080, CheckIntervalSeconds: 3, ResponseTimeoutSeconds: 3,
			HealthyThreshold: 2, UnhealthyThreshold: 2}}
}

// The API refuses what DigitalOcean refuses, with 422
// unprocessable_entity naming the field, and writes nothing.
func TestLBValidation(t *testing.T) {
	c := NewStarted(t, Options{})
	g := client(t, c)
	d := c.Put(Droplet{Name: "n1", PrivateIP: "127.0.83.40"})
	far := c.Put(Droplet{Name: "n2", Region: "fra1", PrivateIP: "127.0.83.41"})
	c.AddCertificate("cert-1")
	for name, tc := range map[string]struct {
		edit func(r *godo.LoadBalancerRequest)
		want string
	}{
		"no rules":       {func(r *godo.LoadBalancerRequest) { r.ForwardingRules = nil }, "forwarding_rules"},
		"bad name":       {func(r *godo.LoadBalancerRequest) { r.Name = "has space" }, "name"},
		"no region":      {func(r *godo.LoadBalancerRequest) { r.Region = "" }, "region is required"},
		"bad protocol":   {func(r *godo.LoadBalancerRequest) { r.ForwardingRules[0].EntryProtocol = "sctp" }, "entry_protocol"},
		"bad port":       {func(r *godo.LoadBalancerRequest) { r.ForwardingRules[0].EntryPort = 70000 }, "between 1 and 65535"},
		"https, no cert": {func(r *godo.LoadBalancerRequest) { r.ForwardingRules[0].EntryProtocol = "https" }, "certificate_id or tls_passthrough"},
		"unknown cert":   {func(r *godo.LoadBalancerRequest) { r.ForwardingRules[0] = httpsRule("cert-2") }, "certificate cert-2 was not found"},
		"cert and passthr": {func(r *godo.LoadBalancerRequest) {
			r.ForwardingRules[0] = httpsRule("cert-1")
			r.ForwardingRules[0].TlsPassthrough = true
		}, "not both"},
		"port twice": {func(r *godo.LoadBalancerRequest) {
			r.ForwardingRules = append(r.ForwardingRules, r.ForwardingRules[0])
		}, "used twice"},
		"interval":     {func(r *godo.LoadBalancerRequest) { r.HealthCheck.CheckIntervalSeconds = 2 }, "check_interval_seconds"},
		"threshold":    {func(r *godo.LoadBalancerRequest) { r.HealthCheck.HealthyThreshold = 11 }, "healthy_threshold"},
		"check proto":  {func(r *godo.LoadBalancerRequest) { r.HealthCheck.Protocol = "udp" }, "health_check protocol"},
		"size unit":    {func(r *godo.LoadBalancerRequest) { r.SizeUnit = 101 }, "size_unit"},
		"size twice":   {func(r *godo.LoadBalancerRequest) { r.SizeUnit, r.SizeSlug = 2, "lb-small" }, "only one of size"},
		"idle timeout": {func(r *godo.LoadBalancerRequest) { r.HTTPIdleTimeoutSeconds = godo.PtrTo(uint64(10)) }, "http_idle_timeout_seconds"},
		"firewall":     {func(r *godo.LoadBalancerRequest) { r.Firewall = &godo.LBFirewall{Allow: []string{"net:1.2.3.0/24"}} }, "firewall rule"},
		"no droplet":   {func(r *godo.LoadBalancerRequest) { r.DropletIDs = []int{12345} }, "droplet 12345 was not found"},
		"far droplet":  {func(r *godo.LoadBalancerRequest) { r.DropletIDs = []int{far.ID} }, "not in the load balancer's region"},
		"bad tag":      {func(r *godo.LoadBalancerRequest) { r.Tags = []string{"a b"} }, "tag"},
		"sticky":       {func(r *godo.LoadBalancerRequest) { r.StickySessions = &godo.StickySessions{Type: "cookies"} }, "cookie_name"},
		"network type": {func(r *godo.LoadBalancerRequest) { r.Type = "REGIONAL_NETWORK" }, "REGIONAL"},
	} {
		req := goodRequest(d.ID)
		tc.edit(req)
		_, _, err := g.LoadBalancers.Create(context.Background(), req)
		st, msg := apiStatus(err)
		var e *godo.ErrorResponse
		if st != http.StatusUnprocessableEntity || !strings.Contains(msg, tc.want) || !errors.As(err, &e) {
			t.Errorf("%s: %d %q, want 422 naming %q", name, st, msg, tc.want)
		}
	}
	if n := len(c.LoadBalancers()); n != 0 {
		t.Errorf("%d load balancers made from bad requests", n)
	}
	if _, _, err := g.LoadBalancers.Create(context.Background(), goodRequest(d.ID)); err != nil {
		t.Fatalf("a good request: %v", err)
	}
}

func httpsRule(cert string) godo.ForwardingRule {
	return godo.ForwardingRule{EntryProtocol: "https", EntryPort: 443, TargetProtocol: "http", TargetPort: 30080, CertificateID: cert}
}

// A load balancer is new, without an IP, until it is built (Settle, or
// the build time); then it is active, with its VIP, and carries traffic
// to its droplets' private addresses once they pass the health check.
// Updates keep its id and IP; a destroyed droplet leaves it; deleting it
// twice is a 404; calls are counted by method.
func TestLBLifecycle(t *testing.T) {
	c := NewStarted(t, Options{HealthCheckSecond: 20 * time.Millisecond})
	g := client(t, c)
	ctx := context.Background()
	d1 := c.Put(Droplet{Name: "n1", PrivateIP: "127.0.83.42"})
	d2 := c.Put(Droplet{Name: "n2", PrivateIP: "127.0.83.43"})
	for _, d := range []Droplet{d1, d2} {
		cloudtest.ServeName(t, d.PrivateIP+":30080", d.Name)
	}
	lb, resp, err := g.LoadBalancers.Create(ctx, goodRequest(d1.ID, d2.ID))
	if err != nil || resp.StatusCode != http.StatusAccepted || lb.Status != LBStatusNew || lb.IP != "" {
		t.Fatalf("create: %+v, %v, %v; want 202, new, no IP", lb, resp, err)
	}
	if got, _, _ := g.LoadBalancers.Get(ctx, lb.ID); got.Status != LBStatusNew {
		t.Fatalf("before settling: %s", got.Status)
	}
	if err := c.SettleLoadBalancers(); err != nil {
		t.Fatal(err)
	}
	got, _, err := g.LoadBalancers.Get(ctx, lb.ID)
	if err != nil || got.Status != LBStatusActive || !DataPlanePrefix.Contains(mustAddr(t, got.IP)) {
		t.Fatalf("settled: %+v, %v", got, err)
	}
	if answer := cloudtest.Ask(t, got.IP+":80", 10*time.Second); answer != "n1" && answer != "n2" {
		t.Errorf("through the load balancer: %q", answer)
	}

	req := goodRequest(d1.ID)
	req.ForwardingRules[0].EntryPort = 81
	up, _, err := g.LoadBalancers.Update(ctx, lb.ID, req)
	if err != nil || up.IP != got.IP || up.ID != lb.ID || len(up.DropletIDs) != 1 {
		t.Fatalf("update: %+v, %v", up, err)
	}
	if answer := cloudtest.Ask(t, got.IP+":81", 10*time.Second); answer != "n1" {
		t.Errorf("after the update: %q, want n1", answer)
	}
	c.Delete(d1.ID)
	if l, _ := c.LoadBalancer(lb.ID); len(l.DropletIDs) != 0 {
		t.Errorf("a destroyed droplet is still a target: %v", l.DropletIDs)
	}
	if _, err := g.LoadBalancers.Delete(ctx, lb.ID); err != nil {
		t.Fatal(err)
	}
	for what, err := range map[string]error{
		"delete": func() error { _, err := g.LoadBalancers.Delete(ctx, lb.ID); return err }(),
		"get":    func() error { _, _, err := g.LoadBalancers.Get(ctx, lb.ID); return err }(),
		"update": func() error { _, _, err := g.LoadBalancers.Update(ctx, lb.ID, req); return err }(),
	} {
		if st, _ := apiStatus(err); st != http.StatusNotFound {
			t.Errorf("%s of a deleted load balancer: %v, want 404", what, err)
		}
	}
	if _, err := net.DialTimeout("tcp", got.IP+":81", time.Second); err == nil {
		t.Error("the deleted load balancer's VIP still answers")
	}
	for m, want := range map[string]int{MethodLBCreate: 1, MethodLBGet: 3, MethodLBUpdate: 2, MethodLBDelete: 2} {
		if n := c.Calls(m); n != want {
			t.Errorf("calls of %s: %d, want %d", m, n, want)
		}
	}
}

// With a build time, a load balancer becomes active by itself.
func TestLBBuildTime(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	c := NewStarted(t, Options{LBBuildTime: time.Minute, Now: func() time.Time { return now }})
	g := client(t, c)
	lb, _, err := g.LoadBalancers.Create(context.Background(), goodRequest())
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	if got, _, err := g.LoadBalancers.Get(context.Background(), lb.ID); err != nil || got.Status != LBStatusActive || got.IP == "" {
		t.Fatalf("after the build time: %+v, %v", got, err)
	}
}

// The list is paged as the droplet list is; faults, the account's limit
// and the rate limit answer as DigitalOcean does.
func TestLBListAndLimits(t *testing.T) {
	c := NewStarted(t, Options{LBLimit: 3, HourlyLimit: 9})
	g := client(t, c)
	ctx := context.Background()
	for range 3 {
		if _, _, err := g.LoadBalancers.Create(ctx, goodRequest()); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := g.LoadBalancers.Create(ctx, goodRequest()); func() bool { st, _ := apiStatus(err); return st != http.StatusForbidden }() {
		t.Errorf("over the account's limit: %v, want 403", err)
	}
	var ids []string
	opt := &godo.ListOptions{Page: 1, PerPage: 2}
	for {
		lbs, resp, err := g.LoadBalancers.List(ctx, opt)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lbs {
			ids = append(ids, l.ID)
		}
		if resp.Links == nil || resp.Links.IsLastPage() {
			break
		}
		opt.Page++
	}
	if len(ids) != 3 || c.Calls(MethodLBList) != 2 {
		t.Errorf("listed %d in %d calls, want 3 in 2", len(ids), c.Calls(MethodLBList))
	}
	c.Fail(MethodLBGet, 1, http.StatusInternalServerError)
	if _, _, err := g.LoadBalancers.Get(ctx, ids[0]); func() bool { st, _ := apiStatus(err); return st != http.StatusInternalServerError }() {
		t.Errorf("an injected fault: %v", err)
	}
	for range 3 {
		_, _, err := g.LoadBalancers.Get(ctx, ids[0])
		if st, _ := apiStatus(err); st == http.StatusTooManyRequests {
			return
		}
	}
	t.Error("the rate limit did not answer 429")
}

func mustAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatalf("address %q: %v", s, err)
	}
	return a
}

// The data plane does what the load balancer holds: only droplets that
// pass the health check get traffic, and the firewall's allow rules
// admit only their sources.
func TestLBDataPlane(t *testing.T) {
	c := NewStarted(t, Options{HealthCheckSecond: 20 * time.Millisecond})
	g := client(t, c)
	ctx := context.Background()
	up := c.Put(Droplet{Name: "up", PrivateIP: "127.0.83.44"})
	down := c.Put(Droplet{Name: "down", PrivateIP: "127.0.83.45"})
	cloudtest.ServeName(t, up.PrivateIP+":30080", up.Name)
	cloudtest.ServeName(t, down.PrivateIP+":30080", down.Name)
	healthz := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
		}
	})}
	ln, err := net.Listen("tcp", up.PrivateIP+":10256")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = healthz.Serve(ln) }()
	t.Cleanup(func() { healthz.Close() })

	req := goodRequest(up.ID, down.ID)
	req.HealthCheck = &godo.HealthCheck{Protocol: "http", Port: 10256, Path: "/healthz", CheckIntervalSeconds: 3,
		ResponseTimeoutSeconds: 3, HealthyThreshold: 2, UnhealthyThreshold: 2}
	req.Firewall = &godo.LBFirewall{Allow: []string{"ip:127.0.0.1"}}
	lb, _, err := g.LoadBalancers.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SettleLoadBalancers(); err != nil {
		t.Fatal(err)
	}
	l, _ := c.LoadBalancer(lb.ID)
	for range 6 {
		if got := cloudtest.Ask(t, l.IP+":80", 10*time.Second); got != "up" {
			t.Fatalf("through the load balancer: %q, want only the droplet that passes its health check", got)
		}
	}
	if h := c.Healthy(lb.ID); h[80] != 1 {
		t.Errorf("healthy droplets: %v, want 1 on port 80", h)
	}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}, Timeout: time.Second}
	if conn, err := d.Dial("tcp", l.IP+":80"); err == nil {
		_ = conn.SetReadDeadline(time.Now().Add(time.Second))
		line, _ := bufio.NewReader(conn).ReadString('\n')
		conn.Close()
		if line != "" {
			t.Errorf("a source outside the allow rules got %q", line)
		}
	}
}
