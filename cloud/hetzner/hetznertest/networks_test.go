package hetznertest

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"
)

func netClient(c *Cloud) *hcloud.Client {
	return hcloud.NewClient(hcloud.WithEndpoint(c.Endpoint()), hcloud.WithToken(c.Token()),
		hcloud.WithRetryOpts(hcloud.RetryOpts{MaxRetries: 0, BackoffFunc: hcloud.ConstantBackoff(0)}),
		hcloud.WithPollOpts(hcloud.PollOpts{BackoffFunc: hcloud.ConstantBackoff(10 * time.Millisecond)}))
}

func route(t *testing.T, dest, gw string) hcloud.NetworkRoute {
	t.Helper()
	_, d, err := net.ParseCIDR(dest)
	if err != nil {
		t.Fatal(err)
	}
	return hcloud.NetworkRoute{Destination: d, Gateway: net.ParseIP(gw)}
}

// The networks API as hcloud-go reads it: the network with its subnet,
// routes and attached servers, by id and by name; add_route and
// delete_route answer running actions that WaitFor sees succeed; the API's
// checks answer its errors.
func TestNetworksAPI(t *testing.T) {
	ctx := context.Background()
	c := NewStarted(t, Options{})
	c.PutNetwork(Network{ID: DefaultNetworkID, Name: "k8s-net", IPRange: "127.0.0.0/8"})
	srv := c.Put(Server{Name: "web-1", PrivateNets: []PrivateNet{{Network: DefaultNetworkID, IP: "127.0.85.1"}}})
	c.Put(Server{Name: "other", PrivateNets: []PrivateNet{{Network: 99, IP: "127.0.87.1"}}})
	hc := netClient(c)

	n, _, err := hc.Network.GetByName(ctx, "k8s-net")
	if err != nil || n == nil || n.ID != DefaultNetworkID || n.IPRange.String() != "127.0.0.0/8" || len(n.Subnets) != 1 ||
		len(n.Servers) != 1 || n.Servers[0].ID != srv.ID {
		t.Fatalf("by name: %+v %v", n, err)
	}
	if n, _, err := hc.Network.GetByID(ctx, 5); n != nil || err != nil {
		t.Fatalf("unknown id: %+v %v (hcloud-go turns not_found into nil)", n, err)
	}
	s, _, err := hc.Server.GetByID(ctx, srv.ID)
	if err != nil || s.PrivateNetFor(n) == nil || s.PrivateNetFor(n).IP.String() != "127.0.85.1" {
		t.Fatalf("server's private_net: %+v %v", s, err)
	}

	act, _, err := hc.Network.AddRoute(ctx, n, hcloud.NetworkAddRouteOpts{Route: route(t, "10.244.1.0/24", "127.0.85.1")})
	if err != nil || act.Status != hcloud.ActionStatusRunning || act.Command != "add_route" || len(act.Resources) != 1 ||
		act.Resources[0].Type != hcloud.ActionResourceTypeNetwork {
		t.Fatalf("add_route: %+v %v", act, err)
	}
	if err := hc.Action.WaitFor(ctx, act); err != nil {
		t.Fatal(err)
	}
	n, _, _ = hc.Network.GetByID(ctx, DefaultNetworkID)
	if len(n.Routes) != 1 || n.Routes[0].Destination.String() != "10.244.1.0/24" || n.Routes[0].Gateway.String() != "127.0.85.1" {
		t.Fatalf("routes %+v", n.Routes)
	}

	for _, tc := range []struct{ dest, gw, code, msg string }{
		{"10.244.0.0/16", "127.0.85.1", "invalid_input", "overlaps"},                          // another route's
		{"127.99.0.0/16", "127.0.85.1", "invalid_input", "private IPv4 range"},                // not RFC 1918
		{"10.245.0.0/24", "192.168.1.1", "invalid_input", "not part of the network IP range"}, // gateway outside
		{"10.245.0.0/24", "127.0.0.0", "invalid_input", "invalid gateway"},                    // the range's first
		{"172.31.1.0/24", "127.0.85.1", "invalid_input", "172.31.1.1"},                        // the public gateway
	} {
		_, _, err := hc.Network.AddRoute(ctx, n, hcloud.NetworkAddRouteOpts{Route: route(t, tc.dest, tc.gw)})
		if !hcloud.IsError(err, hcloud.ErrorCode(tc.code)) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s via %s: %v", tc.dest, tc.gw, err)
		}
	}
	_, _, err = hc.Network.DeleteRoute(ctx, n, hcloud.NetworkDeleteRouteOpts{Route: route(t, "10.244.9.0/24", "127.0.85.1")})
	if !hcloud.IsError(err, hcloud.ErrorCodeNotFound) {
		t.Fatalf("deleting a route the network lacks: %v", err)
	}
	_, _, err = hc.Network.AddRoute(ctx, &hcloud.Network{ID: 5}, hcloud.NetworkAddRouteOpts{Route: route(t, "10.244.2.0/24", "127.0.85.1")})
	if !hcloud.IsError(err, hcloud.ErrorCodeNotFound) {
		t.Fatalf("a route in an unknown network: %v", err)
	}

	act, _, err = hc.Network.DeleteRoute(ctx, n, hcloud.NetworkDeleteRouteOpts{Route: route(t, "10.244.1.0/24", "127.0.85.1")})
	if err != nil {
		t.Fatal(err)
	}
	if err := hc.Action.WaitFor(ctx, act); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Network(DefaultNetworkID); len(n.Routes) != 0 {
		t.Fatalf("routes %+v", n.Routes)
	}
	if c.Calls("route-create") != 7 || c.Calls("route-delete") != 2 || c.Calls("network-list") != 1 {
		t.Fatalf("calls: create %d delete %d network-list %d", c.Calls("route-create"), c.Calls("route-delete"), c.Calls("network-list"))
	}
}

// While a network's action runs, other changes of it are 409 conflict; a
// failed action (FailAction) leaves the route as it was.
func TestNetworkConflictAndFailedAction(t *testing.T) {
	ctx := context.Background()
	c := NewStarted(t, Options{ActionTime: time.Hour})
	c.PutNetwork(Network{ID: DefaultNetworkID})
	hc := netClient(c)
	n := &hcloud.Network{ID: DefaultNetworkID}
	if _, _, err := hc.Network.AddRoute(ctx, n, hcloud.NetworkAddRouteOpts{Route: route(t, "10.244.1.0/24", "127.0.85.1")}); err != nil {
		t.Fatal(err)
	}
	_, _, err := hc.Network.AddRoute(ctx, n, hcloud.NetworkAddRouteOpts{Route: route(t, "10.244.2.0/24", "127.0.85.2")})
	if !hcloud.IsError(err, hcloud.ErrorCodeConflict) {
		t.Fatalf("a change during an action: %v", err)
	}

	c2 := NewStarted(t, Options{})
	c2.PutNetwork(Network{ID: DefaultNetworkID})
	c2.FailAction("add_route", "action_failed", "route could not be added")
	hc2 := netClient(c2)
	act, _, err := hc2.Network.AddRoute(ctx, n, hcloud.NetworkAddRouteOpts{Route: route(t, "10.244.1.0/24", "127.0.85.1")})
	if err != nil {
		t.Fatal(err)
	}
	if err := hc2.Action.WaitFor(ctx, act); err == nil || !strings.Contains(err.Error(), "route could not be added") {
		t.Fatalf("a failed action: %v", err)
	}
	if n, _ := c2.Network(DefaultNetworkID); len(n.Routes) != 0 {
		t.Fatalf("a failed action's route was made: %+v", n.Routes)
	}
}
