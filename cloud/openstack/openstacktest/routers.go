package openstacktest

import (
	"cmp"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// DefaultMaxRoutes is Neutron's max_routes: the most extra routes a
// router holds.
const DefaultMaxRoutes = 30

// Subnet is a Neutron subnet, as far as a router's routes need it.
type Subnet struct {
	// ID is a UUID, assigned by PutSubnet when "".
	ID        string
	NetworkID string
	Name      string
	// CIDR is a loopback range (such as 127.0.87.0/24).
	CIDR string
	// GatewayIP is the router's interface address in the subnet (default:
	// the range's first host address).
	GatewayIP string
}

// Route is one of a router's extra routes: packets for Destination go to
// NextHop.
type Route struct {
	Destination string
	NextHop     string
}

// Router is a Neutron router: its interfaces (by subnet) and its extra
// routes.
type Router struct {
	// ID is a UUID, assigned by PutRouter when "".
	ID   string
	Name string
	// Subnets are the subnets (ids of PutSubnet's) the router has an
	// interface on; a route's next hop must lie in one of them.
	Subnets []string
	Routes  []Route
	// Revision is the revision_number, bumped by every change.
	Revision int
	Created  time.Time
	Updated  time.Time
}

func init() { neutronResources["routers"] = (*Cloud).serveRouters }

// PutSubnet adds or replaces a subnet and returns it. It panics on a range
// or gateway outside loopback.
func (c *Cloud) PutSubnet(s Subnet) Subnet {
	p, err := netip.ParsePrefix(s.CIDR)
	if err != nil {
		panic("openstacktest: subnet CIDR: " + err.Error())
	}
	s.CIDR = p.Masked().String()
	s.ID = cmp.Or(s.ID, uuid.NewString())
	s.NetworkID = cmp.Or(s.NetworkID, uuid.NewString())
	if s.GatewayIP == "" {
		s.GatewayIP = p.Masked().Addr().Next().String()
	}
	cloudtest.MustLoopback("openstacktest", false, p.Addr().String(), s.GatewayIP)
	n := &c.neutron
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.subnets == nil {
		n.subnets = map[string]Subnet{}
	}
	n.subnets[s.ID] = s
	return s
}

// PutRouter adds or replaces a router (a UUID when ID is "") and returns
// it. It panics on a subnet PutSubnet did not make.
func (c *Cloud) PutRouter(r Router) Router {
	n := &c.neutron
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, id := range r.Subnets {
		if _, ok := n.subnets[id]; !ok {
			panic("openstacktest: router on unknown subnet " + id)
		}
	}
	r.ID = cmp.Or(r.ID, uuid.NewString())
	if r.Created.IsZero() {
		r.Created = c.opts.Now()
	}
	r.Updated = cmp.Or(r.Updated, r.Created)
	r.Subnets, r.Routes = slices.Clone(r.Subnets), slices.Clone(r.Routes)
	if n.routers == nil {
		n.routers = map[string]*Router{}
	}
	n.routers[r.ID] = &r
	return r.clone()
}

// Router returns a router as it is now.
func (c *Cloud) Router(id string) (Router, bool) {
	n := &c.neutron
	n.mu.Lock()
	defer n.mu.Unlock()
	r, ok := n.routers[id]
	if !ok {
		return Router{}, false
	}
	return r.clone(), true
}

// DeleteRouter removes a router (GET answers 404).
func (c *Cloud) DeleteRouter(id string) {
	n := &c.neutron
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.routers, id)
}

func (r *Router) clone() Router {
	out := *r
	out.Subnets, out.Routes = slices.Clone(r.Subnets), slices.Clone(r.Routes)
	return out
}

// routeWire is a route in requests and answers.
type routeWire struct {
	Destination string `json:"destination"`
	NextHop     string `json:"nexthop"`
}

// routerUpdate is the body of PUT /v2.0/routers/{id}, the parts modelled
// (DecodeStrict refuses the rest); routes replace the router's.
type routerUpdate struct {
	Router *struct {
		Name         *string      `json:"name"`
		Description  *string      `json:"description"`
		AdminStateUp *bool        `json:"admin_state_up"`
		Routes       *[]routeWire `json:"routes"`
	} `json:"router"`
}

// extraRoutes is the body of add_extraroutes and remove_extraroutes.
type extraRoutes struct {
	Router *struct {
		Routes *[]routeWire `json:"routes"`
	} `json:"router"`
}

// serveRouters serves GET and PUT /v2.0/routers/{id} and PUT
// .../add_extraroutes and .../remove_extraroutes.
func (c *Cloud) serveRouters(w http.ResponseWriter, r *http.Request, rest string) {
	id, action, _ := strings.Cut(strings.TrimPrefix(rest, "/"), "/")
	if id == "" {
		neutronError(w, http.StatusNotFound, "HTTPNotFound", "The resource could not be found.")
		return
	}
	method := ""
	switch {
	case action == "" && r.Method == http.MethodGet:
		method = "router-get"
	case action == "" && r.Method == http.MethodPut:
		method = "router-update"
	case (action == "add_extraroutes" || action == "remove_extraroutes") && c.opts.NoAtomicExtraRoutes:
		neutronError(w, http.StatusNotFound, "HTTPNotFound", "The resource could not be found.")
		return
	case action == "add_extraroutes" && r.Method == http.MethodPut:
		method = "router-add-routes"
	case action == "remove_extraroutes" && r.Method == http.MethodPut:
		method = "router-remove-routes"
	case action == "" || action == "add_extraroutes" || action == "remove_extraroutes":
		neutronError(w, http.StatusMethodNotAllowed, "HTTPMethodNotAllowed", "The method is not allowed for the requested URL.")
		return
	default:
		neutronError(w, http.StatusNotFound, "HTTPNotFound", "The resource could not be found.")
		return
	}
	if f := c.count(method); f != nil {
		neutronError(w, f.Status, http.StatusText(f.Status), "injected fault")
		return
	}
	var routes []routeWire
	update := method != "router-get"
	if update {
		var ok bool
		if routes, ok = decodeRoutes(w, r, method == "router-update"); !ok {
			return
		}
	}
	n := &c.neutron
	n.mu.Lock()
	defer n.mu.Unlock()
	rt, ok := n.routers[id]
	if !ok {
		neutronError(w, http.StatusNotFound, "RouterNotFound", fmt.Sprintf("Router %s could not be found", id))
		return
	}
	if !update {
		cloudtest.WriteJSON(w, http.StatusOK, map[string]any{"router": c.routerWire(rt)})
		return
	}
	if m := r.Header.Get("If-Match"); m != "" && method == "router-update" {
		want, err := strconv.Atoi(strings.TrimPrefix(m, "revision_number="))
		if err != nil || !strings.HasPrefix(m, "revision_number=") {
			neutronError(w, http.StatusBadRequest, "HTTPBadRequest", fmt.Sprintf("Unrecognized If-Match header %q", m))
			return
		}
		if want != rt.Revision {
			neutronError(w, http.StatusPreconditionFailed, "RevisionNumberConstraintFailed",
				fmt.Sprintf("Constrained to %d, but current revision is %d", want, rt.Revision))
			return
		}
	}
	if routes != nil {
		if status, typ, msg := n.checkRoutes(rt, routes); status != 0 {
			neutronError(w, status, typ, msg)
			return
		}
		var next []Route
		switch method {
		case "router-update":
			for _, x := range routes {
				next = append(next, Route(x))
			}
		case "router-add-routes":
			next = slices.Clone(rt.Routes)
			for _, x := range routes {
				if rr := Route(x); !slices.Contains(next, rr) {
					next = append(next, rr)
				}
			}
		case "router-remove-routes":
			next = slices.DeleteFunc(slices.Clone(rt.Routes), func(rr Route) bool {
				return slices.Contains(routes, routeWire(rr))
			})
		}
		if len(next) > c.opts.MaxRoutes {
			neutronError(w, http.StatusBadRequest, "RoutesExhausted",
				fmt.Sprintf("Unable to complete operation for %s. The number of routes exceeds the maximum %d.", rt.ID, c.opts.MaxRoutes))
			return
		}
		rt.Routes = next
	}
	rt.Revision++
	rt.Updated = c.opts.Now()
	body := c.routerWire(rt)
	if method != "router-update" {
		// The atomic calls answer the router's id, name and routes only.
		body = map[string]any{"id": rt.ID, "name": rt.Name, "routes": body["routes"]}
	}
	cloudtest.WriteJSON(w, http.StatusOK, map[string]any{"router": body})
}

// decodeRoutes reads a router update (whole, or an atomic call's routes,
// which are required); false when it answered an error.
func decodeRoutes(w http.ResponseWriter, r *http.Request, whole bool) ([]routeWire, bool) {
	var routes *[]routeWire
	var field string
	var err error
	if whole {
		var body routerUpdate
		field, err = cloudtest.DecodeStrict(r.Body, &body)
		if err == nil && body.Router == nil {
			err = fmt.Errorf("no router")
		}
		if err == nil {
			routes = body.Router.Routes
		}
	} else {
		var body extraRoutes
		field, err = cloudtest.DecodeStrict(r.Body, &body)
		if err == nil && (body.Router == nil || body.Router.Routes == nil) {
			err = fmt.Errorf("no routes")
		}
		if err == nil {
			routes = body.Router.Routes
		}
	}
	switch {
	case field != "":
		neutronError(w, http.StatusBadRequest, "HTTPBadRequest", fmt.Sprintf("Unrecognized attribute(s) '%s'", field))
		return nil, false
	case err != nil:
		neutronError(w, http.StatusBadRequest, "HTTPBadRequest", "Invalid input for operation: "+err.Error()+".")
		return nil, false
	case routes == nil:
		return nil, true
	}
	if *routes == nil {
		return []routeWire{}, true
	}
	return *routes, true
}

// checkRoutes is Neutron's validation of routes for a router: each a
// subnet (its network address) and an address of the same family, no
// duplicates, and each next hop on a subnet of the router's interfaces
// but not the router's own address there. Status 0: valid.
func (n *neutron) checkRoutes(rt *Router, routes []routeWire) (status int, typ, msg string) {
	invalid := func(format string, args ...any) (int, string, string) {
		return http.StatusBadRequest, "InvalidInput", "Invalid input for routes. Reason: " + fmt.Sprintf(format, args...) + "."
	}
	for i, x := range routes {
		dest, err := netip.ParsePrefix(x.Destination)
		if err != nil {
			return invalid("'%s' is not a valid IP subnet", x.Destination)
		}
		if dest.Masked() != dest {
			return invalid("'%s' isn't a recognized IP subnet cidr, '%s' is recommended", x.Destination, dest.Masked())
		}
		hop, err := netip.ParseAddr(x.NextHop)
		if err != nil {
			return invalid("'%s' is not a valid IP address", x.NextHop)
		}
		if slices.Contains(routes[:i], x) {
			return invalid("Duplicate hostroute '%s'", x.Destination)
		}
		connected, used := false, false
		for _, sid := range rt.Subnets {
			s := n.subnets[sid]
			if p, err := netip.ParsePrefix(s.CIDR); err == nil && p.Contains(hop) && dest.Addr().Is4() == hop.Is4() {
				connected = true
				used = used || s.GatewayIP == hop.String()
			}
		}
		reason := ""
		switch {
		case !connected:
			reason = "the nexthop is not connected with router"
		case used:
			reason = "the nexthop is used by router"
		}
		if reason != "" {
			return http.StatusBadRequest, "InvalidRoutes",
				fmt.Sprintf("Invalid format for routes: [{'destination': '%s', 'nexthop': '%s'}], %s", x.Destination, x.NextHop, reason)
		}
	}
	return 0, "", ""
}

// routerWire is a router as Neutron shows it.
func (c *Cloud) routerWire(rt *Router) map[string]any {
	routes := []routeWire{}
	for _, x := range rt.Routes {
		routes = append(routes, routeWire(x))
	}
	return map[string]any{
		"id": rt.ID, "name": rt.Name, "description": "", "status": "ACTIVE", "admin_state_up": true,
		"external_gateway_info": nil, "distributed": false, "ha": false, "routes": routes,
		"availability_zone_hints": []string{}, "availability_zones": []string{"nova"}, "flavor_id": nil,
		"service_type_id": nil, "tags": []string{}, "conntrack_helpers": []any{}, "revision_number": rt.Revision,
		"project_id": DefaultProjectID, "tenant_id": DefaultProjectID,
		"created_at": rt.Created.UTC().Format(neutronTime), "updated_at": rt.Updated.UTC().Format(neutronTime),
	}
}
