package linodetest

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// NodeBalancer methods, for Calls and Fail. Reading a NodeBalancer's
// configs or a config's nodes counts as lb-get; every call that changes a
// NodeBalancer or one of its configs (create, update, rebuild and delete
// of a config) as lb-update.
const (
	MethodLBList   = "lb-list"   // GET /v4/nodebalancers
	MethodLBGet    = "lb-get"    // GET /v4/nodebalancers/{id}[/configs[/{id}[/nodes]]]
	MethodLBCreate = "lb-create" // POST /v4/nodebalancers
	MethodLBUpdate = "lb-update" // PUT /v4/nodebalancers/{id}, the configs' POST, PUT, rebuild and DELETE
	MethodLBDelete = "lb-delete" // DELETE /v4/nodebalancers/{id}
)

// HostnameSuffix ends a NodeBalancer's hostname, which begins with its
// IPv4 address (as the API's documented example:
// 192.0.2.1.ip.linodeusercontent.com).
const HostnameSuffix = ".ip.linodeusercontent.com"

const nbPath = "/v4/nodebalancers"

// NodeBalancer is one NodeBalancer as the endpoint holds it.
type NodeBalancer struct {
	// ID is assigned by the endpoint.
	ID     int
	Label  string
	Region string
	Type   string // common (default), premium, premium_40gb
	// IPv4 is its address on loopback (DataPlanePrefix), Hostname its
	// name; both assigned at creation.
	IPv4, Hostname string
	// Throttle is client_conn_throttle (0-20).
	Throttle int
	Tags     []string
	Created  time.Time
	Configs  []NBConfig
	// VPCs are its backend VPC configurations (the create's vpcs).
	VPCs []NBVPC
}

// NBConfig is one port of a NodeBalancer.
type NBConfig struct {
	ID                                             int
	Port                                           int
	Protocol, ProxyProtocol, Algorithm, Stickiness string
	Check, CheckPath, CheckBody                    string
	CheckInterval, CheckTimeout, CheckAttempts     int
	CheckPassive                                   bool
	UDPCheckPort                                   int
	SSLCert, SSLKey                                string
	// SSLCommonName and SSLFingerprint are read from SSLCert (what the
	// API shows of it).
	SSLCommonName, SSLFingerprint string
	Nodes                         []NBNode
}

// NBNode is one backend of a config.
type NBNode struct {
	ID                   int
	Address, Label, Mode string
	Weight               int
	// SubnetID is the VPC subnet its address is in (0: a private address).
	SubnetID int
}

func (n NodeBalancer) clone() NodeBalancer {
	n.Tags = slices.Clone(n.Tags)
	n.VPCs = slices.Clone(n.VPCs)
	n.Configs = slices.Clone(n.Configs)
	for i := range n.Configs {
		n.Configs[i].Nodes = slices.Clone(n.Configs[i].Nodes)
	}
	return n
}

// nbState is the endpoint's NodeBalancers and their data plane.
type nbState struct {
	byID   map[int]*NodeBalancer
	fws    map[int]*Firewall // Cloud Firewalls (firewalls.go)
	vpc    vpcState          // VPCs (vpcs.go), under their own lock
	nextID int               // NodeBalancers, configs and nodes share one sequence
	plane  cloudtest.DataPlane
}

func (c *Cloud) nextID() int {
	c.nb.nextID++
	return 4000 + 17*c.nb.nextID
}

// NodeBalancers lists the NodeBalancers in ascending id order.
func (c *Cloud) NodeBalancers() []NodeBalancer {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]NodeBalancer, 0, len(c.nb.byID))
	for _, n := range c.nb.byID {
		out = append(out, n.clone())
	}
	slices.SortFunc(out, func(a, b NodeBalancer) int { return a.ID - b.ID })
	return out
}

// NodeBalancer is one NodeBalancer.
func (c *Cloud) NodeBalancer(id int) (NodeBalancer, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nb.byID[id]
	if !ok {
		return NodeBalancer{}, false
	}
	return n.clone(), true
}

// PutNodeBalancer adds a NodeBalancer as another client made it (Linode's
// CCM, a user), unchecked: ids, address, hostname, region, type and
// config defaults are filled in. It panics when the data plane cannot
// serve it.
func (c *Cloud) PutNodeBalancer(n NodeBalancer) NodeBalancer {
	c.mu.Lock()
	defer c.mu.Unlock()
	n = n.clone()
	n.ID = c.nextID()
	n.Region = cmpOr(n.Region, DefaultRegion)
	n.Type = cmpOr(n.Type, "common")
	n.Created = c.opts.Now().UTC().Truncate(time.Second)
	if n.Label == "" {
		n.Label = "nodebalancer" + strconv.Itoa(n.ID)
	}
	for i := range n.Configs {
		c.fill(&n.Configs[i])
	}
	if err := c.serveLocked(&n); err != nil {
		panic(err)
	}
	c.nb.byID[n.ID] = &n
	return n.clone()
}

// ChangeNodeBalancer changes a NodeBalancer out of band (a user in the
// Cloud Manager); its data plane follows.
func (c *Cloud) ChangeNodeBalancer(id int, f func(*NodeBalancer)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nb.byID[id]
	if !ok {
		return fmt.Errorf("linodetest: no NodeBalancer %d", id)
	}
	f(n)
	return c.serveLocked(n)
}

// fill sets a config's defaults and ids (an unchecked PutNodeBalancer).
func (c *Cloud) fill(cf *NBConfig) {
	cf.ID = c.nextID()
	cf.Protocol = cmpOr(cf.Protocol, "http")
	cf.ProxyProtocol = cmpOr(cf.ProxyProtocol, "none")
	cf.Algorithm = cmpOr(cf.Algorithm, "roundrobin")
	cf.Stickiness = cmpOr(cf.Stickiness, defaultStickiness(cf.Protocol))
	cf.Check = cmpOr(cf.Check, "none")
	if cf.CheckInterval == 0 {
		cf.CheckInterval = defaultCheckInterval
	}
	if cf.CheckTimeout == 0 {
		cf.CheckTimeout = defaultCheckTimeout
	}
	if cf.CheckAttempts == 0 {
		cf.CheckAttempts = defaultCheckAttempts
	}
	if cf.UDPCheckPort == 0 {
		cf.UDPCheckPort = 80
	}
	for i := range cf.Nodes {
		cf.Nodes[i].ID = c.nextID()
		cf.Nodes[i].Weight = max(cf.Nodes[i].Weight, 1)
		if cf.Protocol != "udp" {
			cf.Nodes[i].Mode = cmpOr(cf.Nodes[i].Mode, "accept")
		}
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// The defaults of a config's fields a request leaves out, as the API
// answered in linodego's recordings (stickiness none, session for udp;
// check none; check_timeout 30; check_attempts 3; check_passive true,
// false for udp; udp_check_port 80). check_interval's is not recorded
// (the recorded requests sent 60): 60 here.
const (
	defaultCheckInterval = 60
	defaultCheckTimeout  = 30
	defaultCheckAttempts = 3
)

func defaultStickiness(protocol string) string {
	if protocol == "udp" {
		return "session"
	}
	return "none"
}

// assignIDs gives a config and its new nodes ids (under c.mu).
func (c *Cloud) assignIDs(cf *NBConfig) {
	if cf.ID == 0 {
		cf.ID = c.nextID()
	}
	for i := range cf.Nodes {
		if cf.Nodes[i].ID == 0 {
			cf.Nodes[i].ID = c.nextID()
		}
	}
}
