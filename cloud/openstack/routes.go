package openstack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/extraroutes"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/routers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/portsecurity"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/view"
)

// Routes is the route controller's access to the configured Neutron
// router's extra routes (docs/openstack.md, Routes): a Node's pod CIDR is
// routed via the Node's InternalIP, as cloud-provider-openstack routes
// them. Without a routerID there are none.
func (c *Cloud) Routes() (cloudprovider.Routes, bool) {
	if c.routes == nil {
		return nil, false
	}
	return c.routes, true
}

// SetClusterCIDRs narrows the routes the provider touches to destinations
// inside the cluster's pod ranges (--cluster-cidr, comma-separated):
// routes with other destinations are neither listed nor created nor
// deleted. "" leaves the narrowing to the route controller's own.
func (c *Cloud) SetClusterCIDRs(cidrs string) error {
	out, err := kit.ParseClusterCIDRs(cidrs)
	if err != nil {
		return fmt.Errorf("openstack routes: %w", err)
	}
	if c.routes == nil {
		return nil
	}
	c.routes.scope.SetClusterCIDRs(out)
	return nil
}

// routes implements cloudprovider.Routes over the router's extra routes.
//
// Only the cluster's own routes are touched: a route is the cluster's when
// its next hop is an InternalIP of one of the cluster's servers (the
// instance view), or was one earlier in this process's life (a server
// deleted since: its routes are listed as blackholes, which the route
// controller deletes), and, once SetClusterCIDRs was called, its
// destination lies inside the cluster's pod ranges. Routes via any other
// next hop are neither listed nor changed, so a router can carry other
// clusters' and hand-made routes. (cloud-provider-openstack lists every
// route of the router and leaves the narrowing to the route controller's
// --cluster-cidr.)
type routes struct {
	c *Cloud

	scope kit.RouteScope // the cluster CIDRs; next hops seen as cluster servers' InternalIPs -> Node names

	mu   sync.Mutex
	exts *neutronExts // nil until Neutron's extensions were read

	// changing serializes this process's read-modify-write updates of the
	// router (without extraroute-atomic).
	changing sync.Mutex
}

var _ cloudprovider.Routes = (*routes)(nil)

// neutronExts are the extensions of Neutron that routes use.
type neutronExts struct {
	// atomic: extraroute-atomic (add_extraroutes, remove_extraroutes).
	atomic bool
	// pairs: allowed-address-pairs, so a pod CIDR is added to its Node's
	// port's allowed_address_pairs (port security drops its packets
	// otherwise).
	pairs bool
}

// errForeignRoute is wrapped by the error of a route the provider will not
// change: its next hop is not one of the cluster's servers.
var errForeignRoute = errors.New("route via a next hop that is not one of the cluster's servers")

// callContext bounds one API call by the config's requestTimeout.
func (c *Cloud) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if d := c.cfg.RequestTimeout.Duration; d > 0 {
		return context.WithTimeout(ctx, d)
	}
	return context.WithCancel(ctx)
}

// hops maps the cluster's servers' InternalIPs to the servers, from the
// instance view (whole lists or errors), and remembers them in scope.
func (r *routes) hops(ctx context.Context) (map[string]view.Instance, error) {
	ins, err := r.c.view.List(ctx, r.c.cfg.InstanceMaxAge.Duration)
	if err != nil {
		return nil, fmt.Errorf("openstack routes: listing the cluster's servers: %w", err)
	}
	out := map[string]view.Instance{}
	for _, in := range ins {
		for _, a := range in.Addresses {
			if a.Type == v1.NodeInternalIP {
				out[canonicalIP(a.Address)] = in
			}
		}
	}
	nodes := make(map[string]string, len(out))
	for ip, in := range out {
		nodes[ip] = in.NodeName
	}
	r.scope.Remember(nodes)
	return out, nil
}

// canonicalIP is an address's canonical text (as netip writes it), or s
// when it is not an address.
func canonicalIP(s string) string {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().String()
	}
	return s
}

// client is the Neutron client, after checking (once) that Neutron keeps
// extra routes: extraroute-atomic (add_extraroutes/remove_extraroutes) or
// at least extraroute (the router's whole routes replaced).
func (r *routes) client(ctx context.Context) (*gophercloud.ServiceClient, neutronExts, error) {
	nc, err := r.c.networkClient(ctx)
	if err != nil {
		return nil, neutronExts{}, err
	}
	r.mu.Lock()
	known := r.exts
	r.mu.Unlock()
	if known != nil {
		return nc, *known, nil
	}
	cctx, cancel := r.c.callContext(ctx)
	defer cancel()
	pages, err := extensions.List(nc).AllPages(cctx)
	if err != nil {
		return nil, neutronExts{}, fmt.Errorf("openstack routes: listing Neutron's extensions: %w", err)
	}
	list, err := extensions.ExtractExtensions(pages)
	if err != nil {
		return nil, neutronExts{}, fmt.Errorf("openstack routes: reading Neutron's extensions: %w", err)
	}
	plain := false
	var exts neutronExts
	for _, e := range list {
		plain = plain || e.Alias == "extraroute"
		exts.atomic = exts.atomic || e.Alias == "extraroute-atomic"
		exts.pairs = exts.pairs || e.Alias == "allowed-address-pairs"
	}
	if !plain && !exts.atomic {
		return nil, neutronExts{}, errors.New("openstack routes: Neutron lists neither the extraroute nor the extraroute-atomic extension: its routers hold no extra routes")
	}
	klog.InfoS("Neutron keeps extra routes", "router", r.c.cfg.RouterID, "atomic", exts.atomic, "allowedAddressPairs", exts.pairs)
	r.mu.Lock()
	r.exts = &exts
	r.mu.Unlock()
	return nc, exts, nil
}

// router reads the configured router (GET /v2.0/routers/{id}).
func (r *routes) router(ctx context.Context, nc *gophercloud.ServiceClient) (*routers.Router, error) {
	cctx, cancel := r.c.callContext(ctx)
	defer cancel()
	rt, err := routers.Get(cctx, nc, r.c.cfg.RouterID).Extract()
	switch {
	case gophercloud.ResponseCodeIs(err, http.StatusNotFound):
		return nil, fmt.Errorf("openstack routes: router %s (routerID) not found: %w", r.c.cfg.RouterID, err)
	case err != nil:
		return nil, fmt.Errorf("openstack routes: reading router %s: %w", r.c.cfg.RouterID, err)
	case rt == nil || rt.ID != r.c.cfg.RouterID:
		return nil, fmt.Errorf("openstack routes: reading router %s: Neutron answered with another router", r.c.cfg.RouterID)
	}
	return rt, nil
}

// routeName is the name a listed route carries: router, destination and
// next hop.
func routeName(router, dest, hop string) string { return router + ":" + dest + ":via:" + hop }

// listedHop reads the next hop back from the name of a route listed for
// router; false when the name is not of such a route.
func listedHop(name, router string) (string, bool) {
	rest, ok := strings.CutPrefix(name, router+":")
	if !ok {
		return "", false
	}
	_, hop, ok := strings.Cut(rest, ":via:")
	if _, err := netip.ParseAddr(hop); !ok || err != nil {
		return "", false
	}
	return hop, true
}

// ListRoutes lists the cluster's routes on the router: those via a
// cluster server's InternalIP, with the server's Node as TargetNode, and
// those via an address that was one earlier, as blackholes. The router
// and the cluster's servers are read first; if either read fails, it is
// an error, never a shorter list.
func (r *routes) ListRoutes(ctx context.Context, _ string) ([]*cloudprovider.Route, error) {
	nc, _, err := r.client(ctx)
	if err != nil {
		return nil, err
	}
	rt, err := r.router(ctx, nc)
	if err != nil {
		return nil, err
	}
	hops, err := r.hops(ctx)
	if err != nil {
		return nil, err
	}
	var out []*cloudprovider.Route
	for _, x := range rt.Routes {
		dest, err := netip.ParsePrefix(x.DestinationCIDR)
		if err != nil || !r.scope.InCluster(dest.Masked()) {
			continue
		}
		dest = dest.Masked()
		hop := canonicalIP(x.NextHop)
		route := &cloudprovider.Route{Name: routeName(rt.ID, dest.String(), hop), DestinationCIDR: dest.String()}
		if in, ok := hops[hop]; ok {
			route.TargetNode = types.NodeName(in.NodeName)
		} else if node, ok := r.scope.WasKnown(hop); ok {
			klog.V(2).InfoS("Listing a route via a former cluster server's address as a blackhole", "router", rt.ID,
				"destination", dest, "nexthop", hop, "formerNode", node)
			route.Blackhole = true
		} else {
			klog.V(4).InfoS("Leaving out a route via a next hop that is not one of the cluster's servers", "router", rt.ID,
				"destination", dest, "nexthop", hop)
			continue
		}
		out = append(out, route)
	}
	return out, nil
}

// CreateRoute routes the Node's pod CIDR via its server's InternalIP of
// the destination's family (as cloud-provider-openstack does). The
// destination must be inside the cluster CIDRs (when set); the Node's
// server must be one of the cluster's, and its address among the Node's
// InternalIPs the controller passes. A route of the destination via the
// same next hop is left as it is; one via another cluster server (or a
// former one) is replaced; one via any other next hop is an error, and
// stays.
func (r *routes) CreateRoute(ctx context.Context, _ string, _ string, route *cloudprovider.Route) error {
	dest, err := r.scope.CreateDest(route.DestinationCIDR, string(route.TargetNode))
	if err != nil {
		return fmt.Errorf("openstack routes: %w", err)
	}
	in, err := r.c.view.ByNodeName(ctx, string(route.TargetNode), r.c.cfg.InstanceMaxAge.Duration)
	if err != nil {
		return fmt.Errorf("openstack routes: route %s for Node %s: finding its server among the cluster's: %w", dest, route.TargetNode, err)
	}
	hop := ""
	for _, a := range in.Addresses {
		if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == v1.NodeInternalIP && ip.Unmap().Is4() == dest.Addr().Is4() {
			hop = ip.Unmap().String()
			break
		}
	}
	if hop == "" {
		return fmt.Errorf("openstack routes: route %s for Node %s: server %s (%s) has no InternalIP of the destination's family",
			dest, route.TargetNode, in.Name, in.ID)
	}
	if len(route.TargetNodeAddresses) > 0 && !hasInternalIP(route.TargetNodeAddresses, hop) {
		return fmt.Errorf("openstack routes: route %s for Node %s: its server's address %s is not among the Node's InternalIPs yet",
			dest, route.TargetNode, hop)
	}
	r.scope.Remember(map[string]string{hop: in.NodeName})
	nc, exts, err := r.client(ctx)
	if err != nil {
		return err
	}
	rt, err := r.router(ctx, nc)
	if err != nil {
		return err
	}
	exists := false
	for _, x := range rt.Routes {
		if d, err := netip.ParsePrefix(x.DestinationCIDR); err != nil || d.Masked() != dest {
			continue
		}
		old := canonicalIP(x.NextHop)
		if old == hop {
			exists = true
			continue
		}
		hops, err := r.hops(ctx)
		if err != nil {
			return err
		}
		oldIn, live := hops[old]
		if _, was := r.scope.WasKnown(old); !live && !was {
			return fmt.Errorf("openstack routes: route %s for Node %s: router %s routes it via %s: %w; not replaced",
				dest, route.TargetNode, rt.ID, old, errForeignRoute)
		}
		klog.InfoS("Replacing a route via another cluster server", "router", rt.ID, "destination", dest, "oldNexthop", old,
			"nexthop", hop, "node", route.TargetNode)
		if err := r.change(ctx, nc, exts.atomic, false, routers.Route{DestinationCIDR: x.DestinationCIDR, NextHop: x.NextHop}); err != nil {
			return err
		}
		if exts.pairs && live {
			if err := r.pair(ctx, nc, oldIn.ID, old, dest, false); err != nil {
				klog.ErrorS(err, "Leaving the pod CIDR in the former server's port's allowed address pairs", "destination", dest,
					"server", oldIn.ID)
			}
		}
	}
	if !exists {
		if err := r.change(ctx, nc, exts.atomic, true, routers.Route{DestinationCIDR: dest.String(), NextHop: hop}); err != nil {
			return fmt.Errorf("%w (Node %s)", err, route.TargetNode)
		}
	}
	if exts.pairs {
		if err := r.pair(ctx, nc, in.ID, hop, dest, true); err != nil {
			if !exists {
				// As the upstream CCM: the route goes again, so that the
				// controller, which creates only missing routes, tries both
				// once more.
				if uerr := r.change(ctx, nc, exts.atomic, false, routers.Route{DestinationCIDR: dest.String(), NextHop: hop}); uerr != nil {
					klog.ErrorS(uerr, "Could not remove the route again after its port failed", "router", rt.ID, "destination", dest)
				}
			}
			return fmt.Errorf("%w (Node %s)", err, route.TargetNode)
		}
	}
	if exists {
		klog.V(2).InfoS("Route exists", "router", rt.ID, "destination", dest, "nexthop", hop, "node", route.TargetNode)
		return nil
	}
	klog.InfoS("Created route", "router", rt.ID, "destination", dest, "nexthop", hop, "node", route.TargetNode)
	return nil
}

func hasInternalIP(addrs []v1.NodeAddress, ip string) bool {
	for _, a := range addrs {
		if a.Type == v1.NodeInternalIP && canonicalIP(a.Address) == ip {
			return true
		}
	}
	return false
}

// DeleteRoute deletes a route ListRoutes gave: the router's route of its
// destination via the next hop it was listed with (a route of the
// destination made via another next hop since stays), when that next hop
// is, or was, a cluster server's InternalIP and the destination is inside
// the cluster CIDRs (when set). For a route not named as listed, the
// router's routes of the destination, on the same conditions. A route via
// another next hop is an error, and stays; a route already gone is no
// error.
func (r *routes) DeleteRoute(ctx context.Context, _ string, route *cloudprovider.Route) error {
	dest, err := r.scope.DeleteDest(route.DestinationCIDR, route.Name)
	if err != nil {
		return fmt.Errorf("openstack routes: %w", err)
	}
	nc, exts, err := r.client(ctx)
	if err != nil {
		return err
	}
	var gone []routers.Route
	if hop, listed := listedHop(route.Name, r.c.cfg.RouterID); listed {
		gone = append(gone, routers.Route{DestinationCIDR: dest.String(), NextHop: hop})
	} else {
		rt, err := r.router(ctx, nc)
		if err != nil {
			return err
		}
		for _, x := range rt.Routes {
			if d, err := netip.ParsePrefix(x.DestinationCIDR); err == nil && d.Masked() == dest {
				gone = append(gone, x)
			}
		}
		if len(gone) == 0 {
			klog.V(2).InfoS("Route already gone", "router", r.c.cfg.RouterID, "destination", dest)
			return nil
		}
	}
	hops, err := r.hops(ctx)
	if err != nil {
		return err
	}
	for _, x := range gone {
		hop := canonicalIP(x.NextHop)
		if _, was := r.scope.WasKnown(hop); !was {
			return fmt.Errorf("openstack routes: route %s: router %s routes %s via %s: %w; not deleted",
				route.Name, r.c.cfg.RouterID, dest, x.NextHop, errForeignRoute)
		}
	}
	for _, x := range gone {
		if err := r.change(ctx, nc, exts.atomic, false, x); err != nil {
			return err
		}
		klog.InfoS("Deleted route", "router", r.c.cfg.RouterID, "destination", dest, "nexthop", x.NextHop, "node", route.TargetNode)
		// The pod CIDR leaves the port of a server still there (a gone
		// server's port is gone with it, as the upstream CCM leaves
		// blackholes' ports alone).
		if in, live := hops[canonicalIP(x.NextHop)]; exts.pairs && live {
			if err := r.pair(ctx, nc, in.ID, canonicalIP(x.NextHop), dest, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// pair adds dest to, or removes it from, the allowed_address_pairs of
// server's Neutron port that holds hop (GET /v2.0/ports?device_id=&
// fixed_ips=ip_address=, then PUT /v2.0/ports/{id} under If-Match of the
// revision read; a 412 reads it again), as the upstream CCM does so that
// Neutron's port security lets the pods' packets through. A port without
// port security is left alone; no such port is an error.
func (r *routes) pair(ctx context.Context, nc *gophercloud.ServiceClient, server, hop string, dest netip.Prefix, add bool) error {
	type portWithSecurity struct {
		ports.Port
		portsecurity.PortSecurityExt
	}
	what := "removing"
	if add {
		what = "adding"
	}
	for try := 1; ; try++ {
		cctx, cancel := r.c.callContext(ctx)
		pages, err := ports.List(nc, ports.ListOpts{DeviceID: server, FixedIPs: []ports.FixedIPOpts{{IPAddress: hop}}}).AllPages(cctx)
		cancel()
		if err != nil {
			return fmt.Errorf("openstack routes: %s %s in the allowed address pairs of server %s's port of %s: listing its ports: %w",
				what, dest, server, hop, err)
		}
		var found []portWithSecurity
		if err := ports.ExtractPortsInto(pages, &found); err != nil {
			return fmt.Errorf("openstack routes: reading server %s's ports: %w", server, err)
		}
		var port *portWithSecurity
		for i := range found {
			for _, ip := range found[i].FixedIPs {
				if found[i].DeviceID == server && canonicalIP(ip.IPAddress) == hop {
					port = &found[i]
				}
			}
		}
		switch {
		case port == nil:
			return fmt.Errorf("openstack routes: %s %s in the allowed address pairs: server %s has no Neutron port with the address %s",
				what, dest, server, hop)
		case !port.PortSecurityEnabled:
			klog.V(2).InfoS("Port without port security: no allowed address pairs needed", "port", port.ID, "server", server)
			return nil
		}
		var next []ports.AddressPair
		has := false
		for _, p := range port.AllowedAddressPairs {
			if q, err := netip.ParsePrefix(p.IPAddress); err == nil && q.Masked() == dest || p.IPAddress == dest.String() {
				has = true
				if !add {
					continue
				}
			}
			next = append(next, p)
		}
		if has == add {
			return nil
		}
		if add {
			next = append(next, ports.AddressPair{IPAddress: dest.String()})
		}
		if next == nil {
			next = []ports.AddressPair{}
		}
		rev := port.RevisionNumber
		cctx, cancel = r.c.callContext(ctx)
		_, err = ports.Update(cctx, nc, port.ID, ports.UpdateOpts{AllowedAddressPairs: &next, RevisionNumber: &rev}).Extract()
		cancel()
		switch {
		case err == nil:
			klog.InfoS("Changed a port's allowed address pairs", "port", port.ID, "server", server, "destination", dest, "added", add)
			return nil
		case gophercloud.ResponseCodeIs(err, http.StatusPreconditionFailed) && try < maxRevisionRetries:
			continue
		default:
			return fmt.Errorf("openstack routes: %s %s in the allowed address pairs of port %s (server %s): %w", what, dest, port.ID, server, err)
		}
	}
}

// maxRevisionRetries bounds the re-reads of a router another client
// changed between this process's read and its update (412).
const maxRevisionRetries = 3

// change adds or removes one route: with extraroute-atomic by
// add_extraroutes/remove_extraroutes (Neutron changes the set under its
// own lock), else by reading the router and writing its whole routes back
// under If-Match of the revision read (a 412: read again).
func (r *routes) change(ctx context.Context, nc *gophercloud.ServiceClient, atomic, add bool, x routers.Route) error {
	op := "remove"
	if add {
		op = "add"
	}
	fail := func(err error) error {
		if isRoutesExhausted(err) {
			return fmt.Errorf("openstack routes: %s route %s via %s on router %s: the router holds the most extra routes Neutron allows "+
				"(its max_routes, 30 unless the operator changed it): ask for a higher max_routes, or use an overlay pod network "+
				"for a cluster this large: %w", op, x.DestinationCIDR, x.NextHop, r.c.cfg.RouterID, err)
		}
		return fmt.Errorf("openstack routes: %s route %s via %s on router %s: %w", op, x.DestinationCIDR, x.NextHop, r.c.cfg.RouterID, err)
	}
	if atomic {
		cctx, cancel := r.c.callContext(ctx)
		defer cancel()
		opts := extraroutes.Opts{Routes: &[]routers.Route{x}}
		var err error
		if add {
			_, err = extraroutes.Add(cctx, nc, r.c.cfg.RouterID, opts).Extract()
		} else {
			_, err = extraroutes.Remove(cctx, nc, r.c.cfg.RouterID, opts).Extract()
		}
		if err != nil {
			return fail(err)
		}
		return nil
	}
	r.changing.Lock()
	defer r.changing.Unlock()
	for try := 1; ; try++ {
		rt, err := r.router(ctx, nc)
		if err != nil {
			return err
		}
		var next []routers.Route
		found := false
		for _, y := range rt.Routes {
			same := y.DestinationCIDR == x.DestinationCIDR && canonicalIP(y.NextHop) == canonicalIP(x.NextHop)
			found = found || same
			if !same || add {
				next = append(next, y)
			}
		}
		if found == add {
			return nil // already there, or already gone
		}
		if add {
			next = append(next, x)
		}
		if next == nil {
			next = []routers.Route{}
		}
		cctx, cancel := r.c.callContext(ctx)
		rev := rt.RevisionNumber
		_, err = routers.Update(cctx, nc, rt.ID, routers.UpdateOpts{Routes: &next, RevisionNumber: &rev}).Extract()
		cancel()
		switch {
		case err == nil:
			return nil
		case gophercloud.ResponseCodeIs(err, http.StatusPreconditionFailed) && try < maxRevisionRetries:
			klog.V(2).InfoS("Router changed since it was read; reading it again", "router", rt.ID, "revision", rev)
			continue
		default:
			return fail(err)
		}
	}
}

// isRoutesExhausted reports whether Neutron refused a change for the
// router's max_routes (400 RoutesExhausted).
func isRoutesExhausted(err error) bool {
	var e gophercloud.ErrUnexpectedResponseCode
	if errors.As(err, &e) {
		return e.Actual == http.StatusBadRequest && strings.Contains(string(e.Body), "RoutesExhausted")
	}
	return false
}
