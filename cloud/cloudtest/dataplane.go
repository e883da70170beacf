package cloudtest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"syscall"

	"github.com/mooring-dev/mooring/cloud/local/lb"
)

// DataPlane makes a test endpoint's load balancers carry traffic, as the
// cloud's do: each listens on a VIP of its own on loopback and forwards
// to its targets (the local cloud's data plane, cloud/local/lb: TCP and
// UDP, health checks, source ranges). VIPs are picked at random in
// Prefix, so that endpoints of tests running at the same time rarely
// meet, and again when one is taken. The zero value is not ready: set
// Prefix. It is safe for concurrent use.
type DataPlane struct {
	// Prefix holds the VIPs: a loopback prefix of the endpoint's own
	// (127.N.0.0/16).
	Prefix netip.Prefix

	once sync.Once
	m    *lb.Manager
	mu   sync.Mutex
	vips map[string]netip.Addr // load balancer -> its VIP
}

func (d *DataPlane) init() {
	d.once.Do(func() {
		d.m = lb.NewManager(lb.Options{AllowedPrefixes: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
		d.vips = map[string]netip.Addr{}
	})
}

// Serve makes the load balancer of id forward its listeners (every
// listener's Backends and HealthCheck; ranges empty: every client) and
// returns its VIP: the one it had, or a new one.
func (d *DataPlane) Serve(id string, listeners []lb.Listener, ranges []netip.Prefix) (string, error) {
	if !d.Prefix.IsValid() || !d.Prefix.Addr().Is4() || !d.Prefix.Addr().IsLoopback() || d.Prefix.Bits() < 8 || d.Prefix.Bits() > 28 {
		return "", fmt.Errorf("data plane: prefix %v is not an IPv4 loopback prefix from /8 to /28", d.Prefix)
	}
	d.init()
	d.mu.Lock()
	vip, had := d.vips[id]
	d.mu.Unlock()
	for try := 0; ; try++ {
		if !had {
			vip = d.pick()
		}
		err := d.m.Apply(lb.Config{Name: id, VIP: vip.String(), Listeners: listeners, SourceRanges: ranges})
		if err == nil {
			d.mu.Lock()
			d.vips[id] = vip
			d.mu.Unlock()
			return vip.String(), nil
		}
		if had || try == 20 || !errors.Is(err, syscall.EADDRINUSE) {
			return "", err
		}
	}
}

// VIP is the load balancer's VIP, "" when it has none.
func (d *DataPlane) VIP(id string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if v, ok := d.vips[id]; ok {
		return v.String()
	}
	return ""
}

// Healthy reports, per listener port, how many targets pass their checks.
func (d *DataPlane) Healthy(id string) map[int]int {
	d.init()
	st, ok := d.m.Status(id)
	if !ok {
		return nil
	}
	out := map[int]int{}
	for _, l := range st.Listeners {
		for _, b := range l.Backends {
			if b.Healthy {
				out[l.Port]++
			}
		}
	}
	return out
}

// Remove stops the load balancer; its VIP is free again.
func (d *DataPlane) Remove(id string) {
	d.init()
	_ = d.m.Remove(id)
	d.mu.Lock()
	delete(d.vips, id)
	d.mu.Unlock()
}

// Close stops every load balancer.
func (d *DataPlane) Close() error {
	d.init()
	return d.m.Close()
}

// pick is a VIP of Prefix in no use here, neither its first nor last.
func (d *DataPlane) pick() netip.Addr {
	d.mu.Lock()
	defer d.mu.Unlock()
	used := map[netip.Addr]bool{}
	for _, v := range d.vips {
		used[v] = true
	}
	base := d.Prefix.Masked().Addr().As4()
	bits := 32 - d.Prefix.Bits()
	for {
		n := uint32(1 + rand.IntN(1<<bits-2))
		a := base
		for i := 3; i >= 0; i-- {
			a[i] |= byte(n >> (8 * (3 - i)))
		}
		if v := netip.AddrFrom4(a); !used[v] {
			return v
		}
	}
}
