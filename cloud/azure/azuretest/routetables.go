package azuretest

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
)

// Route tables (Microsoft.Network/routeTables), the user-defined routes
// kubenet's route controller writes, written whole through ARM's
// long-running PUT (arm.go: Azure-AsyncOperation, provisioningState,
// etags and If-Match, 429 AnotherOperationInProgress while a write runs,
// 404s, faults). RouteTables registers them; a table's PUT is checked as
// the network resource provider documents its routes:
//
//   - a route has a name (1-80 letters, digits, _ . -, starting with a
//     letter or digit, ending with a letter, digit or _), unique in the
//     table (names compare case-blind);
//   - properties.addressPrefix is a CIDR (Azure also takes service tags,
//     which this endpoint does not), and no two routes of a table have
//     the same one;
//   - properties.nextHopType is one of VirtualNetworkGateway, VnetLocal,
//     Internet, VirtualAppliance, None; nextHopIpAddress is an address,
//     given with VirtualAppliance and only with it;
//   - a member ARM does not know is refused; ARM writes id, etag, type
//     and provisioningState of each route.
//
// Routes' own calls (Microsoft.Network/routeTables/{name}/routes/{route})
// are not modelled: a route is read and written within its table.
// Calls are counted as GetRouteTable, PutRouteTable, DeleteRouteTable and
// ListRouteTables; Fail("PutRouteTable", ...) refuses writes.

// RouteTableType is the route tables' resource type.
const RouteTableType = "Microsoft.Network/routeTables"

// Next hop types of a route.
var nextHopTypes = []string{"VirtualNetworkGateway", "VnetLocal", "Internet", "VirtualAppliance", "None"}

var routeNameRE = regexp.MustCompile(`^[A-Za-z0-9]([-\w.]{0,78}\w)?$`)

// RouteTables makes the endpoint keep route tables (not by default: only
// a test of routes needs them).
func (c *Cloud) RouteTables() {
	c.Register(ARMKind{Type: RouteTableType, Op: "RouteTable", Check: checkRouteTable})
}

// Route is a route of a table, as a test reads or writes it.
type Route struct {
	Name, AddressPrefix, NextHopType, NextHopIPAddress string
}

// PutRouteTable makes (or replaces) route table name in resource group rg
// ("": the cloud's) with routes, built, as another tool would; the
// resource group is made known.
func (c *Cloud) PutRouteTable(rg, name string, routes ...Route) string {
	if rg != "" {
		c.AddResourceGroup(rg)
	}
	id := c.ResourceID(rg, RouteTableType, name)
	body := map[string]any{"properties": map[string]any{"disableBgpRoutePropagation": false, "routes": routesJSON(id, routes)}}
	if e := checkRouteTable(c, id, body, nil); e != nil {
		panic("azuretest: PutRouteTable: " + e.Error())
	}
	c.ARMPut(RouteTableType, id, body)
	return id
}

// TableRoutes are the routes route table id holds; false when there is no
// such table.
func (c *Cloud) TableRoutes(id string) ([]Route, bool) {
	body, ok := c.ARMGet(id)
	if !ok {
		return nil, false
	}
	props, _ := body["properties"].(map[string]any)
	list, _ := props["routes"].([]any)
	var out []Route
	for _, it := range list {
		m, _ := it.(map[string]any)
		p, _ := m["properties"].(map[string]any)
		s := func(m map[string]any, k string) string { v, _ := m[k].(string); return v }
		out = append(out, Route{Name: s(m, "name"), AddressPrefix: s(p, "addressPrefix"), NextHopType: s(p, "nextHopType"),
			NextHopIPAddress: s(p, "nextHopIpAddress")})
	}
	return out, true
}

// AddRoute adds a route to route table id out of band (an administrator's
// or another cluster's), its etag changing; it reports whether the table
// exists.
func (c *Cloud) AddRoute(id string, rt Route) bool {
	return c.ARMMutate(id, func(body map[string]any) {
		props, _ := body["properties"].(map[string]any)
		if props == nil {
			props = map[string]any{}
			body["properties"] = props
		}
		list, _ := props["routes"].([]any)
		for _, it := range routesJSON(id, []Route{rt}) {
			it.(map[string]any)["properties"].(map[string]any)["provisioningState"] = "Succeeded"
			list = append(list, it)
		}
		props["routes"] = list
	})
}

func routesJSON(table string, routes []Route) []any {
	out := []any{}
	for _, rt := range routes {
		p := map[string]any{"addressPrefix": rt.AddressPrefix, "nextHopType": rt.NextHopType}
		if rt.NextHopIPAddress != "" {
			p["nextHopIpAddress"] = rt.NextHopIPAddress
		}
		out = append(out, map[string]any{"name": rt.Name, "properties": p})
	}
	return out
}

var (
	tableProps = []string{"routes", "disableBgpRoutePropagation", "provisioningState", "resourceGuid", "subnets"}
	routeKeys  = []string{"id", "name", "etag", "type", "properties"}
	routeProps = []string{"addressPrefix", "nextHopType", "nextHopIpAddress", "provisioningState", "hasBgpOverride"}
)

func unknownMember(m map[string]any, known []string, what string) *ARMError {
	for k := range m {
		if !slices.Contains(known, k) {
			return BadRequest("InvalidRequestFormat", "Could not find member '%s' on object of type '%s'.", k, what)
		}
	}
	return nil
}

// checkRouteTable checks a route table's PUT and completes its routes.
func checkRouteTable(c *Cloud, id string, body, _ map[string]any) *ARMError {
	props, ok := body["properties"].(map[string]any)
	if body["properties"] != nil && !ok {
		return BadRequest("InvalidRequestFormat", "Cannot parse the request: properties is not an object.")
	}
	if props == nil {
		props = map[string]any{}
		body["properties"] = props
	}
	if e := unknownMember(props, tableProps, "RouteTablePropertiesFormat"); e != nil {
		return e
	}
	if v, ok := props["disableBgpRoutePropagation"]; ok {
		if _, ok := v.(bool); !ok {
			return BadRequest("InvalidRequestFormat", "Cannot parse the request: disableBgpRoutePropagation is not a boolean.")
		}
	}
	// ARM writes these, whatever the request says.
	delete(props, "subnets")
	props["resourceGuid"] = fmt.Sprintf("%x", []byte(strings.ToLower(id)))[:32]
	var list []any
	if v, ok := props["routes"]; ok && v != nil {
		if list, ok = v.([]any); !ok {
			return BadRequest("InvalidRequestFormat", "Cannot parse the request: routes is not an array.")
		}
	}
	names := map[string]bool{}
	prefixes := map[netip.Prefix]string{}
	for i, it := range list {
		rt, ok := it.(map[string]any)
		if !ok {
			return BadRequest("InvalidRequestFormat", "Cannot parse the request: routes[%d] is not an object.", i)
		}
		if e := unknownMember(rt, routeKeys, "Route"); e != nil {
			return e
		}
		name, _ := rt["name"].(string)
		if !routeNameRE.MatchString(name) {
			return BadRequest("InvalidResourceName", "Resource name %s is invalid. The name can be up to 80 characters long. It must begin with a word character, and it must end with a word character or with '_'. The name may contain word characters or '.', '-', '_'.", name)
		}
		if names[strings.ToLower(name)] {
			return BadRequest("InvalidRequestFormat", "Route table %s has two routes named %s.", id, name)
		}
		names[strings.ToLower(name)] = true
		p, _ := rt["properties"].(map[string]any)
		if p == nil {
			return BadRequest("InvalidRequestFormat", "Route %s has no properties.", name)
		}
		if e := unknownMember(p, routeProps, "RoutePropertiesFormat"); e != nil {
			return e
		}
		prefix, _ := p["addressPrefix"].(string)
		dest, err := netip.ParsePrefix(prefix)
		if err != nil || dest.Masked() != dest {
			return BadRequest("InvalidRouteAddressPrefix", "Route %s has an invalid addressPrefix %q: want a CIDR with no host bits set.", name, prefix)
		}
		if other, ok := prefixes[dest]; ok {
			return BadRequest("InvalidRoute", "Routes %s and %s of route table %s have the same address prefix %s.", other, name, id, prefix)
		}
		prefixes[dest] = name
		hopType, _ := p["nextHopType"].(string)
		if !slices.Contains(nextHopTypes, hopType) {
			return BadRequest("InvalidRequestFormat", "Route %s: nextHopType %q is not one of %s.", name, hopType, strings.Join(nextHopTypes, ", "))
		}
		hop, given := p["nextHopIpAddress"].(string)
		switch _, err := netip.ParseAddr(hop); {
		case hopType == "VirtualAppliance" && (!given || err != nil):
			return BadRequest("InvalidNextHopIpAddress", "Route %s: next hop type VirtualAppliance needs a nextHopIpAddress (%q is none).", name, hop)
		case hopType != "VirtualAppliance" && given && hop != "":
			return BadRequest("NextHopIpAddressNotAllowed", "Route %s: a nextHopIpAddress is allowed only with next hop type VirtualAppliance.", name)
		}
		delete(p, "hasBgpOverride")
		rt["id"] = id + "/routes/" + name
		rt["type"] = RouteTableType + "/routes"
		rt["etag"] = newETag()
	}
	if list == nil {
		list = []any{}
	}
	props["routes"] = list
	return nil
}

// routeTableState is a route table's provisioningState ("" when there is
// no such table).
func (c *Cloud) routeTableState(id string) string {
	body, ok := c.ARMGet(id)
	if !ok {
		return ""
	}
	props, _ := body["properties"].(map[string]any)
	s, _ := props["provisioningState"].(string)
	return s
}
