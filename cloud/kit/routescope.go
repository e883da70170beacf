package kit

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
)

// RouteScope is the part of a backend's cloudprovider.Routes that decides
// which routes are the cluster's, beside the backend's own reads of its
// cloud: the cluster CIDRs (SetClusterCIDRs; a destination outside them is
// never listed nor changed) and the next hops seen as cluster servers'
// addresses, to their Node names (Remember), so that a route via a server
// deleted since is still known as the cluster's (WasKnown) and listed as a
// blackhole. Its zero value is ready: no cluster CIDRs, no hops known. It
// is safe for concurrent use.
type RouteScope struct {
	mu           sync.Mutex
	known        map[string]string
	clusterCIDRs []netip.Prefix
}

// ParseClusterCIDRs reads --cluster-cidr's comma-separated prefixes,
// masked; blank items are skipped, so "" is none. An error names the item.
func ParseClusterCIDRs(cidrs string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range strings.Split(cidrs, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("cluster CIDR %q: %w", s, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// SetClusterCIDRs replaces the cluster CIDRs (from ParseClusterCIDRs);
// none lets every destination in.
func (s *RouteScope) SetClusterCIDRs(cidrs []netip.Prefix) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clusterCIDRs = cidrs
}

// InCluster reports whether a route of dest may be touched: dest lies
// whole inside one of the cluster CIDRs, or none were set.
func (s *RouteScope) InCluster(dest netip.Prefix) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.clusterCIDRs) == 0 {
		return true
	}
	for _, p := range s.clusterCIDRs {
		if p.Bits() <= dest.Bits() && p.Contains(dest.Addr()) {
			return true
		}
	}
	return false
}

// CreateDest is the destination of a route to create for node, masked:
// route.DestinationCIDR as the route controller gives it (cidr). It is an
// error when cidr is no prefix or lies outside the cluster CIDRs; the
// backend prefixes its name.
func (s *RouteScope) CreateDest(cidr, node string) (netip.Prefix, error) {
	dest, err := netip.ParsePrefix(cidr)
	switch {
	case err != nil:
		return netip.Prefix{}, fmt.Errorf("route for Node %s: destination %q: %w", node, cidr, err)
	case !s.InCluster(dest.Masked()):
		return netip.Prefix{}, fmt.Errorf("route %s for Node %s: outside the cluster CIDRs; not created", dest, node)
	}
	return dest.Masked(), nil
}

// DeleteDest is the destination of a route to delete, the route the
// route controller names name of cidr, masked. It is an error when cidr is
// no prefix or lies outside the cluster CIDRs (such a route is not the
// cluster's, and stays); the backend prefixes its name.
func (s *RouteScope) DeleteDest(cidr, name string) (netip.Prefix, error) {
	dest, err := netip.ParsePrefix(cidr)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("route %s: destination %q: %w", name, cidr, err)
	}
	dest = dest.Masked()
	if !s.InCluster(dest) {
		return netip.Prefix{}, fmt.Errorf("route %s: destination %s outside the cluster CIDRs; not deleted", name, dest)
	}
	return dest, nil
}

// Remember records next hops just seen as cluster servers' addresses, to
// their servers' Node names, for the rest of the process's life.
func (s *RouteScope) Remember(hops map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.known == nil {
		s.known = map[string]string{}
	}
	for hop, node := range hops {
		s.known[hop] = node
	}
}

// WasKnown is the Node name of a next hop once remembered as a cluster
// server's address; false when it never was.
func (s *RouteScope) WasKnown(hop string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	node, ok := s.known[hop]
	return node, ok
}
