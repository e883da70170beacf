package hetznertest

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The checks of load balancer requests, with the Cloud API's errors.

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
				hc.HTTP = defaultHealthCheckHTTP()
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
			hc.HTTP = defaultHealthCheckHTTP()
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

// checkAlgorithm checks a load balancer algorithm's type, given at field.
func checkAlgorithm(field, typ string) *apiFail {
	if typ != "round_robin" && typ != "least_connections" {
		return invalid(field, "must be round_robin or least_connections")
	}
	return nil
}

// checkInterfaces refuses a load balancer without a public interface
// (public false) that is attached to no network.
func checkInterfaces(public bool, network int64) *apiFail {
	if !public && network == 0 {
		return unprocessable("load_balancer_not_attached_to_network", "a Load Balancer without a public interface needs a network")
	}
	return nil
}

// defaultHealthCheckHTTP is the http part of a health check the request
// leaves out: path /, status codes 2?? and 3??.
func defaultHealthCheckHTTP() *LBHealthCheckHTTP {
	return &LBHealthCheckHTTP{Path: "/", StatusCodes: []string{"2??", "3??"}}
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
		if f := checkAlgorithm("algorithm.type", req.Algorithm.Type); f != nil {
			return l, f
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
		if f := checkInterfaces(*req.PublicInterface, l.Network); f != nil {
			return l, f
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
