package server

import (
	"fmt"
	"net/netip"

	"github.com/mooring-dev/mooring/cloud/local/api"
)

// pool hands out the addresses of a CIDR (without its network and broadcast
// addresses), lowest free first.
type pool struct {
	name   string
	prefix netip.Prefix
	used   map[netip.Addr]bool
	next   netip.Addr // where the search for a free address starts
}

func newPool(name, cidr string, allowed []netip.Prefix) (*pool, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil || !p.Addr().Is4() {
		return nil, fmt.Errorf("config: %s pool %q is not an IPv4 CIDR", name, cidr)
	}
	p = p.Masked()
	if p.Bits() > 30 {
		return nil, fmt.Errorf("config: %s pool %s is too small", name, p)
	}
	if !insideAny(p, allowed) {
		return nil, fmt.Errorf("config: %s pool %s is outside the allowed prefixes %v", name, p, allowed)
	}
	return &pool{name: name, prefix: p, used: map[netip.Addr]bool{}, next: p.Addr().Next()}, nil
}

func insideAny(p netip.Prefix, allowed []netip.Prefix) bool {
	for _, a := range allowed {
		if a.Bits() <= p.Bits() && a.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

func (p *pool) usable(a netip.Addr) bool {
	return p.prefix.Contains(a) && a != p.prefix.Addr() && p.prefix.Contains(a.Next())
}

// allocate returns a free address or an Exhausted error.
func (p *pool) allocate() (netip.Addr, error) {
	a := p.next
	for range 1 << (32 - p.prefix.Bits()) {
		if !p.usable(a) {
			a = p.prefix.Addr().Next()
		}
		if !p.used[a] {
			p.used[a] = true
			p.next = a.Next()
			return a, nil
		}
		a = a.Next()
	}
	return netip.Addr{}, api.Errorf(api.CodeExhausted, "the %s address pool %s is exhausted", p.name, p.prefix)
}

// reserve marks an address as used (when state is loaded).
func (p *pool) reserve(s string) {
	if a, err := netip.ParseAddr(s); err == nil && p.prefix.Contains(a) {
		p.used[a] = true
	}
}

// release frees an address.
func (p *pool) release(s string) {
	if a, err := netip.ParseAddr(s); err == nil {
		delete(p.used, a)
	}
}
