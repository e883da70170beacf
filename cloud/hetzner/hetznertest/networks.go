package hetznertest

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// Network is a private network: its IP range, one cloud subnet, and its
// routes. Servers are attached to it by their PrivateNets.
type Network struct {
	ID int64
	// Name defaults to network-<id> (the name the metadata service gives).
	Name string
	// IPRange is the network's range; its addresses are loopback ones here
	// (default 127.0.0.0/8), where Hetzner's are of RFC 1918. The one
	// subnet is the same range.
	IPRange string
	// Routes are the network's routes.
	Routes []Route
	Labels map[string]string
}

// Route is one route of a network: packets for Destination go to Gateway.
type Route struct {
	Destination string
	Gateway     string
}

// networks is the networks API's state and the actions it started.
type networks struct {
	mu   sync.Mutex
	nets map[int64]*Network
	busy map[int64]time.Time // until when a network's last action runs
}

func init() { resources["networks"] = (*Cloud).serveNetworks }

func (n Network) clone() Network {
	n.Routes = append([]Route(nil), n.Routes...)
	n.Labels = cloneLabels(n.Labels)
	return n
}

func cloneLabels(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// PutNetwork adds or replaces a network (ID required) and returns it. It
// panics on an IP range or route gateway outside loopback.
func (c *Cloud) PutNetwork(n Network) Network {
	if n.ID <= 0 {
		panic("hetznertest: a network needs an id")
	}
	if n.Name == "" {
		n.Name = fmt.Sprintf("network-%d", n.ID)
	}
	if n.IPRange == "" {
		n.IPRange = "127.0.0.0/8"
	}
	if p, err := netip.ParsePrefix(n.IPRange); err != nil || !p.Addr().Is4() || !p.Addr().IsLoopback() {
		panic(fmt.Sprintf("hetznertest: network ip range %q: want a loopback IPv4 range", n.IPRange))
	}
	for _, r := range n.Routes {
		cloudtest.MustLoopback("hetznertest", true, r.Gateway)
	}
	n = n.clone()
	c.nets.mu.Lock()
	defer c.nets.mu.Unlock()
	if c.nets.nets == nil {
		c.nets.nets = map[int64]*Network{}
	}
	c.nets.nets[n.ID] = &n
	return n.clone()
}

// Network returns a network as the API holds it now.
func (c *Cloud) Network(id int64) (Network, bool) {
	c.nets.mu.Lock()
	defer c.nets.mu.Unlock()
	n, ok := c.nets.nets[id]
	if !ok {
		return Network{}, false
	}
	return n.clone(), true
}

var (
	networkPath       = regexp.MustCompile(`^/v1/networks/([0-9]+)$`)
	networkActionPath = regexp.MustCompile(`^/v1/networks/([0-9]+)/actions/([a-z_]+)$`)
)

// serveNetworks serves the networks API: GET /networks, GET
// /networks/{id}, POST /networks/{id}/actions/add_route and delete_route.
func (c *Cloud) serveNetworks(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case p == "/v1/networks" && r.Method == http.MethodGet:
		c.serveNetworkList(w, r)
	case networkPath.MatchString(p) && r.Method == http.MethodGet:
		id, _ := strconv.ParseInt(networkPath.FindStringSubmatch(p)[1], 10, 64)
		c.serveNetworkGet(w, id)
	case networkActionPath.MatchString(p) && r.Method == http.MethodPost:
		m := networkActionPath.FindStringSubmatch(p)
		id, _ := strconv.ParseInt(m[1], 10, 64)
		c.serveRouteAction(w, r, id, m[2])
	case p == "/v1/networks" || networkPath.MatchString(p) || networkActionPath.MatchString(p):
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed", nil)
	default:
		writeError(w, http.StatusNotFound, "not_found", "the requested resource was not found", nil)
	}
}

// networkListParams are the query parameters of GET /networks served.
var networkListParams = map[string]bool{"page": true, "per_page": true, "label_selector": true, "name": true, "sort": true}

func (c *Cloud) serveNetworkList(w http.ResponseWriter, r *http.Request) {
	if f := c.count("network-list", 0); f != nil {
		faultAnswer(w, f)
		return
	}
	q := r.URL.Query()
	if !knownParams(w, q, networkListParams) {
		return
	}
	page, ok := pageNumber(w, q.Get("page"))
	if !ok {
		return
	}
	perPage, ok := perPageNumber(w, q.Get("per_page"))
	if !ok {
		return
	}
	sel, err := parseSelector(q.Get("label_selector"))
	if err != nil {
		invalidInput(w, "label_selector", err.Error())
		return
	}
	c.nets.mu.Lock()
	var match []wireNetwork
	for _, n := range c.nets.nets {
		if (q.Get("name") == "" || n.Name == q.Get("name")) && sel.Matches(labels.Set(n.Labels)) {
			match = append(match, c.wireNetwork(*n))
		}
	}
	c.nets.mu.Unlock()
	sort.Slice(match, func(i, j int) bool { return match[i].ID < match[j].ID })
	from, to, p := paged(len(match), page, perPage)
	cloudtest.WriteJSON(w, http.StatusOK, map[string]any{"networks": append([]wireNetwork{}, match[from:to]...),
		"meta": map[string]any{"pagination": p}})
}

func (c *Cloud) serveNetworkGet(w http.ResponseWriter, id int64) {
	if f := c.count("route-list", 0); f != nil {
		faultAnswer(w, f)
		return
	}
	c.nets.mu.Lock()
	n, ok := c.nets.nets[id]
	var out wireNetwork
	if ok {
		out = c.wireNetwork(*n)
	}
	c.nets.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("network with ID '%d' not found", id), nil)
		return
	}
	cloudtest.WriteJSON(w, http.StatusOK, map[string]any{"network": out})
}

// serveRouteAction serves POST /networks/{id}/actions/add_route and
// delete_route with the API's checks: an unknown network is not_found, a
// network with a running action conflict; the route's destination must be
// an IPv4 prefix in RFC 1918 space (or 0.0.0.0/0) and its gateway an IPv4
// address in the network's range other than its first and 172.31.1.1
// (invalid_input); a destination that overlaps the network's range or
// another route's destination is invalid_input; deleting a route the
// network does not have is not_found.
func (c *Cloud) serveRouteAction(w http.ResponseWriter, r *http.Request, id int64, command string) {
	method := map[string]string{"add_route": "route-create", "delete_route": "route-delete"}[command]
	if method == "" {
		writeError(w, http.StatusNotFound, "not_found", "the requested resource was not found", nil)
		return
	}
	if f := c.count(method, 0); f != nil {
		faultAnswer(w, f)
		return
	}
	var body struct {
		Destination *string `json:"destination"`
		Gateway     *string `json:"gateway"`
	}
	if _, err := cloudtest.DecodeStrict(r.Body, &body); err != nil {
		writeError(w, http.StatusBadRequest, "json_error", "invalid JSON: "+err.Error(), nil)
		return
	}
	if body.Destination == nil {
		invalidInput(w, "destination", "is required")
		return
	}
	if body.Gateway == nil {
		invalidInput(w, "gateway", "is required")
		return
	}
	dest, err := netip.ParsePrefix(*body.Destination)
	if err != nil || !dest.Addr().Is4() || dest.Masked() != dest {
		invalidInput(w, "destination", "invalid destination: want an IPv4 network in CIDR notation")
		return
	}
	gw, err := netip.ParseAddr(*body.Gateway)
	if err != nil || !gw.Is4() {
		invalidInput(w, "gateway", "invalid gateway: want an IPv4 address")
		return
	}
	c.nets.mu.Lock()
	defer c.nets.mu.Unlock()
	n, ok := c.nets.nets[id]
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("network with ID '%d' not found", id), nil)
		return
	}
	now := c.opts.Now()
	if now.Before(c.nets.busy[id]) {
		writeError(w, http.StatusConflict, "conflict", "network is currently being changed by another action", nil)
		return
	}
	at := -1
	for i, rt := range n.Routes {
		if rt.Destination == dest.String() && rt.Gateway == gw.String() {
			at = i
		}
	}
	if command == "delete_route" {
		if at < 0 {
			writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("network route %s via %s not found", dest, gw), nil)
			return
		}
	} else {
		if msg := checkRoute(*n, dest, gw); msg != "" {
			field := "destination"
			if msg[0] == 'g' {
				field = "gateway"
			}
			writeError(w, http.StatusBadRequest, "invalid_input", msg, map[string]any{"fields": []map[string]any{{"name": field, "messages": []string{msg}}}})
			return
		}
	}
	// The change is made at once (a route read before the action ends is
	// there already) unless FailAction makes the action fail.
	act, fail := c.startAction(command, ActionResource{ID: id, Type: "network"})
	if c.nets.busy == nil {
		c.nets.busy = map[int64]time.Time{}
	}
	c.nets.busy[id] = now.Add(c.opts.ActionTime)
	switch {
	case fail:
	case command == "delete_route":
		n.Routes = append(n.Routes[:at], n.Routes[at+1:]...)
	default:
		n.Routes = append(n.Routes, Route{Destination: dest.String(), Gateway: gw.String()})
	}
	cloudtest.WriteJSON(w, http.StatusCreated, map[string]any{"action": act})
}

// private are the RFC 1918 ranges a route's destination must lie in.
var private = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("172.16.0.0/12"), netip.MustParsePrefix("192.168.0.0/16")}

// publicGateway is the gateway of servers' public interfaces, which no
// route may name.
var publicGateway = netip.MustParseAddr("172.31.1.1")

// checkRoute is the API's validation of a new route, "" when it passes;
// messages about the gateway begin with "gateway".
func checkRoute(n Network, dest netip.Prefix, gw netip.Addr) string {
	inPrivate := dest.Bits() == 0
	for _, p := range private {
		if p.Bits() <= dest.Bits() && p.Contains(dest.Addr()) {
			inPrivate = true
		}
	}
	if !inPrivate {
		return "destination must be within a private IPv4 range (RFC 1918) or 0.0.0.0/0"
	}
	if dest.Contains(publicGateway) && dest.Bits() > 0 {
		return "destination must not contain 172.31.1.1"
	}
	rng := netip.MustParsePrefix(n.IPRange)
	if rng.Overlaps(dest) && dest.Bits() > 0 {
		return "network route destination overlaps with another subnetwork or network route"
	}
	for _, rt := range n.Routes {
		if netip.MustParsePrefix(rt.Destination).Overlaps(dest) {
			return "network route destination overlaps with another subnetwork or network route"
		}
	}
	switch {
	case !rng.Contains(gw):
		return fmt.Sprintf("gateway: network route gateway not part of the network IP range (%s)", rng)
	case gw == rng.Masked().Addr() || gw == publicGateway:
		return "gateway: invalid gateway"
	}
	return ""
}

// wireNetwork is the API's network object.
type wireNetwork struct {
	ID                    int64             `json:"id"`
	Name                  string            `json:"name"`
	IPRange               string            `json:"ip_range"`
	Subnets               []wireSubnet      `json:"subnets"`
	Routes                []wireRoute       `json:"routes"`
	Servers               []int64           `json:"servers"`
	LoadBalancers         []int64           `json:"load_balancers"`
	Protection            map[string]bool   `json:"protection"`
	Labels                map[string]string `json:"labels"`
	Created               string            `json:"created"`
	ExposeRoutesToVSwitch bool              `json:"expose_routes_to_vswitch"`
}

type wireSubnet struct {
	Type        string `json:"type"`
	IPRange     string `json:"ip_range"`
	NetworkZone string `json:"network_zone"`
	Gateway     string `json:"gateway"`
}

type wireRoute struct {
	Destination string `json:"destination"`
	Gateway     string `json:"gateway"`
}

// wireNetwork is a network as the API shows it, with the servers attached
// to it. The caller holds c.nets.mu.
func (c *Cloud) wireNetwork(n Network) wireNetwork {
	rng := netip.MustParsePrefix(n.IPRange)
	first := rng.Masked().Addr().Next()
	out := wireNetwork{ID: n.ID, Name: n.Name, IPRange: rng.String(),
		Subnets:       []wireSubnet{{Type: "cloud", IPRange: rng.String(), NetworkZone: "eu-central", Gateway: first.String()}},
		Routes:        []wireRoute{},
		Servers:       []int64{},
		LoadBalancers: []int64{},
		Protection:    map[string]bool{"delete": false},
		Labels:        cloneLabels(n.Labels),
		Created:       "2025-12-15T15:22:19Z",
	}
	for _, rt := range n.Routes {
		out.Routes = append(out.Routes, wireRoute(rt))
	}
	for _, s := range c.servers.List(nil) {
		for _, pn := range s.PrivateNets {
			if pn.Network == n.ID && net.ParseIP(pn.IP) != nil {
				out.Servers = append(out.Servers, s.ID)
				break
			}
		}
	}
	return out
}
