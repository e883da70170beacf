package linodetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
	"github.com/mooring-dev/mooring/cloud/local/lb"
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

// DataPlanePrefix holds the NodeBalancers' addresses (their ipv4).
var DataPlanePrefix = netip.MustParsePrefix("127.83.0.0/16")

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
}

func (n NodeBalancer) clone() NodeBalancer {
	n.Tags = slices.Clone(n.Tags)
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

// Healthy reports, per port of a NodeBalancer, how many of its nodes pass
// their checks in the data plane.
func (c *Cloud) Healthy(id int) map[int]int { return c.nb.plane.Healthy(strconv.Itoa(id)) }

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

// serveLocked makes the data plane forward n's configs: each port to its
// nodes in mode accept (and backup), with its check; n.IPv4 and Hostname
// are its VIP.
func (c *Cloud) serveLocked(n *NodeBalancer) error {
	var ls []lb.Listener
	for _, cf := range n.Configs {
		l := lb.Listener{Port: cf.Port, Protocol: lb.TCP}
		if cf.Protocol == "udp" {
			l.Protocol = lb.UDP
		}
		for _, nd := range cf.Nodes {
			if nd.Mode == "reject" || nd.Mode == "drain" {
				continue
			}
			ap, err := netip.ParseAddrPort(nd.Address)
			if err != nil {
				return fmt.Errorf("linodetest: NodeBalancer %d: node address %q: %v", n.ID, nd.Address, err)
			}
			l.Backends = append(l.Backends, lb.Backend{Address: ap.Addr().String(), Port: int(ap.Port())})
		}
		hc := &lb.HealthCheck{Interval: time.Duration(cf.CheckInterval) * time.Second, Timeout: time.Duration(cf.CheckTimeout) * time.Second,
			HealthyThreshold: 1, UnhealthyThreshold: cf.CheckAttempts}
		switch cf.Check {
		case "connection":
			hc.Protocol = lb.TCP
		case "http", "http_body":
			hc.Protocol, hc.Path = lb.HTTP, cf.CheckPath
		default:
			hc = nil
		}
		if hc != nil && cf.Protocol == "udp" {
			hc.Port = cf.UDPCheckPort
		}
		l.HealthCheck = hc
		ls = append(ls, l)
	}
	ports := make([]int, 0, len(n.Configs))
	for _, cf := range n.Configs {
		ports = append(ports, cf.Port)
	}
	// An https port's TLS is not ended here: the data plane forwards its
	// bytes as TCP (the certificate is checked and held, not served).
	vip, err := c.nb.plane.Serve(strconv.Itoa(n.ID), ls, c.sourceRanges(n.ID, ports))
	if err != nil {
		return err
	}
	n.IPv4 = vip
	n.Hostname = vip + HostnameSuffix
	return nil
}

// nbCollection reports whether p is a collection of the NodeBalancer API
// (for the limit of collections' GETs).
func nbCollection(p string) bool {
	return p == nbPath || strings.HasSuffix(p, "/configs") || strings.HasSuffix(p, "/nodes") || strings.HasSuffix(p, "/firewalls") || strings.HasSuffix(p, "/devices")
}

// serveNodeBalancers routes /v4/nodebalancers/...
func (c *Cloud) serveNodeBalancers(w http.ResponseWriter, r *http.Request) {
	rest := strings.Trim(strings.TrimPrefix(r.URL.Path, nbPath), "/")
	var parts []string
	if rest != "" {
		parts = strings.Split(rest, "/")
	}
	ids := make([]int, 0, 2)
	for i := 0; i < len(parts); i += 2 {
		n, err := strconv.Atoi(parts[i])
		if err != nil || n <= 0 {
			writeError(w, http.StatusNotFound, "", "Not found")
			return
		}
		ids = append(ids, n)
	}
	shape := make([]string, 0, 3)
	for i := 1; i < len(parts); i += 2 {
		shape = append(shape, parts[i])
	}
	route := r.Method + " " + strings.Join(shape, "/")
	switch {
	case len(parts) == 0 && r.Method == http.MethodGet:
		c.nbList(w, r)
	case len(parts) == 0 && r.Method == http.MethodPost:
		c.nbCreate(w, r)
	case len(parts) == 1 && r.Method == http.MethodGet:
		c.nbGet(w, ids[0])
	case len(parts) == 1 && r.Method == http.MethodPut:
		c.nbUpdate(w, r, ids[0])
	case len(parts) == 1 && r.Method == http.MethodDelete:
		c.nbDelete(w, ids[0])
	case len(parts) == 2 && route == "GET firewalls":
		c.nbFirewalls(w, ids[0])
	case len(parts) == 2 && route == "GET configs":
		c.configList(w, ids[0])
	case len(parts) == 2 && route == "POST configs":
		c.configCreate(w, r, ids[0])
	case len(parts) == 3 && (r.Method == http.MethodGet || r.Method == http.MethodPut || r.Method == http.MethodDelete) && route == r.Method+" configs":
		c.configOne(w, r, ids[0], ids[1])
	case len(parts) == 4 && route == "POST configs/rebuild" && parts[3] == "rebuild":
		c.configRebuild(w, r, ids[0], ids[1])
	case len(parts) == 4 && route == "GET configs/nodes" && parts[3] == "nodes":
		c.nodeList(w, ids[0], ids[1])
	default:
		if len(parts) == 4 && (parts[3] == "rebuild" || parts[3] == "nodes") {
			writeError(w, http.StatusMethodNotAllowed, "", "Method not allowed")
			return
		}
		writeError(w, http.StatusNotFound, "", "Not found")
	}
}

// decode reads a request body strictly: a field the endpoint does not
// model is a 400 naming it.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	field, err := cloudtest.DecodeStrict(r.Body, v)
	switch {
	case field != "":
		writeError(w, http.StatusBadRequest, field, "linodetest does not model this field")
	case err != nil:
		writeError(w, http.StatusBadRequest, "", "Invalid JSON")
	}
	return err == nil
}

// The request bodies (the documented fields; linodego's options).
type nbCreateBody struct {
	Label                 *string      `json:"label"`
	Region                string       `json:"region"`
	ClientConnThrottle    *int         `json:"client_conn_throttle"`
	ClientUDPSessThrottle *int         `json:"client_udp_sess_throttle"`
	Configs               []configBody `json:"configs"`
	Tags                  []string     `json:"tags"`
	FirewallID            int          `json:"firewall_id"`
	Type                  string       `json:"type"`
}

type nbUpdateBody struct {
	Label                 *string   `json:"label"`
	ClientConnThrottle    *int      `json:"client_conn_throttle"`
	ClientUDPSessThrottle *int      `json:"client_udp_sess_throttle"`
	Tags                  *[]string `json:"tags"`
}

type configBody struct {
	Port          int        `json:"port"`
	Protocol      string     `json:"protocol"`
	ProxyProtocol string     `json:"proxy_protocol"`
	Algorithm     string     `json:"algorithm"`
	Stickiness    string     `json:"stickiness"`
	Check         string     `json:"check"`
	CheckInterval int        `json:"check_interval"`
	CheckAttempts int        `json:"check_attempts"`
	CheckPath     string     `json:"check_path"`
	CheckBody     string     `json:"check_body"`
	CheckPassive  *bool      `json:"check_passive"`
	CheckTimeout  int        `json:"check_timeout"`
	UDPCheckPort  *int       `json:"udp_check_port"`
	CipherSuite   string     `json:"cipher_suite"`
	SSLCert       string     `json:"ssl_cert"`
	SSLKey        string     `json:"ssl_key"`
	Nodes         []nodeBody `json:"nodes"`
}

type nodeBody struct {
	ID       int    `json:"id"`
	Address  string `json:"address"`
	Label    string `json:"label"`
	Weight   int    `json:"weight"`
	Mode     string `json:"mode"`
	SubnetID int    `json:"subnet_id"`
}

// invalid is a 400's field and reason.
type invalid struct{ field, reason string }

func (e *invalid) Error() string { return e.field + ": " + e.reason }

func bad(field, format string, args ...any) *invalid {
	return &invalid{field: field, reason: fmt.Sprintf(format, args...)}
}

var labelRE = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?$`)

// checkLabel: 3-32 characters, letters, digits, -, _ and ., beginning and
// ending with a letter or digit, no two of -, _ and . in a row.
func checkLabel(field, label string) *invalid {
	if len(label) < 3 || len(label) > 32 {
		return bad(field, "Length must be 3-32 characters")
	}
	if !labelRE.MatchString(label) || strings.Contains(label, "--") || strings.Contains(label, "__") || strings.Contains(label, "..") {
		return bad(field, "Must begin and end with an alphanumeric character, and contain only alphanumeric characters, dashes, underscores and periods, without two of these in a row")
	}
	return nil
}

func checkTags(tags []string) *invalid {
	for i, t := range tags {
		if len(t) < 3 || len(t) > 50 {
			return bad(fmt.Sprintf("tags[%d]", i), "Length must be 3-50 characters")
		}
	}
	return nil
}

func checkThrottle(field string, v *int) *invalid {
	if v != nil && (*v < 0 || *v > 20) {
		return bad(field, "Must be between 0 and 20")
	}
	return nil
}

// checkSettings checks a NodeBalancer's throttles and tags (create and
// update).
func checkSettings(connThrottle, udpThrottle *int, tags []string) *invalid {
	if err := checkThrottle("client_conn_throttle", connThrottle); err != nil {
		return err
	}
	if err := checkThrottle("client_udp_sess_throttle", udpThrottle); err != nil {
		return err
	}
	return checkTags(tags)
}

var (
	tcpAlgorithms  = []string{"roundrobin", "leastconn", "source"}
	udpAlgorithms  = []string{"roundrobin", "leastconn", "ring_hash"}
	tcpStickiness  = []string{"none", "table", "http_cookie"}
	udpStickiness  = []string{"none", "session", "source_ip"}
	checks         = []string{"none", "connection", "http", "http_body"}
	protocols      = []string{"http", "https", "tcp", "udp"}
	proxyProtocols = []string{"none", "v1", "v2"}
	nodeModes      = []string{"accept", "reject", "drain", "backup"}
)

// config checks a config body (prefix names its place in the request:
// "configs[0]." or "") and makes it; the nodes are checked by nodes.
func (c *Cloud) config(prefix string, b configBody, withNodes bool) (NBConfig, *invalid) {
	cf := NBConfig{Port: b.Port, Protocol: cmpOr(b.Protocol, "http"), ProxyProtocol: cmpOr(b.ProxyProtocol, "none"),
		Algorithm: cmpOr(b.Algorithm, "roundrobin"), Check: cmpOr(b.Check, "none"), CheckPath: b.CheckPath, CheckBody: b.CheckBody,
		CheckInterval: b.CheckInterval, CheckTimeout: b.CheckTimeout, CheckAttempts: b.CheckAttempts, CheckPassive: b.Protocol != "udp",
		UDPCheckPort: 80, SSLCert: b.SSLCert, SSLKey: b.SSLKey}
	if cf.CheckInterval == 0 {
		cf.CheckInterval = defaultCheckInterval
	}
	if cf.CheckTimeout == 0 {
		cf.CheckTimeout = min(defaultCheckTimeout, cf.CheckInterval-1)
	}
	if cf.CheckAttempts == 0 {
		cf.CheckAttempts = defaultCheckAttempts
	}
	if b.CheckPassive != nil {
		cf.CheckPassive = *b.CheckPassive
	}
	if b.UDPCheckPort != nil {
		cf.UDPCheckPort = *b.UDPCheckPort
	}
	switch {
	case cf.Port < 1 || cf.Port > 65535:
		return cf, bad(prefix+"port", "Must be between 1 and 65535")
	case !slices.Contains(protocols, cf.Protocol):
		return cf, bad(prefix+"protocol", "Must be one of %s", strings.Join(protocols, ", "))
	case !slices.Contains(proxyProtocols, cf.ProxyProtocol):
		return cf, bad(prefix+"proxy_protocol", "Must be one of %s", strings.Join(proxyProtocols, ", "))
	case cf.ProxyProtocol != "none" && cf.Protocol != "tcp":
		return cf, bad(prefix+"proxy_protocol", "Proxy Protocol is only available for the tcp protocol")
	case !slices.Contains(checks, cf.Check):
		return cf, bad(prefix+"check", "Must be one of %s", strings.Join(checks, ", "))
	case cf.CheckInterval < 2 || cf.CheckInterval > 3600:
		return cf, bad(prefix+"check_interval", "Must be between 2 and 3600")
	case cf.CheckTimeout < 1 || cf.CheckTimeout > 30:
		return cf, bad(prefix+"check_timeout", "Must be between 1 and 30")
	case cf.CheckTimeout >= cf.CheckInterval:
		return cf, bad(prefix+"check_timeout", "Must be less than check_interval")
	case cf.CheckAttempts < 1 || cf.CheckAttempts > 30:
		return cf, bad(prefix+"check_attempts", "Must be between 1 and 30")
	case (cf.Check == "http" || cf.Check == "http_body") && !strings.HasPrefix(cf.CheckPath, "/"):
		return cf, bad(prefix+"check_path", "Must begin with /")
	case cf.Check == "http_body" && cf.CheckBody == "":
		return cf, bad(prefix+"check_body", "Required for check http_body")
	case cf.Protocol == "https" && (cf.SSLCert == "" || cf.SSLKey == ""):
		return cf, bad(prefix+"ssl_cert", "Required for protocol https")
	case cf.Protocol != "https" && (cf.SSLCert != "" || cf.SSLKey != ""):
		return cf, bad(prefix+"ssl_cert", "Only allowed for protocol https")
	case cf.UDPCheckPort < 1 || cf.UDPCheckPort > 65535:
		return cf, bad(prefix+"udp_check_port", "Must be between 1 and 65535")
	case cf.Protocol == "udp" && cf.CheckPassive:
		return cf, bad(prefix+"check_passive", "Must be false for protocol udp")
	case b.CipherSuite != "" && b.CipherSuite != "recommended" && b.CipherSuite != "legacy":
		return cf, bad(prefix+"cipher_suite", "Must be one of recommended, legacy")
	}
	if cf.Protocol == "https" {
		cn, fp, err := checkTLS(prefix, cf.SSLCert, cf.SSLKey)
		if err != nil {
			return cf, err
		}
		cf.SSLCommonName, cf.SSLFingerprint = cn, fp
	}
	if cf.Protocol == "udp" {
		if !slices.Contains(udpAlgorithms, cf.Algorithm) {
			return cf, bad(prefix+"algorithm", "Must be one of %s for protocol udp", strings.Join(udpAlgorithms, ", "))
		}
		cf.Stickiness = cmpOr(b.Stickiness, "session")
		if !slices.Contains(udpStickiness, cf.Stickiness) {
			return cf, bad(prefix+"stickiness", "Must be one of %s for protocol udp", strings.Join(udpStickiness, ", "))
		}
	} else {
		if !slices.Contains(tcpAlgorithms, cf.Algorithm) {
			return cf, bad(prefix+"algorithm", "Must be one of %s", strings.Join(tcpAlgorithms, ", "))
		}
		cf.Stickiness = cmpOr(b.Stickiness, defaultStickiness(cf.Protocol))
		if !slices.Contains(tcpStickiness, cf.Stickiness) || cf.Protocol == "tcp" && cf.Stickiness == "http_cookie" {
			return cf, bad(prefix+"stickiness", "Not valid for protocol %s", cf.Protocol)
		}
	}
	if !withNodes && b.Nodes != nil {
		return cf, bad(prefix+"nodes", "Not allowed here")
	}
	nodes, err := c.nodes(prefix, cf.Protocol, b.Nodes)
	if err != nil {
		return cf, err
	}
	cf.Nodes = nodes
	return cf, nil
}

// nodes checks a config's nodes: address ip:port, the ip a Linode's
// private address (the endpoint's stand-in for 192.168.128.0/17), label
// 3-32 characters, weight 1-255, mode.
func (c *Cloud) nodes(prefix, protocol string, bs []nodeBody) ([]NBNode, *invalid) {
	out := make([]NBNode, 0, len(bs))
	seen := map[string]bool{}
	for i, b := range bs {
		f := fmt.Sprintf("%snodes[%d].", prefix, i)
		ap, err := netip.ParseAddrPort(b.Address)
		switch {
		case err != nil || !ap.Addr().Is4():
			return nil, bad(f+"address", "Must be a valid IPv4 address and port, such as 192.168.255.255:80")
		case !c.privateAddress(ap.Addr().String()):
			return nil, bad(f+"address", "Must be a private IPv4 address")
		case seen[b.Address]:
			return nil, bad(f+"address", "Each node must have a unique address")
		case b.SubnetID != 0:
			return nil, bad(f+"subnet_id", "linodetest does not model VPCs")
		}
		if err := checkLabel(f+"label", b.Label); err != nil {
			return nil, err
		}
		if b.Weight != 0 && (b.Weight < 1 || b.Weight > 255) {
			return nil, bad(f+"weight", "Must be between 1 and 255")
		}
		if b.Mode != "" && !slices.Contains(nodeModes, b.Mode) {
			return nil, bad(f+"mode", "Must be one of %s", strings.Join(nodeModes, ", "))
		}
		mode := b.Mode
		if mode == "" && protocol != "udp" {
			mode = "accept"
		}
		seen[b.Address] = true
		out = append(out, NBNode{ID: b.ID, Address: ap.String(), Label: b.Label, Weight: max(b.Weight, 100), Mode: mode})
		if b.Weight != 0 {
			out[len(out)-1].Weight = b.Weight
		}
	}
	return out, nil
}

// privateAddress: a private address of one of the account's Linodes.
func (c *Cloud) privateAddress(ip string) bool {
	found := false
	c.instances.List(func(in *Instance) bool {
		if in.PrivateIP == ip {
			found = true
		}
		return false
	})
	return found
}

func writeInvalid(w http.ResponseWriter, err *invalid) {
	writeError(w, http.StatusBadRequest, err.field, err.reason)
}

func (c *Cloud) nbList(w http.ResponseWriter, r *http.Request) {
	page, perPage, ok := c.listQuery(w, r, MethodLBList)
	if !ok {
		return
	}
	match, ferr := nbFilter(r.Header.Get("X-Filter"))
	if ferr != nil {
		writeError(w, http.StatusBadRequest, "X-Filter", ferr.Error())
		return
	}
	var all []NodeBalancer
	for _, n := range c.NodeBalancers() {
		if match(n) {
			all = append(all, n)
		}
	}
	from, to, last := cloudtest.Page(len(all), page, perPage)
	out := listAnswer[wireNB]{Data: []wireNB{}, Page: page, Pages: last, Results: len(all)}
	for _, n := range all[from:to] {
		out.Data = append(out.Data, wireNodeBalancer(n))
	}
	cloudtest.WriteJSON(w, http.StatusOK, out)
}

// nbFilter reads X-Filter: {"ipv4": "<address>"}, {"label": "<label>"}
// or {"tags": "<tag>"} (one key) are modelled.
func nbFilter(raw string) (func(NodeBalancer) bool, error) {
	if raw == "" {
		return func(NodeBalancer) bool { return true }, nil
	}
	var f map[string]string
	if err := json.Unmarshal([]byte(raw), &f); err != nil || len(f) != 1 {
		return nil, fmt.Errorf("linodetest models one of ipv4, label or tags, a string")
	}
	for k, v := range f {
		switch k {
		case "ipv4":
			return func(n NodeBalancer) bool { return n.IPv4 == v }, nil
		case "label":
			return func(n NodeBalancer) bool { return n.Label == v }, nil
		case "tags":
			return func(n NodeBalancer) bool { return slices.Contains(n.Tags, v) }, nil
		}
		return nil, fmt.Errorf("linodetest does not model filtering on %q", k)
	}
	return nil, nil
}

func (c *Cloud) nbCreate(w http.ResponseWriter, r *http.Request) {
	if c.faulted(w, MethodLBCreate) {
		return
	}
	var b nbCreateBody
	if !decode(w, r, &b) {
		return
	}
	if b.Region == "" {
		writeError(w, http.StatusBadRequest, "region", "region is required")
		return
	}
	if b.Type != "" && b.Type != "common" && b.Type != "premium" && b.Type != "premium_40gb" {
		writeError(w, http.StatusBadRequest, "type", "Must be one of common, premium, premium_40gb")
		return
	}
	if err := checkSettings(b.ClientConnThrottle, b.ClientUDPSessThrottle, b.Tags); err != nil {
		writeInvalid(w, err)
		return
	}
	n := NodeBalancer{Region: b.Region, Type: cmpOr(b.Type, "common"), Tags: slices.Clone(b.Tags)}
	if n.Tags == nil {
		n.Tags = []string{}
	}
	if b.ClientConnThrottle != nil {
		n.Throttle = *b.ClientConnThrottle
	}
	ports := map[int]bool{}
	for i, cb := range b.Configs {
		cf, err := c.config(fmt.Sprintf("configs[%d].", i), cb, true)
		if err != nil {
			writeInvalid(w, err)
			return
		}
		if ports[cf.Port] {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("configs[%d].port", i), "Port is already in use by another config")
			return
		}
		ports[cf.Port] = true
		n.Configs = append(n.Configs, cf)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if b.Label != nil {
		if err := c.checkNewLabel(*b.Label, 0); err != nil {
			writeInvalid(w, err)
			return
		}
		n.Label = *b.Label
	}
	n.ID = c.nextID()
	if n.Label == "" {
		n.Label = "nodebalancer" + strconv.Itoa(n.ID)
	}
	n.Created = c.opts.Now().UTC().Truncate(time.Second)
	for i := range n.Configs {
		c.assignIDs(&n.Configs[i])
	}
	if b.FirewallID != 0 {
		// Attached before the data plane serves it: never open.
		if err := c.attachAtCreate(b.FirewallID, n.ID); err != nil {
			writeInvalid(w, err)
			return
		}
	}
	if err := c.serveLocked(&n); err != nil {
		c.detachAll(n.ID)
		writeError(w, http.StatusInternalServerError, "", err.Error())
		return
	}
	c.nb.byID[n.ID] = &n
	cloudtest.WriteJSON(w, http.StatusOK, wireNodeBalancer(n))
}

// checkNewLabel checks a NodeBalancer's new label: its form, and that no
// other than except has it (under c.mu).
func (c *Cloud) checkNewLabel(label string, except int) *invalid {
	if err := checkLabel("label", label); err != nil {
		return err
	}
	for id, n := range c.nb.byID {
		if id != except && n.Label == label {
			return bad("label", "Label must be unique among your NodeBalancers")
		}
	}
	return nil
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

// held answers the NodeBalancer of id (under c.mu), or writes 404.
func (c *Cloud) held(w http.ResponseWriter, id int) *NodeBalancer {
	n, ok := c.nb.byID[id]
	if !ok {
		writeError(w, http.StatusNotFound, "", "Not found")
		return nil
	}
	return n
}

func (c *Cloud) nbGet(w http.ResponseWriter, id int) {
	if c.faulted(w, MethodLBGet) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.held(w, id); n != nil {
		cloudtest.WriteJSON(w, http.StatusOK, wireNodeBalancer(*n))
	}
}

func (c *Cloud) nbUpdate(w http.ResponseWriter, r *http.Request, id int) {
	if c.faulted(w, MethodLBUpdate) {
		return
	}
	var b nbUpdateBody
	if !decode(w, r, &b) {
		return
	}
	var tags []string
	if b.Tags != nil {
		tags = *b.Tags
	}
	if err := checkSettings(b.ClientConnThrottle, b.ClientUDPSessThrottle, tags); err != nil {
		writeInvalid(w, err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.held(w, id)
	if n == nil {
		return
	}
	if b.Label != nil {
		if err := c.checkNewLabel(*b.Label, id); err != nil {
			writeInvalid(w, err)
			return
		}
		n.Label = *b.Label
	}
	if b.ClientConnThrottle != nil {
		n.Throttle = *b.ClientConnThrottle
	}
	if b.Tags != nil {
		n.Tags = slices.Clone(*b.Tags)
		if n.Tags == nil {
			n.Tags = []string{}
		}
	}
	cloudtest.WriteJSON(w, http.StatusOK, wireNodeBalancer(*n))
}

func (c *Cloud) nbDelete(w http.ResponseWriter, id int) {
	if c.faulted(w, MethodLBDelete) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held(w, id) == nil {
		return
	}
	delete(c.nb.byID, id)
	c.detachAll(id)
	c.nb.plane.Remove(strconv.Itoa(id))
	cloudtest.WriteJSON(w, http.StatusOK, struct{}{})
}

// configOf finds a config (under c.mu), or writes 404.
func (c *Cloud) configOf(w http.ResponseWriter, id, cid int) (*NodeBalancer, int) {
	n := c.held(w, id)
	if n == nil {
		return nil, -1
	}
	for i := range n.Configs {
		if n.Configs[i].ID == cid {
			return n, i
		}
	}
	writeError(w, http.StatusNotFound, "", "Not found")
	return nil, -1
}

// page answers a whole collection as its one page.
func page[T any](w http.ResponseWriter, items []T) {
	if items == nil {
		items = []T{}
	}
	cloudtest.WriteJSON(w, http.StatusOK, listAnswer[T]{items, 1, 1, len(items)})
}

func (c *Cloud) configList(w http.ResponseWriter, id int) {
	if c.faulted(w, MethodLBGet) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.held(w, id)
	if n == nil {
		return
	}
	var out []wireConfig
	for _, cf := range n.Configs {
		out = append(out, c.wireConfig(n.ID, cf))
	}
	page(w, out)
}

func (c *Cloud) nodeList(w http.ResponseWriter, id, cid int) {
	if c.faulted(w, MethodLBGet) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n, i := c.configOf(w, id, cid)
	if n == nil {
		return
	}
	var out []wireNode
	for _, nd := range n.Configs[i].Nodes {
		out = append(out, c.wireNode(n.ID, n.Configs[i], nd))
	}
	page(w, out)
}

func (c *Cloud) configCreate(w http.ResponseWriter, r *http.Request, id int) {
	if c.faulted(w, MethodLBUpdate) {
		return
	}
	var b configBody
	if !decode(w, r, &b) {
		return
	}
	cf, err := c.config("", b, true)
	if err != nil {
		writeInvalid(w, err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.held(w, id)
	if n == nil {
		return
	}
	if portTaken(n.Configs, cf.Port, -1) {
		writeError(w, http.StatusBadRequest, "port", "Port is already in use by another config")
		return
	}
	c.assignIDs(&cf)
	c.change(w, n, func(n *NodeBalancer) { n.Configs = append(n.Configs, cf) }, func(n *NodeBalancer) any {
		return c.wireConfig(n.ID, cf)
	})
}

// portTaken says whether a config other than the one at except uses port.
func portTaken(configs []NBConfig, port, except int) bool {
	for j, o := range configs {
		if j != except && o.Port == port {
			return true
		}
	}
	return false
}

// change applies f to a copy of n, serves it, keeps it and answers
// answer's (under c.mu).
func (c *Cloud) change(w http.ResponseWriter, n *NodeBalancer, f func(*NodeBalancer), answer func(*NodeBalancer) any) {
	m := n.clone()
	f(&m)
	if err := c.serveLocked(&m); err != nil {
		writeError(w, http.StatusInternalServerError, "", err.Error())
		return
	}
	*n = m
	cloudtest.WriteJSON(w, http.StatusOK, answer(n))
}

func (c *Cloud) configOne(w http.ResponseWriter, r *http.Request, id, cid int) {
	method := map[string]string{http.MethodGet: MethodLBGet, http.MethodPut: MethodLBUpdate, http.MethodDelete: MethodLBUpdate}[r.Method]
	if c.faulted(w, method) {
		return
	}
	var b configBody
	if r.Method == http.MethodPut && !decode(w, r, &b) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n, i := c.configOf(w, id, cid)
	if n == nil {
		return
	}
	switch r.Method {
	case http.MethodGet:
		cloudtest.WriteJSON(w, http.StatusOK, c.wireConfig(n.ID, n.Configs[i]))
	case http.MethodDelete:
		c.change(w, n, func(n *NodeBalancer) { n.Configs = slices.Delete(n.Configs, i, i+1) }, func(*NodeBalancer) any { return struct{}{} })
	case http.MethodPut:
		c.replaceConfig(w, n, i, b, false)
	}
}

func (c *Cloud) configRebuild(w http.ResponseWriter, r *http.Request, id, cid int) {
	if c.faulted(w, MethodLBUpdate) {
		return
	}
	var b configBody
	if !decode(w, r, &b) {
		return
	}
	if b.Nodes == nil {
		writeError(w, http.StatusBadRequest, "nodes", "nodes is required")
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n, i := c.configOf(w, id, cid)
	if n == nil {
		return
	}
	c.replaceConfig(w, n, i, b, true)
}

// replaceConfig is PUT (the config's settings) and rebuild (its settings
// and its nodes: a node with the id of one it has is updated, one without
// added, the others deleted), under c.mu.
func (c *Cloud) replaceConfig(w http.ResponseWriter, n *NodeBalancer, i int, b configBody, rebuild bool) {
	old := n.Configs[i]
	cf, err := c.config("", b, rebuild)
	if err != nil {
		writeInvalid(w, err)
		return
	}
	if portTaken(n.Configs, cf.Port, i) {
		writeError(w, http.StatusBadRequest, "port", "Port is already in use by another config")
		return
	}
	cf.ID = old.ID
	if !rebuild {
		cf.Nodes = old.Nodes
	} else {
		for j, nd := range cf.Nodes {
			if nd.ID != 0 && !slices.ContainsFunc(old.Nodes, func(o NBNode) bool { return o.ID == nd.ID }) {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("nodes[%d].id", j), "Not found")
				return
			}
		}
		c.assignIDs(&cf)
	}
	c.change(w, n, func(n *NodeBalancer) { n.Configs[i] = cf }, func(n *NodeBalancer) any { return c.wireConfig(n.ID, cf) })
}

// The objects as the API shows them.
type wireNB struct {
	ID                    int       `json:"id"`
	Label                 string    `json:"label"`
	Region                string    `json:"region"`
	Hostname              string    `json:"hostname"`
	IPv4                  string    `json:"ipv4"`
	IPv6                  *string   `json:"ipv6"`
	ClientConnThrottle    int       `json:"client_conn_throttle"`
	ClientUDPSessThrottle int       `json:"client_udp_sess_throttle"`
	Transfer              wireXfer  `json:"transfer"`
	Type                  string    `json:"type"`
	Tags                  []string  `json:"tags"`
	Created               string    `json:"created"`
	Updated               string    `json:"updated"`
	LKECluster            *struct{} `json:"lke_cluster"`
	Locks                 []string  `json:"locks"`
	FrontendAddressType   string    `json:"frontend_address_type"`
	FrontendVPCSubnetID   *int      `json:"frontend_vpc_subnet_id"`
}

type wireXfer struct {
	Total *float64 `json:"total"`
	Out   *float64 `json:"out"`
	In    *float64 `json:"in"`
}

func wireNodeBalancer(n NodeBalancer) wireNB {
	tags := slices.Clone(n.Tags)
	if tags == nil {
		tags = []string{}
	}
	created := n.Created.UTC().Format(timeLayout)
	return wireNB{ID: n.ID, Label: n.Label, Region: n.Region, Hostname: n.Hostname, IPv4: n.IPv4,
		ClientConnThrottle: n.Throttle, Type: n.Type, Tags: tags, Created: created, Updated: created, Locks: []string{},
		FrontendAddressType: "public"}
}

type wireConfig struct {
	ID                int        `json:"id"`
	Port              int        `json:"port"`
	Protocol          string     `json:"protocol"`
	ProxyProtocol     string     `json:"proxy_protocol"`
	Algorithm         string     `json:"algorithm"`
	Stickiness        string     `json:"stickiness"`
	Check             string     `json:"check"`
	CheckInterval     int        `json:"check_interval"`
	CheckAttempts     int        `json:"check_attempts"`
	CheckPath         string     `json:"check_path"`
	CheckBody         string     `json:"check_body"`
	CheckPassive      bool       `json:"check_passive"`
	CheckTimeout      int        `json:"check_timeout"`
	UDPCheckPort      int        `json:"udp_check_port"`
	UDPSessionTimeout int        `json:"udp_session_timeout"`
	CipherSuite       string     `json:"cipher_suite"`
	NodeBalancerID    int        `json:"nodebalancer_id"`
	SSLCommonName     string     `json:"ssl_commonname"`
	SSLFingerprint    string     `json:"ssl_fingerprint"`
	SSLCert           *string    `json:"ssl_cert"`
	SSLKey            *string    `json:"ssl_key"`
	NodesStatus       wireUpDown `json:"nodes_status"`
}

type wireUpDown struct {
	Up   int `json:"up"`
	Down int `json:"down"`
}

// wireConfig: ssl_cert and ssl_key show as <REDACTED> when set, as the
// API shows them; nodes_status counts the data plane's healthy nodes
// (under c.mu).
func (c *Cloud) wireConfig(nbID int, cf NBConfig) wireConfig {
	var cert, key *string
	if cf.SSLCert != "" {
		r := "<REDACTED>"
		cert, key = &r, &r
	}
	up := c.nb.plane.Healthy(strconv.Itoa(nbID))[cf.Port]
	cipher := "recommended"
	if cf.Protocol == "udp" {
		cipher = "none"
	}
	return wireConfig{ID: cf.ID, Port: cf.Port, Protocol: cf.Protocol, ProxyProtocol: cf.ProxyProtocol, Algorithm: cf.Algorithm,
		Stickiness: cf.Stickiness, Check: cf.Check, CheckInterval: cf.CheckInterval, CheckAttempts: cf.CheckAttempts,
		CheckPath: cf.CheckPath, CheckBody: cf.CheckBody, CheckPassive: cf.CheckPassive, CheckTimeout: cf.CheckTimeout,
		UDPCheckPort: cf.UDPCheckPort, UDPSessionTimeout: 16, CipherSuite: cipher, NodeBalancerID: nbID,
		SSLCommonName: cf.SSLCommonName, SSLFingerprint: cf.SSLFingerprint,
		SSLCert: cert, SSLKey: key, NodesStatus: wireUpDown{Up: up, Down: len(cf.Nodes) - up}}
}

type wireNode struct {
	ID             int    `json:"id"`
	Address        string `json:"address"`
	Label          string `json:"label"`
	Status         string `json:"status"`
	Weight         int    `json:"weight"`
	Mode           string `json:"mode"`
	ConfigID       int    `json:"config_id"`
	NodeBalancerID int    `json:"nodebalancer_id"`
	VPCConfigID    *int   `json:"vpc_config_id"`
}

func (c *Cloud) wireNode(nbID int, cf NBConfig, nd NBNode) wireNode {
	status := "Unknown"
	if cf.Check != "none" {
		status = "DOWN"
		if c.nb.plane.Healthy(strconv.Itoa(nbID))[cf.Port] > 0 {
			// The data plane counts healthy nodes per port, not which.
			status = "UP"
		}
	}
	return wireNode{ID: nd.ID, Address: nd.Address, Label: nd.Label, Status: status, Weight: nd.Weight, Mode: nd.Mode,
		ConfigID: cf.ID, NodeBalancerID: nbID}
}
