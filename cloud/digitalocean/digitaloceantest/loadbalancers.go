package digitaloceantest

import (
	"cmp"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
	"github.com/mooring-dev/mooring/cloud/local/lb"
)

// Load balancer methods, for Calls and Fail.
const (
	MethodLBList   = "lb-list"   // GET /v2/load_balancers
	MethodLBGet    = "lb-get"    // GET /v2/load_balancers/{id}
	MethodLBCreate = "lb-create" // POST /v2/load_balancers
	MethodLBUpdate = "lb-update" // PUT /v2/load_balancers/{id}
	MethodLBDelete = "lb-delete" // DELETE /v2/load_balancers/{id}
)

// Load balancer statuses.
const (
	LBStatusNew     = "new"
	LBStatusActive  = "active"
	LBStatusErrored = "errored"
)

// DataPlanePrefix holds the VIPs of the endpoint's load balancers.
var DataPlanePrefix = netip.MustParsePrefix("127.81.0.0/16")

// ForwardingRule is one listener of a load balancer.
type ForwardingRule struct {
	EntryProtocol  string `json:"entry_protocol"`
	EntryPort      int    `json:"entry_port"`
	TargetProtocol string `json:"target_protocol"`
	TargetPort     int    `json:"target_port"`
	CertificateID  string `json:"certificate_id"`
	TLSPassthrough bool   `json:"tls_passthrough"`
}

// HealthCheck is a load balancer's check of its droplets.
type HealthCheck struct {
	Protocol               string `json:"protocol"`
	Port                   int    `json:"port"`
	Path                   string `json:"path"`
	CheckIntervalSeconds   int    `json:"check_interval_seconds"`
	ResponseTimeoutSeconds int    `json:"response_timeout_seconds"`
	HealthyThreshold       int    `json:"healthy_threshold"`
	UnhealthyThreshold     int    `json:"unhealthy_threshold"`
	ProxyProtocol          bool   `json:"proxy_protocol"`
}

// StickySessions is a load balancer's session affinity.
type StickySessions struct {
	Type             string `json:"type"`
	CookieName       string `json:"cookie_name,omitempty"`
	CookieTTLSeconds int    `json:"cookie_ttl_seconds,omitempty"`
}

// Firewall is a load balancer's allow and deny rules ("ip:<address>" or
// "cidr:<prefix>").
type Firewall struct {
	Allow []string `json:"allow"`
	Deny  []string `json:"deny"`
}

// LoadBalancer is one load balancer as the endpoint holds it.
type LoadBalancer struct {
	ID, Name string
	// IP is "" while it is new.
	IP     string
	Status string
	Region string
	// SizeUnit is 1-100 (default 1).
	SizeUnit        int
	Type            string // REGIONAL
	Network         string // EXTERNAL
	NetworkStack    string // IPV4
	ForwardingRules []ForwardingRule
	HealthCheck     HealthCheck
	StickySessions  StickySessions
	DropletIDs      []int
	Tag             string
	Tags            []string
	Redirect        bool // redirect_http_to_https
	ProxyProtocol   bool // enable_proxy_protocol
	BackendKeepalive,
	DisableLetsEncryptDNSRecords bool
	HTTPIdleTimeoutSeconds int // 30-600, default 60
	Firewall               Firewall
	VPCUUID                string
	Created                time.Time
}

// The endpoint's load balancers: the store, the data plane and the
// certificates load balancers may name.
type lbState struct {
	mu    sync.Mutex
	lbs   map[string]*LoadBalancer
	order []string // ids by creation
	certs map[string]bool
	plane cloudtest.DataPlane
}

func (s *lbState) init() {
	if s.lbs == nil {
		s.lbs, s.certs = map[string]*LoadBalancer{}, map[string]bool{}
		s.plane.Prefix = DataPlanePrefix
	}
}

func cloneLB(l *LoadBalancer) LoadBalancer {
	c := *l
	c.ForwardingRules = slices.Clone(l.ForwardingRules)
	c.DropletIDs = slices.Clone(l.DropletIDs)
	c.Tags = slices.Clone(l.Tags)
	c.Firewall.Allow, c.Firewall.Deny = slices.Clone(l.Firewall.Allow), slices.Clone(l.Firewall.Deny)
	return c
}

// AddCertificate makes a certificate id known, for forwarding rules that
// end TLS (certificate_id); an unknown one is refused.
func (c *Cloud) AddCertificate(id string) {
	c.lb.mu.Lock()
	defer c.lb.mu.Unlock()
	c.lb.init()
	c.lb.certs[id] = true
}

// LoadBalancers lists every load balancer, oldest first, after building
// those whose build time has passed.
func (c *Cloud) LoadBalancers() []LoadBalancer {
	c.lb.mu.Lock()
	defer c.lb.mu.Unlock()
	c.lb.init()
	var out []LoadBalancer
	for _, id := range c.lb.order {
		l := c.lb.lbs[id]
		c.activateDue(l)
		out = append(out, cloneLB(l))
	}
	return out
}

// LoadBalancer is one load balancer.
func (c *Cloud) LoadBalancer(id string) (LoadBalancer, bool) {
	c.lb.mu.Lock()
	defer c.lb.mu.Unlock()
	c.lb.init()
	l, ok := c.lb.lbs[id]
	if !ok {
		return LoadBalancer{}, false
	}
	c.activateDue(l)
	return cloneLB(l), true
}

// PutLoadBalancer adds or replaces a load balancer as given (a test's
// load balancer made out of band, by hand or by DigitalOcean's CCM):
// defaults id, region, size unit, type, idle timeout, health check and
// created; it is not validated. An active one gets a VIP and carries
// traffic.
func (c *Cloud) PutLoadBalancer(l LoadBalancer) (LoadBalancer, error) {
	c.lb.mu.Lock()
	defer c.lb.mu.Unlock()
	c.lb.init()
	if l.ID == "" {
		l.ID = newUUID()
	}
	l.Region = cmp.Or(l.Region, DefaultRegion)
	l.Status = cmp.Or(l.Status, LBStatusActive)
	l.SizeUnit = cmp.Or(l.SizeUnit, 1)
	l.Type, l.Network, l.NetworkStack = cmp.Or(l.Type, "REGIONAL"), cmp.Or(l.Network, "EXTERNAL"), cmp.Or(l.NetworkStack, "IPV4")
	l.HTTPIdleTimeoutSeconds = cmp.Or(l.HTTPIdleTimeoutSeconds, 60)
	l.StickySessions.Type = cmp.Or(l.StickySessions.Type, "none")
	l.HealthCheck = defaultCheck(l.HealthCheck)
	if l.Created.IsZero() {
		l.Created = c.opts.Now()
	}
	if _, had := c.lb.lbs[l.ID]; !had {
		c.lb.order = append(c.lb.order, l.ID)
	}
	c.lb.lbs[l.ID] = &l
	if l.Status == LBStatusActive {
		if err := c.serveLB(&l); err != nil {
			return l, err
		}
	}
	return cloneLB(&l), nil
}

// UpdateLoadBalancer changes a load balancer out of band (a test's
// tampering); an active one's data plane follows.
func (c *Cloud) UpdateLoadBalancer(id string, f func(*LoadBalancer)) error {
	c.lb.mu.Lock()
	defer c.lb.mu.Unlock()
	c.lb.init()
	l, ok := c.lb.lbs[id]
	if !ok {
		return fmt.Errorf("digitaloceantest: no load balancer %s", id)
	}
	f(l)
	if l.Status == LBStatusActive {
		return c.serveLB(l)
	}
	return nil
}

// SettleLoadBalancers finishes building every new load balancer: it
// becomes active, gets its IP and carries traffic.
func (c *Cloud) SettleLoadBalancers() error {
	c.lb.mu.Lock()
	defer c.lb.mu.Unlock()
	c.lb.init()
	for _, id := range c.lb.order {
		if l := c.lb.lbs[id]; l.Status == LBStatusNew {
			l.Status = LBStatusActive
			if err := c.serveLB(l); err != nil {
				return err
			}
		}
	}
	return nil
}

// Healthy reports, per entry port, how many droplets pass the load
// balancer's health check.
func (c *Cloud) Healthy(id string) map[int]int { return c.lb.plane.Healthy(id) }

// activateDue makes a new load balancer active once Options.LBBuildTime
// has passed since its creation. Locked.
func (c *Cloud) activateDue(l *LoadBalancer) {
	if l.Status != LBStatusNew || c.opts.LBBuildTime <= 0 || c.opts.Now().Sub(l.Created) < c.opts.LBBuildTime {
		return
	}
	l.Status = LBStatusActive
	if err := c.serveLB(l); err != nil {
		l.Status, l.IP = LBStatusErrored, ""
	}
}

// serveLB makes an active load balancer's data plane forward what it
// holds: each tcp, http, https and http2 rule (TCP; udp rules as UDP;
// http3 rules carry nothing) to the private address of each of its
// droplets at the target port, with its health check (tcp, or http; an
// https check is made over TCP) and its firewall's allow rules. Locked.
func (c *Cloud) serveLB(l *LoadBalancer) error {
	hc := &lb.HealthCheck{Protocol: lb.TCP, Port: l.HealthCheck.Port,
		Interval:         time.Duration(l.HealthCheck.CheckIntervalSeconds) * c.opts.HealthCheckSecond,
		Timeout:          time.Duration(l.HealthCheck.ResponseTimeoutSeconds) * c.opts.HealthCheckSecond,
		HealthyThreshold: l.HealthCheck.HealthyThreshold, UnhealthyThreshold: l.HealthCheck.UnhealthyThreshold}
	if l.HealthCheck.Protocol == "http" {
		hc.Protocol, hc.Path = lb.HTTP, cmp.Or(l.HealthCheck.Path, "/")
	}
	var listeners []lb.Listener
	for _, r := range l.ForwardingRules {
		proto := lb.TCP
		switch r.EntryProtocol {
		case "udp":
			proto = lb.UDP
		case "http3":
			continue
		}
		ln := lb.Listener{Port: r.EntryPort, Protocol: proto, HealthCheck: hc, Backends: []lb.Backend{}}
		for _, id := range l.DropletIDs {
			if d, ok := c.Get(id); ok && d.PrivateIP != "" {
				ln.Backends = append(ln.Backends, lb.Backend{Address: d.PrivateIP, Port: r.TargetPort})
			}
		}
		listeners = append(listeners, ln)
	}
	var ranges []netip.Prefix
	for _, rule := range l.Firewall.Allow {
		if p, ok := firewallPrefix(rule); ok {
			ranges = append(ranges, p)
		}
	}
	vip, err := c.lb.plane.Serve(l.ID, listeners, ranges)
	if err != nil {
		return fmt.Errorf("digitaloceantest: load balancer %s: data plane: %w", l.ID, err)
	}
	l.IP = vip
	return nil
}

func firewallPrefix(rule string) (netip.Prefix, bool) {
	kind, val, _ := strings.Cut(rule, ":")
	switch kind {
	case "ip":
		a, err := netip.ParseAddr(val)
		if err != nil {
			return netip.Prefix{}, false
		}
		return netip.PrefixFrom(a, a.BitLen()), true
	case "cidr":
		p, err := netip.ParsePrefix(val)
		return p.Masked(), err == nil
	}
	return netip.Prefix{}, false
}

func defaultCheck(h HealthCheck) HealthCheck {
	h.Protocol = cmp.Or(h.Protocol, "http")
	h.Port = cmp.Or(h.Port, 80)
	if h.Protocol != "tcp" {
		h.Path = cmp.Or(h.Path, "/")
	}
	h.CheckIntervalSeconds = cmp.Or(h.CheckIntervalSeconds, 10)
	h.ResponseTimeoutSeconds = cmp.Or(h.ResponseTimeoutSeconds, 5)
	h.HealthyThreshold = cmp.Or(h.HealthyThreshold, 3)
	h.UnhealthyThreshold = cmp.Or(h.UnhealthyThreshold, 5)
	return h
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := fmt.Sprintf("%x", b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// serveLBAPI answers /v2/load_balancers and /v2/load_balancers/{id}.
func (c *Cloud) serveLBAPI(w http.ResponseWriter, r *http.Request, id string) {
	method := map[string]string{http.MethodGet: MethodLBGet, http.MethodPut: MethodLBUpdate, http.MethodDelete: MethodLBDelete}[r.Method]
	if id == "" {
		method = map[string]string{http.MethodGet: MethodLBList, http.MethodPost: MethodLBCreate}[r.Method]
	}
	if method == "" {
		writeError(w, http.StatusMethodNotAllowed, "digitaloceantest does not serve "+r.Method+" "+r.URL.Path)
		return
	}
	if st := c.count(method); st != 0 {
		writeError(w, st, "injected fault")
		return
	}
	c.lb.mu.Lock()
	defer c.lb.mu.Unlock()
	c.lb.init()
	if id != "" {
		l, ok := c.lb.lbs[id]
		if !ok {
			writeError(w, http.StatusNotFound, "The resource you were accessing could not be found.")
			return
		}
		c.activateDue(l)
		switch r.Method {
		case http.MethodGet:
			writeJSON(w, http.StatusOK, map[string]any{"load_balancer": c.wireLB(l)})
		case http.MethodPut:
			c.updateLB(w, r, l)
		case http.MethodDelete:
			delete(c.lb.lbs, id)
			c.lb.order = slices.DeleteFunc(c.lb.order, func(s string) bool { return s == id })
			c.lb.plane.Remove(id)
			w.Header().Set("Content-Type", "application/octet-stream")
			w.WriteHeader(http.StatusNoContent)
		}
		return
	}
	if r.Method == http.MethodPost {
		c.createLB(w, r)
		return
	}
	c.listLBs(w, r)
}

func (c *Cloud) listLBs(w http.ResponseWriter, r *http.Request) {
	page, perPage, ok := pageQuery(w, r.URL.Query(), c.opts.MaxPerPage)
	if !ok {
		return
	}
	from, to, last := cloudtest.Page(len(c.lb.order), page, perPage)
	out := struct {
		LoadBalancers []wireLB  `json:"load_balancers"`
		Links         wireLinks `json:"links"`
		Meta          wireMeta  `json:"meta"`
	}{LoadBalancers: []wireLB{}, Meta: wireMeta{Total: len(c.lb.order)}}
	for _, id := range c.lb.order[from:to] {
		l := c.lb.lbs[id]
		c.activateDue(l)
		out.LoadBalancers = append(out.LoadBalancers, c.wireLB(l))
	}
	out.Links.Pages = pageLinks("http://"+c.Servers.Addr()+"/v2/load_balancers", nil, page, perPage, last)
	writeJSON(w, http.StatusOK, out)
}

// lbRequest is the body of a create or an update (the fields of
// DigitalOcean's load_balancer_create and load_balancer_update).
type lbRequest struct {
	Name            string           `json:"name"`
	Region          string           `json:"region"`
	Size            string           `json:"size"`
	SizeUnit        *int             `json:"size_unit"`
	Type            string           `json:"type"`
	Network         string           `json:"network"`
	NetworkStack    string           `json:"network_stack"`
	Algorithm       string           `json:"algorithm"`
	ForwardingRules []ForwardingRule `json:"forwarding_rules"`
	HealthCheck     *struct {
		HealthCheck
		ProxyProtocol *bool `json:"proxy_protocol"`
	} `json:"health_check"`
	StickySessions               *StickySessions `json:"sticky_sessions"`
	DropletIDs                   []int           `json:"droplet_ids"`
	Tag                          string          `json:"tag"`
	Tags                         []string        `json:"tags"`
	RedirectHTTPToHTTPS          bool            `json:"redirect_http_to_https"`
	EnableProxyProtocol          bool            `json:"enable_proxy_protocol"`
	EnableBackendKeepalive       bool            `json:"enable_backend_keepalive"`
	DisableLetsEncryptDNSRecords *bool           `json:"disable_lets_encrypt_dns_records"`
	HTTPIdleTimeoutSeconds       *int            `json:"http_idle_timeout_seconds"`
	Firewall                     *Firewall       `json:"firewall"`
	VPCUUID                      string          `json:"vpc_uuid"`
	ProjectID                    string          `json:"project_id"`
	IP                           string          `json:"ip"`
	SubnetUUID                   string          `json:"subnet_uuid"`
	ValidateOnly                 bool            `json:"validate_only"`
	Domains                      json.RawMessage `json:"domains"`
	GLBSettings                  json.RawMessage `json:"glb_settings"`
	TargetLoadBalancerIDs        []string        `json:"target_load_balancer_ids"`
	TLSCipherPolicy              string          `json:"tls_cipher_policy"`
}

var (
	lbNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.-]{0,254}$`)
	tagPattern    = regexp.MustCompile(`^[A-Za-z0-9:_-]{1,255}$`)
)

// decodeLB reads and checks a request as the API does: every problem is
// a 422 unprocessable_entity naming the field. old is the load balancer
// an update changes (nil on create). Locked.
func (c *Cloud) decodeLB(w http.ResponseWriter, r *http.Request, old *LoadBalancer) (LoadBalancer, bool) {
	var req lbRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "unable to parse the request body: "+err.Error())
		return LoadBalancer{}, false
	}
	fail := func(format string, args ...any) (LoadBalancer, bool) {
		writeError(w, http.StatusUnprocessableEntity, fmt.Sprintf(format, args...))
		return LoadBalancer{}, false
	}
	l := LoadBalancer{Name: req.Name, Region: req.Region, Tag: req.Tag, Tags: req.Tags, DropletIDs: req.DropletIDs,
		Redirect: req.RedirectHTTPToHTTPS, ProxyProtocol: req.EnableProxyProtocol, BackendKeepalive: req.EnableBackendKeepalive,
		VPCUUID: req.VPCUUID, Type: cmp.Or(req.Type, "REGIONAL"), Network: cmp.Or(req.Network, "EXTERNAL"),
		NetworkStack: cmp.Or(req.NetworkStack, "IPV4")}
	if old != nil {
		l.ID, l.Status, l.IP, l.Created = old.ID, old.Status, old.IP, old.Created
		l.Region = cmp.Or(l.Region, old.Region)
		l.VPCUUID = cmp.Or(l.VPCUUID, old.VPCUUID)
	}
	switch {
	case !lbNamePattern.MatchString(req.Name):
		return fail("name %q is invalid: it must be 1-255 letters, digits, dots and dashes, starting with a letter or digit", req.Name)
	case l.Region == "":
		return fail("region is required")
	case req.IP != "" || req.SubnetUUID != "" || len(req.Domains) > 0 || len(req.GLBSettings) > 0 || len(req.TargetLoadBalancerIDs) > 0 || req.TLSCipherPolicy != "":
		return fail("digitaloceantest does not model BYOIP addresses, subnets, global load balancers or TLS cipher policies")
	case req.ValidateOnly:
		return fail("digitaloceantest does not model validate_only")
	case l.Type != "REGIONAL":
		return fail("type %q: digitaloceantest models only REGIONAL load balancers", l.Type)
	case l.Network != "EXTERNAL" && l.Network != "INTERNAL":
		return fail("network must be EXTERNAL or INTERNAL")
	case l.NetworkStack != "IPV4" && l.NetworkStack != "DUALSTACK":
		return fail("network_stack must be IPV4 or DUALSTACK")
	case old != nil && (l.Network != old.Network || l.NetworkStack != old.NetworkStack) && (req.Network != "" || req.NetworkStack != ""):
		return fail("network and network_stack cannot be changed after creation")
	case old != nil && l.Region != old.Region:
		return fail("region cannot be changed after creation")
	}
	if old != nil {
		l.Network, l.NetworkStack = old.Network, old.NetworkStack
	}
	switch {
	case req.Size != "" && req.SizeUnit != nil:
		return fail("only one of size and size_unit may be given")
	case req.Size != "":
		n, ok := map[string]int{"lb-small": 1, "lb-medium": 3, "lb-large": 6}[req.Size]
		if !ok {
			return fail("size %q must be lb-small, lb-medium or lb-large", req.Size)
		}
		l.SizeUnit = n
	case req.SizeUnit != nil:
		if *req.SizeUnit < 1 || *req.SizeUnit > 100 {
			return fail("size_unit must be between 1 and 100")
		}
		l.SizeUnit = *req.SizeUnit
	default:
		l.SizeUnit = 1
	}
	if len(req.ForwardingRules) == 0 {
		return fail("forwarding_rules must contain at least one rule")
	}
	entries := map[string]bool{}
	http3 := 0
	for _, fr := range req.ForwardingRules {
		entry, target := fr.EntryProtocol, fr.TargetProtocol
		if !slices.Contains([]string{"http", "https", "http2", "http3", "tcp", "udp"}, entry) {
			return fail("forwarding rule entry_protocol %q must be one of http, https, http2, http3, tcp, udp", entry)
		}
		if !slices.Contains([]string{"http", "https", "http2", "tcp", "udp"}, target) {
			return fail("forwarding rule target_protocol %q must be one of http, https, http2, tcp, udp", target)
		}
		if fr.EntryPort < 1 || fr.EntryPort > 65535 || fr.TargetPort < 1 || fr.TargetPort > 65535 {
			return fail("forwarding rule ports must be between 1 and 65535 (entry_port %d, target_port %d)", fr.EntryPort, fr.TargetPort)
		}
		secure := entry == "https" || entry == "http2" || entry == "http3"
		switch {
		case secure && fr.CertificateID == "" && !fr.TLSPassthrough:
			return fail("forwarding rule on port %d: %s needs a certificate_id or tls_passthrough", fr.EntryPort, entry)
		case fr.CertificateID != "" && fr.TLSPassthrough:
			return fail("forwarding rule on port %d: certificate_id and tls_passthrough cannot both be set", fr.EntryPort)
		case !secure && (fr.CertificateID != "" || fr.TLSPassthrough):
			return fail("forwarding rule on port %d: certificate_id and tls_passthrough need an https, http2 or http3 entry_protocol", fr.EntryPort)
		case fr.TLSPassthrough && (entry == "http3" || target != entry):
			return fail("forwarding rule on port %d: tls_passthrough needs the same target_protocol as entry_protocol (not http3)", fr.EntryPort)
		case fr.CertificateID != "" && !c.lb.certs[fr.CertificateID]:
			return fail("certificate %s was not found", fr.CertificateID)
		case (entry == "udp") != (target == "udp"):
			return fail("forwarding rule on port %d: udp forwards only to udp", fr.EntryPort)
		case entry == "tcp" && target != "tcp":
			return fail("forwarding rule on port %d: tcp forwards only to tcp", fr.EntryPort)
		}
		if entry == "http3" {
			http3++
			continue
		}
		key := strconv.Itoa(fr.EntryPort)
		if entry == "udp" {
			key += "/udp"
		}
		if entries[key] {
			return fail("forwarding rules: entry_port %d is used twice", fr.EntryPort)
		}
		entries[key] = true
	}
	if http3 > 1 {
		return fail("forwarding rules: only one http3 rule is allowed")
	}
	l.ForwardingRules = req.ForwardingRules
	if req.HealthCheck != nil {
		h := req.HealthCheck.HealthCheck
		h.ProxyProtocol = l.ProxyProtocol
		if req.HealthCheck.ProxyProtocol != nil {
			h.ProxyProtocol = *req.HealthCheck.ProxyProtocol
		}
		l.HealthCheck = h
	}
	l.HealthCheck = defaultCheck(l.HealthCheck)
	h := l.HealthCheck
	switch {
	case h.Protocol != "http" && h.Protocol != "https" && h.Protocol != "tcp":
		return fail("health_check protocol %q must be http, https or tcp", h.Protocol)
	case h.Port < 1 || h.Port > 65535:
		return fail("health_check port must be between 1 and 65535")
	case h.CheckIntervalSeconds < 3 || h.CheckIntervalSeconds > 300:
		return fail("health_check check_interval_seconds must be between 3 and 300")
	case h.ResponseTimeoutSeconds < 3 || h.ResponseTimeoutSeconds > 300:
		return fail("health_check response_timeout_seconds must be between 3 and 300")
	case h.HealthyThreshold < 2 || h.HealthyThreshold > 10:
		return fail("health_check healthy_threshold must be between 2 and 10")
	case h.UnhealthyThreshold < 2 || h.UnhealthyThreshold > 10:
		return fail("health_check unhealthy_threshold must be between 2 and 10")
	case h.Protocol != "tcp" && !strings.HasPrefix(h.Path, "/"):
		return fail("health_check path must start with /")
	}
	if h.Protocol == "tcp" {
		l.HealthCheck.Path = ""
	}
	l.StickySessions = StickySessions{Type: "none"}
	if s := req.StickySessions; s != nil {
		switch cmp.Or(s.Type, "none") {
		case "none":
		case "cookies":
			if s.CookieName == "" || s.CookieTTLSeconds < 1 {
				return fail("sticky_sessions of type cookies need cookie_name and cookie_ttl_seconds")
			}
			l.StickySessions = *s
		default:
			return fail("sticky_sessions type %q must be none or cookies", s.Type)
		}
	}
	l.HTTPIdleTimeoutSeconds = 60
	if t := req.HTTPIdleTimeoutSeconds; t != nil {
		if *t < 30 || *t > 600 {
			return fail("http_idle_timeout_seconds must be between 30 and 600")
		}
		l.HTTPIdleTimeoutSeconds = *t
	}
	if req.DisableLetsEncryptDNSRecords != nil {
		l.DisableLetsEncryptDNSRecords = *req.DisableLetsEncryptDNSRecords
	}
	l.Firewall = Firewall{Allow: []string{}, Deny: []string{}}
	if f := req.Firewall; f != nil {
		for _, rule := range slices.Concat(f.Allow, f.Deny) {
			if _, ok := firewallPrefix(rule); !ok {
				return fail("firewall rule %q must be ip:<address> or cidr:<prefix>", rule)
			}
		}
		l.Firewall.Allow, l.Firewall.Deny = append(l.Firewall.Allow, f.Allow...), append(l.Firewall.Deny, f.Deny...)
	}
	if l.Tag != "" && len(l.DropletIDs) > 0 {
		return fail("only one of droplet_ids and tag may be given")
	}
	if l.Tag != "" {
		return fail("digitaloceantest does not model load balancers that target a tag")
	}
	for _, t := range l.Tags {
		if !tagPattern.MatchString(t) {
			return fail("tag %q is invalid: tags are 1-255 letters, digits, colons, dashes and underscores", t)
		}
	}
	seen := map[int]bool{}
	for _, id := range l.DropletIDs {
		d, ok := c.Get(id)
		switch {
		case !ok:
			return fail("droplet %d was not found", id)
		case d.Region != l.Region:
			return fail("droplet %d is in %s, not in the load balancer's region %s", id, d.Region, l.Region)
		case seen[id]:
			return fail("droplet %d is listed twice", id)
		}
		seen[id] = true
	}
	if l.DropletIDs == nil {
		l.DropletIDs = []int{}
	}
	return l, true
}

func (c *Cloud) createLB(w http.ResponseWriter, r *http.Request) {
	l, ok := c.decodeLB(w, r, nil)
	if !ok {
		return
	}
	if len(c.lb.lbs) >= c.opts.LBLimit {
		writeError(w, http.StatusForbidden, fmt.Sprintf("you have reached the limit of %d load balancers on this account", c.opts.LBLimit))
		return
	}
	l.ID, l.Status, l.Created = newUUID(), LBStatusNew, c.opts.Now()
	c.lb.lbs[l.ID] = &l
	c.lb.order = append(c.lb.order, l.ID)
	c.activateDue(&l)
	writeJSON(w, http.StatusAccepted, map[string]any{"load_balancer": c.wireLB(&l)})
}

func (c *Cloud) updateLB(w http.ResponseWriter, r *http.Request, old *LoadBalancer) {
	l, ok := c.decodeLB(w, r, old)
	if !ok {
		return
	}
	if l.Status == LBStatusActive {
		if err := c.serveLB(&l); err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
	}
	*old = l
	writeJSON(w, http.StatusOK, map[string]any{"load_balancer": c.wireLB(old)})
}

// wireLB is a load balancer as the API shows it.
type wireLB struct {
	ID                           string           `json:"id"`
	Name                         string           `json:"name"`
	IP                           string           `json:"ip"`
	IPv6                         string           `json:"ipv6,omitempty"`
	SizeUnit                     int              `json:"size_unit"`
	Type                         string           `json:"type"`
	Algorithm                    string           `json:"algorithm"`
	Status                       string           `json:"status"`
	CreatedAt                    string           `json:"created_at"`
	ForwardingRules              []ForwardingRule `json:"forwarding_rules"`
	HealthCheck                  HealthCheck      `json:"health_check"`
	StickySessions               StickySessions   `json:"sticky_sessions"`
	Region                       wireRegion       `json:"region"`
	Tag                          string           `json:"tag"`
	DropletIDs                   []int            `json:"droplet_ids"`
	Tags                         []string         `json:"tags"`
	RedirectHTTPToHTTPS          bool             `json:"redirect_http_to_https"`
	EnableProxyProtocol          bool             `json:"enable_proxy_protocol"`
	EnableBackendKeepalive       bool             `json:"enable_backend_keepalive"`
	HTTPIdleTimeoutSeconds       int              `json:"http_idle_timeout_seconds"`
	VPCUUID                      string           `json:"vpc_uuid"`
	ProjectID                    string           `json:"project_id"`
	DisableLetsEncryptDNSRecords bool             `json:"disable_lets_encrypt_dns_records"`
	Firewall                     Firewall         `json:"firewall"`
	Network                      string           `json:"network"`
	NetworkStack                 string           `json:"network_stack"`
}

func (c *Cloud) wireLB(l *LoadBalancer) wireLB {
	name := regionNames[l.Region]
	if name == "" {
		name = l.Region
	}
	tags := l.Tags
	if tags == nil {
		tags = []string{}
	}
	fw := l.Firewall
	if fw.Allow == nil {
		fw.Allow = []string{}
	}
	if fw.Deny == nil {
		fw.Deny = []string{}
	}
	rules := l.ForwardingRules
	if rules == nil {
		rules = []ForwardingRule{}
	}
	drops := l.DropletIDs
	if drops == nil {
		drops = []int{}
	}
	return wireLB{ID: l.ID, Name: l.Name, IP: l.IP, SizeUnit: l.SizeUnit, Type: l.Type, Algorithm: "round_robin",
		Status: l.Status, CreatedAt: l.Created.UTC().Format(time.RFC3339), ForwardingRules: rules,
		HealthCheck: l.HealthCheck, StickySessions: l.StickySessions,
		Region: wireRegion{Name: name, Slug: l.Region, Features: []string{"backups", "ipv6", "metadata"}, Available: true,
			Sizes: []string{DefaultSize}},
		Tag: l.Tag, DropletIDs: drops, Tags: tags, RedirectHTTPToHTTPS: l.Redirect, EnableProxyProtocol: l.ProxyProtocol,
		EnableBackendKeepalive: l.BackendKeepalive, HTTPIdleTimeoutSeconds: l.HTTPIdleTimeoutSeconds,
		VPCUUID: cmp.Or(l.VPCUUID, "5a4981aa-9653-4bd1-bef5-d6bff52042e4"), ProjectID: "4de7ac8b-495b-4884-9a69-1050c6793cd6",
		DisableLetsEncryptDNSRecords: l.DisableLetsEncryptDNSRecords, Firewall: fw, Network: l.Network,
		NetworkStack: l.NetworkStack}
}

// dropletGone takes a destroyed droplet out of every load balancer.
func (c *Cloud) dropletGone(id int) {
	c.lb.mu.Lock()
	defer c.lb.mu.Unlock()
	c.lb.init()
	for _, l := range c.lb.lbs {
		if i := slices.Index(l.DropletIDs, id); i >= 0 {
			l.DropletIDs = slices.Delete(l.DropletIDs, i, i+1)
			if l.Status == LBStatusActive {
				_ = c.serveLB(l)
			}
		}
	}
}
