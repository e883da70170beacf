package awstest

import (
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Route table actions, counted by Calls and failed by Fail.
const (
	ActionDescribeRouteTables     = "DescribeRouteTables"
	ActionCreateRoute             = "CreateRoute"
	ActionDeleteRoute             = "DeleteRoute"
	ActionModifyInstanceAttribute = "ModifyInstanceAttribute"
)

func init() {
	ec2Actions[ActionDescribeRouteTables] = (*Cloud).serveDescribeRouteTables
	ec2Actions[ActionCreateRoute] = (*Cloud).serveCreateRoute
	ec2Actions[ActionDeleteRoute] = (*Cloud).serveDeleteRoute
	ec2Actions[ActionModifyInstanceAttribute] = (*Cloud).serveModifyInstanceAttribute
}

// VPCCIDR is the range of the account's one VPC, its route tables' local
// route: loopback, as every address here.
const VPCCIDR = "127.0.0.0/8"

// RouteTable is a route table of the account's VPC.
type RouteTable struct {
	// ID is rtb- and 17 hex digits; PutRouteTable gives one when "".
	ID   string
	Tags map[string]string
	// Routes are its routes, the local route (VPCCIDR via local) first;
	// PutRouteTable adds that one when missing.
	Routes []Route
}

// Route is one route of a table, to one target: an instance (its primary
// network interface, as CreateRoute with InstanceId makes it) or a gateway
// (local, igw-..., vgw-...).
type Route struct {
	Destination string
	InstanceID  string
	GatewayID   string
}

var routeTableIDPattern = regexp.MustCompile(`^rtb-([0-9a-f]{8}|[0-9a-f]{17})$`)

func (t RouteTable) clone() RouteTable {
	t.Tags = maps.Clone(t.Tags)
	t.Routes = slices.Clone(t.Routes)
	return t
}

// PutRouteTable adds a route table or replaces the one of its ID, and
// returns it as stored. It panics on a table AWS could not have (a
// malformed id or destination, a route of two targets or none, a
// destination twice).
func (c *Cloud) PutRouteTable(t RouteTable) RouteTable {
	c.mu.Lock()
	defer c.mu.Unlock()
	for n := len(c.tables) + 1; t.ID == ""; n++ {
		if id := fakeID("rtb", fmt.Sprintf("%s/%s/%d", c.account, c.region, n)); c.tables[id] == nil {
			t.ID = id
		}
	}
	if !routeTableIDPattern.MatchString(t.ID) {
		panic(fmt.Sprintf("awstest: route table id %q: want rtb- and 17 lower-case hex digits", t.ID))
	}
	t = t.clone()
	if !slices.ContainsFunc(t.Routes, func(r Route) bool { return r.GatewayID == "local" }) {
		t.Routes = append([]Route{{Destination: VPCCIDR, GatewayID: "local"}}, t.Routes...)
	}
	seen := map[string]bool{}
	for _, r := range t.Routes {
		if p, err := netip.ParsePrefix(r.Destination); err != nil || p.Masked() != p || !p.Addr().Is4() {
			panic(fmt.Sprintf("awstest: route table %s: destination %q: want an IPv4 CIDR block", t.ID, r.Destination))
		}
		if (r.InstanceID == "") == (r.GatewayID == "") || seen[r.Destination] {
			panic(fmt.Sprintf("awstest: route table %s: route %+v: want one target and a destination of its own", t.ID, r))
		}
		seen[r.Destination] = true
	}
	if c.tables == nil {
		c.tables = map[string]*RouteTable{}
	}
	c.tables[t.ID] = &t
	return t.clone()
}

// RouteTable is the route table of id as the API holds it now.
func (c *Cloud) RouteTable(id string) (RouteTable, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.tables[id]
	if !ok {
		return RouteTable{}, false
	}
	return t.clone(), true
}

// SourceDestCheck is the instance's source/destination check, as
// ModifyInstanceAttribute last set it (on by default).
func (c *Cloud) SourceDestCheck(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.noSourceDest[id]
}

// routeStateLocked is a route's state: blackhole when its instance is
// gone, shutting down or terminated, as EC2 marks a route whose target is
// no longer there; active otherwise.
func (c *Cloud) routeStateLocked(r Route) string {
	if r.InstanceID == "" {
		return "active"
	}
	in, ok := c.instances[r.InstanceID]
	if !ok || in.State == "terminated" || in.State == "shutting-down" {
		return "blackhole"
	}
	return "active"
}

// Wire forms.
type (
	describeRouteTablesResponse struct {
		XMLName     xml.Name         `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DescribeRouteTablesResponse"`
		RequestID   string           `xml:"requestId"`
		RouteTables xmlRouteTableSet `xml:"routeTableSet"`
		NextToken   string           `xml:"nextToken,omitempty"`
	}
	xmlRouteTableSet struct {
		Items []xmlRouteTable `xml:"item"`
	}
	xmlRouteTable struct {
		ID           string      `xml:"routeTableId"`
		VpcID        string      `xml:"vpcId"`
		OwnerID      string      `xml:"ownerId"`
		Routes       xmlRouteSet `xml:"routeSet"`
		Associations struct{}    `xml:"associationSet"`
		Propagating  struct{}    `xml:"propagatingVgwSet"`
		Tags         xmlTagSet   `xml:"tagSet"`
	}
	xmlRouteSet struct {
		Items []xmlRoute `xml:"item"`
	}
	xmlRoute struct {
		Destination        string `xml:"destinationCidrBlock"`
		GatewayID          string `xml:"gatewayId,omitempty"`
		InstanceID         string `xml:"instanceId,omitempty"`
		InstanceOwnerID    string `xml:"instanceOwnerId,omitempty"`
		NetworkInterfaceID string `xml:"networkInterfaceId,omitempty"`
		State              string `xml:"state"`
		Origin             string `xml:"origin"`
	}
	// returnResponse is the answer of an action that answers true.
	returnResponse struct {
		XMLName   xml.Name
		RequestID string `xml:"requestId"`
		Return    bool   `xml:"return"`
	}
)

func returned(action, reqID string) returnResponse {
	return returnResponse{XMLName: xml.Name{Space: "http://ec2.amazonaws.com/doc/2016-11-15/", Local: action + "Response"},
		RequestID: reqID, Return: true}
}

// wireRouteTableLocked is a table as DescribeRouteTables shows it.
func (c *Cloud) wireRouteTableLocked(t *RouteTable) xmlRouteTable {
	x := xmlRouteTable{ID: t.ID, VpcID: fakeID("vpc", c.account+"/"+c.region), OwnerID: c.account}
	for _, k := range slices.Sorted(maps.Keys(t.Tags)) {
		x.Tags.Items = append(x.Tags.Items, xmlTag{Key: k, Value: t.Tags[k]})
	}
	for _, r := range t.Routes {
		xr := xmlRoute{Destination: r.Destination, GatewayID: r.GatewayID, State: c.routeStateLocked(r), Origin: "CreateRoute"}
		if r.GatewayID == "local" {
			xr.Origin = "CreateRouteTable"
		}
		if r.InstanceID != "" {
			xr.InstanceID, xr.InstanceOwnerID, xr.NetworkInterfaceID = r.InstanceID, c.account, fakeID("eni", r.InstanceID)
		}
		x.Routes.Items = append(x.Routes.Items, xr)
	}
	return x
}

// routeTableFilter is one DescribeRouteTables Filter.N: route-table-id,
// vpc-id, tag-key or tag:<key>.
func routeTableFilter(name string, values []string) (func(c *Cloud, t *RouteTable) bool, *apiError) {
	var patterns []pattern
	for _, v := range values {
		patterns = append(patterns, compilePattern(v))
	}
	anyOf := func(got ...string) bool {
		for _, g := range got {
			for _, p := range patterns {
				if p.match(g) {
					return true
				}
			}
		}
		return false
	}
	switch name {
	case "route-table-id":
		return func(_ *Cloud, t *RouteTable) bool { return anyOf(t.ID) }, nil
	case "vpc-id":
		return func(c *Cloud, _ *RouteTable) bool { return anyOf(fakeID("vpc", c.account+"/"+c.region)) }, nil
	case "tag-key":
		return func(_ *Cloud, t *RouteTable) bool { return anyOf(slices.Collect(maps.Keys(t.Tags))...) }, nil
	}
	key, ok := strings.CutPrefix(name, "tag:")
	if !ok || key == "" {
		return nil, invalidParameter(fmt.Sprintf("The filter '%s' is invalid", name))
	}
	return func(_ *Cloud, t *RouteTable) bool {
		v, ok := t.Tags[key]
		return ok && anyOf(v)
	}, nil
}

// serveDescribeRouteTables answers DescribeRouteTables: RouteTableId.N
// (an unknown one InvalidRouteTableID.NotFound), Filter.N, MaxResults
// 5-100 and NextToken (a cursor in id order), DryRun.
func (c *Cloud) serveDescribeRouteTables(q *queryRequest) (any, *apiError) {
	p, aerr := parseEC2Params(q, []string{"RouteTableId"}, nil)
	if aerr != nil {
		return nil, aerr
	}
	maxResults, aerr := intParam("maxResults", p.maxResults, 5, 100)
	if aerr != nil {
		return nil, aerr
	}
	var filters []func(*Cloud, *RouteTable) bool
	for _, rf := range p.filters {
		f, aerr := routeTableFilter(rf.name, rf.values)
		if aerr != nil {
			return nil, aerr
		}
		filters = append(filters, f)
	}
	after := ""
	if p.nextToken != "" {
		raw, err := base64.RawURLEncoding.DecodeString(p.nextToken)
		if err != nil || !routeTableIDPattern.Match(raw) {
			return nil, &apiError{http.StatusBadRequest, "InvalidPaginationToken", fmt.Sprintf("The pagination token %q is invalid.", p.nextToken)}
		}
		after = string(raw)
	}
	if p.dryRun {
		return nil, dryRunOK
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range p.lists["RouteTableId"] {
		if _, ok := c.tables[id]; !ok {
			return nil, &apiError{http.StatusBadRequest, "InvalidRouteTableID.NotFound", fmt.Sprintf("The routeTable ID '%s' does not exist", id)}
		}
	}
	resp := describeRouteTablesResponse{RequestID: q.requestID}
	for _, id := range slices.Sorted(maps.Keys(c.tables)) {
		t := c.tables[id]
		if ids := p.lists["RouteTableId"]; len(ids) > 0 && !slices.Contains(ids, id) || id <= after && after != "" {
			continue
		}
		match := true
		for _, f := range filters {
			match = match && f(c, t)
		}
		if !match {
			continue
		}
		if maxResults > 0 && len(resp.RouteTables.Items) == maxResults {
			resp.NextToken = base64.RawURLEncoding.EncodeToString([]byte(resp.RouteTables.Items[maxResults-1].ID))
			break
		}
		resp.RouteTables.Items = append(resp.RouteTables.Items, c.wireRouteTableLocked(t))
	}
	return resp, nil
}

// routeParams reads RouteTableId and DestinationCidrBlock, both required.
func (c *Cloud) routeParamsLocked(p ec2Params) (*RouteTable, string, *apiError) {
	id, dest := p.scalars["RouteTableId"], p.scalars["DestinationCidrBlock"]
	switch {
	case id == "":
		return nil, "", &apiError{http.StatusBadRequest, "MissingParameter", "The request must contain the parameter routeTableId"}
	case dest == "":
		return nil, "", &apiError{http.StatusBadRequest, "MissingParameter", "The request must contain the parameter destinationCidrBlock"}
	}
	if pr, err := netip.ParsePrefix(dest); err != nil || !pr.Addr().Is4() || pr.Masked() != pr {
		return nil, "", invalidParameter(fmt.Sprintf("Value (%s) for parameter destinationCidrBlock is invalid. This is not a valid CIDR block.", dest))
	}
	t, ok := c.tables[id]
	if !ok {
		return nil, "", &apiError{http.StatusBadRequest, "InvalidRouteTableID.NotFound", fmt.Sprintf("The routeTable ID '%s' does not exist", id)}
	}
	return t, dest, nil
}

// serveCreateRoute answers CreateRoute to an instance (InstanceId) or a
// gateway (GatewayId), one of them: a destination the table routes
// already is RouteAlreadyExists, whatever its target (EC2 has no
// idempotent create of a route; ReplaceRoute changes one), an instance
// unknown InvalidInstanceID.NotFound, one shutting down or terminated
// IncorrectInstanceState.
func (c *Cloud) serveCreateRoute(q *queryRequest) (any, *apiError) {
	p, aerr := parseEC2Params(q, nil, []string{"RouteTableId", "DestinationCidrBlock", "InstanceId", "GatewayId"})
	if aerr != nil {
		return nil, aerr
	}
	instance, gateway := p.scalars["InstanceId"], p.scalars["GatewayId"]
	switch {
	case instance == "" && gateway == "":
		return nil, &apiError{http.StatusBadRequest, "MissingParameter", "The request must contain exactly one of gatewayId, natGatewayId, networkInterfaceId, vpcPeeringConnectionId or instanceId"}
	case instance != "" && gateway != "":
		return nil, &apiError{http.StatusBadRequest, "InvalidParameterCombination", "The parameter instanceId cannot be used with the parameter gatewayId"}
	case gateway == "local":
		return nil, invalidParameter("The gateway ID 'local' is not valid for a route you create")
	}
	if p.dryRun {
		return nil, dryRunOK
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t, dest, aerr := c.routeParamsLocked(p)
	if aerr != nil {
		return nil, aerr
	}
	if instance != "" {
		in, ok := c.instances[instance]
		switch {
		case !instanceIDPattern.MatchString(instance):
			return nil, &apiError{http.StatusBadRequest, "InvalidInstanceID.Malformed", fmt.Sprintf("Invalid id: %q", instance)}
		case !ok || !c.visibleLocked(instance):
			return nil, &apiError{http.StatusBadRequest, "InvalidInstanceID.NotFound", fmt.Sprintf("The instance ID '%s' does not exist", instance)}
		case in.State == "terminated" || in.State == "shutting-down":
			return nil, &apiError{http.StatusBadRequest, "IncorrectInstanceState", fmt.Sprintf("The instance '%s' is not in a state from which it can be routed to.", instance)}
		}
	}
	for _, r := range t.Routes {
		if r.Destination == dest {
			return nil, &apiError{http.StatusBadRequest, "RouteAlreadyExists", fmt.Sprintf("The route identified by %s already exists.", dest)}
		}
	}
	t.Routes = append(t.Routes, Route{Destination: dest, InstanceID: instance, GatewayID: gateway})
	return returned(ActionCreateRoute, q.requestID), nil
}

// serveDeleteRoute answers DeleteRoute: the table's route of the
// destination, whatever its target; none is InvalidRoute.NotFound, and the
// local route may not be deleted.
func (c *Cloud) serveDeleteRoute(q *queryRequest) (any, *apiError) {
	p, aerr := parseEC2Params(q, nil, []string{"RouteTableId", "DestinationCidrBlock"})
	if aerr != nil {
		return nil, aerr
	}
	if p.dryRun {
		return nil, dryRunOK
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t, dest, aerr := c.routeParamsLocked(p)
	if aerr != nil {
		return nil, aerr
	}
	at := slices.IndexFunc(t.Routes, func(r Route) bool { return r.Destination == dest })
	switch {
	case at < 0:
		return nil, &apiError{http.StatusBadRequest, "InvalidRoute.NotFound", fmt.Sprintf("no route with destination-cidr-block %s in route table %s", dest, t.ID)}
	case t.Routes[at].GatewayID == "local":
		return nil, invalidParameter(fmt.Sprintf("cannot remove local route %s in route table %s", dest, t.ID))
	}
	t.Routes = slices.Delete(t.Routes, at, at+1)
	return returned(ActionDeleteRoute, q.requestID), nil
}

// serveModifyInstanceAttribute answers ModifyInstanceAttribute's
// SourceDestCheck.Value, the one attribute modelled.
func (c *Cloud) serveModifyInstanceAttribute(q *queryRequest) (any, *apiError) {
	p, aerr := parseEC2Params(q, nil, []string{"InstanceId", "SourceDestCheck.Value"})
	if aerr != nil {
		return nil, aerr
	}
	id, v := p.scalars["InstanceId"], p.scalars["SourceDestCheck.Value"]
	if id == "" {
		return nil, &apiError{http.StatusBadRequest, "MissingParameter", "The request must contain the parameter instanceId"}
	}
	check, err := strconv.ParseBool(v)
	if err != nil {
		return nil, invalidParameter(fmt.Sprintf("Value (%s) for parameter sourceDestCheck is invalid. Expecting true or false.", v))
	}
	if p.dryRun {
		return nil, dryRunOK
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.instances[id]; !ok || !c.visibleLocked(id) {
		return nil, &apiError{http.StatusBadRequest, "InvalidInstanceID.NotFound", fmt.Sprintf("The instance ID '%s' does not exist", id)}
	}
	if c.noSourceDest == nil {
		c.noSourceDest = map[string]bool{}
	}
	c.noSourceDest[id] = !check
	return returned(ActionModifyInstanceAttribute, q.requestID), nil
}
