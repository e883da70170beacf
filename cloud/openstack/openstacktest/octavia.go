package openstacktest

import (
	"cmp"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
	"github.com/mooring-dev/mooring/cloud/local/lb"
)

// Octavia: load balancers with their listeners, pools, members and health
// monitors (octavia_api.go serves them, octavia_validate.go reads the
// requests), built asynchronously: every change leaves the load balancer
// PENDING_* until it settles (LBOptions.PendingFor, or Settle), and a
// data plane on loopback carries the traffic of each ACTIVE one.

// Provisioning and operating statuses (Octavia's).
const (
	StatusPendingCreate = "PENDING_CREATE"
	StatusPendingUpdate = "PENDING_UPDATE"
	StatusPendingDelete = "PENDING_DELETE"
	StatusError         = "ERROR"
	OperatingOnline     = "ONLINE"
	OperatingOffline    = "OFFLINE"
	OperatingNoMonitor  = "NO_MONITOR"
)

// The networks the endpoint knows: the tenant network of the servers and
// VIPs, and the external network floating IPs come from.
const (
	DefaultNetworkID         = "4c1b2a0e-6f77-4d5e-9a77-2b1d3c8e0a01"
	DefaultSubnetID          = "8f0e5d2c-1b3a-4c6d-8e9f-0a1b2c3d4e02"
	DefaultFloatingNetworkID = "e1a7c3b5-9d2f-4a6e-8c0b-1d3f5a7c9e03"
	DefaultFloatingSubnetID  = "b2d4f6a8-0c1e-4a3b-9d5f-7e9a1c3b5d04"
)

// DataPlanePrefix holds the addresses of the endpoint's VIPs and floating
// IPs.
var DataPlanePrefix = netip.MustParsePrefix("127.84.0.0/16")

// LBOptions configure Octavia and the floating IPs.
type LBOptions struct {
	// PendingFor is how long a load balancer stays PENDING_* after each
	// change before it is ACTIVE (or gone, after a delete); 0: until
	// Settle.
	PendingFor time.Duration
	// Quota is the most load balancers the project may have (0: no
	// limit): Octavia answers 403 beyond it. FloatingIPQuota is Neutron's
	// for floating IPs (409 OverQuota).
	Quota, FloatingIPQuota int
	// PageMax is Octavia's pagination_max_limit (default 1000).
	PageMax int
}

// LoadBalancer is an Octavia load balancer and its children.
type LoadBalancer struct {
	// ID is a UUID, assigned when "".
	ID, Name, Description string
	// VIPAddress is assigned on the data plane when ""; VIPPortID is the
	// VIP's Neutron port, assigned when "".
	VIPAddress, VIPPortID      string
	VIPSubnetID, VIPNetworkID  string
	FlavorID, AvailabilityZone string
	Provider                   string
	Tags                       []string
	// ProvisioningStatus is ACTIVE (PutLoadBalancer's default), PENDING_*
	// or ERROR; OperatingStatus follows it.
	ProvisioningStatus, OperatingStatus string
	Listeners                           []Listener
	Pools                               []Pool
	Created, Updated                    time.Time

	gen int // bumped by every change: a settle timer of an older one does nothing
}

// Listener is a protocol and port of a load balancer.
type Listener struct {
	ID, Name, Description string
	Protocol              string
	Port                  int
	DefaultPoolID         string
	ConnectionLimit       int
	// Timeouts in milliseconds.
	TimeoutClientData, TimeoutMemberConnect, TimeoutMemberData, TimeoutTCPInspect int
	AllowedCIDRs                                                                  []string
	Tags                                                                          []string
}

// Pool is a set of members, the default pool of ListenerID (or of none).
type Pool struct {
	ID, Name, Description string
	Protocol, Algorithm   string
	ListenerID            string
	// SessionPersistence is its type (SOURCE_IP, ...), "" for none.
	SessionPersistence string
	Members            []Member
	Monitor            *Monitor
	Tags               []string
}

// Member is a backend of a pool.
type Member struct {
	ID, Name, Address string
	Port              int
	SubnetID          string
	Weight            int
	// MonitorPort is where the health monitor checks it (0: Port).
	MonitorPort int
	Tags        []string
}

// Monitor is a pool's health monitor.
type Monitor struct {
	ID, Name, Type                             string
	Delay, Timeout, MaxRetries, MaxRetriesDown int
	HTTPMethod, URLPath, ExpectedCodes         string
}

// octavia is the load balancers' state.
type octavia struct {
	mu    sync.Mutex
	lbs   map[string]*LoadBalancer
	order []string // ids, oldest first (Octavia's default sort)
	fips  map[string]*FloatingIP
	fipN  []string
	plane cloudtest.DataPlane
	errs  int // builds still to end in ERROR
	err   error
}

func (o *octavia) init() {
	if o.lbs == nil {
		o.lbs = map[string]*LoadBalancer{}
		o.fips = map[string]*FloatingIP{}
		o.plane.Prefix = DataPlanePrefix
	}
}

// Close stops the data plane, then the endpoint.
func (c *Cloud) Close() error { return errors.Join(c.octavia.plane.Close(), c.Base.Close()) }

func (l *LoadBalancer) clone() *LoadBalancer {
	out := *l
	out.Tags = slices.Clone(l.Tags)
	out.Listeners = slices.Clone(l.Listeners)
	for i := range out.Listeners {
		out.Listeners[i].AllowedCIDRs = slices.Clone(l.Listeners[i].AllowedCIDRs)
		out.Listeners[i].Tags = slices.Clone(l.Listeners[i].Tags)
	}
	out.Pools = slices.Clone(l.Pools)
	for i, p := range l.Pools {
		out.Pools[i].Members = slices.Clone(p.Members)
		out.Pools[i].Tags = slices.Clone(p.Tags)
		if p.Monitor != nil {
			m := *p.Monitor
			out.Pools[i].Monitor = &m
		}
	}
	return &out
}

// fill gives a load balancer's parts their ids and Octavia's defaults.
func (l *LoadBalancer) fill(now time.Time) {
	l.ID = cmp.Or(l.ID, uuid.NewString())
	l.VIPPortID = cmp.Or(l.VIPPortID, uuid.NewString())
	l.VIPSubnetID = cmp.Or(l.VIPSubnetID, DefaultSubnetID)
	l.VIPNetworkID = cmp.Or(l.VIPNetworkID, DefaultNetworkID)
	l.Provider = cmp.Or(l.Provider, "amphora")
	l.ProvisioningStatus = cmp.Or(l.ProvisioningStatus, StatusActive)
	if l.Created.IsZero() {
		l.Created = now
	}
	l.Updated = now
	for i := range l.Listeners {
		ln := &l.Listeners[i]
		ln.ID = cmp.Or(ln.ID, uuid.NewString())
	}
	for i := range l.Pools {
		p := &l.Pools[i]
		p.ID = cmp.Or(p.ID, uuid.NewString())
		for j := range p.Members {
			p.Members[j].ID = cmp.Or(p.Members[j].ID, uuid.NewString())
			if p.Members[j].Weight == 0 {
				p.Members[j].Weight = 1
			}
		}
		if p.Monitor != nil {
			p.Monitor.ID = cmp.Or(p.Monitor.ID, uuid.NewString())
		}
	}
	l.OperatingStatus = operating(l)
}

// operating is a load balancer's operating status for its provisioning
// status.
func operating(l *LoadBalancer) string {
	switch l.ProvisioningStatus {
	case StatusActive:
		return OperatingOnline
	case StatusError:
		return StatusError
	}
	if l.OperatingStatus == OperatingOnline {
		return OperatingOnline // a change keeps serving
	}
	return OperatingOffline
}

// PutLoadBalancer adds or replaces a load balancer as it is (ACTIVE unless
// its status says otherwise: one made by OCCM, or by hand), with its VIP on
// the data plane; ids and the VIP are assigned where "".
func (c *Cloud) PutLoadBalancer(l LoadBalancer) (LoadBalancer, error) {
	o := &c.octavia
	o.mu.Lock()
	defer o.mu.Unlock()
	o.init()
	l = *l.clone()
	l.fill(c.opts.Now().UTC())
	if _, ok := o.lbs[l.ID]; !ok {
		o.order = append(o.order, l.ID)
	}
	o.lbs[l.ID] = &l
	if err := c.serveLB(&l); err != nil {
		return LoadBalancer{}, err
	}
	return *l.clone(), nil
}

// LoadBalancers are every load balancer, oldest first.
func (c *Cloud) LoadBalancers() []LoadBalancer {
	o := &c.octavia
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []LoadBalancer
	for _, id := range o.order {
		out = append(out, *o.lbs[id].clone())
	}
	return out
}

// LoadBalancer is one load balancer.
func (c *Cloud) LoadBalancer(id string) (LoadBalancer, bool) {
	o := &c.octavia
	o.mu.Lock()
	defer o.mu.Unlock()
	if l, ok := o.lbs[id]; ok {
		return *l.clone(), true
	}
	return LoadBalancer{}, false
}

// SetProvisioning sets a load balancer's provisioning status out of band
// (another client's change in flight: PENDING_UPDATE; a failed one:
// ERROR). A pending status settles as any change does.
func (c *Cloud) SetProvisioning(id, status string) {
	o := &c.octavia
	o.mu.Lock()
	defer o.mu.Unlock()
	if l, ok := o.lbs[id]; ok {
		l.ProvisioningStatus = status
		l.OperatingStatus = operating(l)
		c.pending(l)
	}
}

// FailBuilds makes the next n load balancers that settle end in ERROR.
func (c *Cloud) FailBuilds(n int) {
	c.octavia.mu.Lock()
	defer c.octavia.mu.Unlock()
	c.octavia.errs = n
}

// Settle ends every pending change now: the load balancers are ACTIVE (or
// ERROR, FailBuilds), those being deleted are gone.
func (c *Cloud) Settle() {
	o := &c.octavia
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, id := range slices.Clone(o.order) {
		c.settle(o.lbs[id])
	}
}

// DataPlaneErr is the last error the data plane gave (nil: none).
func (c *Cloud) DataPlaneErr() error {
	c.octavia.mu.Lock()
	defer c.octavia.mu.Unlock()
	return c.octavia.err
}

// LBHealthy reports, per listener port, how many members of the load
// balancer pass their health checks on the data plane.
func (c *Cloud) LBHealthy(id string) map[int]int { return c.octavia.plane.Healthy(id) }

// pending marks a change of l (o.mu held): it settles after PendingFor,
// unless another change comes first.
func (c *Cloud) pending(l *LoadBalancer) {
	l.gen++
	l.Updated = c.opts.Now().UTC()
	if d := c.opts.LB.PendingFor; d > 0 {
		id, gen := l.ID, l.gen
		time.AfterFunc(d, func() {
			o := &c.octavia
			o.mu.Lock()
			defer o.mu.Unlock()
			if l, ok := o.lbs[id]; ok && l.gen == gen {
				c.settle(l)
			}
		})
	}
}

// settle ends l's pending change (o.mu held).
func (c *Cloud) settle(l *LoadBalancer) {
	o := &c.octavia
	switch l.ProvisioningStatus {
	case StatusPendingDelete:
		delete(o.lbs, l.ID)
		o.order = slices.DeleteFunc(o.order, func(id string) bool { return id == l.ID })
		o.plane.Remove(l.ID)
		// The VIP port goes (Octavia made it): its floating IPs are free.
		for _, f := range o.fips {
			if f.PortID == l.VIPPortID {
				f.PortID, f.FixedIP = "", ""
				o.err = c.serveFIP(f)
			}
		}
		return
	case StatusPendingCreate, StatusPendingUpdate:
		l.ProvisioningStatus = StatusActive
		if o.errs > 0 {
			o.errs--
			l.ProvisioningStatus = StatusError
		}
	default:
		return
	}
	l.OperatingStatus = operating(l)
	o.err = c.serveLB(l)
}

// serveLB makes the data plane forward l's listeners on its VIP and its
// floating IPs, once it is ACTIVE (o.mu held); before, its VIP is kept
// for it without listeners.
func (c *Cloud) serveLB(l *LoadBalancer) error {
	o := &c.octavia
	var listeners []lb.Listener
	var ranges []netip.Prefix
	if l.ProvisioningStatus == StatusActive || l.OperatingStatus == OperatingOnline {
		listeners, ranges = planeListeners(l)
	}
	vip, err := o.plane.Serve(l.ID, listeners, ranges)
	if err != nil {
		return err
	}
	if l.VIPAddress == "" {
		l.VIPAddress = vip
	}
	var errs []error
	for _, f := range o.fips {
		if f.PortID == l.VIPPortID {
			_, err := o.plane.Serve(fipPlaneID(f.ID), listeners, ranges)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// planeListeners are l's listeners as the data plane serves them: each to
// its default pool's members, checked by the pool's monitor.
func planeListeners(l *LoadBalancer) ([]lb.Listener, []netip.Prefix) {
	var out []lb.Listener
	var ranges []netip.Prefix
	for _, ln := range l.Listeners {
		proto := lb.TCP
		if ln.Protocol == "UDP" {
			proto = lb.UDP
		}
		pl := lb.Listener{Port: ln.Port, Protocol: proto}
		for _, p := range l.Pools {
			if p.ID != ln.DefaultPoolID {
				continue
			}
			for _, m := range p.Members {
				pl.Backends = append(pl.Backends, lb.Backend{Address: m.Address, Port: m.Port})
			}
			if mon := p.Monitor; mon != nil {
				check := &lb.HealthCheck{Protocol: lb.TCP, Interval: time.Duration(max(mon.Delay, 1)) * time.Second,
					Timeout: time.Duration(max(mon.Timeout, 1)) * time.Second, HealthyThreshold: max(mon.MaxRetries, 1),
					UnhealthyThreshold: max(mon.MaxRetriesDown, 1)}
				if len(p.Members) > 0 && p.Members[0].MonitorPort != 0 {
					check.Port = p.Members[0].MonitorPort
				}
				switch mon.Type {
				case "HTTP":
					check.Protocol, check.Path = lb.HTTP, mon.URLPath
				case "TCP":
				default: // UDP-CONNECT, PING, ...: not checked here
					check = nil
				}
				pl.HealthCheck = check
			}
		}
		for _, s := range ln.AllowedCIDRs {
			if p, err := netip.ParsePrefix(s); err == nil {
				ranges = append(ranges, p)
			}
		}
		out = append(out, pl)
	}
	return out, ranges
}

func fipPlaneID(id string) string { return "fip/" + id }
