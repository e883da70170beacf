package openstack

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/cloud/openstack/openstacktest"
)

// routesWorld is a world whose config names a router with an interface on
// 127.0.87.0/24 (its address 127.0.87.1), holding routes, and two cluster
// servers, web-1 (127.0.87.10) and web-2 (127.0.87.11), and a server of
// no cluster, nat-1 (127.0.87.200). The cluster CIDR is 10.244.0.0/16.
func routesWorld(t *testing.T, opts openstacktest.Options, routes ...openstacktest.Route) (*world, cloudprovider.Routes, string) {
	t.Helper()
	var routerID string
	w := newWorld(t, opts, func(c *Config) { c.RouterID = "5f2d6b3e-1c4a-4f0e-9b7d-2a8c6e4f1b30"; routerID = c.RouterID })
	sn := w.os.PutSubnet(openstacktest.Subnet{Name: "k8s-subnet", CIDR: "127.0.87.0/24"})
	w.os.PutRouter(openstacktest.Router{ID: routerID, Name: "k8s-router", Subnets: []string{sn.ID}, Routes: routes})
	w.add("web-1", 10)
	w.add("web-2", 11)
	w.add("nat-1", 200, "role=nat")
	r, ok := w.cloud.Routes()
	if !ok || r == nil {
		t.Fatal("Routes() answers false with a routerID configured")
	}
	if err := w.cloud.SetClusterCIDRs("10.244.0.0/16"); err != nil {
		t.Fatal(err)
	}
	return w, r, routerID
}

func routeSet(rs []*cloudprovider.Route) []string {
	var out []string
	for _, r := range rs {
		s := r.DestinationCIDR + ">" + string(r.TargetNode)
		if r.Blackhole {
			s += "(blackhole)"
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

func routerRoutes(t *testing.T, w *world, id string) []string {
	t.Helper()
	rt, ok := w.os.Router(id)
	if !ok {
		t.Fatal("router gone")
	}
	var out []string
	for _, r := range rt.Routes {
		out = append(out, r.Destination+">"+r.NextHop)
	}
	slices.Sort(out)
	return out
}

func nodeAddrs(ip string) []v1.NodeAddress {
	return []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: ip}}
}

func TestRoutesOnlyWithRouter(t *testing.T) {
	w := newWorld(t, openstacktest.Options{}, nil)
	if r, ok := w.cloud.Routes(); ok || r != nil {
		t.Fatal("Routes() answers true without a routerID")
	}
	if err := w.cloud.SetClusterCIDRs("10.244.0.0/16"); err != nil {
		t.Fatal(err)
	}
}

// List, create and delete through gophercloud against the endpoint, with
// extraroute-atomic (add_extraroutes/remove_extraroutes) and without (the
// router's routes written whole under If-Match).
func TestRoutesListCreateDelete(t *testing.T) {
	for _, atomic := range []bool{true, false} {
		t.Run(fmt.Sprintf("atomic=%v", atomic), func(t *testing.T) {
			ctx := context.Background()
			w, r, id := routesWorld(t, openstacktest.Options{NoAtomicExtraRoutes: !atomic})
			for i, n := range []string{"web-1", "web-2"} {
				rt := &cloudprovider.Route{TargetNode: types.NodeName(n), DestinationCIDR: fmt.Sprintf("10.244.%d.0/24", i+1),
					TargetNodeAddresses: nodeAddrs(fmt.Sprintf("127.0.87.%d", 10+i))}
				if err := r.CreateRoute(ctx, "c1", "", rt); err != nil {
					t.Fatal(err)
				}
				// Again: no error, no second route.
				if err := r.CreateRoute(ctx, "c1", "", rt); err != nil {
					t.Fatal(err)
				}
			}
			want := []string{"10.244.1.0/24>127.0.87.10", "10.244.2.0/24>127.0.87.11"}
			if got := routerRoutes(t, w, id); !slices.Equal(got, want) {
				t.Fatalf("router routes %v, want %v", got, want)
			}
			listed, err := r.ListRoutes(ctx, "c1")
			if err != nil {
				t.Fatal(err)
			}
			if got, want := routeSet(listed), []string{"10.244.1.0/24>web-1", "10.244.2.0/24>web-2"}; !slices.Equal(got, want) {
				t.Fatalf("listed %v, want %v", got, want)
			}
			if err := r.DeleteRoute(ctx, "c1", listed[0]); err != nil {
				t.Fatal(err)
			}
			if err := r.DeleteRoute(ctx, "c1", listed[0]); err != nil {
				t.Fatal("deleting a route again:", err)
			}
			if got, want := routerRoutes(t, w, id), []string{"10.244.2.0/24>127.0.87.11"}; !slices.Equal(got, want) {
				t.Fatalf("router routes %v, want %v", got, want)
			}
			adds, removes, updates := w.os.Calls("router-add-routes"), w.os.Calls("router-remove-routes"), w.os.Calls("router-update")
			if atomic && (adds != 2 || removes != 2 || updates != 0) {
				t.Fatalf("%d add_extraroutes, %d remove_extraroutes, %d router updates; want 2, 2, 0", adds, removes, updates)
			}
			if !atomic && (adds+removes != 0 || updates != 3) {
				t.Fatalf("%d atomic calls and %d router updates; want 0 and 3 (a create, a delete; the rest already done)", adds+removes, updates)
			}
		})
	}
}

// Routes via a next hop that is no cluster server (a server of no cluster,
// an address no server has) and routes outside the cluster CIDR are
// neither listed nor changed; a create of a foreign route's destination
// is an error, and the route stays.
func TestRoutesForeignUntouched(t *testing.T) {
	ctx := context.Background()
	w, r, id := routesWorld(t, openstacktest.Options{},
		openstacktest.Route{Destination: "10.244.9.0/24", NextHop: "127.0.87.200"},
		openstacktest.Route{Destination: "10.244.8.0/24", NextHop: "127.0.87.99"},
		openstacktest.Route{Destination: "192.168.5.0/24", NextHop: "127.0.87.10"})
	before := routerRoutes(t, w, id)
	listed, err := r.ListRoutes(ctx, "c1")
	if err != nil || len(listed) != 0 {
		t.Fatalf("listed %v, %v; want none", routeSet(listed), err)
	}
	err = r.CreateRoute(ctx, "c1", "", &cloudprovider.Route{TargetNode: "web-1", DestinationCIDR: "10.244.9.0/24"})
	if !errors.Is(err, errForeignRoute) {
		t.Fatalf("create over a foreign route: %v", err)
	}
	if err := r.CreateRoute(ctx, "c1", "", &cloudprovider.Route{TargetNode: "web-1", DestinationCIDR: "192.168.6.0/24"}); err == nil ||
		!strings.Contains(err.Error(), "outside the cluster CIDRs") {
		t.Fatalf("create outside the cluster CIDR: %v", err)
	}
	for _, rt := range []*cloudprovider.Route{
		{Name: id + ":10.244.9.0/24:via:127.0.87.200", DestinationCIDR: "10.244.9.0/24"},
		{DestinationCIDR: "10.244.8.0/24"},
		{DestinationCIDR: "192.168.5.0/24"},
	} {
		if err := r.DeleteRoute(ctx, "c1", rt); err == nil {
			t.Fatalf("deleted %s", rt.DestinationCIDR)
		}
	}
	if got := routerRoutes(t, w, id); !slices.Equal(got, before) {
		t.Fatalf("router routes %v, want %v", got, before)
	}
	if n := w.os.Calls("router-add-routes") + w.os.Calls("router-remove-routes") + w.os.Calls("router-update"); n != 0 {
		t.Fatalf("%d changes of the router", n)
	}
}

// A server gone: its route is listed as a blackhole (the controller
// deletes it); its pod CIDR moved to another Node replaces the route.
func TestRoutesBlackholeAndReplace(t *testing.T) {
	ctx := context.Background()
	w, r, id := routesWorld(t, openstacktest.Options{})
	if err := r.CreateRoute(ctx, "c1", "", &cloudprovider.Route{TargetNode: "web-1", DestinationCIDR: "10.244.1.0/24"}); err != nil {
		t.Fatal(err)
	}
	if err := r.CreateRoute(ctx, "c1", "", &cloudprovider.Route{TargetNode: "web-2", DestinationCIDR: "10.244.2.0/24"}); err != nil {
		t.Fatal(err)
	}
	w.os.Delete(w.add("web-1", 10).ID)
	w.cloud.view.Invalidate()
	listed, err := r.ListRoutes(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := routeSet(listed), []string{"10.244.1.0/24>(blackhole)", "10.244.2.0/24>web-2"}; !slices.Equal(got, want) {
		t.Fatalf("listed %v, want %v", got, want)
	}
	// web-2 now has the pod CIDR of web-1 as well: the old route goes.
	if err := r.CreateRoute(ctx, "c1", "", &cloudprovider.Route{TargetNode: "web-2", DestinationCIDR: "10.244.1.0/24"}); err != nil {
		t.Fatal(err)
	}
	// The controller's deletion of the blackhole, as listed, leaves the
	// new route.
	for _, rt := range listed {
		if rt.Blackhole {
			if err := r.DeleteRoute(ctx, "c1", rt); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got, want := routerRoutes(t, w, id), []string{"10.244.1.0/24>127.0.87.11", "10.244.2.0/24>127.0.87.11"}; !slices.Equal(got, want) {
		t.Fatalf("router routes %v, want %v", got, want)
	}
}

// Neutron's max_routes: a create beyond it is an error that says what
// to do, and the router keeps its routes.
func TestRoutesLimit(t *testing.T) {
	ctx := context.Background()
	var full []openstacktest.Route
	for i := range openstacktest.DefaultMaxRoutes {
		full = append(full, openstacktest.Route{Destination: fmt.Sprintf("172.16.%d.0/24", i), NextHop: "127.0.87.99"})
	}
	w, r, id := routesWorld(t, openstacktest.Options{}, full...)
	err := r.CreateRoute(ctx, "c1", "", &cloudprovider.Route{TargetNode: "web-1", DestinationCIDR: "10.244.1.0/24"})
	if err == nil || !strings.Contains(err.Error(), "max_routes") || !strings.Contains(err.Error(), "RoutesExhausted") {
		t.Fatalf("create beyond max_routes: %v", err)
	}
	if got := routerRoutes(t, w, id); len(got) != openstacktest.DefaultMaxRoutes {
		t.Fatalf("router holds %d routes", len(got))
	}
}

// A next hop Neutron refuses (not on a subnet of the router's
// interfaces): the create is an error naming Neutron's reason.
func TestRoutesNextHopNotConnected(t *testing.T) {
	ctx := context.Background()
	w, r, id := routesWorld(t, openstacktest.Options{})
	w.os.Put(openstacktest.Server{Name: "far-1", Tags: []string{testTag},
		Addresses: []openstacktest.Address{{Addr: "127.0.88.5"}}})
	err := r.CreateRoute(ctx, "c1", "", &cloudprovider.Route{TargetNode: "far-1", DestinationCIDR: "10.244.3.0/24"})
	if err == nil || !strings.Contains(err.Error(), "not connected with router") {
		t.Fatalf("create via a next hop off the router's subnets: %v", err)
	}
	if got := routerRoutes(t, w, id); len(got) != 0 {
		t.Fatalf("router routes %v", got)
	}
}

// An outage, or Neutron's errors: ListRoutes and DeleteRoute fail, and
// nothing is deleted.
func TestRoutesOutage(t *testing.T) {
	for _, atomic := range []bool{true, false} {
		t.Run(fmt.Sprintf("atomic=%v", atomic), func(t *testing.T) {
			ctx := context.Background()
			w, r, id := routesWorld(t, openstacktest.Options{NoAtomicExtraRoutes: !atomic},
				openstacktest.Route{Destination: "10.244.1.0/24", NextHop: "127.0.87.10"})
			listed, err := r.ListRoutes(ctx, "c1")
			if err != nil || len(listed) != 1 {
				t.Fatal(listed, err)
			}
			w.os.SetDown(true)
			short, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			if got, err := r.ListRoutes(short, "c1"); err == nil {
				t.Fatalf("listed %v during an outage", routeSet(got))
			}
			if err := r.DeleteRoute(short, "c1", listed[0]); err == nil {
				t.Fatal("deleted during an outage")
			}
			w.os.SetDown(false)
			for _, m := range []string{"router-get", "router-update", "router-remove-routes"} {
				w.os.Fail(m, 10, 503)
			}
			if _, err := r.ListRoutes(ctx, "c1"); err == nil {
				t.Fatal("listed while Neutron fails")
			}
			if err := r.DeleteRoute(ctx, "c1", listed[0]); err == nil {
				t.Fatal("deleted while Neutron fails")
			}
			// The servers' list failing alone: an error, not a blackhole.
			w.os.Fail("list", 10, 503)
			w.cloud.view.Invalidate()
			if got, err := r.ListRoutes(ctx, "c1"); err == nil {
				t.Fatalf("listed %v while Nova fails", routeSet(got))
			}
			if got, want := routerRoutes(t, w, id), []string{"10.244.1.0/24>127.0.87.10"}; !slices.Equal(got, want) {
				t.Fatalf("router routes %v, want %v", got, want)
			}
		})
	}
}

// Without extraroute-atomic, a router changed by another client between
// the read and the write (412 on If-Match) is read again and written.
func TestRoutesRevisionConflict(t *testing.T) {
	ctx := context.Background()
	w, r, id := routesWorld(t, openstacktest.Options{NoAtomicExtraRoutes: true})
	w.os.Fail("router-update", 1, 412)
	if err := r.CreateRoute(ctx, "c1", "", &cloudprovider.Route{TargetNode: "web-1", DestinationCIDR: "10.244.1.0/24"}); err != nil {
		t.Fatal(err)
	}
	if got, want := routerRoutes(t, w, id), []string{"10.244.1.0/24>127.0.87.10"}; !slices.Equal(got, want) {
		t.Fatalf("router routes %v, want %v", got, want)
	}
	if n := w.os.Calls("router-update"); n != 2 {
		t.Fatalf("%d router updates, want 2", n)
	}
}

// Creates at once, as the route controller makes them: all made, also
// when the router is written whole.
func TestRoutesConcurrentCreates(t *testing.T) {
	for _, atomic := range []bool{true, false} {
		t.Run(fmt.Sprintf("atomic=%v", atomic), func(t *testing.T) {
			ctx := context.Background()
			w, r, id := routesWorld(t, openstacktest.Options{NoAtomicExtraRoutes: !atomic})
			var wg sync.WaitGroup
			errs := make([]error, 6)
			for i := range errs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					node := []types.NodeName{"web-1", "web-2"}[i%2]
					errs[i] = r.CreateRoute(ctx, "c1", "", &cloudprovider.Route{TargetNode: node, DestinationCIDR: fmt.Sprintf("10.244.%d.0/24", 10+i)})
				}()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			if got := routerRoutes(t, w, id); len(got) != len(errs) {
				t.Fatalf("router routes %v", got)
			}
		})
	}
}

func TestRouterIDConfig(t *testing.T) {
	for _, bad := range []string{"router-1", "5f2d6b3e1c4a4f0e9b7d2a8c6e4f1b30", "{5f2d6b3e-1c4a-4f0e-9b7d-2a8c6e4f1b30}"} {
		cfg := Config{AuthURL: "https://keystone.example/v3", ApplicationCredentialID: "x", SecretEnv: "X", Region: "r",
			ClusterID: "c", RouterID: bad}
		cfg.defaults()
		if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "routerID") {
			t.Errorf("routerID %q: %v", bad, err)
		}
	}
}

// portPairs are the allowed address pairs of the port of server's address
// addr.
func portPairs(t *testing.T, w *world, server, addr string) []string {
	t.Helper()
	for _, p := range w.os.Ports() {
		if p.DeviceID == server && p.IPAddress == addr {
			return p.AllowedAddressPairs
		}
	}
	t.Fatalf("no port of %s with %s", server, addr)
	return nil
}

// With allowed-address-pairs, a route's pod CIDR is added to its Node's
// port's allowed_address_pairs (port security drops the pods' packets
// otherwise), and removed with the route or when the CIDR moves; a port
// without port security is left alone; a port that cannot be changed
// takes the route back, so that the controller tries both again.
func TestRoutesAllowedAddressPairs(t *testing.T) {
	ctx := context.Background()
	w, r, id := routesWorld(t, openstacktest.Options{})
	web1, web2 := w.add("web-1", 10), w.add("web-2", 11)
	if err := r.CreateRoute(ctx, "c1", "", &cloudprovider.Route{TargetNode: "web-1", DestinationCIDR: "10.244.1.0/24"}); err != nil {
		t.Fatal(err)
	}
	if got := portPairs(t, w, web1.ID, "127.0.87.10"); !slices.Equal(got, []string{"10.244.1.0/24"}) {
		t.Fatalf("web-1's pairs %v", got)
	}
	// Again: nothing changes.
	if err := r.CreateRoute(ctx, "c1", "", &cloudprovider.Route{TargetNode: "web-1", DestinationCIDR: "10.244.1.0/24"}); err != nil {
		t.Fatal(err)
	}
	if n := w.os.Calls("port-update"); n != 1 {
		t.Fatalf("%d port updates, want 1", n)
	}
	// The pod CIDR moves to web-2: the old route and web-1's pair go.
	if err := r.CreateRoute(ctx, "c1", "", &cloudprovider.Route{TargetNode: "web-2", DestinationCIDR: "10.244.1.0/24"}); err != nil {
		t.Fatal(err)
	}
	if got1, got2 := portPairs(t, w, web1.ID, "127.0.87.10"), portPairs(t, w, web2.ID, "127.0.87.11"); len(got1) != 0 ||
		!slices.Equal(got2, []string{"10.244.1.0/24"}) {
		t.Fatalf("pairs after the move: web-1 %v, web-2 %v", got1, got2)
	}
	listed, err := r.ListRoutes(ctx, "c1")
	if err != nil || len(listed) != 1 {
		t.Fatal(routeSet(listed), err)
	}
	if err := r.DeleteRoute(ctx, "c1", listed[0]); err != nil {
		t.Fatal(err)
	}
	if got := portPairs(t, w, web2.ID, "127.0.87.11"); len(got) != 0 {
		t.Fatalf("web-2's pairs after the deletion %v", got)
	}
	// Port security off: the route alone.
	w.os.SetPortSecurity(web1.ID, "127.0.87.10", false)
	before := w.os.Calls("port-update")
	if err := r.CreateRoute(ctx, "c1", "", &cloudprovider.Route{TargetNode: "web-1", DestinationCIDR: "10.244.5.0/24"}); err != nil {
		t.Fatal(err)
	}
	if n := w.os.Calls("port-update"); n != before {
		t.Fatalf("%d port updates for a port without port security", n-before)
	}
	// The port refuses: an error, and the route is taken back.
	w.os.Fail("port-update", 1, 403)
	err = r.CreateRoute(ctx, "c1", "", &cloudprovider.Route{TargetNode: "web-2", DestinationCIDR: "10.244.6.0/24"})
	if err == nil || !strings.Contains(err.Error(), "allowed address pairs") {
		t.Fatalf("create with the port refusing: %v", err)
	}
	if got, want := routerRoutes(t, w, id), []string{"10.244.5.0/24>127.0.87.10"}; !slices.Equal(got, want) {
		t.Fatalf("router routes %v, want %v", got, want)
	}
}

// Without the allowed-address-pairs extension no port is read or changed.
func TestRoutesWithoutAllowedAddressPairs(t *testing.T) {
	ctx := context.Background()
	w, r, _ := routesWorld(t, openstacktest.Options{NoAllowedAddressPairs: true})
	if err := r.CreateRoute(ctx, "c1", "", &cloudprovider.Route{TargetNode: "web-1", DestinationCIDR: "10.244.1.0/24"}); err != nil {
		t.Fatal(err)
	}
	if n := w.os.Calls("port-list") + w.os.Calls("port-update"); n != 0 {
		t.Fatalf("%d port calls", n)
	}
}
