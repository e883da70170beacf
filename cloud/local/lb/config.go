package lb

import (
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Protocol of a listener or health check.
type Protocol string

// Protocols. HTTP is a health-check protocol only.
const (
	TCP  Protocol = "TCP"
	UDP  Protocol = "UDP"
	HTTP Protocol = "HTTP"
)

// Backend is an address and port traffic is forwarded to.
type Backend struct {
	Address string
	Port    int
}

func (b Backend) String() string {
	return netip.AddrPortFrom(netip.MustParseAddr(b.Address), uint16(b.Port)).String()
}

// HealthCheck probes every backend of a listener.
type HealthCheck struct {
	Protocol Protocol // TCP or HTTP
	Port     int      // 0: the backend's port
	Path     string   // HTTP only; default "/"
	// Interval between checks and Timeout of one; defaults 2s and 1s.
	Interval, Timeout time.Duration
	// Consecutive results that flip a backend; defaults 1 and 2.
	HealthyThreshold, UnhealthyThreshold int
}

// Listener is a port and protocol on the VIP.
type Listener struct {
	Port        int
	Protocol    Protocol // TCP or UDP
	Backends    []Backend
	HealthCheck *HealthCheck // nil: every backend counts as healthy
}

// Config is one load balancer.
type Config struct {
	Name      string
	VIP       string
	Listeners []Listener
	// SourceRanges the client's address must be in; empty allows all.
	SourceRanges []netip.Prefix
}

type listenerKey struct {
	port  int
	proto Protocol
}

// validate checks cfg against the allowed prefixes and fills defaults in
// a copy.
func validate(cfg Config, allowed []netip.Prefix) (Config, netip.Addr, error) {
	out := cfg
	if cfg.Name == "" {
		return out, netip.Addr{}, errors.New("lb: name is empty")
	}
	fail := func(format string, args ...any) (Config, netip.Addr, error) {
		return out, netip.Addr{}, fmt.Errorf("lb %s: "+format, append([]any{cfg.Name}, args...)...)
	}
	vip, err := netip.ParseAddr(cfg.VIP)
	if err != nil {
		return fail("VIP %q is not an IP address", cfg.VIP)
	}
	if !inside(vip, allowed) {
		return fail("VIP %s is outside the allowed prefixes %v", vip, allowed)
	}
	out.Listeners = make([]Listener, len(cfg.Listeners))
	seen := map[listenerKey]bool{}
	for i, l := range cfg.Listeners {
		if l.Port < 1 || l.Port > 65535 {
			return fail("listener %d: port %d is not 1-65535", i, l.Port)
		}
		if l.Protocol != TCP && l.Protocol != UDP {
			return fail("listener %d: protocol %q is not TCP or UDP", i, l.Protocol)
		}
		k := listenerKey{l.Port, l.Protocol}
		if seen[k] {
			return fail("listener %d: %s/%d appears twice", i, l.Protocol, l.Port)
		}
		seen[k] = true
		l.Backends = append([]Backend(nil), l.Backends...)
		for j, b := range l.Backends {
			a, err := netip.ParseAddr(b.Address)
			if err != nil {
				return fail("listener %d backend %d: address %q is not an IP address", i, j, b.Address)
			}
			if !inside(a, allowed) {
				return fail("listener %d backend %d: address %s is outside the allowed prefixes %v", i, j, a, allowed)
			}
			if b.Port < 1 || b.Port > 65535 {
				return fail("listener %d backend %d: port %d is not 1-65535", i, j, b.Port)
			}
			l.Backends[j].Address = a.String()
		}
		if l.HealthCheck != nil {
			hc, err := normalizeCheck(*l.HealthCheck)
			if err != nil {
				return fail("listener %d health check: %v", i, err)
			}
			l.HealthCheck = &hc
		}
		out.Listeners[i] = l
	}
	for i, p := range cfg.SourceRanges {
		if !p.IsValid() {
			return fail("source range %d is not a valid prefix", i)
		}
	}
	return out, vip, nil
}

func normalizeCheck(hc HealthCheck) (HealthCheck, error) {
	switch hc.Protocol {
	case TCP:
	case HTTP:
		if hc.Path == "" {
			hc.Path = "/"
		}
	default:
		return hc, fmt.Errorf("protocol %q is not TCP or HTTP", hc.Protocol)
	}
	if hc.Port < 0 || hc.Port > 65535 {
		return hc, fmt.Errorf("port %d is not 0-65535", hc.Port)
	}
	if hc.Interval < 0 || hc.Timeout < 0 || hc.HealthyThreshold < 0 || hc.UnhealthyThreshold < 0 {
		return hc, errors.New("durations and thresholds must not be negative")
	}
	if hc.Interval == 0 {
		hc.Interval = 2 * time.Second
	}
	if hc.Timeout == 0 {
		hc.Timeout = time.Second
	}
	if hc.HealthyThreshold == 0 {
		hc.HealthyThreshold = 1
	}
	if hc.UnhealthyThreshold == 0 {
		hc.UnhealthyThreshold = 2
	}
	return hc, nil
}

func inside(a netip.Addr, prefixes []netip.Prefix) bool {
	a = a.Unmap()
	for _, p := range prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// allowedSource reports whether a client may connect.
func allowedSource(a netip.Addr, ranges []netip.Prefix) bool {
	return len(ranges) == 0 || inside(a, ranges)
}
