package gcetest

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"

	compute "google.golang.org/api/compute/v1"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// The network load balancers of the Compute API that the upstream GCE
// provider writes, as GCE documents them:
//   - regional addresses (regions/R/addresses: list, get, insert, delete):
//     an insert without an address is given one of the data plane's
//     (127.86.0.0/16); one with the address of a forwarding rule's
//     ephemeral address makes it static (the rule keeps it); an address
//     in use by a forwarding rule is IN_USE with the rule among its users,
//     and deleting it leaves the rule its address (GCE's static to
//     ephemeral). Quota STATIC_ADDRESSES (SetQuota).
//   - target pools (regions/R/targetPools: list, get, insert, delete,
//     addInstance, removeInstance): instances by URL (any host, or
//     partial), each of the project and once (addInstance of a member is
//     400), at most one legacy HTTP health check, sessionAffinity. A pool
//     a forwarding rule targets cannot be deleted (400
//     resourceInUseByAnotherResource). Quota TARGET_POOLS.
//   - forwarding rules (regions/R/forwardingRules: list, get, insert,
//     delete): EXTERNAL ones target a target pool, INTERNAL ones a
//     regional backend service (backendservices.go) with network and
//     subnetwork; IPProtocol TCP or UDP (and L3_DEFAULT, refused here),
//     portRange or ports (at most five), allPorts, networkTier, and the
//     internal fields (serviceLabel, allowGlobalAccess, ipVersion) stored
//     as given. A rule without IPAddress is given an ephemeral one. Quota
//     FORWARDING_RULES.
//   - firewall rules (global/firewalls: list, get, insert, update, patch,
//     delete) and legacy HTTP health checks (global/httpHealthChecks: list,
//     get, insert, update, patch, delete; a check a target pool uses cannot
//     be deleted).
//   - reads the upstream makes besides: zones/Z/instances (list, with a
//     filter), regions/R (get), global/networks/N (get) and
//     regions/R/subnetworks (list, get).
//
// Every write is an operation (operations.go); an insert of a taken name is
// 409 alreadyExists, of an unknown reference 404 or 400 as GCE answers,
// beyond a quota 403 quotaExceeded. Methods for Calls and Fail are named
// COLLECTION.VERB (targetPools.insert, forwardingRules.list, ...);
// FailOperations makes a write's operation end in error.
//
// The data plane: each forwarding rule listens on its address (its ports,
// or every port of its pool's instances' node ports... see SetKubeProxy)
// and forwards to the instances of its target pool (EXTERNAL) or of its
// backend service's groups (INTERNAL), at their internal addresses; it
// follows the resources when an operation that changed them ends.
// GCE's passthrough load balancers deliver a packet to the node with the
// load balancer's own address and port, where kube-proxy takes it to the
// Service: on loopback, the data plane forwards a port to the port that
// SetKubeProxy's function says (the Service's node port), the same port
// when none is set. Health checks are probed when EnableHealthChecks says
// so: a target pool's HTTP health check on its port and path.

// lbState is what the load balancers hold, under c.net.mu.
type lbState struct {
	addresses map[string]*compute.Address        // by self link
	pools     map[string]*compute.TargetPool     // by self link
	rules     map[string]*compute.ForwardingRule // by self link
	firewalls map[string]*compute.Firewall       // by self link
	checks    map[string]*compute.HttpHealthCheck
	// vips: an address of the data plane -> its id there.
	vips   map[string]string
	quotas map[string]int // COLLECTION -> most items per project and scope
	// kubeProxy maps a rule's ports to the nodes' ports.
	kubeProxy   func(rule *compute.ForwardingRule) map[int]int
	checkHealth bool
	hooked      bool
}

func (c *Cloud) lbInit() *lbState {
	s := &c.net.lb
	if s.addresses == nil {
		s.addresses = map[string]*compute.Address{}
		s.pools = map[string]*compute.TargetPool{}
		s.rules = map[string]*compute.ForwardingRule{}
		s.firewalls = map[string]*compute.Firewall{}
		s.checks = map[string]*compute.HttpHealthCheck{}
		s.vips = map[string]string{}
		s.quotas = map[string]int{}
	}
	c.net.init()
	c.hookRouting()
	return s
}

// SetQuota limits the items of a collection (addresses, targetPools,
// forwardingRules, firewalls, httpHealthChecks) per project and scope:
// an insert beyond is 403 quotaExceeded. 0 lifts it.
func (c *Cloud) SetQuota(collection string, limit int) {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	c.lbInit().quotas[collection] = limit
}

// SetKubeProxy sets the stand-in for kube-proxy's rules of load balancer
// addresses: the nodes' ports a forwarding rule's ports are delivered to
// (the Service's node ports: the upstream GCE provider names the Service
// in the rule's description). A port it does not map is delivered to the
// same port; of a range wider than 64 ports (a Service's ports 80 and
// 8080 are the range 80-8080) only the mapped ports are listened on. f is
// called once a rule each time the data plane follows the resources, with
// a copy of the rule, while the endpoint is locked: keep it quick.
func (c *Cloud) SetKubeProxy(f func(rule *compute.ForwardingRule) map[int]int) {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	c.lbInit().kubeProxy = f
	c.syncDataPlane()
}

// EnableHealthChecks makes the data plane probe target pools' health
// checks (off by default: a node then counts as healthy).
func (c *Cloud) EnableHealthChecks(on bool) {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	c.lbInit().checkHealth = on
	c.syncDataPlane()
}

// quotaNames are GCE's names of the collections' quotas.
var quotaNames = map[string]string{"addresses": "STATIC_ADDRESSES", "targetPools": "TARGET_POOLS",
	"forwardingRules": "FORWARDING_RULES", "firewalls": "FIREWALLS", "httpHealthChecks": "HEALTH_CHECKS"}

// collection is one kind of resource and how it is served.
type collection[T any] struct {
	name     string // targetPools
	regional bool
	kind     string // compute#targetPool
	items    func(*lbState) map[string]*T
	meta     func(*T) meta
	// prepare checks an insert (or update: old set) and makes it as stored
	// (references canonical); under c.net.mu.
	prepare func(c *Cloud, project, scope string, in, old *T) *apiError
	// user is the partial URL of a resource that uses it ("": none).
	user func(c *Cloud, link string) string
	// removed runs after a deletion, under c.net.mu.
	removed func(c *Cloud, x *T)
	// mutable: update (PUT) and patch are served.
	mutable bool
}

// meta are pointers to a resource's common fields.
type meta struct {
	name, selfLink, created, region *string
	id                              *uint64
}

func (k *collection[T]) scopePattern() string {
	if k.regional {
		return `(regions/[^/]+)/` + k.name
	}
	return `(global)/` + k.name
}

func (k *collection[T]) register() {
	handle(http.MethodGet, k.scopePattern(), func(c *Cloud, w http.ResponseWriter, r *http.Request, m []string) { k.list(c, w, r, m) })
	handle(http.MethodPost, k.scopePattern(), func(c *Cloud, w http.ResponseWriter, r *http.Request, m []string) { k.insert(c, w, r, m) })
	item := k.scopePattern() + `/([^/]+)`
	handle(http.MethodGet, item, func(c *Cloud, w http.ResponseWriter, r *http.Request, m []string) { k.get(c, w, r, m) })
	handle(http.MethodDelete, item, func(c *Cloud, w http.ResponseWriter, r *http.Request, m []string) { k.delete(c, w, r, m) })
	if k.mutable {
		handle(http.MethodPut, item, func(c *Cloud, w http.ResponseWriter, r *http.Request, m []string) { k.update(c, w, r, m, false) })
		handle(http.MethodPatch, item, func(c *Cloud, w http.ResponseWriter, r *http.Request, m []string) { k.update(c, w, r, m, true) })
	}
}

// snapshot is every item of project's scope, in name order; under
// c.net.mu.
func (k *collection[T]) snapshot(c *Cloud, project, scope string) []T {
	prefix := scopeURL(project, scope) + "/" + k.name + "/"
	var out []T
	for link, x := range k.items(c.lbInit()) {
		if strings.HasPrefix(link, prefix) {
			out = append(out, cloneWire(*x))
		}
	}
	slices.SortFunc(out, func(a, b T) int { return strings.Compare(*k.meta(&a).name, *k.meta(&b).name) })
	return out
}

// cloneWire deep-copies a wire struct through JSON.
func cloneWire[T any](x T) T {
	var out T
	raw, err := json.Marshal(x)
	if err == nil {
		err = json.Unmarshal(raw, &out)
	}
	if err != nil {
		panic(err)
	}
	return out
}

func (k *collection[T]) list(c *Cloud, w http.ResponseWriter, r *http.Request, m []string) {
	project, scope := m[1], m[2]
	if !c.call(w, k.name+".list", project) {
		return
	}
	self := scopeURL(project, scope) + "/" + k.name
	lq, aerr := c.parseListQuery(r, self, reflect.TypeFor[T]())
	if aerr != nil {
		aerr.write(w)
		return
	}
	c.net.mu.Lock()
	all := k.snapshot(c, project, scope)
	c.net.mu.Unlock()
	items, next := page(lq, all, func(x *T) string { return *k.meta(x).name })
	writeList(w, k.kind+"List", self, items, next)
}

func (k *collection[T]) link(project, scope, name string) string {
	return scopeURL(project, scope) + "/" + k.name + "/" + name
}

func (k *collection[T]) get(c *Cloud, w http.ResponseWriter, r *http.Request, m []string) {
	project, scope, name := m[1], m[2], m[3]
	if !c.call(w, k.name+".get", project) {
		return
	}
	c.net.mu.Lock()
	x, ok := k.items(c.lbInit())[k.link(project, scope, name)]
	var out T
	if ok {
		out = cloneWire(*x)
	}
	c.net.mu.Unlock()
	if !ok {
		notFound(strings.TrimPrefix(k.link(project, scope, name), resourceBase)).write(w)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (k *collection[T]) insert(c *Cloud, w http.ResponseWriter, r *http.Request, m []string) {
	project, scope := m[1], m[2]
	method := k.name + ".insert"
	if !c.call(w, method, project) {
		return
	}
	in := new(T)
	if field, err := cloudtest.DecodeStrict(r.Body, in); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid JSON payload received. %v %s", err, field))
		return
	}
	md := k.meta(in)
	if !validName.MatchString(*md.name) {
		nameError(*md.name).write(w)
		return
	}
	fault := c.opFault(method)
	n := &c.net
	n.mu.Lock()
	defer n.mu.Unlock()
	s := c.lbInit()
	items := k.items(s)
	link := k.link(project, scope, *md.name)
	if _, taken := items[link]; taken {
		alreadyExists(strings.TrimPrefix(link, resourceBase)).write(w)
		return
	}
	if aerr := n.checkIdle(link); aerr != nil {
		aerr.write(w)
		return
	}
	if limit := s.quotas[k.name]; limit > 0 && len(k.snapshot(c, project, scope)) >= limit {
		where := "project"
		if k.regional {
			where = "region " + strings.TrimPrefix(scope, "regions/")
		}
		(&apiError{status: http.StatusForbidden, reason: "quotaExceeded",
			msg: fmt.Sprintf("Quota '%s' exceeded.  Limit: %d.0 in %s.", quotaNames[k.name], limit, where)}).write(w)
		return
	}
	if aerr := k.prepare(c, project, scope, in, nil); aerr != nil {
		aerr.write(w)
		return
	}
	if fault != nil {
		k.undo(c, in)
		answerOp(w, c.begin(project, scope, "insert", link, 0, failed(fault)))
		return
	}
	*md.selfLink = link
	*md.id = n.nextID()
	*md.created = timestamp(c.opts.Now())
	if k.regional {
		*md.region = scopeURL(project, scope)
	}
	items[link] = in
	answerOp(w, c.begin(project, scope, "insert", link, *md.id, c.dataPlaneChanged))
}

// undo releases what prepare took for a write that is not made (an
// ephemeral address); under c.net.mu.
func (k *collection[T]) undo(c *Cloud, x *T) {
	if rule, ok := any(x).(*compute.ForwardingRule); ok {
		c.releaseVIP(rule.IPAddress)
	}
}

func (k *collection[T]) update(c *Cloud, w http.ResponseWriter, r *http.Request, m []string, patch bool) {
	project, scope, name := m[1], m[2], m[3]
	method := k.name + ".update"
	if patch {
		method = k.name + ".patch"
	}
	if !c.call(w, method, project) {
		return
	}
	fault := c.opFault(method)
	n := &c.net
	n.mu.Lock()
	defer n.mu.Unlock()
	items := k.items(c.lbInit())
	link := k.link(project, scope, name)
	old, ok := items[link]
	if !ok {
		notFound(strings.TrimPrefix(link, resourceBase)).write(w)
		return
	}
	if aerr := n.checkIdle(link); aerr != nil {
		aerr.write(w)
		return
	}
	in := new(T)
	if patch {
		*in = cloneWire(*old)
	}
	if field, err := cloudtest.DecodeStrict(r.Body, in); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid JSON payload received. %v %s", err, field))
		return
	}
	md, omd := k.meta(in), k.meta(old)
	if *md.name != name {
		invalidField("resource.name", *md.name, "The name of a resource cannot be changed.").write(w)
		return
	}
	if aerr := k.prepare(c, project, scope, in, old); aerr != nil {
		aerr.write(w)
		return
	}
	if fault != nil {
		answerOp(w, c.begin(project, scope, "update", link, *omd.id, failed(fault)))
		return
	}
	*md.selfLink, *md.id, *md.created = link, *omd.id, *omd.created
	if k.regional {
		*md.region = scopeURL(project, scope)
	}
	items[link] = in
	answerOp(w, c.begin(project, scope, "update", link, *md.id, c.dataPlaneChanged))
}

func (k *collection[T]) delete(c *Cloud, w http.ResponseWriter, r *http.Request, m []string) {
	project, scope, name := m[1], m[2], m[3]
	method := k.name + ".delete"
	if !c.call(w, method, project) {
		return
	}
	fault := c.opFault(method)
	n := &c.net
	n.mu.Lock()
	defer n.mu.Unlock()
	items := k.items(c.lbInit())
	link := k.link(project, scope, name)
	x, ok := items[link]
	if !ok {
		notFound(strings.TrimPrefix(link, resourceBase)).write(w)
		return
	}
	if aerr := n.checkIdle(link); aerr != nil {
		aerr.write(w)
		return
	}
	if k.user != nil {
		if u := k.user(c, link); u != "" {
			inUse(strings.TrimSuffix(snake(k.name), "s"), strings.TrimPrefix(link, resourceBase), u).write(w)
			return
		}
	}
	id := *k.meta(x).id
	if fault != nil {
		answerOp(w, c.begin(project, scope, "delete", link, id, failed(fault)))
		return
	}
	delete(items, link)
	if k.removed != nil {
		k.removed(c, x)
	}
	answerOp(w, c.begin(project, scope, "delete", link, id, c.dataPlaneChanged))
}

// snake is a collection's name as GCE's messages write kinds
// (targetPools: target_pools).
func snake(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

var (
	addresses = &collection[compute.Address]{name: "addresses", regional: true, kind: "compute#address",
		items: func(s *lbState) map[string]*compute.Address { return s.addresses },
		meta: func(a *compute.Address) meta {
			return meta{name: &a.Name, selfLink: &a.SelfLink, created: &a.CreationTimestamp, region: &a.Region, id: &a.Id}
		},
		prepare: (*Cloud).prepareAddress,
		removed: func(c *Cloud, a *compute.Address) {
			// An address in use stays its rule's (ephemeral).
			if len(a.Users) == 0 {
				c.releaseVIP(a.Address)
			}
		}}
	targetPools = &collection[compute.TargetPool]{name: "targetPools", regional: true, kind: "compute#targetPool",
		items: func(s *lbState) map[string]*compute.TargetPool { return s.pools },
		meta: func(p *compute.TargetPool) meta {
			return meta{name: &p.Name, selfLink: &p.SelfLink, created: &p.CreationTimestamp, region: &p.Region, id: &p.Id}
		},
		prepare: (*Cloud).preparePool,
		user: func(c *Cloud, link string) string {
			return c.ruleUsing(func(fr *compute.ForwardingRule) bool { return fr.Target == link })
		}}
	forwardingRules = &collection[compute.ForwardingRule]{name: "forwardingRules", regional: true, kind: "compute#forwardingRule",
		items: func(s *lbState) map[string]*compute.ForwardingRule { return s.rules },
		meta: func(f *compute.ForwardingRule) meta {
			return meta{name: &f.Name, selfLink: &f.SelfLink, created: &f.CreationTimestamp, region: &f.Region, id: &f.Id}
		},
		prepare: (*Cloud).prepareRule,
		removed: (*Cloud).ruleRemoved}
	firewalls = &collection[compute.Firewall]{name: "firewalls", kind: "compute#firewall", mutable: true,
		items: func(s *lbState) map[string]*compute.Firewall { return s.firewalls },
		meta: func(f *compute.Firewall) meta {
			return meta{name: &f.Name, selfLink: &f.SelfLink, created: &f.CreationTimestamp, region: new(string), id: &f.Id}
		},
		prepare: (*Cloud).prepareFirewall}
	httpHealthChecks = &collection[compute.HttpHealthCheck]{name: "httpHealthChecks", kind: "compute#httpHealthCheck", mutable: true,
		items: func(s *lbState) map[string]*compute.HttpHealthCheck { return s.checks },
		meta: func(h *compute.HttpHealthCheck) meta {
			return meta{name: &h.Name, selfLink: &h.SelfLink, created: &h.CreationTimestamp, region: new(string), id: &h.Id}
		},
		prepare: (*Cloud).prepareHTTPCheck,
		user: func(c *Cloud, link string) string {
			s := c.lbInit()
			for _, k := range slices.Sorted(maps.Keys(s.pools)) {
				if slices.Contains(s.pools[k].HealthChecks, link) {
					return strings.TrimPrefix(k, resourceBase)
				}
			}
			return ""
		}}
)

func init() {
	addresses.register()
	targetPools.register()
	forwardingRules.register()
	firewalls.register()
	httpHealthChecks.register()
	handle(http.MethodPost, `(regions/[^/]+)/targetPools/([^/]+)/addInstance`, func(c *Cloud, w http.ResponseWriter, r *http.Request, m []string) {
		c.servePoolMembers(w, r, m, true)
	})
	handle(http.MethodPost, `(regions/[^/]+)/targetPools/([^/]+)/removeInstance`, func(c *Cloud, w http.ResponseWriter, r *http.Request, m []string) {
		c.servePoolMembers(w, r, m, false)
	})
}

// ruleUsing is the partial URL of the first forwarding rule (by link) that
// f holds for ("": none); under c.net.mu.
func (c *Cloud) ruleUsing(f func(*compute.ForwardingRule) bool) string {
	s := c.lbInit()
	for _, k := range slices.Sorted(maps.Keys(s.rules)) {
		if f(s.rules[k]) {
			return strings.TrimPrefix(k, resourceBase)
		}
	}
	return ""
}

func (c *Cloud) prepareAddress(project, scope string, a, _ *compute.Address) *apiError {
	s := c.lbInit()
	a.Kind = "compute#address"
	a.AddressType = cmp.Or(a.AddressType, "EXTERNAL")
	a.NetworkTier = cmp.Or(a.NetworkTier, "PREMIUM")
	if a.AddressType != "EXTERNAL" && a.AddressType != "INTERNAL" {
		return invalidField("resource.addressType", a.AddressType, "Must be EXTERNAL or INTERNAL.")
	}
	if a.Subnetwork != "" {
		ref, ok := parseRef(project, a.Subnetwork, "regions", "*", "subnetworks", "*")
		if !ok {
			return invalidField("resource.subnetwork", a.Subnetwork, "Must be a subnetwork's URL.")
		}
		a.Subnetwork = ref.link()
	}
	a.Status, a.Users = "RESERVED", nil
	if a.Address == "" {
		vip, err := c.allocVIP()
		if err != nil {
			return &apiError{status: http.StatusServiceUnavailable, reason: "backendError", msg: err.Error()}
		}
		a.Address = vip
		return nil
	}
	if _, held := s.vips[a.Address]; !held {
		// GCE answers 400 for an address it cannot reserve.
		return invalidField("resource.address", a.Address, "The specified IP address is not available.")
	}
	for _, other := range s.addresses {
		if other.Address == a.Address {
			return invalidField("resource.address", a.Address, "The specified IP address is already reserved by '"+strings.TrimPrefix(other.SelfLink, resourceBase)+"'.")
		}
	}
	// The ephemeral address of a rule becomes static, in use by it.
	for _, k := range slices.Sorted(maps.Keys(s.rules)) {
		if s.rules[k].IPAddress == a.Address {
			a.Status, a.Users = "IN_USE", append(a.Users, k)
		}
	}
	return nil
}

// instanceLink is an instance reference as stored, and whether the
// instance exists.
func (c *Cloud) instanceLink(project, ref string) (string, bool) {
	// The upstream GCE provider writes a pool's instances as
	// /zones/Z/instances/N, which GCE takes as the project's.
	r, ok := parseRef(project, strings.TrimPrefix(ref, "/"), "zones", "*", "instances", "*")
	if !ok {
		return "", false
	}
	_, exists := c.Get(r.project, r.parts[1], r.parts[3])
	return r.link(), exists
}

func (c *Cloud) preparePool(project, scope string, p, _ *compute.TargetPool) *apiError {
	s := c.lbInit()
	p.Kind = "compute#targetPool"
	p.SessionAffinity = cmp.Or(p.SessionAffinity, "NONE")
	switch p.SessionAffinity {
	case "NONE", "CLIENT_IP", "CLIENT_IP_PROTO":
	default:
		return invalidField("resource.sessionAffinity", p.SessionAffinity, "Must be NONE, CLIENT_IP or CLIENT_IP_PROTO.")
	}
	if len(p.HealthChecks) > 1 {
		return invalidField("resource.healthChecks", strings.Join(p.HealthChecks, ","), "A target pool takes at most one health check.")
	}
	for i, h := range p.HealthChecks {
		ref, ok := parseRef(project, h, "global", "httpHealthChecks", "*")
		if !ok {
			return invalidField("resource.healthChecks", h, "Must be an HTTP health check's URL.")
		}
		if _, exists := s.checks[ref.link()]; !exists {
			return notFound(ref.path())
		}
		p.HealthChecks[i] = ref.link()
	}
	seen := map[string]bool{}
	for i, in := range p.Instances {
		link, exists := c.instanceLink(project, in)
		if link == "" {
			return invalidField("resource.instances", in, "Must be an instance's URL.")
		}
		if !exists {
			return notFound(strings.TrimPrefix(link, resourceBase))
		}
		if seen[link] {
			return invalidField("resource.instances", in, "Duplicate instance.")
		}
		seen[link] = true
		p.Instances[i] = link
	}
	return nil
}

func (c *Cloud) servePoolMembers(w http.ResponseWriter, r *http.Request, m []string, add bool) {
	project, scope, name := m[1], m[2], m[3]
	verb := map[bool]string{true: "addInstance", false: "removeInstance"}[add]
	method := "targetPools." + verb
	if !c.call(w, method, project) {
		return
	}
	var req struct {
		Instances []*compute.InstanceReference `json:"instances"`
	}
	if field, err := cloudtest.DecodeStrict(r.Body, &req); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid JSON payload received. %v %s", err, field))
		return
	}
	fault := c.opFault(method)
	n := &c.net
	n.mu.Lock()
	defer n.mu.Unlock()
	s := c.lbInit()
	link := targetPools.link(project, scope, name)
	p, ok := s.pools[link]
	if !ok {
		notFound(strings.TrimPrefix(link, resourceBase)).write(w)
		return
	}
	if aerr := n.checkIdle(link); aerr != nil {
		aerr.write(w)
		return
	}
	members := slices.Clone(p.Instances)
	for _, ref := range req.Instances {
		if ref == nil {
			continue
		}
		il, exists := c.instanceLink(project, ref.Instance)
		switch {
		case il == "":
			invalidField("instances.instance", ref.Instance, "Must be an instance's URL.").write(w)
			return
		case add && !exists:
			notFound(strings.TrimPrefix(il, resourceBase)).write(w)
			return
		case add && slices.Contains(members, il):
			invalidField("instances.instance", ref.Instance, "The instance is already a member of '"+strings.TrimPrefix(link, resourceBase)+"'.").write(w)
			return
		case !add && !slices.Contains(members, il):
			invalidField("instances.instance", ref.Instance, "The instance is not a member of '"+strings.TrimPrefix(link, resourceBase)+"'.").write(w)
			return
		case add:
			members = append(members, il)
		default:
			members = slices.DeleteFunc(members, func(x string) bool { return x == il })
		}
	}
	if fault != nil {
		answerOp(w, c.begin(project, scope, verb, link, p.Id, failed(fault)))
		return
	}
	p.Instances = members
	answerOp(w, c.begin(project, scope, verb, link, p.Id, c.dataPlaneChanged))
}

// portRange is a rule's portRange "A-B" or "A" as its ports.
func portRange(s string) ([]int, bool) {
	lo, hi, ok := strings.Cut(s, "-")
	if !ok {
		hi = lo
	}
	a, err1 := strconv.Atoi(lo)
	b, err2 := strconv.Atoi(hi)
	if err1 != nil || err2 != nil || a < 1 || b > 65535 || a > b {
		return nil, false
	}
	var out []int
	for p := a; p <= b; p++ {
		out = append(out, p)
	}
	return out, true
}

func (c *Cloud) prepareRule(project, scope string, fr, _ *compute.ForwardingRule) *apiError {
	s := c.lbInit()
	fr.Kind = "compute#forwardingRule"
	fr.LoadBalancingScheme = cmp.Or(fr.LoadBalancingScheme, "EXTERNAL")
	fr.IPProtocol = cmp.Or(fr.IPProtocol, "TCP")
	if fr.IPProtocol != "TCP" && fr.IPProtocol != "UDP" {
		return invalidField("resource.IPProtocol", fr.IPProtocol, "Only TCP and UDP are served here.")
	}
	switch {
	case fr.PortRange != "" && (len(fr.Ports) > 0 || fr.AllPorts):
		return invalidField("resource.portRange", fr.PortRange, "portRange cannot be set with ports or allPorts.")
	case fr.PortRange != "":
		if _, ok := portRange(fr.PortRange); !ok {
			return invalidField("resource.portRange", fr.PortRange, "Must be a port or a range of ports.")
		}
	case len(fr.Ports) > 5:
		return invalidField("resource.ports", strings.Join(fr.Ports, ","), "At most five ports.")
	}
	for _, p := range fr.Ports {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return invalidField("resource.ports", p, "Must be a port.")
		}
	}
	switch fr.LoadBalancingScheme {
	case "EXTERNAL":
		fr.NetworkTier = cmp.Or(fr.NetworkTier, "PREMIUM")
		ref, ok := parseRef(project, fr.Target, "regions", "*", "targetPools", "*")
		if !ok || fr.BackendService != "" {
			return invalidField("resource.target", fr.Target, "An EXTERNAL forwarding rule here targets a target pool.")
		}
		if _, exists := s.pools[ref.link()]; !exists {
			return notFound(ref.path())
		}
		fr.Target = ref.link()
	case "INTERNAL":
		ref, ok := parseRef(project, fr.BackendService, "regions", "*", "backendServices", "*")
		if !ok || fr.Target != "" {
			return invalidField("resource.backendService", fr.BackendService, "An INTERNAL forwarding rule takes a regional backend service.")
		}
		fr.BackendService = ref.link()
		for _, f := range []struct {
			field string
			v     *string
			shape []string
		}{{"resource.network", &fr.Network, []string{"global", "networks", "*"}},
			{"resource.subnetwork", &fr.Subnetwork, []string{"regions", "*", "subnetworks", "*"}}} {
			if *f.v == "" {
				continue
			}
			ref, ok := parseRef(project, *f.v, f.shape...)
			if !ok {
				return invalidField(f.field, *f.v, "Must be a resource URL.")
			}
			*f.v = ref.link()
		}
	default:
		return invalidField("resource.loadBalancingScheme", fr.LoadBalancingScheme, "Must be EXTERNAL or INTERNAL here.")
	}
	if fr.IPAddress == "" {
		vip, err := c.allocVIP()
		if err != nil {
			return &apiError{status: http.StatusServiceUnavailable, reason: "backendError", msg: err.Error()}
		}
		fr.IPAddress = vip
		return nil
	}
	if ref, ok := parseRef(project, fr.IPAddress, "regions", "*", "addresses", "*"); ok && strings.Contains(fr.IPAddress, "/") {
		a, exists := s.addresses[ref.link()]
		if !exists {
			return notFound(ref.path())
		}
		fr.IPAddress = a.Address
	}
	if _, held := s.vips[fr.IPAddress]; !held {
		return invalidField("resource.IPAddress", fr.IPAddress, "Specified IP address is not reserved in this region.")
	}
	if u := c.ruleUsing(func(o *compute.ForwardingRule) bool {
		return o.IPAddress == fr.IPAddress && o.IPProtocol == fr.IPProtocol
	}); u != "" {
		return invalidField("resource.IPAddress", fr.IPAddress, "Specified IP address is in-use and would result in a conflict.")
	}
	link := scopeURL(project, scope) + "/forwardingRules/" + fr.Name
	for _, a := range s.addresses {
		if a.Address == fr.IPAddress {
			a.Status, a.Users = "IN_USE", append(slices.DeleteFunc(a.Users, func(u string) bool { return u == link }), link)
		}
	}
	return nil
}

// ruleRemoved frees a deleted rule's address: its address resource is
// RESERVED again, an ephemeral one is released.
func (c *Cloud) ruleRemoved(fr *compute.ForwardingRule) {
	s := c.lbInit()
	reserved := false
	for _, a := range s.addresses {
		if a.Address != fr.IPAddress {
			continue
		}
		reserved = true
		a.Users = slices.DeleteFunc(a.Users, func(u string) bool { return u == fr.SelfLink })
		if len(a.Users) == 0 {
			a.Status = "RESERVED"
		}
	}
	if id, ok := s.vips[fr.IPAddress]; ok {
		c.net.dp.Prefix = DataPlanePrefix
		if reserved {
			_, _ = c.net.dp.Serve(id, nil, nil)
		} else {
			c.releaseVIP(fr.IPAddress)
		}
	}
}

func (c *Cloud) prepareFirewall(project, _ string, f, _ *compute.Firewall) *apiError {
	f.Kind = "compute#firewall"
	f.Direction = cmp.Or(f.Direction, "INGRESS")
	if f.Priority == 0 {
		f.Priority = 1000
	}
	if f.Network == "" {
		f.Network = "global/networks/default"
	}
	ref, ok := parseRef(project, f.Network, "global", "networks", "*")
	if !ok {
		return invalidField("resource.network", f.Network, "Must be a network's URL.")
	}
	f.Network = ref.link()
	if len(f.Allowed) == 0 && len(f.Denied) == 0 {
		return invalidField("resource.allowed", "", "A firewall rule needs allowed or denied.")
	}
	for _, r := range append(slices.Clone(f.SourceRanges), f.DestinationRanges...) {
		if _, err := netip.ParsePrefix(r); err != nil {
			if _, err := netip.ParseAddr(r); err != nil {
				return invalidField("resource.sourceRanges", r, "Must be a CIDR range.")
			}
		}
	}
	for _, a := range f.Allowed {
		switch strings.ToLower(a.IPProtocol) {
		case "tcp", "udp", "sctp", "icmp", "all", "esp", "ah":
		default:
			return invalidField("resource.allowed.IPProtocol", a.IPProtocol, "Unknown protocol.")
		}
	}
	return nil
}

func (c *Cloud) prepareHTTPCheck(_, _ string, h, _ *compute.HttpHealthCheck) *apiError {
	h.Kind = "compute#httpHealthCheck"
	h.Port = cmp.Or(h.Port, 80)
	h.RequestPath = cmp.Or(h.RequestPath, "/")
	h.CheckIntervalSec = cmp.Or(h.CheckIntervalSec, 5)
	h.TimeoutSec = cmp.Or(h.TimeoutSec, 5)
	h.HealthyThreshold = cmp.Or(h.HealthyThreshold, 2)
	h.UnhealthyThreshold = cmp.Or(h.UnhealthyThreshold, 2)
	if h.Port < 1 || h.Port > 65535 {
		return invalidField("resource.port", strconv.FormatInt(h.Port, 10), "Must be a port.")
	}
	if h.TimeoutSec > h.CheckIntervalSec {
		return invalidField("resource.timeoutSec", strconv.FormatInt(h.TimeoutSec, 10), "Timeout sec must be less than or equal to check interval sec.")
	}
	return nil
}

// Addresses are the region's addresses, in name order.
func (c *Cloud) Addresses(project, region string) []compute.Address {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	return addresses.snapshot(c, project, "regions/"+region)
}

// TargetPools are the region's target pools, in name order.
func (c *Cloud) TargetPools(project, region string) []compute.TargetPool {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	return targetPools.snapshot(c, project, "regions/"+region)
}

// ForwardingRules are the region's forwarding rules, in name order.
func (c *Cloud) ForwardingRules(project, region string) []compute.ForwardingRule {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	return forwardingRules.snapshot(c, project, "regions/"+region)
}

// Firewalls are the project's firewall rules, in name order.
func (c *Cloud) Firewalls(project string) []compute.Firewall {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	return firewalls.snapshot(c, project, "global")
}

// HTTPHealthChecks are the project's legacy HTTP health checks, in name
// order.
func (c *Cloud) HTTPHealthChecks(project string) []compute.HttpHealthCheck {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	return httpHealthChecks.snapshot(c, project, "global")
}

// PutTargetPool stores a target pool as given (a test's out-of-band
// change, such as one the cloud's own CCM made): its references must be
// canonical; the data plane follows at once.
func (c *Cloud) PutTargetPool(project, region string, p compute.TargetPool) compute.TargetPool {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	s := c.lbInit()
	link := targetPools.link(project, "regions/"+region, p.Name)
	if old, ok := s.pools[link]; ok {
		p.Id, p.CreationTimestamp = old.Id, old.CreationTimestamp
	} else {
		p.Id, p.CreationTimestamp = c.net.nextID(), timestamp(c.opts.Now())
	}
	p.Kind, p.SelfLink, p.Region = "compute#targetPool", link, scopeURL(project, "regions/"+region)
	p.SessionAffinity = cmp.Or(p.SessionAffinity, "NONE")
	s.pools[link] = &p
	c.syncDataPlane()
	return cloneWire(p)
}
