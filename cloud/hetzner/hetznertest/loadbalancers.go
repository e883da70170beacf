package hetznertest

import (
	"cmp"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// Load balancers, after the Cloud API's reference: /v1/load_balancers
// (list with label_selector, name, sort and pages; create; get; update of
// name and labels; delete) and its actions (add_target and remove_target
// of server targets, add_service, update_service, delete_service,
// change_algorithm, change_type, attach_to_network, detach_from_network,
// enable_public_interface, disable_public_interface), each answering an
// action (actions.go). Every load balancer carries traffic: a
// cloudtest.DataPlane serves its services on its public IPv4, a VIP in
// DataPlanePrefix, and, when attached to a network, on its private IP, a
// second VIP there; each forwards to its targets' public IPv4, or their
// address in the load balancer's network (use_private_ip), at the
// destination port, with the service's health check.

func init() { resources["load_balancers"] = (*Cloud).serveLoadBalancers }

// LBTypes are the load balancer types the endpoint sells, with their
// limits (as the API's load_balancer_types list them).
var LBTypes = map[string]LBType{
	"lb11": {ID: 1, MaxServices: 5, MaxTargets: 25, MaxCertificates: 10},
	"lb21": {ID: 2, MaxServices: 15, MaxTargets: 75, MaxCertificates: 25},
	"lb31": {ID: 3, MaxServices: 30, MaxTargets: 150, MaxCertificates: 50},
}

// LBType is a load balancer type's limits.
type LBType struct {
	ID                                       int64
	MaxServices, MaxTargets, MaxCertificates int
}

// networkZones are the network zones load balancers are made in, each with
// the location one made in the zone gets.
var networkZones = map[string]string{"eu-central": "fsn1", "us-east": "ash", "us-west": "hil", "ap-southeast": "sin"}

// LoadBalancer is one load balancer as the endpoint holds it.
type LoadBalancer struct {
	ID        int64
	Name      string
	Type      string // lb11, lb21, lb31
	Location  string
	Algorithm string // round_robin, least_connections
	Labels    map[string]string
	// Public is whether its public interface is enabled; IPv4 is its
	// public address (its data plane VIP), IPv6 "" unless Options.IPv6.
	Public     bool
	IPv4, IPv6 string
	// Network is the network it is attached to (0: none) and PrivateIP its
	// address there (a second VIP).
	Network   int64
	PrivateIP string
	Services  []LBService
	Targets   []LBTarget
	Protected bool
	Created   time.Time
}

// LBService is a load balancer's service: a listen port forwarded to a
// destination port on every target.
type LBService struct {
	Protocol        string        `json:"protocol"` // tcp, http, https
	ListenPort      int           `json:"listen_port"`
	DestinationPort int           `json:"destination_port"`
	ProxyProtocol   bool          `json:"proxyprotocol"`
	HTTP            *LBHTTP       `json:"http"`
	HealthCheck     LBHealthCheck `json:"health_check"`
}

// LBHTTP is an http or https service's settings.
type LBHTTP struct {
	CookieName     string  `json:"cookie_name"`
	CookieLifetime int     `json:"cookie_lifetime"`
	Certificates   []int64 `json:"certificates"`
	RedirectHTTP   bool    `json:"redirect_http"`
	StickySessions bool    `json:"sticky_sessions"`
	TimeoutIdle    int     `json:"timeout_idle"`
}

// LBHealthCheck is a service's health check (seconds).
type LBHealthCheck struct {
	Protocol string             `json:"protocol"`
	Port     int                `json:"port"`
	Interval int                `json:"interval"`
	Timeout  int                `json:"timeout"`
	Retries  int                `json:"retries"`
	HTTP     *LBHealthCheckHTTP `json:"http"`
}

// LBHealthCheckHTTP is an http health check's request and expectation.
type LBHealthCheckHTTP struct {
	Domain      string   `json:"domain"`
	Path        string   `json:"path"`
	Response    string   `json:"response"`
	StatusCodes []string `json:"status_codes"`
	TLS         bool     `json:"tls"`
}

// LBTarget is a server target.
type LBTarget struct {
	Server       int64
	UsePrivateIP bool
}

func (l LoadBalancer) clone() LoadBalancer {
	l.Labels = maps.Clone(l.Labels)
	l.Targets = slices.Clone(l.Targets)
	l.Services = slices.Clone(l.Services)
	for i, s := range l.Services {
		if s.HTTP != nil {
			h := *s.HTTP
			h.Certificates = slices.Clone(h.Certificates)
			l.Services[i].HTTP = &h
		}
		if s.HealthCheck.HTTP != nil {
			h := *s.HealthCheck.HTTP
			h.StatusCodes = slices.Clone(h.StatusCodes)
			l.Services[i].HealthCheck.HTTP = &h
		}
	}
	return l
}

// loadBalancers are the endpoint's load balancers, its certificates and
// its data plane.
type loadBalancers struct {
	mu    sync.Mutex
	next  int64
	all   map[int64]*LoadBalancer
	certs map[int64]string // certificate id -> name
	plane cloudtest.DataPlane
	err   error               // the data plane's last error
	busy  map[int64]time.Time // until when a load balancer's last action runs
}

// lock refuses an action on a load balancer whose previous action still
// runs (423 locked, "another action is running"), else records the new
// one's end (s.mu held).
func (c *Cloud) lock(id int64) *apiFail {
	s := &c.lbs
	now := c.opts.Now()
	if until, ok := s.busy[id]; ok && now.Before(until) {
		return &apiFail{status: http.StatusLocked, code: "locked", msg: "load balancer is locked: another action is running"}
	}
	if c.opts.ActionTime > 0 {
		if s.busy == nil {
			s.busy = map[int64]time.Time{}
		}
		s.busy[id] = now.Add(c.opts.ActionTime)
	}
	return nil
}

// LoadBalancers are every load balancer, by id.
func (c *Cloud) LoadBalancers() []LoadBalancer {
	s := &c.lbs
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []LoadBalancer
	for _, l := range s.all {
		out = append(out, l.clone())
	}
	slices.SortFunc(out, func(a, b LoadBalancer) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// LoadBalancer is one load balancer.
func (c *Cloud) LoadBalancer(id int64) (LoadBalancer, bool) {
	s := &c.lbs
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.all[id]
	if !ok {
		return LoadBalancer{}, false
	}
	return l.clone(), true
}

// PutLoadBalancer adds a load balancer as another client of the API would
// have made it (hcloud-cloud-controller-manager, a test changing one out
// of band: an existing id is replaced, keeping its addresses), serves it
// and returns it. Defaults: type lb11, location fsn1, round_robin, public
// interface on.
func (c *Cloud) PutLoadBalancer(l LoadBalancer) (LoadBalancer, error) {
	l.Type = cmp.Or(l.Type, "lb11")
	l.Location = cmp.Or(l.Location, DefaultLocation)
	l.Algorithm = cmp.Or(l.Algorithm, "round_robin")
	s := &c.lbs
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.all[l.ID]; ok && l.ID != 0 {
		l.IPv4, l.IPv6, l.PrivateIP, l.Created = old.IPv4, old.IPv6, old.PrivateIP, old.Created
	} else {
		if !l.Public && l.Network == 0 {
			l.Public = true
		}
		c.newLB(&l)
	}
	cp := l.clone()
	s.all[l.ID] = &cp
	if err := c.serveLB(&cp); err != nil {
		return l, err
	}
	return cp.clone(), nil
}

// AddCertificate adds a certificate (uploaded) and returns its id.
func (c *Cloud) AddCertificate(name string) int64 {
	s := &c.lbs
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.certs == nil {
		s.certs = map[int64]string{}
	}
	id := int64(900_001 + len(s.certs))
	s.certs[id] = name
	return id
}

// newLB gives l an id, a creation time and its addresses (s.mu held).
func (c *Cloud) newLB(l *LoadBalancer) {
	s := &c.lbs
	if s.all == nil {
		s.all = map[int64]*LoadBalancer{}
	}
	s.plane.Prefix = DataPlanePrefix
	s.next++
	if l.ID == 0 {
		l.ID = 700_000 + 11*s.next
	}
	if l.Created.IsZero() {
		l.Created = c.opts.Now()
	}
	if c.opts.IPv6 {
		l.IPv6 = "::1"
	}
}

// CCMPort is a Service port as hcloud-cloud-controller-manager forwards
// it: Port on the load balancer to NodePort on the servers.
type CCMPort struct{ Port, NodePort int }

// CCMLoadBalancer is the load balancer hcloud-cloud-controller-manager
// makes for a Service without annotations (to add with PutLoadBalancer):
// its name (the Service's name annotation, or "a" and the UID without
// dashes), in fsn1, of type lb11, a tcp service per port to its node port
// with the API's default tcp health check, the servers as targets at
// their public IPv4, and its one label, hcloud-ccm/service-uid.
func CCMLoadBalancer(name, serviceUID string, ports []CCMPort, servers []int64) LoadBalancer {
	l := LoadBalancer{Name: name, Public: true, Labels: map[string]string{"hcloud-ccm/service-uid": serviceUID}}
	for _, p := range ports {
		l.Services = append(l.Services, LBService{Protocol: "tcp", ListenPort: p.Port, DestinationPort: p.NodePort,
			HealthCheck: LBHealthCheck{Protocol: "tcp", Port: p.NodePort, Interval: 15, Timeout: 10, Retries: 3}})
	}
	for _, id := range servers {
		l.Targets = append(l.Targets, LBTarget{Server: id})
	}
	return l
}
