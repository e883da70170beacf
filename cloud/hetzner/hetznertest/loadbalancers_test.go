package hetznertest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// lbClient is hcloud-go against the endpoint, polling actions a
// millisecond apart and not retrying.
func lbClient(c *Cloud) *hcloud.Client {
	return hcloud.NewClient(hcloud.WithEndpoint(c.Endpoint()), hcloud.WithToken(c.Token()),
		hcloud.WithPollOpts(hcloud.PollOpts{BackoffFunc: hcloud.ConstantBackoff(time.Millisecond)}),
		hcloud.WithRetryOpts(hcloud.RetryOpts{MaxRetries: 0}))
}

func isCode(t *testing.T, what string, err error, code hcloud.ErrorCode, field string) {
	t.Helper()
	if !hcloud.IsError(err, code) {
		t.Errorf("%s: %v, want %s", what, err, code)
		return
	}
	if field == "" {
		return
	}
	var apiErr hcloud.Error
	if he, ok := err.(hcloud.Error); ok {
		apiErr = he
	}
	d, _ := apiErr.Details.(hcloud.ErrorDetailsInvalidInput)
	for _, f := range d.Fields {
		if f.Name == field {
			return
		}
	}
	t.Errorf("%s: %v, want details naming field %s", what, err, field)
}

// The load balancer API through hcloud-go: what it refuses, with the
// API's codes and statuses; actions running, then done; the data plane.
func TestLoadBalancerAPI(t *testing.T) {
	ctx := context.Background()
	c := NewStarted(t, Options{})
	hc := lbClient(c)
	srv := c.Put(Server{Name: "web-1", PublicIPv4: "127.0.86.90", PrivateNets: []PrivateNet{{Network: DefaultNetworkID, IP: "127.0.85.90"}}})
	bare := c.Put(Server{Name: "web-2"})
	// A stand-in for the target's node port.
	cloudtest.ServeName(t, "127.0.86.90:30080", "web-1")
	svc := hcloud.LoadBalancerCreateOptsService{Protocol: "tcp", ListenPort: hcloud.Ptr(8080), DestinationPort: hcloud.Ptr(30080)}
	create := func(name string, edit func(*hcloud.LoadBalancerCreateOpts)) (hcloud.LoadBalancerCreateResult, error) {
		o := hcloud.LoadBalancerCreateOpts{Name: name, LoadBalancerType: &hcloud.LoadBalancerType{Name: "lb11"},
			Location: &hcloud.Location{Name: "fsn1"}, Services: []hcloud.LoadBalancerCreateOptsService{svc},
			Targets: []hcloud.LoadBalancerCreateOptsTarget{{Type: "server", Server: hcloud.LoadBalancerCreateOptsTargetServer{Server: &hcloud.Server{ID: srv.ID}}}}}
		if edit != nil {
			edit(&o)
		}
		res, _, err := hc.LoadBalancer.Create(ctx, o)
		return res, err
	}
	res, err := create("lb", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Action.Status != hcloud.ActionStatusRunning || res.Action.Command != "create_load_balancer" {
		t.Errorf("create's action: %+v, want create_load_balancer running", res.Action)
	}
	if err := hc.Action.WaitFor(ctx, res.Action); err != nil {
		t.Fatal(err)
	}
	lb := res.LoadBalancer
	if ip := lb.PublicNet.IPv4.IP; ip == nil || !DataPlanePrefix.Contains(netipOf(ip)) || lb.PublicNet.IPv6.IP != nil {
		t.Errorf("addresses: %v %v, want an IPv4 in %s and no IPv6", ip, lb.PublicNet.IPv6.IP, DataPlanePrefix)
	}
	// Checks of a create.
	for what, tc := range map[string]struct {
		edit  func(*hcloud.LoadBalancerCreateOpts)
		code  hcloud.ErrorCode
		field string
	}{
		"no location":      {func(o *hcloud.LoadBalancerCreateOpts) { o.Location = nil }, hcloud.ErrorCodeInvalidInput, "location"},
		"unknown location": {func(o *hcloud.LoadBalancerCreateOpts) { o.Location.Name = "mars1" }, hcloud.ErrorCodeInvalidInput, "location"},
		"unknown type": {func(o *hcloud.LoadBalancerCreateOpts) { o.LoadBalancerType.Name = "lb99" }, hcloud.ErrorCodeInvalidInput,
			"load_balancer_type"},
		"taken name": {func(o *hcloud.LoadBalancerCreateOpts) { o.Name = "lb" }, hcloud.ErrorCodeUniquenessError, ""},
		"reserved label": {func(o *hcloud.LoadBalancerCreateOpts) { o.Labels = map[string]string{"hetzner.cloud/x": "1"} },
			hcloud.ErrorCodeInvalidInput, "labels"},
		"long label value": {func(o *hcloud.LoadBalancerCreateOpts) { o.Labels = map[string]string{"a": strings.Repeat("x", 64)} },
			hcloud.ErrorCodeInvalidInput, "labels"},
		"https without a certificate": {func(o *hcloud.LoadBalancerCreateOpts) { o.Services[0].Protocol = "https" }, hcloud.ErrorCodeInvalidInput,
			"http.certificates"},
		"port twice": {func(o *hcloud.LoadBalancerCreateOpts) { o.Services = append(o.Services, svc) }, hcloud.ErrorCodeSourcePortAlreadyUsed, ""},
		"private target without a network": {func(o *hcloud.LoadBalancerCreateOpts) { o.Targets[0].UsePrivateIP = hcloud.Ptr(true) },
			hcloud.ErrorCodeLoadBalancerNotAttachedToNetwork, ""},
		"no public interface, no network": {func(o *hcloud.LoadBalancerCreateOpts) { o.PublicInterface = hcloud.Ptr(false) },
			hcloud.ErrorCodeLoadBalancerNotAttachedToNetwork, ""},
		"target without a public IPv4": {func(o *hcloud.LoadBalancerCreateOpts) { o.Targets[0].Server.Server.ID = bare.ID },
			hcloud.ErrorCodeMissingIPv4, ""},
	} {
		_, err := create("lb-"+strings.ReplaceAll(what, " ", "-"), tc.edit)
		isCode(t, what, err, tc.code, tc.field)
	}
	if n := len(c.LoadBalancers()); n != 1 {
		t.Fatalf("load balancers after refused creates: %d", n)
	}

	// Actions on it.
	_, _, err = hc.LoadBalancer.AddServerTarget(ctx, lb, hcloud.LoadBalancerAddServerTargetOpts{Server: &hcloud.Server{ID: srv.ID}})
	isCode(t, "the same target again", err, hcloud.ErrorCodeTargetAlreadyDefined, "")
	a, _, err := hc.LoadBalancer.AttachToNetwork(ctx, lb, hcloud.LoadBalancerAttachToNetworkOpts{Network: &hcloud.Network{ID: DefaultNetworkID}})
	if err != nil || hc.Action.WaitFor(ctx, a) != nil {
		t.Fatal(err)
	}
	_, _, err = hc.LoadBalancer.AttachToNetwork(ctx, lb, hcloud.LoadBalancerAttachToNetworkOpts{Network: &hcloud.Network{ID: DefaultNetworkID}})
	isCode(t, "attached twice", err, hcloud.ErrorCodeLoadBalancerAlreadyAttached, "")
	_, _, err = hc.LoadBalancer.AddServerTarget(ctx, lb, hcloud.LoadBalancerAddServerTargetOpts{Server: &hcloud.Server{ID: bare.ID}, UsePrivateIP: hcloud.Ptr(true)})
	isCode(t, "a private target outside the network", err, hcloud.ErrorCodeServerNotAttachedToNetwork, "")
	_, _, err = hc.LoadBalancer.DeleteService(ctx, lb, 9999)
	isCode(t, "deleting a port it lacks", err, hcloud.ErrorCodeNotFound, "")
	c.FailAction("change_algorithm", "conflict", "busy")
	a, _, err = hc.LoadBalancer.ChangeAlgorithm(ctx, lb, hcloud.LoadBalancerChangeAlgorithmOpts{Type: "least_connections"})
	if err != nil {
		t.Fatal(err)
	}
	if err := hc.Action.WaitFor(ctx, a); err == nil || !strings.Contains(err.Error(), "conflict") {
		t.Errorf("failed action: %v", err)
	}
	if got, _ := c.LoadBalancer(lb.ID); got.Algorithm != "round_robin" {
		t.Errorf("a failed action's change was made: %s", got.Algorithm)
	}
	got, _, err := hc.LoadBalancer.GetByID(ctx, lb.ID)
	if err != nil || got.PrivateNet[0].Network.ID != DefaultNetworkID || !DataPlanePrefix.Contains(netipOf(got.PrivateNet[0].IP)) {
		t.Fatalf("after attaching: %+v, %v", got, err)
	}

	// The data plane forwards the listen port to the target's public IPv4
	// (its stand-in listening since before the load balancer was made, so
	// that the first health check passes).
	if answer := cloudtest.Ask(t, net.JoinHostPort(got.PublicNet.IPv4.IP.String(), "8080"), 10*time.Second); answer != "web-1" {
		t.Fatalf("through the load balancer: %q, want web-1", answer)
	}

	// Actions need their ids; an unknown id is not found.
	resp, _ := cloudtest.Send(t, http.MethodGet, c.Endpoint()+"/actions", map[string]string{"Authorization": "Bearer " + c.Token()})
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("actions without ids: %d, want 400", resp.StatusCode)
	}
	if a, _, err := hc.Action.GetByID(ctx, 1); a != nil || err != nil {
		t.Errorf("an unknown action: %+v, %v", a, err)
	}

	// Deleted: gone, then not found; the VIP is free.
	dres, _, err := hc.LoadBalancer.DeleteWithResult(ctx, lb)
	if err != nil || hc.Action.WaitFor(ctx, dres.Action) != nil {
		t.Fatal(err)
	}
	if l, _, err := hc.LoadBalancer.GetByID(ctx, lb.ID); l != nil || err != nil {
		t.Errorf("after deletion: %+v, %v", l, err)
	}
	_, _, err = hc.LoadBalancer.DeleteWithResult(ctx, lb)
	isCode(t, "deleting twice", err, hcloud.ErrorCodeNotFound, "")
	for m, want := range map[string]int{"lb-create": 12, "lb-delete": 2} {
		if got := c.Calls(m); got != want {
			t.Errorf("%s calls: %d, want %d", m, got, want)
		}
	}
}

// The list pages as the servers' does, and selects by label and name.
func TestLoadBalancerList(t *testing.T) {
	ctx := context.Background()
	c := NewStarted(t, Options{PageLimit: 2})
	hc := lbClient(c)
	for i := range 5 {
		if _, err := c.PutLoadBalancer(LoadBalancer{Name: fmt.Sprintf("lb-%d", i), Labels: map[string]string{"n": fmt.Sprint(i % 2)}}); err != nil {
			t.Fatal(err)
		}
	}
	all, err := hc.LoadBalancer.All(ctx)
	if err != nil || len(all) != 5 || c.Calls("lb-list") != 3 {
		t.Fatalf("all: %d, %v in %d calls, want 5 in 3", len(all), err, c.Calls("lb-list"))
	}
	odd, err := hc.LoadBalancer.AllWithOpts(ctx, hcloud.LoadBalancerListOpts{ListOpts: hcloud.ListOpts{LabelSelector: "n==1"}})
	if err != nil || len(odd) != 2 {
		t.Errorf("n==1: %d, %v", len(odd), err)
	}
	one, _, err := hc.LoadBalancer.GetByName(ctx, "lb-3")
	if err != nil || one == nil || one.Name != "lb-3" {
		t.Errorf("by name: %+v, %v", one, err)
	}
	c.Fail("lb-list", 1, http.StatusServiceUnavailable, "unavailable")
	if _, err := hc.LoadBalancer.All(ctx); err == nil {
		t.Error("an injected fault: no error")
	}
}

func netipOf(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip.To4())
	return a
}

// With actions that take a while, a second action on a load balancer
// while the first runs is 423 locked; WaitFor sees it end.
func TestLoadBalancerLocked(t *testing.T) {
	ctx := context.Background()
	c := NewStarted(t, Options{ActionTime: 300 * time.Millisecond})
	hc := lbClient(c)
	l, err := c.PutLoadBalancer(LoadBalancer{Name: "lb"})
	if err != nil {
		t.Fatal(err)
	}
	lb := &hcloud.LoadBalancer{ID: l.ID}
	a, _, err := hc.LoadBalancer.ChangeAlgorithm(ctx, lb, hcloud.LoadBalancerChangeAlgorithmOpts{Type: "least_connections"})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = hc.LoadBalancer.ChangeType(ctx, lb, hcloud.LoadBalancerChangeTypeOpts{LoadBalancerType: &hcloud.LoadBalancerType{Name: "lb21"}})
	isCode(t, "an action while another runs", err, hcloud.ErrorCodeLocked, "")
	if err := hc.Action.WaitFor(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, _, err = hc.LoadBalancer.ChangeType(ctx, lb, hcloud.LoadBalancerChangeTypeOpts{LoadBalancerType: &hcloud.LoadBalancerType{Name: "lb21"}}); err != nil {
		t.Errorf("after the first action ended: %v", err)
	}
}

// Load balancer calls spend the project's request budget as every call
// does: over it, 429 rate_limit_exceeded.
func TestLoadBalancerRateLimit(t *testing.T) {
	c := NewStarted(t, Options{RateLimit: 3})
	hc := lbClient(c)
	for i := range 3 {
		if _, _, err := hc.LoadBalancer.List(context.Background(), hcloud.LoadBalancerListOpts{}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	_, _, err := hc.LoadBalancer.List(context.Background(), hcloud.LoadBalancerListOpts{})
	isCode(t, "over the budget", err, hcloud.ErrorCodeRateLimitExceeded, "")
}
