package hetznertest

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
	"github.com/mooring-dev/mooring/cloud/local/lb"
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

// DataPlanePrefix holds the endpoint's load balancers' addresses.
var DataPlanePrefix = netip.MustParsePrefix("127.82.0.0/16")

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

// LBHealthy reports, per listen port, how many of the load balancer's
// targets pass its health checks on the data plane.
func (c *Cloud) LBHealthy(id int64) map[int]int { return c.lbs.plane.Healthy(fmt.Sprint(id)) }

// DataPlaneErr is the last error the data plane gave serving a load
// balancer (nil: none).
func (c *Cloud) DataPlaneErr() error {
	c.lbs.mu.Lock()
	defer c.lbs.mu.Unlock()
	return c.lbs.err
}

// closeLBs stops the data plane.
func (c *Cloud) closeLBs() error { return c.lbs.plane.Close() }

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

// serveLB makes the data plane do what l says (s.mu held): its public
// VIP, and its private one while attached to a network.
func (c *Cloud) serveLB(l *LoadBalancer) error {
	s := &c.lbs
	s.plane.Prefix = DataPlanePrefix
	var listeners []lb.Listener
	for _, svc := range l.Services {
		ln := lb.Listener{Port: svc.ListenPort, Protocol: lb.TCP}
		for _, t := range l.Targets {
			if addr := c.targetAddress(l, t); addr != "" {
				ln.Backends = append(ln.Backends, lb.Backend{Address: addr, Port: svc.DestinationPort})
			}
		}
		hc := svc.HealthCheck
		check := &lb.HealthCheck{Protocol: lb.TCP, Port: hc.Port, Interval: time.Duration(max(hc.Interval, 1)) * time.Second,
			Timeout: time.Duration(max(hc.Timeout, 1)) * time.Second, UnhealthyThreshold: max(hc.Retries, 1)}
		if hc.Protocol == "http" {
			check.Protocol = lb.HTTP
			if hc.HTTP != nil {
				check.Path = hc.HTTP.Path
			}
		}
		ln.HealthCheck = check
		listeners = append(listeners, ln)
	}
	id := fmt.Sprint(l.ID)
	var errs []error
	vip, err := s.plane.Serve(id, listeners, nil)
	errs = append(errs, err)
	if err == nil && l.IPv4 == "" {
		l.IPv4 = vip
	}
	if l.Network != 0 {
		pvip, err := s.plane.Serve(id+"/private", listeners, nil)
		errs = append(errs, err)
		if err == nil {
			l.PrivateIP = pvip
		}
	} else {
		s.plane.Remove(id + "/private")
		l.PrivateIP = ""
	}
	s.err = errors.Join(errs...)
	return s.err
}

// targetAddress is where l sends a target's traffic: the server's address
// in l's network, or its public IPv4; "" when it has neither.
func (c *Cloud) targetAddress(l *LoadBalancer, t LBTarget) string {
	srv, ok := c.Get(t.Server)
	if !ok {
		return ""
	}
	if !t.UsePrivateIP {
		return srv.PublicIPv4
	}
	for _, pn := range srv.PrivateNets {
		if pn.Network == l.Network {
			return pn.IP
		}
	}
	return ""
}

var (
	lbPath       = regexp.MustCompile(`^/v1/load_balancers/([0-9]+)$`)
	lbActionPath = regexp.MustCompile(`^/v1/load_balancers/([0-9]+)/actions/([a-z_]+)$`)
)

// apiFail is an error answer of the API.
type apiFail struct {
	status    int
	code, msg string
	field     string // invalid_input: the field named in details
}

func (e *apiFail) Error() string { return e.code + ": " + e.msg }

func invalid(field, msg string) *apiFail {
	return &apiFail{status: http.StatusBadRequest, code: "invalid_input", msg: msg, field: field}
}

func unprocessable(code, msg string) *apiFail {
	return &apiFail{status: http.StatusUnprocessableEntity, code: code, msg: msg}
}

func (f *apiFail) write(w http.ResponseWriter) {
	if f.code == "invalid_input" && f.field != "" {
		details := map[string]any{"fields": []map[string]any{{"name": f.field, "messages": []string{f.msg}}}}
		writeError(w, f.status, f.code, "invalid input in field '"+f.field+"'", details)
		return
	}
	writeError(w, f.status, f.code, f.msg, nil)
}

func (c *Cloud) serveLoadBalancers(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case p == "/v1/load_balancers" && r.Method == http.MethodGet:
		c.serveLBList(w, r)
	case p == "/v1/load_balancers" && r.Method == http.MethodPost:
		c.serveLBCreate(w, r)
	case lbPath.MatchString(p):
		id, _ := strconv.ParseInt(lbPath.FindStringSubmatch(p)[1], 10, 64)
		switch r.Method {
		case http.MethodGet:
			if f := c.count("lb-get", 0); f != nil {
				faultAnswer(w, f)
				return
			}
			l, ok := c.LoadBalancer(id)
			if !ok {
				lbNotFound(w, id)
				return
			}
			cloudtest.WriteJSON(w, http.StatusOK, map[string]any{"load_balancer": wireLB(l)})
		case http.MethodPut:
			c.serveLBUpdate(w, r, id)
		case http.MethodDelete:
			c.serveLBDelete(w, id)
		default:
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed", nil)
		}
	case lbActionPath.MatchString(p) && r.Method == http.MethodPost:
		m := lbActionPath.FindStringSubmatch(p)
		id, _ := strconv.ParseInt(m[1], 10, 64)
		c.serveLBAction(w, r, id, m[2])
	default:
		writeError(w, http.StatusNotFound, "not_found", "the requested resource was not found", nil)
	}
}

func lbNotFound(w http.ResponseWriter, id int64) {
	writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("load_balancer with ID '%d' not found", id), nil)
}

// lbListParams are the query parameters of GET /load_balancers.
var lbListParams = map[string]bool{"page": true, "per_page": true, "label_selector": true, "sort": true, "name": true}

func (c *Cloud) serveLBList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	page, perPage, sel, ok := c.listQuery(w, q, "lb-list", lbListParams)
	if !ok {
		return
	}
	for _, k := range q["sort"] {
		if f, _, _ := strings.Cut(k, ":"); f != "id" && f != "name" && f != "created" {
			invalidInput(w, "sort", fmt.Sprintf("unknown sort field %q", f))
			return
		}
	}
	var match []LoadBalancer
	for _, l := range c.LoadBalancers() {
		if sel.Matches(labels.Set(l.Labels)) && (q.Get("name") == "" || l.Name == q.Get("name")) {
			match = append(match, l)
		}
	}
	from, to, p := paged(len(match), page, perPage)
	out := []wireLoadBalancer{}
	for _, l := range match[from:to] {
		out = append(out, wireLB(l))
	}
	cloudtest.WriteJSON(w, http.StatusOK, map[string]any{"load_balancers": out, "meta": map[string]any{"pagination": p}})
}

// decodeBody reads a JSON body strictly: malformed JSON is json_error, an
// unknown field invalid_input naming it.
func decodeBody(r *http.Request, v any) *apiFail {
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(r.Body); err != nil {
		return &apiFail{status: http.StatusBadRequest, code: "json_error", msg: err.Error()}
	}
	if len(bytes.TrimSpace(buf.Bytes())) == 0 {
		// An action without options may come without a body
		// (enable_public_interface, as hcloud-go sends it).
		buf.WriteString("{}")
	}
	if !json.Valid(buf.Bytes()) {
		return &apiFail{status: http.StatusBadRequest, code: "json_error", msg: "request body is not valid JSON"}
	}
	if field, err := cloudtest.DecodeStrict(&buf, v); field != "" {
		return invalid(field, "unknown field")
	} else if err != nil {
		return invalid("body", err.Error())
	}
	return nil
}

// Request bodies (the fields hcloud-go sends).
type (
	reqHealthCheckHTTP struct {
		Domain      *string   `json:"domain"`
		Path        *string   `json:"path"`
		Response    *string   `json:"response"`
		StatusCodes *[]string `json:"status_codes"`
		TLS         *bool     `json:"tls"`
	}
	reqHealthCheck struct {
		Protocol *string             `json:"protocol"`
		Port     *int                `json:"port"`
		Interval *int                `json:"interval"`
		Timeout  *int                `json:"timeout"`
		Retries  *int                `json:"retries"`
		HTTP     *reqHealthCheckHTTP `json:"http"`
	}
	reqHTTP struct {
		CookieName     *string  `json:"cookie_name"`
		CookieLifetime *int     `json:"cookie_lifetime"`
		Certificates   *[]int64 `json:"certificates"`
		RedirectHTTP   *bool    `json:"redirect_http"`
		StickySessions *bool    `json:"sticky_sessions"`
		TimeoutIdle    *int     `json:"timeout_idle"`
	}
	reqService struct {
		Protocol        *string         `json:"protocol"`
		ListenPort      *int            `json:"listen_port"`
		DestinationPort *int            `json:"destination_port"`
		Proxyprotocol   *bool           `json:"proxyprotocol"`
		HTTP            *reqHTTP        `json:"http"`
		HealthCheck     *reqHealthCheck `json:"health_check"`
	}
	reqTarget struct {
		Type   string `json:"type"`
		Server *struct {
			ID int64 `json:"id"`
		} `json:"server"`
		LabelSelector any   `json:"label_selector"`
		IP            any   `json:"ip"`
		UsePrivateIP  *bool `json:"use_private_ip"`
	}
	reqIDOrName struct {
		ID   *int64  `json:"id"`
		Name *string `json:"name"`
	}
	reqCreate struct {
		Name             string          `json:"name"`
		LoadBalancerType json.RawMessage `json:"load_balancer_type"`
		Algorithm        *struct {
			Type string `json:"type"`
		} `json:"algorithm"`
		Location        *string            `json:"location"`
		NetworkZone     *string            `json:"network_zone"`
		Labels          *map[string]string `json:"labels"`
		Targets         []reqTarget        `json:"targets"`
		Services        []reqService       `json:"services"`
		PublicInterface *bool              `json:"public_interface"`
		Network         *int64             `json:"network"`
		PublicNet       any                `json:"public_net"`
	}
)

// lbType reads a load_balancer_type: a name, an id, or {"id"|"name"}.
func lbType(raw json.RawMessage) (string, *apiFail) {
	if len(raw) == 0 {
		return "", invalid("load_balancer_type", "is required")
	}
	var name string
	var id int64
	var obj reqIDOrName
	switch {
	case json.Unmarshal(raw, &name) == nil:
	case json.Unmarshal(raw, &id) == nil:
	case json.Unmarshal(raw, &obj) == nil && (obj.ID != nil || obj.Name != nil):
		if obj.Name != nil {
			name = *obj.Name
		} else {
			id = *obj.ID
		}
	default:
		return "", invalid("load_balancer_type", "must be a load balancer type's id or name")
	}
	for n, t := range LBTypes {
		if n == name || (name == "" && t.ID == id) {
			return n, nil
		}
	}
	return "", invalid("load_balancer_type", "load balancer type not found")
}

// checkLabels applies the API's label rules: keys are qualified names
// (an optional DNS subdomain prefix, a name of up to 63 characters),
// values up to 63 characters of the same alphabet, may be empty; the
// prefix hetzner.cloud/ is Hetzner's own.
func checkLabels(m map[string]string) *apiFail {
	for k, v := range m {
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			return invalid("labels", fmt.Sprintf("label key %q: %s", k, msgs[0]))
		}
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			return invalid("labels", fmt.Sprintf("label value %q of %q: %s", v, k, msgs[0]))
		}
		if strings.HasPrefix(k, "hetzner.cloud/") || strings.Contains(k, ".hetzner.cloud/") {
			return invalid("labels", fmt.Sprintf("label key %q: the prefix hetzner.cloud/ is reserved", k))
		}
	}
	return nil
}

// checkName: a load balancer's name is 1 to 63 characters, unique in the
// project (uniqueness_error).
func (c *Cloud) checkName(name string, self int64) *apiFail {
	if name == "" || len(name) > 63 {
		return invalid("name", "must be 1 to 63 characters")
	}
	for _, l := range c.lbs.all {
		if l.Name == name && l.ID != self {
			return &apiFail{status: http.StatusConflict, code: "uniqueness_error", msg: "name is already used", field: "name"}
		}
	}
	return nil
}

// networkKnown: a network of the networks API (PutNetwork), one some
// server is attached to, or the default.
func (c *Cloud) networkKnown(id int64) bool {
	if _, ok := c.Network(id); ok || id == DefaultNetworkID {
		return true
	}
	for _, s := range c.servers.List(nil) {
		for _, pn := range s.PrivateNets {
			if pn.Network == id {
				return true
			}
		}
	}
	return false
}

// service builds a service from a request, over old (an update) or a new
// one, and checks it.
func (c *Cloud) service(req reqService, old *LBService) (LBService, *apiFail) {
	var s LBService
	if old != nil {
		s = *old
	} else {
		s = LBService{Protocol: "tcp", HealthCheck: LBHealthCheck{Interval: 15, Timeout: 10, Retries: 3}}
	}
	if req.Protocol != nil {
		s.Protocol = *req.Protocol
	}
	if old == nil && req.Protocol == nil {
		return s, invalid("protocol", "is required")
	}
	switch s.Protocol {
	case "tcp", "http", "https":
	default:
		return s, invalid("protocol", "must be one of tcp, http, https")
	}
	if req.ListenPort != nil {
		s.ListenPort = *req.ListenPort
	}
	if req.DestinationPort != nil {
		s.DestinationPort = *req.DestinationPort
	}
	if old == nil {
		defPort := map[string]int{"http": 80, "https": 443}[s.Protocol]
		if s.ListenPort == 0 {
			s.ListenPort = defPort
		}
		if s.DestinationPort == 0 {
			s.DestinationPort = cmp.Or(defPort, s.ListenPort)
		}
	}
	if s.ListenPort < 1 || s.ListenPort > 65535 {
		return s, invalid("listen_port", "must be from 1 to 65535")
	}
	if s.DestinationPort < 1 || s.DestinationPort > 65535 {
		return s, invalid("destination_port", "must be from 1 to 65535")
	}
	if req.Proxyprotocol != nil {
		s.ProxyProtocol = *req.Proxyprotocol
	}
	if s.Protocol == "tcp" {
		if req.HTTP != nil {
			return s, invalid("http", "is only allowed for protocol http and https")
		}
		s.HTTP = nil
	} else {
		if s.HTTP == nil {
			s.HTTP = &LBHTTP{CookieName: "HCLBSTICKY", CookieLifetime: 300, TimeoutIdle: 60, Certificates: []int64{}}
		}
		if h := req.HTTP; h != nil {
			setIf(&s.HTTP.CookieName, h.CookieName)
			setIf(&s.HTTP.CookieLifetime, h.CookieLifetime)
			setIf(&s.HTTP.RedirectHTTP, h.RedirectHTTP)
			setIf(&s.HTTP.StickySessions, h.StickySessions)
			setIf(&s.HTTP.TimeoutIdle, h.TimeoutIdle)
			if h.Certificates != nil {
				s.HTTP.Certificates = slices.Clone(*h.Certificates)
			}
		}
		for _, id := range s.HTTP.Certificates {
			if _, ok := c.lbs.certs[id]; !ok {
				return s, invalid("http.certificates", fmt.Sprintf("certificate with ID '%d' not found", id))
			}
		}
		if s.Protocol == "https" && len(s.HTTP.Certificates) == 0 {
			return s, invalid("http.certificates", "an https service needs at least one certificate")
		}
		if s.Protocol == "http" && len(s.HTTP.Certificates) > 0 {
			return s, invalid("http.certificates", "certificates are only allowed for protocol https")
		}
		if s.HTTP.RedirectHTTP && s.Protocol != "https" {
			return s, invalid("http.redirect_http", "is only allowed for protocol https")
		}
	}
	hc := &s.HealthCheck
	if old == nil || hc.Port == 0 {
		hc.Port = s.DestinationPort
	}
	if h := req.HealthCheck; h != nil {
		if old == nil && h.Protocol == nil {
			return s, invalid("health_check.protocol", "is required")
		}
		setIf(&hc.Protocol, h.Protocol)
		setIf(&hc.Port, h.Port)
		setIf(&hc.Interval, h.Interval)
		setIf(&hc.Timeout, h.Timeout)
		setIf(&hc.Retries, h.Retries)
		if h.HTTP != nil {
			if hc.HTTP == nil {
				hc.HTTP = &LBHealthCheckHTTP{Path: "/", StatusCodes: []string{"2??", "3??"}}
			}
			setIf(&hc.HTTP.Domain, h.HTTP.Domain)
			setIf(&hc.HTTP.Path, h.HTTP.Path)
			setIf(&hc.HTTP.Response, h.HTTP.Response)
			setIf(&hc.HTTP.TLS, h.HTTP.TLS)
			if h.HTTP.StatusCodes != nil {
				hc.HTTP.StatusCodes = slices.Clone(*h.HTTP.StatusCodes)
			}
		}
	}
	hc.Protocol = cmp.Or(hc.Protocol, "tcp")
	switch hc.Protocol {
	case "tcp":
		hc.HTTP = nil
	case "http", "https":
		if hc.HTTP == nil {
			hc.HTTP = &LBHealthCheckHTTP{Path: "/", StatusCodes: []string{"2??", "3??"}}
		}
		if !strings.HasPrefix(hc.HTTP.Path, "/") {
			return s, invalid("health_check.http.path", "must begin with /")
		}
	default:
		return s, invalid("health_check.protocol", "must be one of tcp, http, https")
	}
	if hc.Port < 1 || hc.Port > 65535 {
		return s, invalid("health_check.port", "must be from 1 to 65535")
	}
	if hc.Interval < 1 || hc.Timeout < 1 || hc.Retries < 0 {
		return s, invalid("health_check", "interval and timeout must be positive, retries not negative")
	}
	return s, nil
}

func setIf[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

// target checks a server target for l.
func (c *Cloud) target(l *LoadBalancer, req reqTarget) (LBTarget, *apiFail) {
	if req.Type != "server" || req.Server == nil {
		return LBTarget{}, invalid("type", "only server targets are modelled by hetznertest")
	}
	t := LBTarget{Server: req.Server.ID, UsePrivateIP: req.UsePrivateIP != nil && *req.UsePrivateIP}
	srv, ok := c.Get(t.Server)
	if !ok {
		return t, invalid("server", fmt.Sprintf("server with ID '%d' not found", t.Server))
	}
	for _, old := range l.Targets {
		if old.Server == t.Server {
			return t, unprocessable("target_already_defined", "the Load Balancer target is already defined")
		}
	}
	if len(l.Targets) >= LBTypes[l.Type].MaxTargets {
		return t, &apiFail{status: http.StatusForbidden, code: "resource_limit_exceeded",
			msg: fmt.Sprintf("the load balancer type %s takes at most %d targets", l.Type, LBTypes[l.Type].MaxTargets)}
	}
	if t.UsePrivateIP {
		if l.Network == 0 {
			return t, unprocessable("load_balancer_not_attached_to_network", "the Load Balancer is not attached to a network")
		}
		if c.targetAddress(l, t) == "" {
			return t, unprocessable("server_not_attached_to_network", "the server is not attached to the same network as the Load Balancer")
		}
	} else {
		if !l.Public {
			return t, unprocessable("load_balancer_public_interface_disabled", "the Load Balancer's public network interface is disabled")
		}
		if srv.PublicIPv4 == "" {
			return t, unprocessable("missing_ipv4", "the server has no public IPv4 address")
		}
	}
	return t, nil
}

// addService checks a new service's listen port and the type's limit.
func addService(l *LoadBalancer, s LBService) *apiFail {
	for _, old := range l.Services {
		if old.ListenPort == s.ListenPort {
			return unprocessable("source_port_already_used", fmt.Sprintf("listen port %d is already used", s.ListenPort))
		}
	}
	if len(l.Services) >= LBTypes[l.Type].MaxServices {
		return &apiFail{status: http.StatusForbidden, code: "resource_limit_exceeded",
			msg: fmt.Sprintf("the load balancer type %s takes at most %d services", l.Type, LBTypes[l.Type].MaxServices)}
	}
	l.Services = append(l.Services, s)
	return nil
}

func (c *Cloud) serveLBCreate(w http.ResponseWriter, r *http.Request) {
	if f := c.count("lb-create", 0); f != nil {
		faultAnswer(w, f)
		return
	}
	var req reqCreate
	if f := decodeBody(r, &req); f != nil {
		f.write(w)
		return
	}
	s := &c.lbs
	s.mu.Lock()
	defer s.mu.Unlock()
	l, f := c.lbFromCreate(req)
	if f != nil {
		f.write(w)
		return
	}
	act, fail := c.startAction("create_load_balancer", ActionResource{ID: l.ID, Type: "load_balancer"})
	if fail {
		// The action failed: the load balancer is not made.
		cloudtest.WriteJSON(w, http.StatusCreated, map[string]any{"load_balancer": wireLB(l), "action": act})
		return
	}
	s.all[l.ID] = &l
	if err := c.serveLB(&l); err != nil {
		writeError(w, http.StatusInternalServerError, "server_error", "data plane: "+err.Error(), nil)
		return
	}
	cloudtest.WriteJSON(w, http.StatusCreated, map[string]any{"load_balancer": wireLB(l.clone()), "action": act})
}

// lbFromCreate builds and checks a load balancer of a create request
// (s.mu held).
func (c *Cloud) lbFromCreate(req reqCreate) (LoadBalancer, *apiFail) {
	l := LoadBalancer{Name: req.Name, Algorithm: "round_robin", Public: true, Labels: map[string]string{}}
	if f := c.checkName(req.Name, 0); f != nil {
		return l, f
	}
	typ, f := lbType(req.LoadBalancerType)
	if f != nil {
		return l, f
	}
	l.Type = typ
	switch {
	case req.Location != nil && req.NetworkZone != nil:
		return l, invalid("location", "location and network_zone are mutually exclusive")
	case req.Location != nil:
		if _, ok := locations[*req.Location]; !ok {
			return l, invalid("location", fmt.Sprintf("location %q not found", *req.Location))
		}
		l.Location = *req.Location
	case req.NetworkZone != nil:
		loc, ok := networkZones[*req.NetworkZone]
		if !ok {
			return l, invalid("network_zone", fmt.Sprintf("network zone %q not found", *req.NetworkZone))
		}
		l.Location = loc
	default:
		return l, invalid("location", "one of location and network_zone is required")
	}
	if req.Algorithm != nil {
		if req.Algorithm.Type != "round_robin" && req.Algorithm.Type != "least_connections" {
			return l, invalid("algorithm.type", "must be round_robin or least_connections")
		}
		l.Algorithm = req.Algorithm.Type
	}
	if req.Labels != nil {
		if f := checkLabels(*req.Labels); f != nil {
			return l, f
		}
		l.Labels = maps.Clone(*req.Labels)
	}
	if req.PublicNet != nil {
		return l, invalid("public_net", "primary IPs are not modelled by hetznertest")
	}
	if req.Network != nil {
		if !c.networkKnown(*req.Network) {
			return l, invalid("network", fmt.Sprintf("network with ID '%d' not found", *req.Network))
		}
		l.Network = *req.Network
	}
	if req.PublicInterface != nil {
		if !*req.PublicInterface && l.Network == 0 {
			return l, unprocessable("load_balancer_not_attached_to_network", "a Load Balancer without a public interface needs a network")
		}
		l.Public = *req.PublicInterface
	}
	c.newLB(&l)
	for _, rs := range req.Services {
		svc, f := c.service(rs, nil)
		if f != nil {
			return l, f
		}
		if f := addService(&l, svc); f != nil {
			return l, f
		}
	}
	for _, rt := range req.Targets {
		t, f := c.target(&l, rt)
		if f != nil {
			return l, f
		}
		l.Targets = append(l.Targets, t)
	}
	return l, nil
}

func (c *Cloud) serveLBUpdate(w http.ResponseWriter, r *http.Request, id int64) {
	if f := c.count("lb-update", 0); f != nil {
		faultAnswer(w, f)
		return
	}
	var req struct {
		Name   *string            `json:"name"`
		Labels *map[string]string `json:"labels"`
	}
	if f := decodeBody(r, &req); f != nil {
		f.write(w)
		return
	}
	s := &c.lbs
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.all[id]
	if !ok {
		lbNotFound(w, id)
		return
	}
	if req.Name != nil {
		if f := c.checkName(*req.Name, id); f != nil {
			f.write(w)
			return
		}
	}
	if req.Labels != nil {
		if f := checkLabels(*req.Labels); f != nil {
			f.write(w)
			return
		}
	}
	if req.Name != nil {
		l.Name = *req.Name
	}
	if req.Labels != nil {
		l.Labels = maps.Clone(*req.Labels)
	}
	cloudtest.WriteJSON(w, http.StatusOK, map[string]any{"load_balancer": wireLB(l.clone())})
}

func (c *Cloud) serveLBDelete(w http.ResponseWriter, id int64) {
	if f := c.count("lb-delete", 0); f != nil {
		faultAnswer(w, f)
		return
	}
	s := &c.lbs
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.all[id]
	if !ok {
		lbNotFound(w, id)
		return
	}
	if l.Protected {
		writeError(w, http.StatusForbidden, "protected", "load balancer is delete protected", nil)
		return
	}
	if f := c.lock(id); f != nil {
		f.write(w)
		return
	}
	act, fail := c.startAction("delete_load_balancer", ActionResource{ID: id, Type: "load_balancer"})
	if !fail {
		delete(s.all, id)
		s.plane.Remove(fmt.Sprint(id))
		s.plane.Remove(fmt.Sprint(id) + "/private")
	}
	// The API answers a deletion with its action (as hcloud-go's
	// DeleteWithResult reads it).
	cloudtest.WriteJSON(w, http.StatusOK, map[string]any{"action": act})
}

// serveLBAction serves POST /load_balancers/{id}/actions/{action}, counted
// as lb-update.
func (c *Cloud) serveLBAction(w http.ResponseWriter, r *http.Request, id int64, name string) {
	if f := c.count("lb-update", 0); f != nil {
		faultAnswer(w, f)
		return
	}
	s := &c.lbs
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.all[id]
	if !ok {
		lbNotFound(w, id)
		return
	}
	l := cur.clone()
	var f *apiFail
	switch name {
	case "add_target":
		var req reqTarget
		if f = decodeBody(r, &req); f == nil {
			var t LBTarget
			if t, f = c.target(&l, req); f == nil {
				l.Targets = append(l.Targets, t)
			}
		}
	case "remove_target":
		var req reqTarget
		if f = decodeBody(r, &req); f == nil {
			if req.Type != "server" || req.Server == nil {
				f = invalid("type", "only server targets are modelled by hetznertest")
				break
			}
			n := len(l.Targets)
			l.Targets = slices.DeleteFunc(l.Targets, func(t LBTarget) bool { return t.Server == req.Server.ID })
			if len(l.Targets) == n {
				f = invalid("server", fmt.Sprintf("server with ID '%d' is no target of the Load Balancer", req.Server.ID))
			}
		}
	case "add_service":
		var req reqService
		if f = decodeBody(r, &req); f == nil {
			var svc LBService
			if svc, f = c.service(req, nil); f == nil {
				f = addService(&l, svc)
			}
		}
	case "update_service":
		var req reqService
		if f = decodeBody(r, &req); f == nil {
			if req.ListenPort == nil {
				f = invalid("listen_port", "is required")
				break
			}
			i := slices.IndexFunc(l.Services, func(s LBService) bool { return s.ListenPort == *req.ListenPort })
			if i < 0 {
				f = &apiFail{status: http.StatusNotFound, code: "not_found", msg: fmt.Sprintf("service with listen port %d not found", *req.ListenPort)}
				break
			}
			l.Services[i], f = c.service(req, &l.Services[i])
		}
	case "delete_service":
		var req struct {
			ListenPort int `json:"listen_port"`
		}
		if f = decodeBody(r, &req); f == nil {
			n := len(l.Services)
			l.Services = slices.DeleteFunc(l.Services, func(s LBService) bool { return s.ListenPort == req.ListenPort })
			if len(l.Services) == n {
				f = &apiFail{status: http.StatusNotFound, code: "not_found", msg: fmt.Sprintf("service with listen port %d not found", req.ListenPort)}
			}
		}
	case "change_algorithm":
		var req struct {
			Type string `json:"type"`
		}
		if f = decodeBody(r, &req); f == nil {
			if req.Type != "round_robin" && req.Type != "least_connections" {
				f = invalid("type", "must be round_robin or least_connections")
				break
			}
			l.Algorithm = req.Type
		}
	case "change_type":
		var req struct {
			LoadBalancerType json.RawMessage `json:"load_balancer_type"`
		}
		if f = decodeBody(r, &req); f == nil {
			var typ string
			if typ, f = lbType(req.LoadBalancerType); f == nil {
				if len(l.Targets) > LBTypes[typ].MaxTargets || len(l.Services) > LBTypes[typ].MaxServices {
					f = unprocessable("invalid_load_balancer_type", "the load balancer type does not fit the load balancer's targets and services")
					break
				}
				l.Type = typ
			}
		}
	case "attach_to_network":
		var req struct {
			Network int64   `json:"network"`
			IP      *string `json:"ip"`
			IPRange *string `json:"ip_range"`
		}
		if f = decodeBody(r, &req); f == nil {
			switch {
			case l.Network != 0:
				f = unprocessable("load_balancer_already_attached", "the Load Balancer is already attached to a network")
			case !c.networkKnown(req.Network):
				f = invalid("network", fmt.Sprintf("network with ID '%d' not found", req.Network))
			case req.IP != nil || req.IPRange != nil:
				f = invalid("ip", "choosing the private IP or subnet is not modelled by hetznertest")
			default:
				l.Network = req.Network
			}
		}
	case "detach_from_network":
		var req struct {
			Network int64 `json:"network"`
		}
		if f = decodeBody(r, &req); f == nil {
			switch {
			case l.Network == 0 || l.Network != req.Network:
				f = unprocessable("load_balancer_not_attached_to_network", "the Load Balancer is not attached to this network")
			case !l.Public:
				f = unprocessable("load_balancer_public_interface_disabled", "detaching the last network of a Load Balancer without a public interface")
			case slices.ContainsFunc(l.Targets, func(t LBTarget) bool { return t.UsePrivateIP }):
				f = unprocessable("targets_without_use_private_ip", "the Load Balancer has targets that use its private network")
			default:
				l.Network = 0
			}
		}
	case "enable_public_interface", "disable_public_interface":
		var req struct{}
		if f = decodeBody(r, &req); f == nil {
			l.Public = name == "enable_public_interface"
			if !l.Public && l.Network == 0 {
				f = unprocessable("load_balancer_not_attached_to_network", "a Load Balancer without a public interface needs a network")
			}
		}
	default:
		writeError(w, http.StatusNotFound, "not_found", "the requested resource was not found", nil)
		return
	}
	if f == nil {
		f = c.lock(id)
	}
	if f != nil {
		f.write(w)
		return
	}
	act, fail := c.startAction(name, ActionResource{ID: id, Type: "load_balancer"})
	if !fail {
		*cur = l
		if err := c.serveLB(cur); err != nil {
			writeError(w, http.StatusInternalServerError, "server_error", "data plane: "+err.Error(), nil)
			return
		}
	}
	cloudtest.WriteJSON(w, http.StatusCreated, map[string]any{"action": act})
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
