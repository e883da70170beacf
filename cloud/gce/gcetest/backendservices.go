package gcetest

import (
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"

	compute "google.golang.org/api/compute/v1"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// Regional backend services (regions/R/backendServices: list, get, insert,
// update (PUT), patch, delete, getHealth), as the Compute API serves them
// for internal passthrough load balancers. A service has a
// loadBalancingScheme (INTERNAL, EXTERNAL; EXTERNAL when not given), a
// protocol (TCP, UDP or UNSPECIFIED for INTERNAL; TCP when not given), a
// sessionAffinity (NONE when not given), one health check (a global or
// this region's health check that exists), and backends whose groups are
// instance groups that exist in the region's zones, each once. Its
// fingerprint changes with every write; an update or patch that carries
// another is 412 conditionNotMet. A service that a forwarding rule uses
// cannot be deleted (400 resourceInUseByAnotherResource).
//
// The data plane of an INTERNAL forwarding rule forwards to the instances
// of its backend service's groups (backendServiceTargets); it follows a
// change of the service or of its groups' members when the change's
// operation ends.

// Backend service methods for Calls and Fail: regionBackendServices.list,
// regionBackendServices.get, regionBackendServices.insert,
// regionBackendServices.update, regionBackendServices.patch,
// regionBackendServices.delete, regionBackendServices.getHealth;
// FailOperations of the writes.
func init() {
	handle(http.MethodGet, `(regions/[^/]+)/backendServices`, (*Cloud).serveServiceList)
	handle(http.MethodPost, `(regions/[^/]+)/backendServices`, (*Cloud).serveServiceInsert)
	handle(http.MethodGet, `(regions/[^/]+)/backendServices/([^/]+)`, (*Cloud).serveServiceGet)
	handle(http.MethodPut, `(regions/[^/]+)/backendServices/([^/]+)`, (*Cloud).serveServiceUpdate)
	handle(http.MethodPatch, `(regions/[^/]+)/backendServices/([^/]+)`, (*Cloud).serveServiceUpdate)
	handle(http.MethodDelete, `(regions/[^/]+)/backendServices/([^/]+)`, (*Cloud).serveServiceDelete)
	handle(http.MethodPost, `(regions/[^/]+)/backendServices/([^/]+)/getHealth`, (*Cloud).serveServiceHealth)
}

func serviceKey(project, scope, name string) string { return project + "/" + scope + "/" + name }

// checkService checks a backend service written in project's region scope
// and makes it as stored (without id, creation time and fingerprint);
// under c.net.mu (it reads the groups and checks it references).
func (c *Cloud) checkService(project, scope string, in compute.BackendService) (compute.BackendService, *apiError) {
	if !validName.MatchString(in.Name) {
		return in, nameError(in.Name)
	}
	region := strings.TrimPrefix(scope, "regions/")
	out := compute.BackendService{
		Kind: "compute#backendService", Name: in.Name, Description: in.Description,
		LoadBalancingScheme: cmp.Or(in.LoadBalancingScheme, "EXTERNAL"), Protocol: cmp.Or(in.Protocol, "TCP"),
		SessionAffinity: cmp.Or(in.SessionAffinity, "NONE"), TimeoutSec: cmp.Or(in.TimeoutSec, 30),
		ConnectionDraining: in.ConnectionDraining, Region: scopeURL(project, scope),
		SelfLink: scopeURL(project, scope) + "/backendServices/" + in.Name,
	}
	if in.Network != "" {
		ref, ok := parseRef(project, in.Network, "global", "networks", "*")
		if !ok {
			return in, invalidField("resource.network", in.Network, "Must be a network's URL.")
		}
		out.Network = ref.link()
	}
	switch out.LoadBalancingScheme {
	case "INTERNAL":
		if !slices.Contains([]string{"TCP", "UDP", "UNSPECIFIED"}, out.Protocol) {
			return in, invalidField("resource.protocol", out.Protocol, "An INTERNAL backend service's protocol is TCP, UDP or UNSPECIFIED.")
		}
	case "EXTERNAL":
	default:
		return in, invalidField("resource.loadBalancingScheme", out.LoadBalancingScheme, "Must be INTERNAL or EXTERNAL here.")
	}
	switch out.SessionAffinity {
	case "NONE", "CLIENT_IP", "CLIENT_IP_PROTO", "CLIENT_IP_PORT_PROTO", "CLIENT_IP_NO_DESTINATION":
	default:
		return in, invalidField("resource.sessionAffinity", out.SessionAffinity, "Not a session affinity of a passthrough load balancer.")
	}
	if len(in.HealthChecks) != 1 && out.LoadBalancingScheme == "INTERNAL" {
		return in, invalidField("resource.healthChecks", strings.Join(in.HealthChecks, ","), "An INTERNAL backend service needs exactly one health check.")
	}
	for _, h := range in.HealthChecks {
		ref, ok := parseRef(project, h, "global", "healthChecks", "*")
		if !ok {
			ref, ok = parseRef(project, h, "regions", region, "healthChecks", "*")
		}
		if !ok || ref.project != project {
			return in, invalidField("resource.healthChecks", h, "Must be a global health check or one of region "+region+".")
		}
		if _, exists := c.rt.checks[checkKey(ref.project, ref.scope(), ref.name())]; !exists {
			return in, notFound(ref.path())
		}
		out.HealthChecks = append(out.HealthChecks, ref.link())
	}
	seen := map[string]bool{}
	for _, b := range in.Backends {
		if b == nil {
			return in, invalidField("resource.backends", "", "A backend is empty.")
		}
		ref, ok := parseRef(project, b.Group, "zones", "*", "instanceGroups", "*")
		if !ok || ref.project != project {
			return in, invalidField("resource.backends[].group", b.Group, "Must be an instance group of project "+project+".")
		}
		if zoneRegion(ref.parts[1]) != region {
			return in, invalidField("resource.backends[].group", b.Group, "The instance group must be in a zone of region "+region+".")
		}
		if _, exists := c.rt.groups[groupKey(ref.project, ref.parts[1], ref.name())]; !exists {
			return in, notFound(ref.path())
		}
		if seen[ref.link()] {
			return in, invalidField("resource.backends", b.Group, "Duplicate backend group.")
		}
		seen[ref.link()] = true
		be := *b
		be.Group = ref.link()
		be.BalancingMode = cmp.Or(be.BalancingMode, "CONNECTION")
		out.Backends = append(out.Backends, &be)
	}
	return out, nil
}

// serviceWire copies a stored service.
func serviceWire(bs *compute.BackendService) compute.BackendService {
	out := *bs
	out.HealthChecks = slices.Clone(bs.HealthChecks)
	out.Backends = nil
	for _, b := range bs.Backends {
		cp := *b
		out.Backends = append(out.Backends, &cp)
	}
	return out
}

func (c *Cloud) serveServiceList(w http.ResponseWriter, r *http.Request, m []string) {
	project, scope := m[1], m[2]
	if !c.call(w, "regionBackendServices.list", project) {
		return
	}
	self := scopeURL(project, scope) + "/backendServices"
	lq, aerr := c.parseListQuery(r, self, reflect.TypeFor[compute.BackendService]())
	if aerr != nil {
		aerr.write(w)
		return
	}
	items, next := page(lq, c.BackendServices(project, strings.TrimPrefix(scope, "regions/")),
		func(bs *compute.BackendService) string { return bs.Name })
	writeList(w, "compute#backendServiceList", self, items, next)
}

func (c *Cloud) serveServiceGet(w http.ResponseWriter, r *http.Request, m []string) {
	project, scope, name := m[1], m[2], m[3]
	if !c.call(w, "regionBackendServices.get", project) {
		return
	}
	bs, ok := c.BackendService(project, strings.TrimPrefix(scope, "regions/"), name)
	if !ok {
		notFound("projects/" + project + "/" + scope + "/backendServices/" + name).write(w)
		return
	}
	writeJSON(w, http.StatusOK, bs)
}

func (c *Cloud) serveServiceInsert(w http.ResponseWriter, r *http.Request, m []string) {
	project, scope := m[1], m[2]
	if !c.call(w, "regionBackendServices.insert", project) {
		return
	}
	var in compute.BackendService
	if field, err := cloudtest.DecodeStrict(r.Body, &in); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid JSON payload received. %v %s", err, field))
		return
	}
	fault := c.opFault("regionBackendServices.insert")
	n := &c.net
	n.mu.Lock()
	defer n.mu.Unlock()
	n.init()
	c.rt.init()
	bs, aerr := c.checkService(project, scope, in)
	if aerr != nil {
		aerr.write(w)
		return
	}
	key := serviceKey(project, scope, bs.Name)
	if _, taken := c.rt.services[key]; taken {
		alreadyExists(strings.TrimPrefix(bs.SelfLink, resourceBase)).write(w)
		return
	}
	if aerr := n.checkIdle(bs.SelfLink); aerr != nil {
		aerr.write(w)
		return
	}
	if fault != nil {
		answerOp(w, c.begin(project, scope, "insert", bs.SelfLink, 0, failed(fault)))
		return
	}
	bs.Id = n.nextID()
	bs.CreationTimestamp = timestamp(c.opts.Now())
	bs.Fingerprint = fingerprint(bs.Id)
	c.rt.services[key] = &bs
	answerOp(w, c.begin(project, scope, "insert", bs.SelfLink, bs.Id, c.groupChanged()))
}

// serveServiceUpdate serves update (PUT: the service as given) and patch
// (PATCH: the fields given over the stored ones); a fingerprint given must
// be the stored one.
func (c *Cloud) serveServiceUpdate(w http.ResponseWriter, r *http.Request, m []string) {
	project, scope, name := m[1], m[2], m[3]
	method, opType := "regionBackendServices.update", "update"
	if r.Method == http.MethodPatch {
		method, opType = "regionBackendServices.patch", "patch"
	}
	if !c.call(w, method, project) {
		return
	}
	fault := c.opFault(method)
	n := &c.net
	n.mu.Lock()
	defer n.mu.Unlock()
	n.init()
	c.rt.init()
	key := serviceKey(project, scope, name)
	old, ok := c.rt.services[key]
	if !ok {
		notFound("projects/" + project + "/" + scope + "/backendServices/" + name).write(w)
		return
	}
	var in compute.BackendService
	if r.Method == http.MethodPatch {
		in = serviceWire(old)
		in.Fingerprint = ""
	}
	if field, err := cloudtest.DecodeStrict(r.Body, &in); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid JSON payload received. %v %s", err, field))
		return
	}
	if in.Fingerprint != "" && in.Fingerprint != old.Fingerprint {
		(&apiError{status: http.StatusPreconditionFailed, reason: "conditionNotMet",
			msg: "Invalid fingerprint. The resource has changed since it was read: read it again."}).write(w)
		return
	}
	if in.Name != name {
		invalidField("resource.name", in.Name, "The name of a backend service cannot change.").write(w)
		return
	}
	bs, aerr := c.checkService(project, scope, in)
	if aerr != nil {
		aerr.write(w)
		return
	}
	if old.LoadBalancingScheme != bs.LoadBalancingScheme {
		invalidField("resource.loadBalancingScheme", bs.LoadBalancingScheme, "The scheme of a backend service cannot change.").write(w)
		return
	}
	if aerr := n.checkIdle(old.SelfLink); aerr != nil {
		aerr.write(w)
		return
	}
	if fault != nil {
		answerOp(w, c.begin(project, scope, opType, old.SelfLink, old.Id, failed(fault)))
		return
	}
	bs.Id, bs.CreationTimestamp = old.Id, old.CreationTimestamp
	bs.Fingerprint = fingerprint(n.nextID())
	c.rt.services[key] = &bs
	answerOp(w, c.begin(project, scope, opType, old.SelfLink, old.Id, c.groupChanged()))
}

func (c *Cloud) serveServiceDelete(w http.ResponseWriter, r *http.Request, m []string) {
	project, scope, name := m[1], m[2], m[3]
	if !c.call(w, "regionBackendServices.delete", project) {
		return
	}
	fault := c.opFault("regionBackendServices.delete")
	n := &c.net
	n.mu.Lock()
	defer n.mu.Unlock()
	n.init()
	c.rt.init()
	key := serviceKey(project, scope, name)
	bs, ok := c.rt.services[key]
	if !ok {
		notFound("projects/" + project + "/" + scope + "/backendServices/" + name).write(w)
		return
	}
	if aerr := n.checkIdle(bs.SelfLink); aerr != nil {
		aerr.write(w)
		return
	}
	if user := c.serviceUser(bs.SelfLink); user != "" {
		inUse("backendService", strings.TrimPrefix(bs.SelfLink, resourceBase), user).write(w)
		return
	}
	if fault != nil {
		answerOp(w, c.begin(project, scope, "delete", bs.SelfLink, bs.Id, failed(fault)))
		return
	}
	delete(c.rt.services, key)
	answerOp(w, c.begin(project, scope, "delete", bs.SelfLink, bs.Id, nil))
}

// serveServiceHealth answers every member of the group asked for HEALTHY
// while it runs (the data plane sends no health checks).
func (c *Cloud) serveServiceHealth(w http.ResponseWriter, r *http.Request, m []string) {
	project, scope, name := m[1], m[2], m[3]
	if !c.call(w, "regionBackendServices.getHealth", project) {
		return
	}
	var req compute.ResourceGroupReference
	if field, err := cloudtest.DecodeStrict(r.Body, &req); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid JSON payload received. %v %s", err, field))
		return
	}
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	c.rt.init()
	bs, ok := c.rt.services[serviceKey(project, scope, name)]
	if !ok {
		notFound("projects/" + project + "/" + scope + "/backendServices/" + name).write(w)
		return
	}
	ref, ok := parseRef(project, req.Group, "zones", "*", "instanceGroups", "*")
	var g *instanceGroup
	if ok {
		g = c.rt.groups[groupKey(ref.project, ref.parts[1], ref.name())]
	}
	if g == nil || !slices.ContainsFunc(bs.Backends, func(b *compute.Backend) bool { return b.Group == ref.link() }) {
		invalidField("resource.group", req.Group, "The group is no backend of "+strings.TrimPrefix(bs.SelfLink, resourceBase)+".").write(w)
		return
	}
	out := compute.BackendServiceGroupHealth{Kind: "compute#backendServiceGroupHealth"}
	for _, in := range c.members(ref.project, g) {
		state := "UNHEALTHY"
		if in.Status == "RUNNING" {
			state = "HEALTHY"
		}
		out.HealthStatus = append(out.HealthStatus, &compute.HealthStatus{Instance: wire(in).SelfLink, IpAddress: in.InternalIP, HealthState: state})
	}
	writeJSON(w, http.StatusOK, out)
}

// BackendServices are a region's backend services, in name order.
func (c *Cloud) BackendServices(project, region string) []compute.BackendService {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	c.rt.init()
	var out []compute.BackendService
	prefix := serviceKey(project, "regions/"+region, "")
	for _, k := range slices.Sorted(maps.Keys(c.rt.services)) {
		if strings.HasPrefix(k, prefix) {
			out = append(out, serviceWire(c.rt.services[k]))
		}
	}
	return out
}

// BackendService is a backend service as the API answers it.
func (c *Cloud) BackendService(project, region, name string) (compute.BackendService, bool) {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	c.rt.init()
	bs, ok := c.rt.services[serviceKey(project, "regions/"+region, name)]
	if !ok {
		return compute.BackendService{}, false
	}
	return serviceWire(bs), true
}

// BackendServiceTargets are the instances an INTERNAL forwarding rule of
// the backend service at link forwards to (backendServiceTargets).
func (c *Cloud) BackendServiceTargets(link string) []string {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	return c.backendServiceTargets(link)
}

// backendServiceTargets are the names of the instances in the groups of
// the backend service at link (any form of its URL), sorted, each once:
// the targets of an INTERNAL forwarding rule's data plane. None for a
// service that does not exist. Under c.net.mu.
func (c *Cloud) backendServiceTargets(link string) []string {
	c.rt.init()
	ref, ok := parseRef("", link, "regions", "*", "backendServices", "*")
	if !ok {
		return nil
	}
	bs, ok := c.rt.services[serviceKey(ref.project, ref.scope(), ref.name())]
	if !ok {
		return nil
	}
	names := map[string]bool{}
	for _, b := range bs.Backends {
		g, ok := parseRef(ref.project, b.Group, "zones", "*", "instanceGroups", "*")
		if !ok {
			continue
		}
		if ig := c.rt.groups[groupKey(g.project, g.parts[1], g.name())]; ig != nil {
			for _, in := range c.members(g.project, ig) {
				names[in.Name] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(names))
}

// serviceUser is the partial URL of a forwarding rule that uses the
// backend service at link ("" when none): routing.ruleUsing, which the
// forwarding rules' file sets; under c.net.mu.
func (c *Cloud) serviceUser(link string) string {
	if c.rt.ruleUsing == nil {
		return ""
	}
	return c.rt.ruleUsing(link)
}

// backendsChanged makes the data plane follow a change of backend services
// or of their groups' members (routing.backendsChanged, which the
// forwarding rules' file sets); under c.net.mu.
func (c *Cloud) backendsChanged() {
	if c.rt.backendsChanged != nil {
		c.rt.backendsChanged()
	}
}
