package hetzner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/cloud/hetzner/hetznertest"
)

// fastPoll makes hcloud-go poll actions every 10ms (its default is 500ms).
var fastPoll = hcloud.WithPollOpts(hcloud.PollOpts{BackoffFunc: hcloud.ConstantBackoff(10 * time.Millisecond)})

// routesWorld is a world whose config names the default network, with
// that network (10.244.0.0/16 pod routes go through it) and two cluster
// servers in it, web-1 (127.0.85.1) and web-2 (127.0.85.2), and a server
// of no cluster, nat-1 (127.0.85.200).
func routesWorld(t *testing.T, ref NetworkRef, routes ...hetznertest.Route) (*world, cloudprovider.Routes) {
	t.Helper()
	w := newWorld(t, hetznertest.Options{}, func(c *Config) { c.Network = ref }, fastPoll)
	w.hz.PutNetwork(hetznertest.Network{ID: hetznertest.DefaultNetworkID, Name: "k8s-net", Routes: routes})
	w.add("web-1", 1, nil)
	w.add("web-2", 2, nil)
	w.add("nat-1", 200, map[string]string{"role": "nat"})
	r, ok := w.cloud.Routes()
	if !ok || r == nil {
		t.Fatal("Routes() answers false with a network configured")
	}
	return w, r
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

func networkRoutes(t *testing.T, w *world) []string {
	t.Helper()
	n, ok := w.hz.Network(hetznertest.DefaultNetworkID)
	if !ok {
		t.Fatal("network gone")
	}
	var out []string
	for _, r := range n.Routes {
		out = append(out, r.Destination+">"+r.Gateway)
	}
	slices.Sort(out)
	return out
}

func nodeAddrs(ip string) []v1.NodeAddress {
	return []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: ip}}
}

func TestRoutesOnlyWithNetwork(t *testing.T) {
	w := newWorld(t, hetznertest.Options{}, nil)
	if r, ok := w.cloud.Routes(); ok || r != nil {
		t.Fatal("Routes() answers true without a network")
	}
}

// List, create and delete through the real hcloud-go against the endpoint:
// only routes via cluster servers are listed and touched; a route via
// another server (nat-1) stays through it all.
func TestRoutesListCreateDelete(t *testing.T) {
	ctx := context.Background()
	w, r := routesWorld(t, NetworkRef{ID: hetznertest.DefaultNetworkID},
		hetznertest.Route{Destination: "10.244.1.0/24", Gateway: "127.0.85.1"},
		hetznertest.Route{Destination: "10.0.0.0/16", Gateway: "127.0.85.200"},
		hetznertest.Route{Destination: "10.244.200.0/24", Gateway: "127.0.85.200"})
	got, err := r.ListRoutes(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"10.244.1.0/24>web-1"}; !slices.Equal(routeSet(got), want) {
		t.Fatalf("listed %v, want %v", routeSet(got), want)
	}
	if err := r.CreateRoute(ctx, "c1", "uid-2", &cloudprovider.Route{TargetNode: "web-2", DestinationCIDR: "10.244.2.0/24",
		TargetNodeAddresses: nodeAddrs("127.0.85.2")}); err != nil {
		t.Fatal(err)
	}
	// Again: the route exists, no call.
	if err := r.CreateRoute(ctx, "c1", "uid-2", &cloudprovider.Route{TargetNode: "web-2", DestinationCIDR: "10.244.2.0/24",
		TargetNodeAddresses: nodeAddrs("127.0.85.2")}); err != nil {
		t.Fatal(err)
	}
	if n := w.hz.Calls("route-create"); n != 1 {
		t.Fatalf("%d add_route calls, want 1", n)
	}
	got, err = r.ListRoutes(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"10.244.1.0/24>web-1", "10.244.2.0/24>web-2"}; !slices.Equal(routeSet(got), want) {
		t.Fatalf("listed %v, want %v", routeSet(got), want)
	}
	if err := r.DeleteRoute(ctx, "c1", got[0]); err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.0/16>127.0.85.200", "10.244.2.0/24>127.0.85.2", "10.244.200.0/24>127.0.85.200"}
	if got := networkRoutes(t, w); !slices.Equal(got, want) {
		t.Fatalf("network routes %v, want %v", got, want)
	}
	if n := w.hz.Calls("route-delete"); n != 1 {
		t.Fatalf("%d delete_route calls, want 1", n)
	}
	// A route already gone is no error.
	if err := r.DeleteRoute(ctx, "c1", got[0]); err != nil {
		t.Fatal(err)
	}
}

// Routes via other gateways are refused, not replaced or deleted: a
// destination routed via nat-1 is not taken over for a Node, nor deleted
// when asked.
func TestRoutesForeignGatewayUntouched(t *testing.T) {
	ctx := context.Background()
	w, r := routesWorld(t, NetworkRef{ID: hetznertest.DefaultNetworkID},
		hetznertest.Route{Destination: "10.244.2.0/24", Gateway: "127.0.85.200"})
	err := r.CreateRoute(ctx, "c1", "uid-2", &cloudprovider.Route{TargetNode: "web-2", DestinationCIDR: "10.244.2.0/24",
		TargetNodeAddresses: nodeAddrs("127.0.85.2")})
	if !errors.Is(err, errForeignRoute) || !strings.Contains(err.Error(), "127.0.85.200") {
		t.Fatalf("create over a foreign route: %v", err)
	}
	err = r.DeleteRoute(ctx, "c1", &cloudprovider.Route{Name: "x", TargetNode: "web-2", DestinationCIDR: "10.244.2.0/24"})
	if !errors.Is(err, errForeignRoute) {
		t.Fatalf("delete of a foreign route: %v", err)
	}
	if got, want := networkRoutes(t, w), []string{"10.244.2.0/24>127.0.85.200"}; !slices.Equal(got, want) {
		t.Fatalf("network routes %v, want %v", got, want)
	}
	if n := w.hz.Calls("route-create") + w.hz.Calls("route-delete"); n != 0 {
		t.Fatalf("%d changes asked of the API", n)
	}
}

// A route via another cluster server (the pod CIDR moved) is replaced; a
// server deleted since it was seen leaves its routes listed as blackholes.
func TestRoutesReplaceAndBlackhole(t *testing.T) {
	ctx := context.Background()
	w, r := routesWorld(t, NetworkRef{ID: hetznertest.DefaultNetworkID},
		hetznertest.Route{Destination: "10.244.2.0/24", Gateway: "127.0.85.1"},
		hetznertest.Route{Destination: "10.244.1.0/24", Gateway: "127.0.85.1"})
	if err := r.CreateRoute(ctx, "c1", "uid-2", &cloudprovider.Route{TargetNode: "web-2", DestinationCIDR: "10.244.2.0/24",
		TargetNodeAddresses: nodeAddrs("127.0.85.2")}); err != nil {
		t.Fatal(err)
	}
	if got, want := networkRoutes(t, w), []string{"10.244.1.0/24>127.0.85.1", "10.244.2.0/24>127.0.85.2"}; !slices.Equal(got, want) {
		t.Fatalf("network routes %v, want %v", got, want)
	}
	web1, _ := w.cloud.view.ByNodeName(ctx, "web-1", time.Minute)
	w.hz.Delete(mustID(t, web1.ID))
	time.Sleep(10 * time.Millisecond)
	if err := w.cloud.view.Refresh(ctx, 0); err != nil {
		t.Fatal(err)
	}
	got, err := r.ListRoutes(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"10.244.1.0/24>(blackhole)", "10.244.2.0/24>web-2"}; !slices.Equal(routeSet(got), want) {
		t.Fatalf("listed %v, want %v", routeSet(got), want)
	}
}

func mustID(t *testing.T, s string) int64 {
	t.Helper()
	id, err := ParseProviderID("hcloud://" + s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// A Node whose server has no address in the network: a clear error, no
// call.
func TestCreateRouteServerNotInNetwork(t *testing.T) {
	ctx := context.Background()
	w, r := routesWorld(t, NetworkRef{ID: hetznertest.DefaultNetworkID})
	w.hz.Put(hetznertest.Server{Name: "web-3", Labels: map[string]string{DefaultClusterLabel: testCluster}, PublicIPv4: "127.0.86.3",
		PrivateNets: []hetznertest.PrivateNet{{Network: 99, IP: "127.0.87.3"}}})
	err := r.CreateRoute(ctx, "c1", "uid-3", &cloudprovider.Route{TargetNode: "web-3", DestinationCIDR: "10.244.3.0/24"})
	if err == nil || !strings.Contains(err.Error(), "has no address in network 4711") || !strings.Contains(err.Error(), "web-3") {
		t.Fatalf("got %v", err)
	}
	// The Node's InternalIPs must show the gateway.
	err = r.CreateRoute(ctx, "c1", "uid-2", &cloudprovider.Route{TargetNode: "web-2", DestinationCIDR: "10.244.2.0/24",
		TargetNodeAddresses: nodeAddrs("127.0.85.99")})
	if err == nil || !strings.Contains(err.Error(), "not among the Node's InternalIPs") {
		t.Fatalf("got %v", err)
	}
	// IPv6 pod CIDRs: Hetzner networks carry none.
	err = r.CreateRoute(ctx, "c1", "uid-2", &cloudprovider.Route{TargetNode: "web-2", DestinationCIDR: "fd00:10:244::/64"})
	if err == nil || !strings.Contains(err.Error(), "IPv4 only") {
		t.Fatalf("got %v", err)
	}
	if n := w.hz.Calls("route-create"); n != 0 {
		t.Fatalf("%d add_route calls", n)
	}
}

// An outage: ListRoutes and DeleteRoute fail, and nothing is deleted.
func TestRoutesOutage(t *testing.T) {
	ctx := context.Background()
	w, r := routesWorld(t, NetworkRef{ID: hetznertest.DefaultNetworkID},
		hetznertest.Route{Destination: "10.244.1.0/24", Gateway: "127.0.85.1"})
	listed, err := r.ListRoutes(ctx, "c1")
	if err != nil || len(listed) != 1 {
		t.Fatal(listed, err)
	}
	w.hz.SetDown(true)
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if got, err := r.ListRoutes(short, "c1"); err == nil {
		t.Fatalf("listed %v during an outage", routeSet(got))
	}
	if err := r.DeleteRoute(short, "c1", listed[0]); err == nil {
		t.Fatal("deleted during an outage")
	}
	w.hz.SetDown(false)
	// The API answers errors: the same.
	w.hz.Fail("route-list", 10, 503, "unavailable")
	w.hz.Fail("route-delete", 10, 503, "unavailable")
	if _, err := r.ListRoutes(ctx, "c1"); err == nil {
		t.Fatal("listed while the API fails")
	}
	if err := r.DeleteRoute(ctx, "c1", listed[0]); err == nil {
		t.Fatal("deleted while the API fails")
	}
	w.hz.ClearFaults("route-list")
	w.hz.ClearFaults("route-delete")
	if got, want := networkRoutes(t, w), []string{"10.244.1.0/24>127.0.85.1"}; !slices.Equal(got, want) {
		t.Fatalf("network routes %v, want %v", got, want)
	}
	if n := w.hz.Calls("route-delete"); n != 1 {
		t.Fatalf("%d delete_route calls, want the one refused", n)
	}
}

// The controller deletes a listed route while it creates the route of the
// same destination for another Node (a pod CIDR moved): the deletion names
// the gateway it was listed with, so the new route stays.
func TestDeleteListedRouteOnly(t *testing.T) {
	ctx := context.Background()
	w, r := routesWorld(t, NetworkRef{ID: hetznertest.DefaultNetworkID},
		hetznertest.Route{Destination: "10.244.1.0/24", Gateway: "127.0.85.1"})
	listed, err := r.ListRoutes(ctx, "c1")
	if err != nil || len(listed) != 1 {
		t.Fatal(listed, err)
	}
	if err := r.CreateRoute(ctx, "c1", "u", &cloudprovider.Route{TargetNode: "web-2", DestinationCIDR: "10.244.1.0/24"}); err != nil {
		t.Fatal(err)
	}
	if err := r.DeleteRoute(ctx, "c1", listed[0]); err != nil {
		t.Fatal(err)
	}
	if got, want := networkRoutes(t, w), []string{"10.244.1.0/24>127.0.85.2"}; !slices.Equal(got, want) {
		t.Fatalf("network routes %v, want %v", got, want)
	}
}

// A failed action is an error (hcloud-go's WaitFor).
func TestCreateRouteActionFails(t *testing.T) {
	ctx := context.Background()
	w, r := routesWorld(t, NetworkRef{ID: hetznertest.DefaultNetworkID})
	w.hz.FailAction("add_route", "action_failed", "route could not be added")
	err := r.CreateRoute(ctx, "c1", "uid-2", &cloudprovider.Route{TargetNode: "web-2", DestinationCIDR: "10.244.2.0/24"})
	if err == nil || !strings.Contains(err.Error(), "route could not be added") {
		t.Fatalf("got %v", err)
	}
}

// The API's validation comes back as the error: a destination overlapping
// another route's.
func TestCreateRouteAPIRefuses(t *testing.T) {
	ctx := context.Background()
	_, r := routesWorld(t, NetworkRef{ID: hetznertest.DefaultNetworkID},
		hetznertest.Route{Destination: "10.244.0.0/16", Gateway: "127.0.85.200"})
	err := r.CreateRoute(ctx, "c1", "uid-2", &cloudprovider.Route{TargetNode: "web-2", DestinationCIDR: "10.244.2.0/24"})
	if !hcloud.IsError(err, hcloud.ErrorCodeInvalidInput) || !strings.Contains(err.Error(), "overlaps") {
		t.Fatalf("got %v", err)
	}
}

// With the cluster CIDRs set, routes outside them are neither listed nor
// created nor deleted.
func TestRoutesClusterCIDRs(t *testing.T) {
	ctx := context.Background()
	w, r := routesWorld(t, NetworkRef{ID: hetznertest.DefaultNetworkID},
		hetznertest.Route{Destination: "10.244.1.0/24", Gateway: "127.0.85.1"},
		hetznertest.Route{Destination: "192.168.7.0/24", Gateway: "127.0.85.1"})
	if err := w.cloud.SetClusterCIDRs("10.244.0.0/16, fd00:10:244::/56"); err != nil {
		t.Fatal(err)
	}
	got, err := r.ListRoutes(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"10.244.1.0/24>web-1"}; !slices.Equal(routeSet(got), want) {
		t.Fatalf("listed %v, want %v", routeSet(got), want)
	}
	if err := r.CreateRoute(ctx, "c1", "u", &cloudprovider.Route{TargetNode: "web-2", DestinationCIDR: "10.96.0.0/24"}); err == nil ||
		!strings.Contains(err.Error(), "outside the cluster CIDRs") {
		t.Fatalf("got %v", err)
	}
	if err := r.DeleteRoute(ctx, "c1", &cloudprovider.Route{TargetNode: "web-1", DestinationCIDR: "192.168.7.0/24"}); err == nil {
		t.Fatal("deleted a route outside the cluster CIDRs")
	}
	if err := w.cloud.SetClusterCIDRs("10.244.0.0/33"); err == nil {
		t.Fatal("a bad cluster CIDR was taken")
	}
}

// The network by name: looked up once; Nodes' InternalIPs are their
// servers' addresses in it only.
func TestRoutesNetworkByName(t *testing.T) {
	ctx := context.Background()
	w, r := routesWorld(t, NetworkRef{Name: "k8s-net"})
	w.hz.Put(hetznertest.Server{Name: "web-4", Labels: map[string]string{DefaultClusterLabel: testCluster}, PublicIPv4: "127.0.86.4",
		PrivateNets: []hetznertest.PrivateNet{{Network: 99, IP: "127.0.87.4"}, {Network: hetznertest.DefaultNetworkID, IP: "127.0.85.4"}}})
	md, err := w.cloud.ViewInstances.InstanceMetadata(ctx, node("web-4", ""))
	if err != nil {
		t.Fatal(err)
	}
	var internal []string
	for _, a := range md.NodeAddresses {
		if a.Type == v1.NodeInternalIP {
			internal = append(internal, a.Address)
		}
	}
	if !slices.Equal(internal, []string{"127.0.85.4"}) {
		t.Fatalf("InternalIPs %v, want the address in k8s-net only", internal)
	}
	if err := r.CreateRoute(ctx, "c1", "u", &cloudprovider.Route{TargetNode: "web-4", DestinationCIDR: "10.244.4.0/24"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ListRoutes(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if n := w.hz.Calls("network-list"); n != 1 {
		t.Fatalf("%d lookups of the name, want 1", n)
	}
	// A name the project lacks: every listing fails, naming it.
	w2 := newWorld(t, hetznertest.Options{}, func(c *Config) { c.Network = NetworkRef{Name: "nope"} })
	r2, _ := w2.cloud.Routes()
	if _, err := r2.ListRoutes(ctx, "c1"); !errors.Is(err, errNoNetwork) || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("got %v", err)
	}
	if _, err := w2.cloud.view.List(ctx, 0); !errors.Is(err, errNoNetwork) {
		t.Fatalf("view list: %v", err)
	}
}

func TestNetworkConfig(t *testing.T) {
	for in, want := range map[string]NetworkRef{
		"network: 4711\n": {ID: 4711}, "network: '4711'\n": {ID: 4711}, "network: k8s-net\n": {Name: "k8s-net"}, "": {},
	} {
		c, err := ParseConfig(strings.NewReader("clusterID: c1\n" + in))
		if err != nil || c.Network != want {
			t.Fatalf("%q: %+v %v", in, c.Network, err)
		}
	}
	for _, bad := range []string{"network: -1\n", "network: ' k8s'\n", "network: 1.5\n", "network: [1]\n"} {
		if _, err := ParseConfig(strings.NewReader("clusterID: c1\n" + bad)); err == nil || !strings.Contains(err.Error(), "network") {
			t.Fatalf("%q: %v", bad, err)
		}
	}
	// The ID or name is what the config is written back as.
	for _, ref := range []NetworkRef{{ID: 4711}, {Name: "k8s-net"}} {
		b, _ := ref.MarshalJSON()
		var back NetworkRef
		if err := back.UnmarshalJSON(b); err != nil || back != ref {
			t.Fatalf("%+v: %s %+v %v", ref, b, back, err)
		}
	}
}

// The controller creates many routes at once; the API refuses a change
// while the network's previous action runs. The provider makes its
// changes one at a time: each route is asked for once, none refused.
func TestConcurrentCreatesSerialized(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, hetznertest.Options{ActionTime: 30 * time.Millisecond}, func(c *Config) {
		c.Network = NetworkRef{ID: hetznertest.DefaultNetworkID}
	}, fastPoll)
	w.hz.PutNetwork(hetznertest.Network{ID: hetznertest.DefaultNetworkID})
	const n = 6
	for i := 1; i <= n; i++ {
		w.add(fmt.Sprintf("web-%d", i), i, nil)
	}
	r, _ := w.cloud.Routes()
	errs := make(chan error, n)
	for i := 1; i <= n; i++ {
		go func() {
			errs <- r.CreateRoute(ctx, "c1", "u", &cloudprovider.Route{TargetNode: types.NodeName(fmt.Sprintf("web-%d", i)),
				DestinationCIDR: fmt.Sprintf("10.244.%d.0/24", i)})
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if got := len(networkRoutes(t, w)); got != n {
		t.Fatalf("%d routes, want %d", got, n)
	}
	if c := w.hz.Calls("route-create"); c != n {
		t.Fatalf("%d add_route calls for %d routes (refused ones retried)", c, n)
	}
}
