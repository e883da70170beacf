package gcetest

import (
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"

	compute "google.golang.org/api/compute/v1"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// Zonal unmanaged instance groups (zones/Z/instanceGroups: list, get,
// insert, delete, addInstances, removeInstances, listInstances), as the
// Compute API serves them. Members are instances of the group's zone and
// project; a group takes the network of its first member when it names
// none. An instance added twice is 400 memberAlreadyExists, one the project
// has not 404 notFound, one of another zone 400; removing an instance that
// is no member is no error. A deleted instance leaves its groups, as GCE
// drops it. A group that a backend service uses cannot be deleted (400
// resourceInUseByAnotherResource). listInstances answers the members with
// their status; instanceState RUNNING keeps the running ones.
//
// zones.list (and zones.get) answer the zones of a few regions and every
// zone the project has instances or groups in, with their region as a full
// URL (the upstream provider lists a region's zones with the filter
// "region eq .*/regions/R").

// Instance group methods for Calls and Fail: instanceGroups.list,
// instanceGroups.get, instanceGroups.insert, instanceGroups.delete,
// instanceGroups.addInstances, instanceGroups.removeInstances,
// instanceGroups.listInstances; FailOperations of the writes. zones.list,
// zones.get.
func init() {
	handle(http.MethodGet, `zones/([^/]+)/instanceGroups`, (*Cloud).serveGroupList)
	handle(http.MethodPost, `zones/([^/]+)/instanceGroups`, (*Cloud).serveGroupInsert)
	handle(http.MethodGet, `zones/([^/]+)/instanceGroups/([^/]+)`, (*Cloud).serveGroupGet)
	handle(http.MethodDelete, `zones/([^/]+)/instanceGroups/([^/]+)`, (*Cloud).serveGroupDelete)
	handle(http.MethodPost, `zones/([^/]+)/instanceGroups/([^/]+)/addInstances`, (*Cloud).serveGroupAdd)
	handle(http.MethodPost, `zones/([^/]+)/instanceGroups/([^/]+)/removeInstances`, (*Cloud).serveGroupRemove)
	handle(http.MethodPost, `zones/([^/]+)/instanceGroups/([^/]+)/listInstances`, (*Cloud).serveGroupListInstances)
	handle(http.MethodGet, `zones`, (*Cloud).serveZoneList)
	handle(http.MethodGet, `zones/([^/]+)`, (*Cloud).serveZoneGet)
}

// instanceGroup is a stored group: its API form (without size) and its
// members' names.
type instanceGroup struct {
	ig      compute.InstanceGroup
	members map[string]bool
}

func groupKey(project, zone, name string) string { return project + "/" + zone + "/" + name }

// validZone is a zone name as GCE writes them (us-central1-a,
// us-central1-ai1a).
var validZone = validName

// members are the group's members the project still has, in name order;
// under c.net.mu.
func (c *Cloud) members(project string, g *instanceGroup) []Instance {
	var out []Instance
	for _, name := range slices.Sorted(maps.Keys(g.members)) {
		in, ok := c.Get(project, lastPart(g.ig.Zone), name)
		if !ok {
			delete(g.members, name) // GCE drops a deleted instance
			continue
		}
		out = append(out, in)
	}
	return out
}

func lastPart(link string) string { return link[strings.LastIndex(link, "/")+1:] }

// groupWire is a stored group as the API answers it; under c.net.mu.
func (c *Cloud) groupWire(project string, g *instanceGroup) compute.InstanceGroup {
	out := g.ig
	out.NamedPorts = slices.Clone(g.ig.NamedPorts)
	out.Size = int64(len(c.members(project, g)))
	return out
}

func (c *Cloud) serveGroupList(w http.ResponseWriter, r *http.Request, m []string) {
	project, zone := m[1], m[2]
	if !c.call(w, "instanceGroups.list", project) {
		return
	}
	self := scopeURL(project, "zones/"+zone) + "/instanceGroups"
	lq, aerr := c.parseListQuery(r, self, reflect.TypeFor[compute.InstanceGroup]())
	if aerr != nil {
		aerr.write(w)
		return
	}
	items, next := page(lq, c.InstanceGroups(project, zone), func(g *compute.InstanceGroup) string { return g.Name })
	writeList(w, "compute#instanceGroupList", self, items, next)
}

func (c *Cloud) serveGroupGet(w http.ResponseWriter, r *http.Request, m []string) {
	project, zone, name := m[1], m[2], m[3]
	if !c.call(w, "instanceGroups.get", project) {
		return
	}
	g, ok := c.InstanceGroup(project, zone, name)
	if !ok {
		notFound(fmt.Sprintf("projects/%s/zones/%s/instanceGroups/%s", project, zone, name)).write(w)
		return
	}
	writeJSON(w, http.StatusOK, g)
}

func (c *Cloud) serveGroupInsert(w http.ResponseWriter, r *http.Request, m []string) {
	project, zone := m[1], m[2]
	if !c.call(w, "instanceGroups.insert", project) {
		return
	}
	var in compute.InstanceGroup
	if field, err := cloudtest.DecodeStrict(r.Body, &in); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid JSON payload received. %v %s", err, field))
		return
	}
	if !validZone.MatchString(zone) {
		notFound("projects/" + project + "/zones/" + zone).write(w)
		return
	}
	if !validName.MatchString(in.Name) {
		nameError(in.Name).write(w)
		return
	}
	g := &instanceGroup{members: map[string]bool{}, ig: compute.InstanceGroup{
		Kind: "compute#instanceGroup", Name: in.Name, Description: in.Description,
		NamedPorts: slices.Clone(in.NamedPorts), Zone: scopeURL(project, "zones/"+zone),
		SelfLink: scopeURL(project, "zones/"+zone) + "/instanceGroups/" + in.Name,
	}}
	if in.Network != "" {
		ref, ok := parseRef(project, in.Network, "global", "networks", "*")
		if !ok {
			invalidField("resource.network", in.Network, "Must be a network's URL.").write(w)
			return
		}
		g.ig.Network = ref.link()
	}
	fault := c.opFault("instanceGroups.insert")
	n := &c.net
	n.mu.Lock()
	defer n.mu.Unlock()
	n.init()
	c.rt.init()
	key := groupKey(project, zone, in.Name)
	if _, taken := c.rt.groups[key]; taken {
		alreadyExists(strings.TrimPrefix(g.ig.SelfLink, resourceBase)).write(w)
		return
	}
	if aerr := n.checkIdle(g.ig.SelfLink); aerr != nil {
		aerr.write(w)
		return
	}
	if fault != nil {
		answerOp(w, c.begin(project, "zones/"+zone, "insert", g.ig.SelfLink, 0, failed(fault)))
		return
	}
	g.ig.Id = n.nextID()
	g.ig.CreationTimestamp = timestamp(c.opts.Now())
	g.ig.Fingerprint = fingerprint(g.ig.Id)
	c.rt.groups[key] = g
	answerOp(w, c.begin(project, "zones/"+zone, "insert", g.ig.SelfLink, g.ig.Id, nil))
}

// fingerprint is a resource's fingerprint after a change (base64 of 8
// bytes, as GCE's).
func fingerprint(seq uint64) string {
	const digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	var b [11]byte
	x := seq*0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019
	for i := range b {
		b[i] = digits[x&63]
		x >>= 6
	}
	return string(b[:]) + "="
}

// lookupGroup is the stored group of m (project, zone, name) for a write,
// or the answer written; under c.net.mu.
func (c *Cloud) lookupGroup(w http.ResponseWriter, m []string) (*instanceGroup, bool) {
	c.rt.init()
	g, ok := c.rt.groups[groupKey(m[1], m[2], m[3])]
	if !ok {
		notFound(fmt.Sprintf("projects/%s/zones/%s/instanceGroups/%s", m[1], m[2], m[3])).write(w)
		return nil, false
	}
	if aerr := c.net.checkIdle(g.ig.SelfLink); aerr != nil {
		aerr.write(w)
		return nil, false
	}
	return g, true
}

func (c *Cloud) serveGroupDelete(w http.ResponseWriter, r *http.Request, m []string) {
	project, zone := m[1], m[2]
	if !c.call(w, "instanceGroups.delete", project) {
		return
	}
	fault := c.opFault("instanceGroups.delete")
	n := &c.net
	n.mu.Lock()
	defer n.mu.Unlock()
	n.init()
	g, ok := c.lookupGroup(w, m)
	if !ok {
		return
	}
	if user := c.groupUser(g.ig.SelfLink); user != "" {
		inUse("instance_group", strings.TrimPrefix(g.ig.SelfLink, resourceBase), user).write(w)
		return
	}
	if fault != nil {
		answerOp(w, c.begin(project, "zones/"+zone, "delete", g.ig.SelfLink, g.ig.Id, failed(fault)))
		return
	}
	delete(c.rt.groups, groupKey(m[1], m[2], m[3]))
	answerOp(w, c.begin(project, "zones/"+zone, "delete", g.ig.SelfLink, g.ig.Id, nil))
}

// groupUser is the partial URL of a backend service that uses the group at
// link ("" when none); under c.net.mu.
func (c *Cloud) groupUser(link string) string {
	for _, k := range slices.Sorted(maps.Keys(c.rt.services)) {
		bs := c.rt.services[k]
		for _, b := range bs.Backends {
			if b.Group == link {
				return strings.TrimPrefix(bs.SelfLink, resourceBase)
			}
		}
	}
	return ""
}

// memberRefs reads an addInstances or removeInstances request: the names
// of its instances, each of the group's project and zone.
func memberRefs(project, zone string, refs []*compute.InstanceReference) ([]string, *apiError) {
	if len(refs) == 0 {
		return nil, invalidField("resource.instances", "", "At least one instance is required.")
	}
	var names []string
	for _, ir := range refs {
		if ir == nil {
			return nil, invalidField("resource.instances", "", "An instance reference is empty.")
		}
		ref, ok := parseRef(project, ir.Instance, "zones", "*", "instances", "*")
		if !ok {
			return nil, invalidField("resource.instances[].instance", ir.Instance, "Must be an instance's URL.")
		}
		if ref.project != project || ref.parts[1] != zone {
			return nil, invalidField("resource.instances[].instance", ir.Instance,
				fmt.Sprintf("Resource must be in the same project and zone as the instance group (projects/%s/zones/%s).", project, zone))
		}
		names = append(names, ref.name())
	}
	return names, nil
}

func (c *Cloud) serveGroupAdd(w http.ResponseWriter, r *http.Request, m []string) {
	project, zone := m[1], m[2]
	if !c.call(w, "instanceGroups.addInstances", project) {
		return
	}
	var req compute.InstanceGroupsAddInstancesRequest
	if field, err := cloudtest.DecodeStrict(r.Body, &req); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid JSON payload received. %v %s", err, field))
		return
	}
	names, aerr := memberRefs(project, zone, req.Instances)
	if aerr != nil {
		aerr.write(w)
		return
	}
	fault := c.opFault("instanceGroups.addInstances")
	n := &c.net
	n.mu.Lock()
	defer n.mu.Unlock()
	n.init()
	g, ok := c.lookupGroup(w, m)
	if !ok {
		return
	}
	c.members(project, g) // drops the deleted ones
	seen := map[string]bool{}
	for _, name := range names {
		path := fmt.Sprintf("projects/%s/zones/%s/instances/%s", project, zone, name)
		if _, exists := c.Get(project, zone, name); !exists {
			notFound(path).write(w)
			return
		}
		if g.members[name] || seen[name] {
			(&apiError{status: http.StatusBadRequest, reason: "memberAlreadyExists", msg: fmt.Sprintf("Resource '%s' is already a member of '%s'",
				path, strings.TrimPrefix(g.ig.SelfLink, resourceBase))}).write(w)
			return
		}
		seen[name] = true
	}
	if fault != nil {
		answerOp(w, c.begin(project, "zones/"+zone, "compute.instanceGroups.addInstances", g.ig.SelfLink, g.ig.Id, failed(fault)))
		return
	}
	for name := range seen {
		g.members[name] = true
	}
	if g.ig.Network == "" {
		g.ig.Network = scopeURL(project, "global") + "/networks/default" // the instances' network
	}
	g.ig.Fingerprint = fingerprint(n.nextID())
	answerOp(w, c.begin(project, "zones/"+zone, "compute.instanceGroups.addInstances", g.ig.SelfLink, g.ig.Id, c.groupChanged()))
}

func (c *Cloud) serveGroupRemove(w http.ResponseWriter, r *http.Request, m []string) {
	project, zone := m[1], m[2]
	if !c.call(w, "instanceGroups.removeInstances", project) {
		return
	}
	var req compute.InstanceGroupsRemoveInstancesRequest
	if field, err := cloudtest.DecodeStrict(r.Body, &req); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid JSON payload received. %v %s", err, field))
		return
	}
	names, aerr := memberRefs(project, zone, req.Instances)
	if aerr != nil {
		aerr.write(w)
		return
	}
	fault := c.opFault("instanceGroups.removeInstances")
	n := &c.net
	n.mu.Lock()
	defer n.mu.Unlock()
	n.init()
	g, ok := c.lookupGroup(w, m)
	if !ok {
		return
	}
	if fault != nil {
		answerOp(w, c.begin(project, "zones/"+zone, "compute.instanceGroups.removeInstances", g.ig.SelfLink, g.ig.Id, failed(fault)))
		return
	}
	for _, name := range names {
		delete(g.members, name)
	}
	g.ig.Fingerprint = fingerprint(n.nextID())
	answerOp(w, c.begin(project, "zones/"+zone, "compute.instanceGroups.removeInstances", g.ig.SelfLink, g.ig.Id, c.groupChanged()))
}

// groupChanged is the finish of an operation that changed a group's
// members: the data plane follows them when it ends.
func (c *Cloud) groupChanged() func() *OpError {
	return func() *OpError {
		c.backendsChanged()
		return nil
	}
}

func (c *Cloud) serveGroupListInstances(w http.ResponseWriter, r *http.Request, m []string) {
	project, zone, name := m[1], m[2], m[3]
	if !c.call(w, "instanceGroups.listInstances", project) {
		return
	}
	var req compute.InstanceGroupsListInstancesRequest
	if r.ContentLength != 0 {
		if field, err := cloudtest.DecodeStrict(r.Body, &req); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid JSON payload received. %v %s", err, field))
			return
		}
	}
	switch req.InstanceState {
	case "", "ALL", "RUNNING":
	default:
		invalidField("resource.instanceState", req.InstanceState, "Must be ALL or RUNNING.").write(w)
		return
	}
	self := scopeURL(project, "zones/"+zone) + "/instanceGroups/" + name
	lq, aerr := c.parseListQuery(r, self+"/listInstances", reflect.TypeFor[compute.InstanceWithNamedPorts]())
	if aerr != nil {
		aerr.write(w)
		return
	}
	c.net.mu.Lock()
	c.rt.init()
	g, ok := c.rt.groups[groupKey(project, zone, name)]
	var items []compute.InstanceWithNamedPorts
	if ok {
		for _, in := range c.members(project, g) {
			if req.InstanceState == "RUNNING" && in.Status != "RUNNING" {
				continue
			}
			items = append(items, compute.InstanceWithNamedPorts{Instance: wire(in).SelfLink, Status: in.Status,
				NamedPorts: slices.Clone(g.ig.NamedPorts)})
		}
	}
	c.net.mu.Unlock()
	if !ok {
		notFound(strings.TrimPrefix(self, resourceBase)).write(w)
		return
	}
	out, next := page(lq, items, func(i *compute.InstanceWithNamedPorts) string { return i.Instance })
	writeList(w, "compute#instanceGroupsListInstances", self, out, next)
}

// InstanceGroups are a zone's instance groups, in name order, as the API
// lists them.
func (c *Cloud) InstanceGroups(project, zone string) []compute.InstanceGroup {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	c.rt.init()
	var out []compute.InstanceGroup
	prefix := project + "/" + zone + "/"
	for _, k := range slices.Sorted(maps.Keys(c.rt.groups)) {
		if strings.HasPrefix(k, prefix) {
			out = append(out, c.groupWire(project, c.rt.groups[k]))
		}
	}
	return out
}

// InstanceGroup is a group as the API answers it.
func (c *Cloud) InstanceGroup(project, zone, name string) (compute.InstanceGroup, bool) {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	c.rt.init()
	g, ok := c.rt.groups[groupKey(project, zone, name)]
	if !ok {
		return compute.InstanceGroup{}, false
	}
	return c.groupWire(project, g), true
}

// GroupMembers are the names of a group's members the project still has.
func (c *Cloud) GroupMembers(project, zone, name string) []string {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	c.rt.init()
	g, ok := c.rt.groups[groupKey(project, zone, name)]
	if !ok {
		return nil
	}
	var out []string
	for _, in := range c.members(project, g) {
		out = append(out, in.Name)
	}
	return out
}

// knownRegions are the zones of the regions zones.list answers, beside
// those the project uses.
var knownRegions = map[string][]string{
	"us-central1":  {"a", "b", "c", "f"},
	"europe-west1": {"b", "c", "d"},
	"asia-east1":   {"a", "b", "c"},
}

// zoneRegion is a zone's region: its name without the last part.
func zoneRegion(zone string) string {
	if i := strings.LastIndex(zone, "-"); i > 0 {
		return zone[:i]
	}
	return zone
}

// zones are the zones the project sees, in name order.
func (c *Cloud) zones(project string) []compute.Zone {
	names := map[string]bool{}
	for region, suffixes := range knownRegions {
		for _, s := range suffixes {
			names[region+"-"+s] = true
		}
	}
	all, _ := c.project(project)
	for _, in := range all {
		names[in.Zone] = true
	}
	c.net.mu.Lock()
	c.rt.init()
	for k := range c.rt.groups {
		if parts := strings.Split(k, "/"); parts[0] == project {
			names[parts[1]] = true
		}
	}
	c.net.mu.Unlock()
	var out []compute.Zone
	for _, z := range slices.Sorted(maps.Keys(names)) {
		out = append(out, compute.Zone{Kind: "compute#zone", Name: z, Status: "UP", Description: z,
			Id: uint64(projectNumber(z)), Region: scopeURL(project, "regions/"+zoneRegion(z)), SelfLink: scopeURL(project, "zones/"+z)})
	}
	return out
}

func (c *Cloud) serveZoneList(w http.ResponseWriter, r *http.Request, m []string) {
	project := m[1]
	if !c.call(w, "zones.list", project) {
		return
	}
	self := scopeURL(project, "zones")
	lq, aerr := c.parseListQuery(r, self, reflect.TypeFor[compute.Zone]())
	if aerr != nil {
		aerr.write(w)
		return
	}
	items, next := page(lq, c.zones(project), func(z *compute.Zone) string { return z.Name })
	writeList(w, "compute#zoneList", self, items, next)
}

func (c *Cloud) serveZoneGet(w http.ResponseWriter, r *http.Request, m []string) {
	project, zone := m[1], m[2]
	if !c.call(w, "zones.get", project) {
		return
	}
	for _, z := range c.zones(project) {
		if z.Name == zone {
			writeJSON(w, http.StatusOK, z)
			return
		}
	}
	notFound("projects/" + project + "/zones/" + zone).write(w)
}
