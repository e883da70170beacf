package linodetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/linode/linodego"
	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// apiErr is a linodego error's status and its first reason's field.
func apiErr(err error) (int, string) {
	var e *linodego.Error
	if !errors.As(err, &e) {
		return 0, ""
	}
	// linodego writes a reason with a field as "[field] reason".
	field := ""
	if i := strings.LastIndex(e.Message, "] "); i > 0 {
		if j := strings.LastIndex(e.Message[:i], " ["); j >= 0 {
			field = e.Message[j+2 : i]
		} else if strings.HasPrefix(e.Message, "[") {
			field = e.Message[1:i]
		}
	}
	return e.Code, field
}

func ptr[T any](v T) *T { return &v }

// config is a valid tcp config of port to addresses.
func config(port int, addrs ...string) linodego.NodeBalancerConfigCreateOptions {
	cf := linodego.NodeBalancerConfigCreateOptions{Port: port, Protocol: linodego.ProtocolTCP, Check: linodego.CheckConnection,
		CheckInterval: 5, CheckTimeout: 3, CheckAttempts: 2}
	for i, a := range addrs {
		cf.Nodes = append(cf.Nodes, linodego.NodeBalancerNodeCreateOptions{Address: a, Label: fmt.Sprintf("node-%d", i), Weight: 100, Mode: linodego.ModeAccept})
	}
	return cf
}

// The NodeBalancer API through linodego: create with configs and nodes
// (an address on loopback and a hostname that begins with it), list in
// pages, get, update, a config's rebuild, create and delete, and delete;
// each call counted by its method.
func TestNodeBalancersWithLinodego(t *testing.T) {
	c := NewStarted(t, Options{})
	lc := client(t, c, c.Token())
	ctx := context.Background()
	in := c.Put(Instance{Label: "web-1", PublicIP: "127.0.96.1", PrivateIP: "127.0.95.1"})
	in2 := c.Put(Instance{Label: "web-2", PublicIP: "127.0.96.2", PrivateIP: "127.0.95.2"})
	cf := config(80, in.PrivateIP+":30080")
	nb, err := lc.CreateNodeBalancer(ctx, linodego.NodeBalancerCreateOptions{Label: ptr("web-lb"), Region: "us-east",
		ClientConnThrottle: ptr(5), Tags: []string{"team-a"}, Configs: []*linodego.NodeBalancerConfigCreateOptions{&cf}})
	if err != nil {
		t.Fatal(err)
	}
	if nb.IPv4 == nil || !DataPlanePrefix.Contains(mustAddr(t, *nb.IPv4)) || nb.Hostname == nil ||
		*nb.Hostname != *nb.IPv4+HostnameSuffix || nb.ClientConnThrottle != 5 ||
		*nb.Label != "web-lb" || nb.Region != "us-east" || nb.Type != linodego.NBTypeCommon || nb.Created == nil {
		t.Fatalf("created %+v", nb)
	}
	got, err := lc.GetNodeBalancer(ctx, nb.ID)
	if err != nil || *got.IPv4 != *nb.IPv4 {
		t.Fatalf("get: %+v, %v", got, err)
	}
	cfs, err := lc.ListNodeBalancerConfigs(ctx, nb.ID, nil)
	if err != nil || len(cfs) != 1 || cfs[0].Port != 80 || cfs[0].Protocol != linodego.ProtocolTCP || cfs[0].Stickiness != "none" || cfs[0].CipherSuite != "recommended" ||
		cfs[0].NodeBalancerID != nb.ID || !cfs[0].CheckPassive {
		t.Fatalf("configs %+v, %v", cfs, err)
	}
	nodes, err := lc.ListNodeBalancerNodes(ctx, nb.ID, cfs[0].ID, nil)
	if err != nil || len(nodes) != 1 || nodes[0].Address != in.PrivateIP+":30080" || nodes[0].Mode != linodego.ModeAccept {
		t.Fatalf("nodes %+v, %v", nodes, err)
	}
	// Rebuild: the nodes given replace the config's.
	rb := cfs[0].GetRebuildOptions()
	rb.Nodes = []linodego.NodeBalancerConfigRebuildNodeOptions{
		{NodeBalancerNodeCreateOptions: linodego.NodeBalancerNodeCreateOptions{Address: in2.PrivateIP + ":30080", Label: "web-2"}}}
	if _, err := lc.RebuildNodeBalancerConfig(ctx, nb.ID, cfs[0].ID, rb); err != nil {
		t.Fatal(err)
	}
	nodes, _ = lc.ListNodeBalancerNodes(ctx, nb.ID, cfs[0].ID, nil)
	if len(nodes) != 1 || nodes[0].Address != in2.PrivateIP+":30080" {
		t.Fatalf("after rebuild: %+v", nodes)
	}
	udp := config(53)
	udp.Protocol, udp.Check, udp.UDPCheckPort = linodego.ProtocolUDP, linodego.CheckNone, ptr(8053)
	if _, err := lc.CreateNodeBalancerConfig(ctx, nb.ID, udp); err != nil {
		t.Fatal(err)
	}
	tags := []string{"team-b"}
	if up, err := lc.UpdateNodeBalancer(ctx, nb.ID, linodego.NodeBalancerUpdateOptions{Tags: &tags, ClientConnThrottle: ptr(0)}); err != nil ||
		up.ClientConnThrottle != 0 || len(up.Tags) != 1 || up.Tags[0] != "team-b" || *up.IPv4 != *nb.IPv4 {
		t.Fatalf("update: %+v, %v", up, err)
	}
	if err := lc.DeleteNodeBalancerConfig(ctx, nb.ID, cfs[0].ID); err != nil {
		t.Fatal(err)
	}
	if cfs, _ := lc.ListNodeBalancerConfigs(ctx, nb.ID, nil); len(cfs) != 1 || cfs[0].Port != 53 || cfs[0].Stickiness != "session" ||
		cfs[0].CheckPassive || cfs[0].CipherSuite != "none" || cfs[0].UDPCheckPort != 8053 {
		t.Fatalf("configs after delete: %+v", cfs)
	}
	// Pages of 25.
	for i := range 30 {
		c.PutNodeBalancer(NodeBalancer{Label: fmt.Sprintf("other-%d", i)})
	}
	opts := &linodego.ListOptions{PageOptions: &linodego.PageOptions{Page: 2}, PageSize: 25}
	page, err := lc.ListNodeBalancers(ctx, opts)
	if err != nil || len(page) != 6 || opts.Pages != 2 || opts.Results != 31 {
		t.Fatalf("page 2: %d, pages %d, results %d, %v", len(page), opts.Pages, opts.Results, err)
	}
	byIP, err := lc.ListNodeBalancers(ctx, &linodego.ListOptions{Filter: fmt.Sprintf(`{"ipv4": %q}`, *nb.IPv4)})
	if err != nil || len(byIP) != 1 || byIP[0].ID != nb.ID {
		t.Fatalf("filtered by ipv4: %+v, %v", byIP, err)
	}
	if err := lc.DeleteNodeBalancer(ctx, nb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.GetNodeBalancer(ctx, nb.ID); !linodego.IsNotFound(err) {
		t.Fatalf("deleted: %v", err)
	}
	if err := lc.DeleteNodeBalancer(ctx, nb.ID); !linodego.IsNotFound(err) {
		t.Fatalf("deleted twice: %v", err)
	}
	for m, want := range map[string]int{MethodLBCreate: 1, MethodLBDelete: 2, MethodLBList: 2} {
		if got := c.Calls(m); got != want {
			t.Errorf("calls of %s: %d, want %d", m, got, want)
		}
	}
	if got := c.Calls(MethodLBUpdate); got != 4 {
		t.Errorf("calls of %s: %d, want 4 (rebuild, config create, update, config delete)", MethodLBUpdate, got)
	}
	// A fault of a method.
	c.Fail(MethodLBCreate, 1, http.StatusServiceUnavailable)
	if _, err := lc.CreateNodeBalancer(ctx, linodego.NodeBalancerCreateOptions{Region: "us-east"}); !linodego.ErrHasStatus(err, http.StatusServiceUnavailable) {
		t.Fatalf("injected fault: %v", err)
	}
}

func mustAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// The API's validation: each bad request is a 400 naming its field, and
// nothing is made.
func TestNodeBalancerValidation(t *testing.T) {
	c := NewStarted(t, Options{})
	lc := client(t, c, c.Token())
	ctx := context.Background()
	in := c.Put(Instance{Label: "web-1", PublicIP: "127.0.96.1", PrivateIP: "127.0.95.1"})
	node := in.PrivateIP + ":30080"
	c.PutNodeBalancer(NodeBalancer{Label: "taken"})
	for _, tc := range []struct {
		name, field string
		edit        func(o *linodego.NodeBalancerCreateOptions, cf *linodego.NodeBalancerConfigCreateOptions)
	}{
		{"no region", "region", func(o *linodego.NodeBalancerCreateOptions, _ *linodego.NodeBalancerConfigCreateOptions) {
			o.Region = ""
		}},
		{"short label", "label", func(o *linodego.NodeBalancerCreateOptions, _ *linodego.NodeBalancerConfigCreateOptions) {
			o.Label = ptr("ab")
		}},
		{"label with a space", "label", func(o *linodego.NodeBalancerCreateOptions, _ *linodego.NodeBalancerConfigCreateOptions) {
			o.Label = ptr("a b c")
		}},
		{"label taken", "label", func(o *linodego.NodeBalancerCreateOptions, _ *linodego.NodeBalancerConfigCreateOptions) {
			o.Label = ptr("taken")
		}},
		{"throttle 21", "client_conn_throttle", func(o *linodego.NodeBalancerCreateOptions, _ *linodego.NodeBalancerConfigCreateOptions) {
			o.ClientConnThrottle = ptr(21)
		}},
		{"short tag", "tags[0]", func(o *linodego.NodeBalancerCreateOptions, _ *linodego.NodeBalancerConfigCreateOptions) {
			o.Tags = []string{"x"}
		}},
		{"firewall", "firewall_id", func(o *linodego.NodeBalancerCreateOptions, _ *linodego.NodeBalancerConfigCreateOptions) {
			o.FirewallID = 7
		}},
		{"port 0", "configs[0].port", func(_ *linodego.NodeBalancerCreateOptions, cf *linodego.NodeBalancerConfigCreateOptions) { cf.Port = 0 }},
		{"timeout not below interval", "configs[0].check_timeout", func(_ *linodego.NodeBalancerCreateOptions, cf *linodego.NodeBalancerConfigCreateOptions) {
			cf.CheckTimeout = 5
		}},
		{"attempts 31", "configs[0].check_attempts", func(_ *linodego.NodeBalancerCreateOptions, cf *linodego.NodeBalancerConfigCreateOptions) {
			cf.CheckAttempts = 31
		}},
		{"PROXY protocol on http", "configs[0].proxy_protocol", func(_ *linodego.NodeBalancerCreateOptions, cf *linodego.NodeBalancerConfigCreateOptions) {
			cf.Protocol, cf.ProxyProtocol = linodego.ProtocolHTTP, linodego.ProxyProtocolV2
		}},
		{"https without a certificate", "configs[0].ssl_cert", func(_ *linodego.NodeBalancerCreateOptions, cf *linodego.NodeBalancerConfigCreateOptions) {
			cf.Protocol = linodego.ProtocolHTTPS
		}},
		{"http check without a path", "configs[0].check_path", func(_ *linodego.NodeBalancerCreateOptions, cf *linodego.NodeBalancerConfigCreateOptions) {
			cf.Check = linodego.CheckHTTP
		}},
		{"source on udp", "configs[0].algorithm", func(_ *linodego.NodeBalancerCreateOptions, cf *linodego.NodeBalancerConfigCreateOptions) {
			cf.Protocol, cf.Algorithm, cf.Nodes[0].Mode = linodego.ProtocolUDP, linodego.AlgorithmSource, ""
		}},
		{"public node", "configs[0].nodes[0].address", func(_ *linodego.NodeBalancerCreateOptions, cf *linodego.NodeBalancerConfigCreateOptions) {
			cf.Nodes[0].Address = in.PublicIP + ":30080"
		}},
		{"node without a port", "configs[0].nodes[0].address", func(_ *linodego.NodeBalancerCreateOptions, cf *linodego.NodeBalancerConfigCreateOptions) {
			cf.Nodes[0].Address = in.PrivateIP
		}},
		{"node weight 256", "configs[0].nodes[0].weight", func(_ *linodego.NodeBalancerCreateOptions, cf *linodego.NodeBalancerConfigCreateOptions) {
			cf.Nodes[0].Weight = 256
		}},
		{"node label short", "configs[0].nodes[0].label", func(_ *linodego.NodeBalancerCreateOptions, cf *linodego.NodeBalancerConfigCreateOptions) {
			cf.Nodes[0].Label = "n"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cf := config(80, node)
			o := linodego.NodeBalancerCreateOptions{Region: "us-east", Tags: []string{}}
			tc.edit(&o, &cf)
			o.Configs = []*linodego.NodeBalancerConfigCreateOptions{&cf}
			_, err := lc.CreateNodeBalancer(ctx, o)
			if status, field := apiErr(err); status != http.StatusBadRequest || field != tc.field {
				t.Fatalf("%v: status %d field %q, want 400 %q", err, status, field, tc.field)
			}
		})
	}
	cf1, cf2 := config(80, node), config(80, node)
	_, err := lc.CreateNodeBalancer(ctx, linodego.NodeBalancerCreateOptions{Region: "us-east",
		Configs: []*linodego.NodeBalancerConfigCreateOptions{&cf1, &cf2}})
	if status, field := apiErr(err); status != http.StatusBadRequest || field != "configs[1].port" {
		t.Fatalf("a port twice: %v", err)
	}
	if n := len(c.NodeBalancers()); n != 1 {
		t.Fatalf("NodeBalancers: %d, want the one put", n)
	}
	if _, err := lc.GetNodeBalancer(ctx, 1); !linodego.IsNotFound(err) {
		t.Fatalf("unknown id: %v", err)
	}
	if _, err := lc.ListNodeBalancerConfigs(ctx, 1, nil); !linodego.IsNotFound(err) {
		t.Fatalf("configs of an unknown id: %v", err)
	}
}

// A NodeBalancer forwards each config's port on its address to the
// config's nodes, and stops with the endpoint.
func TestNodeBalancerDataPlane(t *testing.T) {
	c, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	in := c.Put(Instance{Label: "web-1", PublicIP: "127.0.96.1", PrivateIP: "127.0.95.1"})
	ln := cloudtest.ServeName(t, in.PrivateIP+":0", "web-1")
	lc := client(t, c, c.Token())
	cf := config(8080, ln.Addr().String())
	cf.CheckInterval, cf.CheckTimeout = 2, 1
	nb, err := lc.CreateNodeBalancer(context.Background(), linodego.NodeBalancerCreateOptions{Region: "us-east",
		Configs: []*linodego.NodeBalancerConfigCreateOptions{&cf}})
	if err != nil {
		t.Fatal(err)
	}
	vip := net.JoinHostPort(*nb.IPv4, "8080")
	if line := cloudtest.Ask(t, vip, 20*time.Second); line != "web-1" {
		t.Fatalf("through %s: %q", vip, line)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if conn, err := net.DialTimeout("tcp", vip, time.Second); err == nil {
		conn.Close()
		t.Fatal("the NodeBalancer still answers after Close")
	}
}
