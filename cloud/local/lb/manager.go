package lb

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// Options configure a Manager.
type Options struct {
	// AllowedPrefixes hold every VIP and backend; default 127.0.0.0/8.
	AllowedPrefixes []netip.Prefix
	// UDPIdleTimeout ends a UDP session without traffic; default 30s.
	UDPIdleTimeout time.Duration
	// DialTimeout bounds connecting to a backend; default 2s.
	DialTimeout time.Duration
	// Logf receives health transitions and proxy errors; may be nil.
	Logf func(string, ...any)
}

// Manager runs every load balancer of a cloud. It is safe for concurrent use.
type Manager struct {
	opts Options

	mu     sync.Mutex
	lbs    map[string]*balancer
	closed bool
}

type balancer struct {
	vip       netip.Addr
	listeners map[listenerKey]*listener
}

// Status is what the data plane knows of a load balancer.
type Status struct{ Listeners []ListenerStatus }

// ListenerStatus is one listener's backends and their health.
type ListenerStatus struct {
	Port     int
	Protocol Protocol
	Backends []BackendStatus
}

// BackendStatus is one backend's health.
type BackendStatus struct {
	Backend
	Healthy bool
	// LastError is the last failed check while unhealthy or flapping.
	LastError string
}

// NewManager makes a manager with no load balancers.
func NewManager(opts Options) *Manager {
	if len(opts.AllowedPrefixes) == 0 {
		opts.AllowedPrefixes = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	}
	if opts.UDPIdleTimeout <= 0 {
		opts.UDPIdleTimeout = 30 * time.Second
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 2 * time.Second
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	return &Manager{opts: opts, lbs: map[string]*balancer{}}
}

func (m *Manager) logf(format string, args ...any) { m.opts.Logf(format, args...) }

// Apply creates the load balancer or brings it to cfg. Nothing changes
// unless the whole config is valid and every new socket binds; listeners
// that stay keep their sockets and open connections.
func (m *Manager) Apply(cfg Config) error {
	cfg, vip, err := validate(cfg, m.opts.AllowedPrefixes)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errors.New("lb: manager is closed")
	}
	old := m.lbs[cfg.Name]
	if old != nil && old.vip != vip {
		old = nil // a new VIP: every socket is new; the old ones close after
	}
	next := &balancer{vip: vip, listeners: map[listenerKey]*listener{}}
	var bound []*listener
	for _, l := range cfg.Listeners {
		k := listenerKey{l.Port, l.Protocol}
		if old != nil && old.listeners[k] != nil {
			next.listeners[k] = old.listeners[k]
			continue
		}
		ln, err := bind(m, cfg.Name, vip, l)
		if err != nil {
			for _, b := range bound {
				b.stop()
			}
			return fmt.Errorf("lb %s: listen on %s %s:%d: %w", cfg.Name, l.Protocol, vip, l.Port, err)
		}
		bound = append(bound, ln)
		next.listeners[k] = ln
	}
	for _, l := range cfg.Listeners {
		next.listeners[listenerKey{l.Port, l.Protocol}].configure(l, cfg.SourceRanges)
	}
	for _, ln := range bound {
		ln.serve()
	}
	if prev := m.lbs[cfg.Name]; prev != nil {
		for k, ln := range prev.listeners {
			if next.listeners[k] != ln {
				ln.stop()
			}
		}
	}
	m.lbs[cfg.Name] = next
	return nil
}

// Remove stops a load balancer; an unknown name is not an error.
func (m *Manager) Remove(name string) error {
	m.mu.Lock()
	b := m.lbs[name]
	delete(m.lbs, name)
	m.mu.Unlock()
	if b != nil {
		b.stop()
	}
	return nil
}

func (b *balancer) stop() {
	for _, ln := range b.listeners {
		ln.stop()
	}
}

// Status reports listeners by port and protocol, backends in config order.
func (m *Manager) Status(name string) (Status, bool) {
	m.mu.Lock()
	b := m.lbs[name]
	var lns []*listener
	if b != nil {
		for _, ln := range b.listeners {
			lns = append(lns, ln)
		}
	}
	m.mu.Unlock()
	if b == nil {
		return Status{}, false
	}
	slices.SortFunc(lns, func(x, y *listener) int {
		if x.key.port != y.key.port {
			return x.key.port - y.key.port
		}
		return strings.Compare(string(x.key.proto), string(y.key.proto))
	})
	var st Status
	for _, ln := range lns {
		ls := ListenerStatus{Port: ln.key.port, Protocol: ln.key.proto}
		ln.mu.Lock()
		for _, be := range ln.backends {
			ls.Backends = append(ls.Backends, be.status())
		}
		ln.mu.Unlock()
		st.Listeners = append(st.Listeners, ls)
	}
	return st, true
}

// Close stops every load balancer and waits for all goroutines.
func (m *Manager) Close() error {
	m.mu.Lock()
	m.closed = true
	lbs := m.lbs
	m.lbs = map[string]*balancer{}
	m.mu.Unlock()
	for _, b := range lbs {
		b.stop()
	}
	return nil
}
