package gcetest

import (
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"time"

	compute "google.golang.org/api/compute/v1"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// Routes: the global routes of a project's VPC networks (global/routes:
// list, get, insert, delete), as the Compute API serves them. A route has
// a name (RFC 1035), a network, a destRange (a CIDR without host bits),
// a priority (0-65535, 1000 when not given), a description, tags, and
// exactly one next hop: nextHopInstance (an instance of the project, full
// or partial URL), nextHopIp, or nextHopGateway (the project's
// default-internet-gateway). Its references are stored and answered as
// full URLs; a route whose next hop instance is gone stays, with the
// warning NEXT_HOP_INSTANCE_NOT_FOUND (NEXT_HOP_NOT_RUNNING while it is
// not RUNNING), as GCE keeps it. An insert of a taken name is 409
// alreadyExists, of an instance the project has not 404 notFound.
// Networks are not resources here: any network name of the project
// stands.

// routing is what the routes, instance groups, backend services and health
// checks hold, under c.net.mu; its zero value is ready.
type routing struct {
	routes   map[string]*compute.Route          // by project/name
	groups   map[string]*instanceGroup          // by project/zone/name
	services map[string]*compute.BackendService // by project/region/name
	checks   map[string]*compute.HealthCheck    // by project/scope/name

	// Set by the forwarding rules' file (nil: none), called under
	// c.net.mu: ruleUsing is the partial URL of a forwarding rule that
	// uses the backend service at link ("" when none): such a service
	// cannot be deleted; backendsChanged makes the data plane follow a
	// change of a backend service or of its groups' members, when the
	// change's operation ends.
	ruleUsing       func(link string) string
	backendsChanged func()
}

func (rt *routing) init() {
	if rt.routes == nil {
		rt.routes = map[string]*compute.Route{}
		rt.groups = map[string]*instanceGroup{}
		rt.services = map[string]*compute.BackendService{}
		rt.checks = map[string]*compute.HealthCheck{}
	}
}

// Route methods for Calls and Fail: routes.list, routes.get,
// routes.insert, routes.delete. FailOperations of routes.insert or
// routes.delete makes the write's operation end in error instead.
func init() {
	handle(http.MethodGet, `global/routes`, (*Cloud).serveRouteList)
	handle(http.MethodPost, `global/routes`, (*Cloud).serveRouteInsert)
	handle(http.MethodGet, `global/routes/([^/]+)`, (*Cloud).serveRouteGet)
	handle(http.MethodDelete, `global/routes/([^/]+)`, (*Cloud).serveRouteDelete)
}

// DefaultGateway is the next hop of a route to the internet: the
// project's default internet gateway.
const DefaultGateway = "default-internet-gateway"

// routeKey is a route's key in routing.routes.
func routeKey(project, name string) string { return project + "/" + name }

// call counts a call of a networking method and answers its injected
// fault, or the 404 of an unknown project; false when it has answered.
func (c *Cloud) call(w http.ResponseWriter, method, project string) bool {
	if st := c.count(method); st != 0 {
		writeError(w, st, "injected fault")
		return false
	}
	if _, known := c.project(project); !known {
		writeError(w, http.StatusNotFound, "The resource 'projects/"+project+"' was not found")
		return false
	}
	return true
}

// FailOperations makes the next n writes of method (such as routes.insert)
// be accepted and their operations end in error: code (QUOTA_EXCEEDED when
// empty) and HTTP status (403 when 0), without their effect. n <= 0 clears
// it.
func (c *Cloud) FailOperations(method string, n, status int, code string) {
	c.Faults.Set(method+" operation", cloudtest.Fault{Left: n, Status: cmp.Or(status, http.StatusForbidden), Code: cmp.Or(code, "QUOTA_EXCEEDED")})
}

// opFault is the injected failure of a write's operation, if any.
func (c *Cloud) opFault(method string) *OpError {
	f := c.Faults.Take(method+" operation", 0)
	if f == nil {
		return nil
	}
	return &OpError{Code: f.Code, Status: f.Status, Message: "injected fault of the operation of " + method}
}

// failed is an operation's finish that ends it in err.
func failed(err *OpError) func() *OpError { return func() *OpError { return err } }

// timestamp is a creationTimestamp as the API writes it.
func timestamp(t time.Time) string { return t.Format("2006-01-02T15:04:05.000-07:00") }

func (c *Cloud) serveRouteList(w http.ResponseWriter, r *http.Request, m []string) {
	project := m[1]
	if !c.call(w, "routes.list", project) {
		return
	}
	self := scopeURL(project, "global") + "/routes"
	lq, aerr := c.parseListQuery(r, self, reflect.TypeFor[compute.Route]())
	if aerr != nil {
		aerr.write(w)
		return
	}
	items, next := page(lq, c.Routes(project), func(rt *compute.Route) string { return rt.Name })
	writeList(w, "compute#routeList", self, items, next)
}

func (c *Cloud) serveRouteGet(w http.ResponseWriter, r *http.Request, m []string) {
	project, name := m[1], m[2]
	if !c.call(w, "routes.get", project) {
		return
	}
	rt, ok := c.Route(project, name)
	if !ok {
		notFound("projects/" + project + "/global/routes/" + name).write(w)
		return
	}
	writeJSON(w, http.StatusOK, rt)
}

func (c *Cloud) serveRouteInsert(w http.ResponseWriter, r *http.Request, m []string) {
	project := m[1]
	if !c.call(w, "routes.insert", project) {
		return
	}
	var in compute.Route
	if field, err := cloudtest.DecodeStrict(r.Body, &in); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid JSON payload received. %v %s", err, field))
		return
	}
	rt, aerr := c.checkRoute(project, in)
	if aerr != nil {
		aerr.write(w)
		return
	}
	fault := c.opFault("routes.insert")
	n := &c.net
	n.mu.Lock()
	defer n.mu.Unlock()
	n.init()
	c.rt.init()
	key := routeKey(project, rt.Name)
	if _, taken := c.rt.routes[key]; taken {
		alreadyExists(strings.TrimPrefix(rt.SelfLink, resourceBase)).write(w)
		return
	}
	if aerr := n.checkIdle(rt.SelfLink); aerr != nil {
		aerr.write(w)
		return
	}
	if fault != nil {
		answerOp(w, c.begin(project, "global", "insert", rt.SelfLink, 0, failed(fault)))
		return
	}
	if ref, ok := parseRef(project, rt.NextHopInstance, "zones", "*", "instances", "*"); rt.NextHopInstance != "" && ok {
		if _, exists := c.Get(ref.project, ref.parts[1], ref.parts[3]); !exists {
			// GCE checks the next hop when it runs the operation.
			answerOp(w, c.begin(project, "global", "insert", rt.SelfLink, 0, failed(&OpError{Code: "RESOURCE_NOT_FOUND",
				Status: http.StatusNotFound, Message: "The resource '" + ref.path() + "' was not found"})))
			return
		}
	}
	rt.Id = n.nextID()
	rt.CreationTimestamp = timestamp(c.opts.Now())
	c.rt.routes[key] = &rt
	answerOp(w, c.begin(project, "global", "insert", rt.SelfLink, rt.Id, nil))
}

func (c *Cloud) serveRouteDelete(w http.ResponseWriter, r *http.Request, m []string) {
	project, name := m[1], m[2]
	if !c.call(w, "routes.delete", project) {
		return
	}
	fault := c.opFault("routes.delete")
	n := &c.net
	n.mu.Lock()
	defer n.mu.Unlock()
	n.init()
	c.rt.init()
	key := routeKey(project, name)
	rt, ok := c.rt.routes[key]
	if !ok {
		notFound("projects/" + project + "/global/routes/" + name).write(w)
		return
	}
	if aerr := n.checkIdle(rt.SelfLink); aerr != nil {
		aerr.write(w)
		return
	}
	if fault != nil {
		answerOp(w, c.begin(project, "global", "delete", rt.SelfLink, rt.Id, failed(fault)))
		return
	}
	delete(c.rt.routes, key)
	answerOp(w, c.begin(project, "global", "delete", rt.SelfLink, rt.Id, nil))
}

// checkRoute checks a route written in project and makes it as stored
// (without id and creation time): its references full URLs, its defaults
// set.
func (c *Cloud) checkRoute(project string, in compute.Route) (compute.Route, *apiError) {
	if !validName.MatchString(in.Name) {
		return in, nameError(in.Name)
	}
	net, ok := parseRef(project, in.Network, "global", "networks", "*")
	if !ok || net.project != project {
		return in, invalidField("resource.network", in.Network, "The network must be a network of project "+project+".")
	}
	p, err := netip.ParsePrefix(in.DestRange)
	if err != nil || p != p.Masked() {
		return in, invalidField("resource.destRange", in.DestRange, "Must be an IP range in CIDR notation without host bits.")
	}
	if in.Priority < 0 || in.Priority > 65535 {
		return in, invalidField("resource.priority", fmt.Sprint(in.Priority), "Must be in the range [0, 65535].")
	}
	hops := 0
	for _, h := range []string{in.NextHopInstance, in.NextHopIp, in.NextHopGateway, in.NextHopVpnTunnel, in.NextHopIlb} {
		if h != "" {
			hops++
		}
	}
	if hops != 1 {
		return in, invalidField("resource", in.Name, "Exactly one of nextHopInstance, nextHopIp, nextHopGateway, nextHopVpnTunnel or nextHopIlb must be set.")
	}
	switch {
	case in.NextHopInstance != "":
		ref, ok := parseRef(project, in.NextHopInstance, "zones", "*", "instances", "*")
		if !ok || ref.project != project {
			return in, invalidField("resource.nextHopInstance", in.NextHopInstance, "Must be an instance of project "+project+".")
		}
		in.NextHopInstance = ref.link()
	case in.NextHopGateway != "":
		ref, ok := parseRef(project, in.NextHopGateway, "global", "gateways", "*")
		if !ok || ref.project != project || ref.name() != DefaultGateway {
			return in, invalidField("resource.nextHopGateway", in.NextHopGateway, "The only gateway is global/gateways/"+DefaultGateway+".")
		}
		in.NextHopGateway = ref.link()
	case in.NextHopIp != "":
		if a, err := netip.ParseAddr(in.NextHopIp); err != nil || !a.Is4() {
			return in, invalidField("resource.nextHopIp", in.NextHopIp, "Must be an IPv4 address.")
		}
	default:
		return in, invalidField("resource", in.Name, "Next hops other than an instance, an address or the default internet gateway are not served here.")
	}
	return compute.Route{
		Kind: "compute#route", Name: in.Name, Description: in.Description, Network: net.link(), DestRange: p.String(),
		Priority: cmp.Or(in.Priority, 1000), Tags: slices.Clone(in.Tags), NextHopInstance: in.NextHopInstance,
		NextHopIp: in.NextHopIp, NextHopGateway: in.NextHopGateway, RouteType: "STATIC",
		SelfLink: scopeURL(project, "global") + "/routes/" + in.Name,
	}, nil
}

// routeWire is a stored route as the API answers it: with the warnings of
// its next hop instance.
func (c *Cloud) routeWire(project string, rt *compute.Route) compute.Route {
	out := *rt
	out.Tags = slices.Clone(rt.Tags)
	out.Warnings = nil
	if ref, ok := parseRef(project, rt.NextHopInstance, "zones", "*", "instances", "*"); ok {
		in, exists := c.Get(ref.project, ref.parts[1], ref.parts[3])
		switch {
		case !exists:
			out.Warnings = []*compute.RouteWarnings{{Code: "NEXT_HOP_INSTANCE_NOT_FOUND",
				Message: "Next hop instance '" + rt.NextHopInstance + "' does not exist."}}
		case in.Status != "RUNNING":
			out.Warnings = []*compute.RouteWarnings{{Code: "NEXT_HOP_NOT_RUNNING",
				Message: "Next hop instance '" + rt.NextHopInstance + "' is not running."}}
		}
	}
	return out
}

// Routes are the project's routes, in name order, as the API lists them.
func (c *Cloud) Routes(project string) []compute.Route {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	c.rt.init()
	var out []compute.Route
	for _, k := range slices.Sorted(maps.Keys(c.rt.routes)) {
		if p, _, _ := strings.Cut(k, "/"); p == project {
			out = append(out, c.routeWire(project, c.rt.routes[k]))
		}
	}
	return out
}

// Route is a route as the API answers it.
func (c *Cloud) Route(project, name string) (compute.Route, bool) {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	c.rt.init()
	rt, ok := c.rt.routes[routeKey(project, name)]
	if !ok {
		return compute.Route{}, false
	}
	return c.routeWire(project, rt), true
}

// PutRoute adds (or replaces) a route of project at once, without an
// operation, as an administrator's or another cluster's (project "" is
// DefaultProject); its fields are checked as an insert's, its references
// may be partial. It returns the route as stored.
func (c *Cloud) PutRoute(project string, rt compute.Route) (compute.Route, error) {
	project = cmp.Or(project, DefaultProject)
	out, aerr := c.checkRoute(project, rt)
	if aerr != nil {
		return compute.Route{}, fmt.Errorf("gcetest: route %s: %s", rt.Name, aerr.msg)
	}
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	c.rt.init()
	out.Id = c.net.nextID()
	out.CreationTimestamp = timestamp(c.opts.Now())
	c.rt.routes[routeKey(project, out.Name)] = &out
	return c.routeWire(project, &out), nil
}

// DeleteRoute removes a route at once.
func (c *Cloud) DeleteRoute(project, name string) {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	c.rt.init()
	delete(c.rt.routes, routeKey(cmp.Or(project, DefaultProject), name))
}
