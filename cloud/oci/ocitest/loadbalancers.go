package ocitest

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
	"github.com/mooring-dev/mooring/cloud/local/lb"
)

// The load balancers of both APIs, the flexible Load Balancer (Kind LB,
// /20170115) and the Network Load Balancer (Kind NLB, /20200501), held in
// one model: each API answers them in its own wire types
// (loadbalancers_api.go, networkloadbalancers.go). Every write is a work
// request (workrequests.go) that changes the model when it succeeds.

// Kinds of load balancer.
const (
	KindLB  = "lb"
	KindNLB = "nlb"
)

// Lifecycle states (both APIs; UPDATING is the NLB's alone).
const (
	StateCreating = "CREATING"
	StateActive   = "ACTIVE"
	StateUpdating = "UPDATING"
	StateFailed   = "FAILED"
	StateDeleting = "DELETING"
)

// DataPlanePrefix holds the endpoint's load balancers' addresses.
var DataPlanePrefix = netip.MustParsePrefix("127.85.0.0/16")

// Balancer is one load balancer of either kind.
type Balancer struct {
	// ID is assigned by PutBalancer when "" (ocid1.loadbalancer... or
	// ocid1.networkloadbalancer...).
	ID   string
	Kind string
	// Compartment defaults to the endpoint's.
	Compartment, DisplayName string
	// State: PutBalancer's default ACTIVE.
	State string
	// Shape (LB): a fixed shape's name or flexible with FlexMin/FlexMax.
	Shape            string
	FlexMin, FlexMax int
	Private          bool
	// Subnets: one or two (LB), exactly one (NLB).
	Subnets []string
	NSGs    []string
	// Listeners and BackendSets by name.
	Listeners   map[string]Listener
	BackendSets map[string]BackendSet
	// Certificates (LB): certificate name -> public certificate (PEM).
	Certificates map[string]string
	FreeformTags map[string]string
	// IP is its address on the data plane, given when it first becomes
	// ACTIVE and kept (PutBalancer ignores the one given).
	IP      string
	Created time.Time
}

// Listener is a listener: a port and protocol to a backend set.
type Listener struct {
	Name, Protocol, BackendSet string
	Port                       int
	// Certificate (LB) is the SSL configuration's certificate name.
	Certificate string
	// IdleTimeout and ProxyProtocol (LB's connection configuration).
	IdleTimeout   int64
	ProxyProtocol int
	// PPv2 (NLB's isPpv2Enabled).
	PPv2 bool
}

// BackendSet is a backend set: its backends, policy and health checker.
type BackendSet struct {
	Name, Policy   string
	Check          HealthCheck
	Backends       []Backend
	PreserveSource bool
}

// HealthCheck is a backend set's health checker.
type HealthCheck struct {
	Protocol, Path                                 string
	Port, ReturnCode, Retries, TimeoutMs, Interval int
}

// Backend is a backend: an address and port (and the NLB's target
// instance).
type Backend struct {
	IP       string
	Port     int
	TargetID string
	Weight   int
}

// Name is a backend's name as both APIs give it: ip:port.
func (b Backend) Name() string { return fmt.Sprintf("%s:%d", b.IP, b.Port) }

// lbStore is the load balancers, their work requests and data plane; the
// Cloud's mu guards it.
type lbStore struct {
	balancers map[string]*Balancer
	work      map[string]*workRequest
	order     []string          // work request ids, in acceptance order
	tokens    map[string]string // opc-retry-token -> work request id
	plane     cloudtest.DataPlane
	failNext  int // work requests still to fail
	hold      bool
	planeErr  error
}

func (s *lbStore) init() {
	if s.balancers == nil {
		s.balancers, s.work, s.tokens = map[string]*Balancer{}, map[string]*workRequest{}, map[string]string{}
		s.plane.Prefix = DataPlanePrefix
	}
}

// clone is a deep copy of b.
func (b *Balancer) clone() Balancer {
	out := *b
	out.Subnets, out.NSGs = slices.Clone(b.Subnets), slices.Clone(b.NSGs)
	out.Listeners, out.Certificates, out.FreeformTags = maps.Clone(b.Listeners), maps.Clone(b.Certificates), maps.Clone(b.FreeformTags)
	out.BackendSets = map[string]BackendSet{}
	for k, v := range b.BackendSets {
		v.Backends = slices.Clone(v.Backends)
		out.BackendSets[k] = v
	}
	return out
}

// Balancers are the load balancers of both kinds, by creation time.
func (c *Cloud) Balancers() []Balancer {
	c.advance()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lbs.init()
	var out []Balancer
	for _, b := range c.lbs.balancers {
		out = append(out, b.clone())
	}
	slices.SortFunc(out, func(a, b Balancer) int { return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.ID, b.ID)) })
	return out
}

// Balancer is one load balancer.
func (c *Cloud) Balancer(id string) (Balancer, bool) {
	c.advance()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lbs.init()
	b, ok := c.lbs.balancers[id]
	if !ok {
		return Balancer{}, false
	}
	return b.clone(), true
}

// PutBalancer adds or replaces a load balancer out of band (one the
// cloud's own CCM made, a change by hand), ACTIVE unless State says
// otherwise, served on the data plane when ACTIVE.
func (c *Cloud) PutBalancer(b Balancer) (Balancer, error) {
	if b.Kind != KindLB && b.Kind != KindNLB {
		return Balancer{}, fmt.Errorf("ocitest: kind %q, want %s or %s", b.Kind, KindLB, KindNLB)
	}
	c.mu.Lock()
	c.lbs.init()
	if b.ID == "" {
		b.ID = c.newID(b.Kind)
	}
	b.Compartment = cmp.Or(b.Compartment, c.opts.Compartment)
	b.State = cmp.Or(b.State, StateActive)
	if b.Created.IsZero() {
		b.Created = c.opts.Now().UTC().Truncate(time.Millisecond)
	}
	b.IP = "" // the data plane's
	if old, ok := c.lbs.balancers[b.ID]; ok {
		b.IP = old.IP
	}
	stored := b.clone()
	c.lbs.balancers[b.ID] = &stored
	c.mu.Unlock()
	if b.State == StateActive {
		c.serve(b.ID)
	}
	out, _ := c.Balancer(b.ID)
	return out, nil
}

// DeleteBalancer removes a load balancer out of band.
func (c *Cloud) DeleteBalancer(id string) {
	c.mu.Lock()
	c.lbs.init()
	delete(c.lbs.balancers, id)
	c.mu.Unlock()
	c.lbs.plane.Remove(id)
}

// LBHealthy reports, per listener port, how many of the load balancer's
// backends pass its health checks on the data plane.
func (c *Cloud) LBHealthy(id string) map[int]int { return c.lbs.plane.Healthy(id) }

// DataPlaneErr is the last error the data plane gave serving a load
// balancer (nil: none).
func (c *Cloud) DataPlaneErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lbs.planeErr
}

// Close stops the API, the instances' services and the data plane.
func (c *Cloud) Close() error {
	err := c.Base.Close()
	if perr := c.lbs.plane.Close(); err == nil {
		err = perr
	}
	return err
}

func (c *Cloud) newID(kind string) string {
	if kind == KindNLB {
		return "ocid1.networkloadbalancer.oc1." + c.opts.RegionKey + "." + uniqueID()
	}
	return "ocid1.loadbalancer.oc1." + c.opts.RegionKey + "." + uniqueID()
}

// serve makes the data plane forward the load balancer's listeners to
// the backends of their backend sets (with its health checker), and
// gives it its VIP; one not ACTIVE (or gone) is removed.
func (c *Cloud) serve(id string) {
	c.mu.Lock()
	b, ok := c.lbs.balancers[id]
	if !ok || b.State != StateActive && b.State != StateUpdating {
		c.mu.Unlock()
		c.lbs.plane.Remove(id)
		return
	}
	var listeners []lb.Listener
	for _, name := range slices.Sorted(maps.Keys(b.Listeners)) {
		l := b.Listeners[name]
		set := b.BackendSets[l.BackendSet]
		protos := []lb.Protocol{lb.TCP}
		switch l.Protocol {
		case "UDP":
			protos = []lb.Protocol{lb.UDP}
		case "TCP_AND_UDP":
			protos = []lb.Protocol{lb.TCP, lb.UDP}
		}
		hc := set.Check
		check := &lb.HealthCheck{Protocol: lb.TCP, Port: hc.Port, Interval: time.Duration(max(min(hc.Interval, 2000), 200)) * time.Millisecond,
			Timeout: time.Duration(max(min(hc.TimeoutMs, 1000), 100)) * time.Millisecond, UnhealthyThreshold: max(hc.Retries, 1)}
		if hc.Protocol == "HTTP" {
			check.Protocol, check.Path = lb.HTTP, cmp.Or(hc.Path, "/")
		}
		for _, p := range protos {
			ln := lb.Listener{Port: l.Port, Protocol: p, HealthCheck: check}
			for _, be := range set.Backends {
				if ip, err := netip.ParseAddr(be.IP); err == nil && ip.IsLoopback() && ip.Is4() {
					ln.Backends = append(ln.Backends, lb.Backend{Address: be.IP, Port: be.Port})
				}
			}
			listeners = append(listeners, ln)
		}
	}
	c.mu.Unlock()
	vip, err := c.lbs.plane.Serve(id, listeners, nil)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lbs.planeErr = err
	if b, ok := c.lbs.balancers[id]; ok && err == nil && b.IP == "" {
		b.IP = vip
	}
}
