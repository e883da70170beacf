package hetzner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/view"
)

// Routes is the route controller's access to the configured private
// network's routes (docs/hetzner.md, Routes): a pod CIDR is routed to its
// Node's server by a route of the network whose gateway is the server's
// address in it, as hcloud-cloud-controller-manager routes them. Without a
// configured network there are none.
func (c *Cloud) Routes() (cloudprovider.Routes, bool) {
	if c.cfg.Network.IsZero() {
		return nil, false
	}
	return c.routes, true
}

// SetClusterCIDRs narrows the routes the provider touches to destinations
// inside the cluster's pod ranges (--cluster-cidr, comma-separated): routes
// with other destinations are neither listed nor created nor deleted. ""
// leaves the narrowing to the route controller's own (see routes).
func (c *Cloud) SetClusterCIDRs(cidrs string) error {
	out, err := kit.ParseClusterCIDRs(cidrs)
	if err != nil {
		return fmt.Errorf("hetzner routes: %w", err)
	}
	c.routes.scope.SetClusterCIDRs(out)
	return nil
}

// routes implements cloudprovider.Routes over the network's routes.
//
// Only the cluster's own routes are touched: a route is the cluster's when
// its gateway is the address, in the network, of one of the cluster's
// servers (the instance view: servers with the cluster label), or was one
// earlier in this process's life (a server deleted since: its routes are
// listed as blackholes, which the route controller deletes). Routes via
// any other gateway are neither listed nor changed, so two clusters (or a
// cluster and hand-made routes) can share a network. When SetClusterCIDRs
// was called, only destinations inside the cluster's pod ranges are
// touched as well. The stock route controller (k8s.io/cloud-provider
// controllers/route) deletes only listed routes whose destination's first
// or last address lies in --cluster-cidr, and creates routes only for
// Nodes' spec.podCIDRs.
type routes struct {
	c *Cloud

	// scope holds the cluster CIDRs and the gateways seen as cluster
	// servers' addresses, to the Node names of those servers.
	scope kit.RouteScope

	// changing serializes this process's changes of the network: the API
	// refuses a change while the network's previous action runs
	// (conflict), and the controller creates routes many at a time.
	changing sync.Mutex
}

var _ cloudprovider.Routes = (*routes)(nil)

// errForeignRoute is wrapped by the error of a route the provider will not
// change: its gateway is not one of the cluster's servers.
var errForeignRoute = errors.New("route via a gateway that is not one of the cluster's servers")

// gateways maps the cluster's servers' addresses in the network (their
// InternalIPs: the view lists only the configured network's) to the
// servers' Node names, from the instance view, and remembers them in scope.
func (r *routes) gateways(ctx context.Context) (map[string]string, error) {
	ins, err := r.c.view.List(ctx, r.c.cfg.InstanceMaxAge.Duration)
	if err != nil {
		return nil, fmt.Errorf("hetzner routes: listing the cluster's servers: %w", err)
	}
	out := map[string]string{}
	for _, in := range ins {
		for _, a := range in.Addresses {
			if a.Type == v1.NodeInternalIP {
				out[a.Address] = in.NodeName
			}
		}
	}
	r.scope.Remember(out)
	return out, nil
}

// network reads the configured network (GET /networks/{id}).
func (r *routes) network(ctx context.Context) (*hcloud.Network, error) {
	id, err := r.c.network.ID(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := r.c.callContext(ctx)
	defer cancel()
	n, resp, err := r.c.client.Network.GetByID(ctx, id)
	noteRateLimit(resp)
	switch {
	case err != nil:
		return nil, fmt.Errorf("hetzner routes: reading network %d: %w", id, err)
	case n == nil:
		return nil, fmt.Errorf("hetzner routes: network %d (%s): %w", id, r.c.cfg.Network, errNoNetwork)
	}
	return n, nil
}

// callContext bounds one API call by the config's requestTimeout.
func (c *Cloud) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if d := c.cfg.RequestTimeout.Duration; d > 0 {
		return context.WithTimeout(ctx, d)
	}
	return context.WithCancel(ctx)
}

// routeName is the name a listed route carries: network, destination and
// gateway.
func routeName(network int64, dest, gw string) string {
	return fmt.Sprintf("hcloud-network-%d:%s:via:%s", network, dest, gw)
}

// listedGateway reads the gateway back from the name of a route listed
// in network; false when the name is not of such a route.
func listedGateway(name string, network int64) (string, bool) {
	rest, ok := strings.CutPrefix(name, fmt.Sprintf("hcloud-network-%d:", network))
	if !ok {
		return "", false
	}
	_, gw, ok := strings.Cut(rest, ":via:")
	if _, err := netip.ParseAddr(gw); !ok || err != nil {
		return "", false
	}
	return gw, true
}

// ListRoutes lists the cluster's routes in the network: those via a
// cluster server's address, with the server's Node as TargetNode, and
// those via an address that was a cluster server's earlier, as blackholes.
// The network and the cluster's servers are read first; if either read
// fails, it is an error, never a shorter list. The servers come from the
// view, whose lists are whole or errors: a server missing from them would
// make its live routes look like blackholes, which the controller deletes.
func (r *routes) ListRoutes(ctx context.Context, _ string) ([]*cloudprovider.Route, error) {
	n, err := r.network(ctx)
	if err != nil {
		return nil, err
	}
	gws, err := r.gateways(ctx)
	if err != nil {
		return nil, err
	}
	var out []*cloudprovider.Route
	for _, nr := range n.Routes {
		if nr.Destination == nil || nr.Gateway == nil {
			continue
		}
		dest, ok := prefixOf(nr.Destination)
		if !ok || !r.scope.InCluster(dest) {
			continue
		}
		gw := nr.Gateway.String()
		rt := &cloudprovider.Route{Name: routeName(n.ID, dest.String(), gw), DestinationCIDR: dest.String()}
		if node, ok := gws[gw]; ok {
			rt.TargetNode = types.NodeName(node)
		} else if node, ok := r.scope.WasKnown(gw); ok {
			klog.V(2).InfoS("Listing a route via a former cluster server's address as a blackhole", "network", n.ID,
				"destination", rt.DestinationCIDR, "gateway", gw, "formerNode", node)
			rt.Blackhole = true
		} else {
			klog.V(4).InfoS("Leaving out a route via a gateway that is not one of the cluster's servers", "network", n.ID,
				"destination", rt.DestinationCIDR, "gateway", gw)
			continue
		}
		out = append(out, rt)
	}
	return out, nil
}

// prefixOf converts a route's destination.
func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	addr, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, bits := n.Mask.Size()
	if bits == 0 {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(addr.Unmap(), ones).Masked(), true
}

// CreateRoute routes the Node's pod CIDR to its server's address in the
// network. The destination must be IPv4 (Hetzner networks carry no IPv6)
// and, when cluster CIDRs were set, inside one; the Node's server must be
// one of the cluster's and have an address in the network, and that
// address must be among the Node's InternalIPs the controller passes. A
// route of the destination via the same gateway is left as it is; one via
// another cluster server (or a former one) is replaced; one via any other
// gateway is an error, and stays.
func (r *routes) CreateRoute(ctx context.Context, _ string, _ string, route *cloudprovider.Route) error {
	dest, err := netip.ParsePrefix(route.DestinationCIDR)
	switch {
	case err != nil:
		return fmt.Errorf("hetzner routes: route for Node %s: destination %q: %w", route.TargetNode, route.DestinationCIDR, err)
	case !dest.Addr().Is4():
		return fmt.Errorf("hetzner routes: route %s for Node %s: Hetzner private networks carry IPv4 only", dest, route.TargetNode)
	case !r.scope.InCluster(dest):
		return fmt.Errorf("hetzner routes: route %s for Node %s: outside the cluster CIDRs; not created", dest, route.TargetNode)
	}
	dest = dest.Masked()
	in, err := r.c.view.ByNodeName(ctx, string(route.TargetNode), r.c.cfg.InstanceMaxAge.Duration)
	if err != nil {
		return fmt.Errorf("hetzner routes: route %s for Node %s: finding its server among the cluster's: %w", dest, route.TargetNode, err)
	}
	gw := internalIP(in)
	if gw == "" {
		return fmt.Errorf("hetzner routes: route %s for Node %s: server %s (%s) has no address in network %s: attach it to the network",
			dest, route.TargetNode, in.Name, in.ID, r.c.cfg.Network)
	}
	if len(route.TargetNodeAddresses) > 0 && !hasInternalIP(route.TargetNodeAddresses, gw) {
		return fmt.Errorf("hetzner routes: route %s for Node %s: its server's network address %s is not among the Node's InternalIPs yet",
			dest, route.TargetNode, gw)
	}
	n, err := r.network(ctx)
	if err != nil {
		return err
	}
	for _, nr := range n.Routes {
		if d, ok := prefixOf(nr.Destination); !ok || d != dest || nr.Gateway == nil {
			continue
		}
		old := nr.Gateway.String()
		if old == gw {
			klog.V(2).InfoS("Route exists", "network", n.ID, "destination", dest, "gateway", gw, "node", route.TargetNode)
			return nil
		}
		if err := r.ours(ctx, old); err != nil {
			return fmt.Errorf("hetzner routes: route %s for Node %s: network %d routes it via %s: %w; not replaced",
				dest, route.TargetNode, n.ID, old, err)
		}
		klog.InfoS("Replacing a route via another cluster server", "network", n.ID, "destination", dest, "oldGateway", old,
			"gateway", gw, "node", route.TargetNode)
		if err := r.change(ctx, n, "delete", dest, old); err != nil && !errors.Is(err, errRouteGone) {
			return err
		}
	}
	if err := r.change(ctx, n, "add", dest, gw); err != nil {
		return fmt.Errorf("%w (Node %s)", err, route.TargetNode)
	}
	klog.InfoS("Created route", "network", n.ID, "destination", dest, "gateway", gw, "node", route.TargetNode)
	return nil
}

// ours is nil when gw is, or was, a cluster server's address.
func (r *routes) ours(ctx context.Context, gw string) error {
	gws, err := r.gateways(ctx)
	if err != nil {
		return err
	}
	if _, ok := gws[gw]; ok {
		return nil
	}
	if _, ok := r.scope.WasKnown(gw); ok {
		return nil
	}
	return errForeignRoute
}

// DeleteRoute deletes a route ListRoutes gave: the network's route of its
// destination via the gateway it was listed with (delete_route names
// both, so a route of the destination made via another gateway since, as
// when the controller moves a pod CIDR to another Node while it deletes
// the old route, stays), when that gateway is, or was, a cluster server's
// address and the destination is inside the cluster CIDRs (when set). For
// a route not named as listed, the network's route of the destination, on
// the same conditions. A route via another gateway is an error, and stays;
// a route already gone is no error.
func (r *routes) DeleteRoute(ctx context.Context, _ string, route *cloudprovider.Route) error {
	dest, err := r.scope.DeleteDest(route.DestinationCIDR, route.Name)
	if err != nil {
		return fmt.Errorf("hetzner routes: %w", err)
	}
	id, err := r.c.network.ID(ctx)
	if err != nil {
		return err
	}
	gw, listed := listedGateway(route.Name, id)
	if !listed {
		n, err := r.network(ctx)
		if err != nil {
			return err
		}
		for _, nr := range n.Routes {
			if d, ok := prefixOf(nr.Destination); ok && d == dest && nr.Gateway != nil {
				gw = nr.Gateway.String()
			}
		}
		if gw == "" {
			klog.V(2).InfoS("Route already gone", "network", id, "destination", dest)
			return nil
		}
	}
	if err := r.ours(ctx, gw); err != nil {
		return fmt.Errorf("hetzner routes: route %s: network %d routes %s via %s: %w; not deleted", route.Name, id, dest, gw, err)
	}
	switch err := r.change(ctx, &hcloud.Network{ID: id}, "delete", dest, gw); {
	case errors.Is(err, errRouteGone):
		klog.V(2).InfoS("Route already gone", "network", id, "destination", dest, "gateway", gw)
		return nil
	case err != nil:
		return err
	}
	klog.InfoS("Deleted route", "network", id, "destination", dest, "gateway", gw, "node", route.TargetNode)
	return nil
}

// errRouteGone: the route change deletes is not in the network (any more).
var errRouteGone = errors.New("route not in the network")

// change adds or deletes one route and waits for its action, one change
// at a time; a route to delete that the network does not have is
// errRouteGone.
func (r *routes) change(ctx context.Context, n *hcloud.Network, op string, dest netip.Prefix, gw string) error {
	r.changing.Lock()
	defer r.changing.Unlock()
	nr := hcloud.NetworkRoute{Destination: &net.IPNet{IP: dest.Addr().AsSlice(), Mask: net.CIDRMask(dest.Bits(), 32)}, Gateway: net.ParseIP(gw)}
	cctx, cancel := r.c.callContext(ctx)
	var (
		act  *hcloud.Action
		resp *hcloud.Response
		err  error
	)
	if op == "add" {
		act, resp, err = r.c.client.Network.AddRoute(cctx, n, hcloud.NetworkAddRouteOpts{Route: nr})
	} else {
		act, resp, err = r.c.client.Network.DeleteRoute(cctx, n, hcloud.NetworkDeleteRouteOpts{Route: nr})
	}
	cancel()
	noteRateLimit(resp)
	if err != nil {
		if op == "delete" && hcloud.IsError(err, hcloud.ErrorCodeNotFound) {
			return errRouteGone
		}
		return fmt.Errorf("hetzner routes: %s route %s via %s in network %d: %w", op, dest, gw, n.ID, err)
	}
	if act == nil {
		return fmt.Errorf("hetzner routes: %s route %s via %s in network %d: the API answered no action", op, dest, gw, n.ID)
	}
	wctx, cancel := r.c.callContext(ctx)
	defer cancel()
	if err := r.c.client.Action.WaitFor(wctx, act); err != nil {
		return fmt.Errorf("hetzner routes: %s route %s via %s in network %d: action %d: %w", op, dest, gw, n.ID, act.ID, err)
	}
	return nil
}

// internalIP is an instance's first InternalIP: its address in the
// configured network.
func internalIP(in view.Instance) string {
	for _, a := range in.Addresses {
		if a.Type == v1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

func hasInternalIP(addrs []v1.NodeAddress, ip string) bool {
	for _, a := range addrs {
		if a.Type == v1.NodeInternalIP && a.Address == ip {
			return true
		}
	}
	return false
}
