package azure

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/view"
)

// Routes is the route controller's access to the configured route table
// (routeTableName; docs/azure.md, Routes): kubenet's routes, a Node's pod
// CIDR via its VM's private IP (next hop type VirtualAppliance), as
// cloud-provider-azure routes them. Without a routeTableName there are
// none.
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
		return fmt.Errorf("azure routes: %w", err)
	}
	if c.routes == nil {
		return nil
	}
	c.routes.scope.SetClusterCIDRs(out)
	return nil
}

// routes implements cloudprovider.Routes over one route table.
//
// Only the cluster's own routes are touched: a route is the cluster's when
// its next hop type is VirtualAppliance and its next hop is the private IP
// of one of the cluster's VMs (the instance view), or was one earlier in
// this process's life (a VM deleted since: its routes are listed as
// blackholes, which the route controller deletes), and, once
// SetClusterCIDRs was called, its destination lies inside the cluster's pod
// ranges. Every other route is neither listed nor changed, so the table
// can carry other clusters' and hand-made routes. (cloud-provider-azure
// lists every route of its table, taking the route's name for its Node.)
//
// Changes are made to the route table whole: read (GET, with its ETag),
// changed, written back (PUT under If-Match of that ETag, a long-running
// operation followed to its end). Changes asked for while a write runs are
// gathered into the next write (the route controller creates the missing
// routes all at once; ARM refuses a second write of a table while one
// runs), as cloud-provider-azure batches them. A 412 (the table changed
// since it was read) or an AnotherOperationInProgress (409, or 429 as the
// network resource provider answers it: another client's write runs; the
// SDK has already retried a 429 itself) reads it again, up to
// maxTableWrites times.
type routes struct {
	c      *Cloud
	tables *armnetwork.RouteTablesClient
	group  string // the route table's resource group
	table  string

	scope kit.RouteScope // the cluster CIDRs; next hops seen as cluster VMs' private IPs -> Node names

	mu     sync.Mutex
	queued []*routeOp // changes not yet taken by a write

	writing sync.Mutex // one write of the table at a time
}

var _ cloudprovider.Routes = (*routes)(nil)

// maxTableWrites bounds the attempts of one write of the table that ARM
// refuses for another's change (412) or write (409).
const maxTableWrites = 5

// pollFrequency is how often a write's long-running operation is asked
// about when ARM's answer gives no Retry-After (the SDK's least).
const pollFrequency = time.Second

// errForeignRoute is wrapped by the error of a route the provider will not
// change: it is not the cluster's.
var errForeignRoute = errors.New("a route that is not the cluster's (not via one of the cluster's VMs)")

// newRoutes makes the routes of the config's route table; nil without one.
func newRoutes(c *Cloud, cred azcore.TokenCredential, opts *arm.ClientOptions) (*routes, error) {
	if c.cfg.RouteTableName == "" {
		return nil, nil
	}
	tables, err := armnetwork.NewRouteTablesClient(c.cfg.SubscriptionID, cred, opts)
	if err != nil {
		return nil, fmt.Errorf("azure routes: route tables client: %w", err)
	}
	return &routes{c: c, tables: tables, group: c.cfg.routeTableGroup(), table: c.cfg.RouteTableName}, nil
}

// callContext bounds one ARM call by the config's requestTimeout.
func (r *routes) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if d := r.c.cfg.RequestTimeout.Duration; d > 0 {
		return context.WithTimeout(ctx, d)
	}
	return context.WithCancel(ctx)
}

// hops maps the cluster's VMs' private IPs (their Nodes' InternalIPs) to
// the VMs, from the instance view (whole lists or errors), and remembers
// them in scope.
func (r *routes) hops(ctx context.Context) (map[string]view.Instance, error) {
	ins, err := r.c.view.List(ctx, r.c.cfg.InstanceMaxAge.Duration)
	if err != nil {
		return nil, fmt.Errorf("azure routes: listing the cluster's VMs: %w", err)
	}
	out := map[string]view.Instance{}
	nodes := map[string]string{}
	for _, in := range ins {
		for _, a := range in.Addresses {
			if a.Type == v1.NodeInternalIP {
				ip := canonicalIP(a.Address)
				out[ip] = in
				nodes[ip] = in.NodeName
			}
		}
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

// read reads the route table (GET) with its ETag.
func (r *routes) read(ctx context.Context) (armnetwork.RouteTable, error) {
	cctx, cancel := r.callContext(ctx)
	defer cancel()
	resp, err := r.tables.Get(cctx, r.group, r.table, nil)
	var re *azcore.ResponseError
	switch {
	case errors.As(err, &re) && re.StatusCode == http.StatusNotFound:
		return armnetwork.RouteTable{}, fmt.Errorf("azure routes: route table %s in resource group %s (routeTableName, routeTableResourceGroup) not found: "+
			"create it and associate it with the nodes' subnet: %w", r.table, r.group, err)
	case err != nil:
		return armnetwork.RouteTable{}, fmt.Errorf("azure routes: reading route table %s in resource group %s: %w", r.table, r.group, err)
	}
	return resp.RouteTable, nil
}

// hopOf is a route's next hop when it is a VirtualAppliance's address
// (the only kind the cluster's routes are); false otherwise.
func hopOf(x *armnetwork.Route) (string, bool) {
	if x == nil || x.Properties == nil || x.Properties.NextHopType == nil ||
		!strings.EqualFold(string(*x.Properties.NextHopType), string(armnetwork.RouteNextHopTypeVirtualAppliance)) {
		return "", false
	}
	hop := canonicalIP(str(x.Properties.NextHopIPAddress))
	if _, err := netip.ParseAddr(hop); err != nil {
		return "", false
	}
	return hop, true
}

// destOf is a route's destination, masked; false when it is not a CIDR
// (Azure also takes service tags there).
func destOf(x *armnetwork.Route) (netip.Prefix, bool) {
	if x == nil || x.Properties == nil {
		return netip.Prefix{}, false
	}
	p, err := netip.ParsePrefix(str(x.Properties.AddressPrefix))
	if err != nil {
		return netip.Prefix{}, false
	}
	return p.Masked(), true
}

// ListRoutes lists the cluster's routes in the route table: those via a
// cluster VM's private IP, with the VM's Node as TargetNode, and those via
// an address that was one earlier, as blackholes; each named as the table
// names it. The table and the cluster's VMs are read first; if either read
// fails, it is an error, never a shorter list.
func (r *routes) ListRoutes(ctx context.Context, _ string) ([]*cloudprovider.Route, error) {
	rt, err := r.read(ctx)
	if err != nil {
		return nil, err
	}
	hops, err := r.hops(ctx)
	if err != nil {
		return nil, err
	}
	var out []*cloudprovider.Route
	for _, x := range tableRoutes(rt) {
		dest, ok := destOf(x)
		if !ok || !r.scope.InCluster(dest) {
			continue
		}
		hop, ok := hopOf(x)
		if !ok {
			continue
		}
		route := &cloudprovider.Route{Name: str(x.Name), DestinationCIDR: dest.String()}
		if in, ok := hops[hop]; ok {
			route.TargetNode = types.NodeName(in.NodeName)
		} else if node, ok := r.scope.WasKnown(hop); ok {
			klog.V(2).InfoS("Listing a route via a former cluster VM's address as a blackhole", "routeTable", r.table,
				"route", str(x.Name), "destination", dest, "nexthop", hop, "formerNode", node)
			route.TargetNode = types.NodeName(node)
			route.Blackhole = true
		} else {
			klog.V(4).InfoS("Leaving out a route via a next hop that is not one of the cluster's VMs", "routeTable", r.table,
				"route", str(x.Name), "destination", dest, "nexthop", hop)
			continue
		}
		out = append(out, route)
	}
	return out, nil
}

func tableRoutes(rt armnetwork.RouteTable) []*armnetwork.Route {
	if rt.Properties == nil {
		return nil
	}
	return rt.Properties.Routes
}

// routeNameSeparator is cloud-provider-azure's separator of a route name's
// Node name and destination (its dual-stack form, which names every route
// by both: a Node may have a route of each family).
const routeNameSeparator = "____"

// maxRouteName is Azure's longest route name.
const maxRouteName = 80

// routeName is the name of the route of dest to node, as
// cloud-provider-azure names routes in dual-stack clusters: the Node's
// name, "____", and the destination without ':', '.' and '/'. A name
// longer than Azure takes keeps its start and ends in a hash of the whole.
func routeName(node string, dest netip.Prefix) string {
	d := strings.NewReplacer(":", "", ".", "", "/", "").Replace(dest.String())
	name := node + routeNameSeparator + d
	if len(name) <= maxRouteName {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	tail := "-" + hex.EncodeToString(sum[:6])
	return name[:maxRouteName-len(tail)] + tail
}

// CreateRoute routes the Node's pod CIDR via its VM's private IP of the
// destination's family (next hop type VirtualAppliance), named as
// cloud-provider-azure names it. The destination must be inside the
// cluster CIDRs (when set); the Node's VM must be one of the cluster's, and
// its address among the Node's InternalIPs the controller passes. A route
// of the destination via the same next hop is left as it is; one via
// another cluster VM (or a former one) is replaced in the same write; one
// that is not the cluster's is an error, and stays.
func (r *routes) CreateRoute(ctx context.Context, _ string, _ string, route *cloudprovider.Route) error {
	dest, err := r.scope.CreateDest(route.DestinationCIDR, string(route.TargetNode))
	if err != nil {
		return fmt.Errorf("azure routes: %w", err)
	}
	in, err := r.c.view.ByNodeName(ctx, string(route.TargetNode), r.c.cfg.InstanceMaxAge.Duration)
	if err != nil {
		return fmt.Errorf("azure routes: route %s for Node %s: finding its VM among the cluster's: %w", dest, route.TargetNode, err)
	}
	hop := ""
	for _, a := range in.Addresses {
		if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == v1.NodeInternalIP && ip.Unmap().Is4() == dest.Addr().Is4() {
			hop = ip.Unmap().String()
			break
		}
	}
	if hop == "" {
		return fmt.Errorf("azure routes: route %s for Node %s: VM %s has no private IP of the destination's family", dest, route.TargetNode, in.Name)
	}
	if len(route.TargetNodeAddresses) > 0 && !hasInternalIP(route.TargetNodeAddresses, hop) {
		return fmt.Errorf("azure routes: route %s for Node %s: its VM's private IP %s is not among the Node's InternalIPs yet",
			dest, route.TargetNode, hop)
	}
	r.scope.Remember(map[string]string{hop: in.NodeName})
	name := routeName(string(route.TargetNode), dest)
	op := &routeOp{what: fmt.Sprintf("route %s via %s (Node %s)", dest, hop, route.TargetNode),
		apply: func(rs []*armnetwork.Route, hops map[string]view.Instance) ([]*armnetwork.Route, bool, error) {
			var keep []*armnetwork.Route
			exists, changed := false, false
			for _, x := range rs {
				d, ok := destOf(x)
				if !ok || d != dest {
					keep = append(keep, x)
					continue
				}
				old, va := hopOf(x)
				switch _, was := r.scope.WasKnown(old); {
				case va && old == hop && !exists:
					exists = true
					keep = append(keep, x)
				case va && was:
					klog.InfoS("Replacing a route via another cluster VM", "routeTable", r.table, "route", str(x.Name),
						"destination", dest, "oldNexthop", old, "nexthop", hop, "node", route.TargetNode)
					changed = true
				default:
					return nil, false, fmt.Errorf("azure routes: route %s for Node %s: route table %s routes it by its route %s (next hop %s %s): %w; not replaced",
						dest, route.TargetNode, r.table, str(x.Name), nextHopType(x), str(x.Properties.NextHopIPAddress), errForeignRoute)
				}
			}
			if exists {
				return keep, changed, nil
			}
			n := name
			if taken(keep, n) {
				// Another destination's name (the name drops the
				// destination's dots): this one's own hash.
				sum := sha256.Sum256([]byte(dest.String()))
				n = name[:min(len(name), maxRouteName-9)] + "-" + hex.EncodeToString(sum[:4])
				if taken(keep, n) {
					return nil, false, fmt.Errorf("azure routes: route %s for Node %s: route table %s already has routes named %s and %s",
						dest, route.TargetNode, r.table, name, n)
				}
			}
			return append(keep, &armnetwork.Route{Name: to.Ptr(n), Properties: &armnetwork.RoutePropertiesFormat{
				AddressPrefix:    to.Ptr(dest.String()),
				NextHopType:      to.Ptr(armnetwork.RouteNextHopTypeVirtualAppliance),
				NextHopIPAddress: to.Ptr(hop),
			}}), true, nil
		}}
	if err := r.change(ctx, op); err != nil {
		return err
	}
	if op.changed {
		klog.InfoS("Created route", "routeTable", r.table, "destination", dest, "nexthop", hop, "node", route.TargetNode)
	} else {
		klog.V(2).InfoS("Route exists", "routeTable", r.table, "destination", dest, "nexthop", hop, "node", route.TargetNode)
	}
	return nil
}

// taken reports whether a route of rs is named name (ARM's names compare
// case-blind).
func taken(rs []*armnetwork.Route, name string) bool {
	for _, x := range rs {
		if strings.EqualFold(str(x.Name), name) {
			return true
		}
	}
	return false
}

func nextHopType(x *armnetwork.Route) string {
	if x.Properties == nil || x.Properties.NextHopType == nil {
		return ""
	}
	return string(*x.Properties.NextHopType)
}

func hasInternalIP(addrs []v1.NodeAddress, ip string) bool {
	for _, a := range addrs {
		if a.Type == v1.NodeInternalIP && canonicalIP(a.Address) == ip {
			return true
		}
	}
	return false
}

// DeleteRoute deletes a route ListRoutes gave: the table's route of that
// name, when it still routes the destination (a route of the destination
// made under another name since stays); for a route without a name, the
// table's routes of the destination. Only a route via a next hop that is,
// or was, a cluster VM's private IP, of a destination inside the cluster
// CIDRs (when set), is deleted; another is an error, and stays. A route
// already gone is no error.
func (r *routes) DeleteRoute(ctx context.Context, _ string, route *cloudprovider.Route) error {
	dest, err := r.scope.DeleteDest(route.DestinationCIDR, route.Name)
	if err != nil {
		return fmt.Errorf("azure routes: %w", err)
	}
	var gone []string
	op := &routeOp{what: fmt.Sprintf("deletion of route %s (%s)", route.Name, dest),
		apply: func(rs []*armnetwork.Route, _ map[string]view.Instance) ([]*armnetwork.Route, bool, error) {
			var keep []*armnetwork.Route
			gone = gone[:0]
			for _, x := range rs {
				d, ok := destOf(x)
				if !ok || d != dest || route.Name != "" && !strings.EqualFold(str(x.Name), route.Name) {
					keep = append(keep, x)
					continue
				}
				hop, va := hopOf(x)
				if _, was := r.scope.WasKnown(hop); !va || !was {
					return nil, false, fmt.Errorf("azure routes: route %s: route table %s routes %s by it via next hop %s %s: %w; not deleted",
						str(x.Name), r.table, dest, nextHopType(x), str(x.Properties.NextHopIPAddress), errForeignRoute)
				}
				gone = append(gone, str(x.Name)+" via "+hop)
			}
			return keep, len(gone) > 0, nil
		}}
	if err := r.change(ctx, op); err != nil {
		return err
	}
	if !op.changed {
		klog.V(2).InfoS("Route already gone", "routeTable", r.table, "route", route.Name, "destination", dest)
		return nil
	}
	klog.InfoS("Deleted route", "routeTable", r.table, "routes", gone, "destination", dest, "node", route.TargetNode)
	return nil
}

// routeOp is one change of the table's routes, made by a write.
type routeOp struct {
	what string
	// apply changes rs (not in place): the routes after, and whether they
	// changed; an error refuses this change alone.
	apply func(rs []*armnetwork.Route, hops map[string]view.Instance) ([]*armnetwork.Route, bool, error)

	// Set by the write that took it, under routes.writing.
	finished bool
	changed  bool
	err      error
}

// change makes op in a write of the table: the write running when it is
// asked for, if op is not taken by it, or the next, which takes every
// change queued by then.
func (r *routes) change(ctx context.Context, op *routeOp) error {
	r.mu.Lock()
	r.queued = append(r.queued, op)
	r.mu.Unlock()
	r.writing.Lock()
	defer r.writing.Unlock()
	if op.finished {
		return op.err
	}
	r.mu.Lock()
	batch := r.queued
	r.queued = nil
	r.mu.Unlock()
	r.write(ctx, batch)
	return op.err
}

// write reads the table, applies the batch's changes, and writes it back
// under If-Match of the ETag read when any changed it; every op is
// finished.
func (r *routes) write(ctx context.Context, batch []*routeOp) {
	finish := func(err error, only func(*routeOp) bool) {
		for _, op := range batch {
			if !op.finished && (only == nil || only(op)) {
				op.finished, op.err = true, err
			}
		}
	}
	defer finish(nil, nil)
	for try := 1; ; try++ {
		rt, err := r.read(ctx)
		if err != nil {
			finish(err, nil)
			return
		}
		hops, err := r.hops(ctx)
		if err != nil {
			finish(err, nil)
			return
		}
		rs := append([]*armnetwork.Route(nil), tableRoutes(rt)...)
		changed := 0
		for _, op := range batch {
			op.changed, op.err = false, nil
			next, ch, err := op.apply(rs, hops)
			if err != nil {
				op.err = err
				continue
			}
			rs, op.changed = next, ch
			if ch {
				changed++
			}
		}
		if changed == 0 {
			for _, op := range batch {
				op.finished = true
			}
			return
		}
		err = r.put(ctx, rt, rs)
		var re *azcore.ResponseError
		retry := errors.As(err, &re) && (re.StatusCode == http.StatusPreconditionFailed ||
			strings.EqualFold(re.ErrorCode, "AnotherOperationInProgress"))
		switch {
		case err == nil:
			for _, op := range batch {
				op.finished = true
			}
			return
		case retry && try < maxTableWrites:
			klog.V(2).InfoS("Route table changed or being changed since it was read; reading it again", "routeTable", r.table,
				"etag", str(rt.Etag), "status", re.StatusCode, "code", re.ErrorCode)
			select {
			case <-ctx.Done():
				finish(ctx.Err(), nil)
				return
			case <-time.After(time.Duration(try) * 100 * time.Millisecond):
			}
			continue
		default:
			werr := fmt.Errorf("azure routes: writing route table %s in resource group %s: %w", r.table, r.group, err)
			for _, op := range batch {
				if op.err == nil && op.changed {
					op.err = fmt.Errorf("%s: %w", op.what, werr)
				}
				op.finished = true
			}
			return
		}
	}
}

// put writes the table read as rt with routes rs (PUT under If-Match of
// rt's ETag) and follows the long-running operation to its end.
func (r *routes) put(ctx context.Context, rt armnetwork.RouteTable, rs []*armnetwork.Route) error {
	if rs == nil {
		rs = []*armnetwork.Route{}
	}
	next := armnetwork.RouteTable{ID: rt.ID, Name: rt.Name, Location: rt.Location, Tags: rt.Tags,
		Properties: &armnetwork.RouteTablePropertiesFormat{Routes: make([]*armnetwork.Route, 0, len(rs))}}
	if rt.Properties != nil {
		next.Properties.DisableBgpRoutePropagation = rt.Properties.DisableBgpRoutePropagation
	}
	for _, x := range rs {
		// A route as written: its name and properties (ARM sets the
		// rest).
		y := &armnetwork.Route{Name: x.Name}
		if x.Properties != nil {
			y.Properties = &armnetwork.RoutePropertiesFormat{AddressPrefix: x.Properties.AddressPrefix, NextHopType: x.Properties.NextHopType,
				NextHopIPAddress: x.Properties.NextHopIPAddress}
		}
		next.Properties.Routes = append(next.Properties.Routes, y)
	}
	cctx, cancel := r.callContext(ctx)
	defer cancel()
	if rt.Etag != nil {
		cctx = policy.WithHTTPHeader(cctx, http.Header{"If-Match": []string{*rt.Etag}})
	}
	poller, err := r.tables.BeginCreateOrUpdate(cctx, r.group, r.table, next, nil)
	if err != nil {
		return err
	}
	// The operation runs on in ARM past the call's own timeout: it is
	// followed under ctx.
	_, err = poller.PollUntilDone(ctx, &runtime.PollUntilDoneOptions{Frequency: pollFrequency})
	return err
}
