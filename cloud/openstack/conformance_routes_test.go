package openstack

import (
	"fmt"
	"net/netip"
	"strconv"
	"testing"

	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/cloud/openstack/openstacktest"
)

// The bed's routes half (conformance.RoutesBed): a Neutron router with an
// interface on the servers' subnet, 127.0.87.0/24 (the router's address
// .254), named by the config's routerID; read and written through
// openstacktest directly.

// bedRouterID is the router of a bed made with Options.Routes.
const bedRouterID = "3b0c9f4e-7a51-4d2e-8c6f-1e9a2b7d5c40"

// foreignHop is an address on the router's subnet that no server has.
const foreignHop = "127.0.87.250"

// routeCalls are Neutron's methods of each route call.
var routeCalls = map[conformance.Call][]string{conformance.RouteList: {"router-get"},
	conformance.RouteCreate: {"router-add-routes"}, conformance.RouteDelete: {"router-remove-routes"}}

// withRouter is edit, plus the routerID with Options.Routes.
func withRouter(o conformance.Options, edit func(*Config)) func(*Config) {
	if !o.Routes {
		return edit
	}
	return func(c *Config) {
		if edit != nil {
			edit(c)
		}
		c.RouterID = bedRouterID
	}
}

// putBedRouter makes the bed's subnet and router.
func putBedRouter(w *world) {
	sn := w.os.PutSubnet(openstacktest.Subnet{Name: "bed-subnet", CIDR: "127.0.87.0/24", GatewayIP: "127.0.87.254"})
	w.os.PutRouter(openstacktest.Router{ID: bedRouterID, Name: "bed-router", Subnets: []string{sn.ID}})
}

// routerLine is the config's routerID line, when the bed has a router.
func (b *bed) routerLine() string {
	if b.cloud.cfg.RouterID == "" {
		return ""
	}
	return "routerID: " + b.cloud.cfg.RouterID + "\n"
}

// hopTarget is the id of the server (as Make made it: 127.0.87.N) whose
// address hop is, else hop itself.
func (b *bed) hopTarget(hop string) string {
	a, err := netip.ParseAddr(hop)
	if err != nil || !netip.MustParsePrefix("127.0.87.0/24").Contains(a) {
		return hop
	}
	n, _ := strconv.Atoi(a.String()[len("127.0.87."):])
	id := fmt.Sprintf("00000000-0000-4000-8000-%012d", n)
	if _, ok := b.os.Get(id); ok {
		return id
	}
	return hop
}

func (b *bed) CloudRoutes(t testing.TB) []conformance.CloudRoute {
	t.Helper()
	r, ok := b.os.Router(bedRouterID)
	if !ok {
		t.Fatal("the bed's router is gone")
	}
	out := make([]conformance.CloudRoute, 0, len(r.Routes))
	for _, x := range r.Routes {
		out = append(out, conformance.CloudRoute{Destination: x.Destination, Target: b.hopTarget(x.NextHop)})
	}
	return out
}

// AddForeignRoute adds a route via m's address (another cluster's server)
// or, with m nil, via an address on the subnet that no server has.
func (b *bed) AddForeignRoute(t testing.TB, dest string, m *conformance.Made) (conformance.CloudRoute, bool) {
	t.Helper()
	hop := foreignHop
	if m != nil {
		hop = m.InternalIP
	}
	r, ok := b.os.Router(bedRouterID)
	if !ok {
		t.Fatal("the bed's router is gone")
	}
	r.Routes = append(r.Routes, openstacktest.Route{Destination: dest, NextHop: hop})
	b.os.PutRouter(r)
	return conformance.CloudRoute{Destination: dest, Target: b.hopTarget(hop)}, true
}
