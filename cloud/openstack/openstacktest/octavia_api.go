package openstacktest

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// Octavia's API under loadBalancerBase: its version document at the root,
// /v2 (and /v2.0, gophercloud's) /lbaas/... with a token.

// loadBalancerBase is Octavia's endpoint in the catalog.
const loadBalancerBase = "/load-balancer"

// LoadBalancerURL is Octavia's endpoint as the catalog gives it.
func (c *Cloud) LoadBalancerURL() string { return "http://" + c.Servers.Addr() + loadBalancerBase }

// octaviaTime is how Octavia writes created_at and updated_at (no zone).
const octaviaTime = "2006-01-02T15:04:05"

// octaviaError is Octavia's (wsme's) error body.
func octaviaError(w http.ResponseWriter, status int, msg string) {
	fault := "Client"
	if status >= 500 {
		fault = "Server"
	}
	cloudtest.WriteJSON(w, status, map[string]any{"faultcode": fault, "faultstring": msg, "debuginfo": nil})
}

var (
	lbaasPath   = regexp.MustCompile(`^/(loadbalancers|listeners|pools|healthmonitors)(?:/([^/]+))?(?:/(status|members))?$`)
	versionPath = regexp.MustCompile(`^/v2(?:\.0)?(/.*)$`)
)

// serveLoadBalancer is Octavia.
func (c *Cloud) serveLoadBalancer(w http.ResponseWriter, r *http.Request, path string) {
	if path == "" || path == "/" {
		c.serveVersions(w, r)
		return
	}
	if !c.validToken(r.Header.Get("X-Auth-Token")) {
		c.Counter.Add("unauthorized")
		unauthorized(w)
		return
	}
	m := versionPath.FindStringSubmatch(path)
	rest, ok := "", m != nil
	if ok {
		rest, ok = strings.CutPrefix(m[1], "/lbaas")
	}
	p := lbaasPath.FindStringSubmatch(rest)
	if !ok || p == nil || p[3] == "status" && p[1] != "loadbalancers" || p[3] == "members" && p[1] != "pools" {
		octaviaError(w, http.StatusNotFound, "The resource could not be found.")
		return
	}
	kind, id, sub := p[1], p[2], p[3]
	method := methodName(kind, id, sub, r.Method)
	if method == "" {
		octaviaError(w, http.StatusMethodNotAllowed, "The method is not allowed for the requested URL.")
		return
	}
	if f := c.count(method); f != nil {
		octaviaError(w, f.Status, "injected fault")
		return
	}
	var body any
	switch method {
	case "lb-create":
		body = &struct {
			LB lbBody `json:"loadbalancer"`
		}{}
	case "lb-update":
		body = &struct {
			LB lbBody `json:"loadbalancer"`
		}{}
	case "listener-create", "listener-update":
		body = &struct {
			L listenerBody `json:"listener"`
		}{}
	case "pool-create", "pool-update":
		body = &struct {
			P poolBody `json:"pool"`
		}{}
	case "monitor-create", "monitor-update":
		body = &struct {
			M monitorBody `json:"healthmonitor"`
		}{}
	case "member-batch":
		body = &struct {
			M []memberBody `json:"members"`
		}{}
	}
	if body != nil {
		if field, err := cloudtest.DecodeStrict(r.Body, body); err != nil {
			msg := "Invalid input for field/attribute: " + err.Error()
			if field != "" {
				msg = fmt.Sprintf("Invalid input: unknown attribute %s", field)
			}
			octaviaError(w, http.StatusBadRequest, msg)
			return
		}
	}
	o := &c.octavia
	o.mu.Lock()
	defer o.mu.Unlock()
	o.init()
	status, out, err := c.octaviaCall(r, method, id, body)
	switch {
	case err != nil:
		octaviaError(w, err.status, err.msg)
	case out == nil:
		w.WriteHeader(status)
	default:
		cloudtest.WriteJSON(w, status, out)
	}
}

// methodName is the counted name of a call ("" for one Octavia lacks).
func methodName(kind, id, sub, verb string) string {
	short := map[string]string{"loadbalancers": "lb", "listeners": "listener", "pools": "pool", "healthmonitors": "monitor"}[kind]
	switch {
	case sub == "status" && verb == http.MethodGet:
		return "lb-status"
	case sub == "members" && verb == http.MethodGet:
		return "member-list"
	case sub == "members" && verb == http.MethodPut:
		return "member-batch"
	case sub != "":
		return ""
	case id == "" && verb == http.MethodGet:
		return short + "-list"
	case id == "" && verb == http.MethodPost:
		return short + "-create"
	case id != "" && verb == http.MethodGet:
		return short + "-get"
	case id != "" && verb == http.MethodPut:
		return short + "-update"
	case id != "" && verb == http.MethodDelete:
		return short + "-delete"
	}
	return ""
}

// serveVersions is Octavia's version document: v2.0 to v2.30, the last
// CURRENT (so every feature OCCM detects is there).
func (c *Cloud) serveVersions(w http.ResponseWriter, r *http.Request) {
	c.count("lb-versions")
	var vs []map[string]any
	for i := 0; i <= 30; i++ {
		st := "SUPPORTED"
		if i == 30 {
			st = "CURRENT"
		}
		vs = append(vs, map[string]any{"id": fmt.Sprintf("v2.%d", i), "status": st, "updated": "2024-01-01T00:00:00Z",
			"links": []map[string]any{{"href": "http://" + r.Host + loadBalancerBase + "/v2", "rel": "self"}}})
	}
	cloudtest.WriteJSON(w, http.StatusOK, map[string]any{"versions": vs})
}

// mutable is Octavia's 409 when l is not ACTIVE (a delete also takes
// ERROR).
func mutable(l *LoadBalancer, deleting bool) *apiError {
	if l.ProvisioningStatus == StatusActive || deleting && l.ProvisioningStatus == StatusError {
		return nil
	}
	if strings.HasPrefix(l.ProvisioningStatus, "PENDING_") {
		return &apiError{409, fmt.Sprintf("Invalid state %s of loadbalancer resource %s", l.ProvisioningStatus, l.ID)}
	}
	return &apiError{409, fmt.Sprintf("Load Balancer %s is immutable and cannot be updated.", l.ID)}
}

// find finds a child's load balancer and index (o.mu held).
func (c *Cloud) findListener(id string) (*LoadBalancer, int) {
	for _, l := range c.octavia.lbs {
		for i, ln := range l.Listeners {
			if ln.ID == id {
				return l, i
			}
		}
	}
	return nil, -1
}

func (c *Cloud) findPool(id string) (*LoadBalancer, int) {
	for _, l := range c.octavia.lbs {
		for i, p := range l.Pools {
			if p.ID == id {
				return l, i
			}
		}
	}
	return nil, -1
}

func (c *Cloud) findMonitor(id string) (*LoadBalancer, int) {
	for _, l := range c.octavia.lbs {
		for i, p := range l.Pools {
			if p.Monitor != nil && p.Monitor.ID == id {
				return l, i
			}
		}
	}
	return nil, -1
}

func notFound(kind, id string) *apiError {
	return &apiError{404, fmt.Sprintf("%s %s not found.", kind, id)}
}

// changed marks l PENDING_UPDATE after a change of a child.
func (c *Cloud) changed(l *LoadBalancer) {
	l.ProvisioningStatus = StatusPendingUpdate
	l.OperatingStatus = operating(l)
	c.pending(l)
}

// octaviaCall does a call (o.mu held): its status and body.
func (c *Cloud) octaviaCall(r *http.Request, method, id string, body any) (int, any, *apiError) {
	o := &c.octavia
	q := r.URL.Query()
	switch method {
	case "lb-list":
		var items []map[string]any
		for _, lid := range o.order {
			items = append(items, lbWire(o.lbs[lid], false))
		}
		return c.list(r, "loadbalancers", items, []string{"name", "id", "description", "provisioning_status", "operating_status",
			"vip_address", "vip_port_id", "vip_subnet_id", "vip_network_id", "project_id", "provider", "flavor_id", "availability_zone"})
	case "lb-get", "lb-status":
		l := o.lbs[id]
		if l == nil {
			return 0, nil, notFound("Load Balancer", id)
		}
		if method == "lb-status" {
			return 200, map[string]any{"statuses": statusTree(l)}, nil
		}
		return 200, map[string]any{"loadbalancer": lbWire(l, false)}, nil
	case "lb-create":
		b := body.(*struct {
			LB lbBody `json:"loadbalancer"`
		}).LB
		if q := c.opts.LB.Quota; q > 0 && len(o.lbs) >= q {
			return 0, nil, &apiError{403, "Quota has been met for resources: LoadBalancer"}
		}
		l, err := b.graph()
		if err != nil {
			return 0, nil, err
		}
		l.ProvisioningStatus = StatusPendingCreate
		l.fill(c.opts.Now().UTC())
		for i := range l.Pools {
			n, _ := strconv.Atoi(strings.TrimPrefix(l.Pools[i].ListenerID, "#"))
			l.Pools[i].ListenerID = l.Listeners[n].ID
			l.Listeners[n].DefaultPoolID = l.Pools[i].ID
		}
		o.lbs[l.ID] = l
		o.order = append(o.order, l.ID)
		if e := c.serveLB(l); e != nil {
			delete(o.lbs, l.ID)
			o.order = o.order[:len(o.order)-1]
			return 0, nil, &apiError{500, "openstacktest: data plane: " + e.Error()}
		}
		c.pending(l)
		return 201, map[string]any{"loadbalancer": lbWire(l, true)}, nil
	case "lb-update":
		b := body.(*struct {
			LB lbBody `json:"loadbalancer"`
		}).LB
		l := o.lbs[id]
		if l == nil {
			return 0, nil, notFound("Load Balancer", id)
		}
		if b.VIPSubnetID != "" || b.VIPNetworkID != "" || b.VIPPortID != "" || b.VIPAddress != "" || b.FlavorID != "" ||
			b.AvailabilityZone != "" || b.Provider != "" || b.Listeners != nil || b.Pools != nil {
			return 0, nil, invalid("only name, description, admin_state_up, vip_qos_policy_id and tags can be changed")
		}
		if err := mutable(l, false); err != nil {
			return 0, nil, err
		}
		if err := checkName("load balancer", b.Name); err != nil {
			return 0, nil, err
		}
		l.Name, l.Description = or(b.Name, l.Name), or(b.Description, l.Description)
		if b.Tags != nil {
			if err := checkTags(*b.Tags); err != nil {
				return 0, nil, err
			}
			l.Tags = slices.Clone(*b.Tags)
		}
		c.changed(l)
		return 200, map[string]any{"loadbalancer": lbWire(l, false)}, nil
	case "lb-delete":
		l := o.lbs[id]
		if l == nil {
			return 0, nil, notFound("Load Balancer", id)
		}
		if err := mutable(l, true); err != nil {
			return 0, nil, err
		}
		if (len(l.Listeners) > 0 || len(l.Pools) > 0) && q.Get("cascade") != "true" {
			return 0, nil, &apiError{400, fmt.Sprintf("Cannot delete Load Balancer %s - it has children", id)}
		}
		l.ProvisioningStatus = StatusPendingDelete
		c.pending(l)
		return 204, nil, nil
	}
	kind, _, _ := strings.Cut(method, "-")
	switch kind {
	case "listener":
		return c.listenerCall(r, method, id, body)
	case "pool", "member":
		return c.poolCall(r, method, id, body)
	case "monitor":
		return c.monitorCall(r, method, id, body)
	}
	return 0, nil, &apiError{405, "The method is not allowed for the requested URL."}
}

func (c *Cloud) listenerCall(r *http.Request, method, id string, body any) (int, any, *apiError) {
	o := &c.octavia
	switch method {
	case "listener-list":
		var items []map[string]any
		for _, lid := range o.order {
			for _, ln := range o.lbs[lid].Listeners {
				w := listenerWire(o.lbs[lid], ln, false)
				w["_loadbalancer_id"] = lid
				items = append(items, w)
			}
		}
		return c.list(r, "listeners", items, []string{"loadbalancer_id", "name", "id", "protocol", "protocol_port", "default_pool_id", "provisioning_status"})
	case "listener-create":
		b := body.(*struct {
			L listenerBody `json:"listener"`
		}).L
		l := o.lbs[b.LoadbalancerID]
		if l == nil {
			return 0, nil, &apiError{400, fmt.Sprintf("Validation failure: Load Balancer %s not found.", b.LoadbalancerID)}
		}
		ln, err := b.listener()
		if err != nil {
			return 0, nil, err
		}
		if err := mutable(l, false); err != nil {
			return 0, nil, err
		}
		if err := portTaken(l, ln.Protocol, ln.Port); err != nil {
			return 0, nil, err
		}
		var pool *Pool
		switch {
		case b.DefaultPool != nil:
			p, err := b.DefaultPool.pool(ln.Protocol)
			if err != nil {
				return 0, nil, err
			}
			pool = &p
		case b.DefaultPoolID != nil && *b.DefaultPoolID != "":
			_, i := c.findPool(*b.DefaultPoolID)
			if i < 0 || l.Pools[i].ListenerID != "" {
				return 0, nil, invalid("default_pool_id %s is not a free pool of the load balancer", *b.DefaultPoolID)
			}
			ln.DefaultPoolID = l.Pools[i].ID
		}
		l.Listeners = append(l.Listeners, ln)
		if pool != nil {
			l.Pools = append(l.Pools, *pool)
		}
		l.fill(l.Updated)
		n := len(l.Listeners) - 1
		if pool != nil {
			p := &l.Pools[len(l.Pools)-1]
			p.ListenerID = l.Listeners[n].ID
			l.Listeners[n].DefaultPoolID = p.ID
		} else if ln.DefaultPoolID != "" {
			_, i := c.findPool(ln.DefaultPoolID)
			l.Pools[i].ListenerID = l.Listeners[n].ID
		}
		c.changed(l)
		return 201, map[string]any{"listener": listenerWire(l, l.Listeners[n], false)}, nil
	}
	l, i := c.findListener(id)
	if l == nil {
		return 0, nil, notFound("Listener", id)
	}
	switch method {
	case "listener-get":
		return 200, map[string]any{"listener": listenerWire(l, l.Listeners[i], false)}, nil
	case "listener-update":
		b := body.(*struct {
			L listenerBody `json:"listener"`
		}).L
		if b.Protocol != "" || b.ProtocolPort != nil || b.LoadbalancerID != "" || b.DefaultPool != nil {
			return 0, nil, invalid("protocol, protocol_port and loadbalancer_id can only be set at create time")
		}
		b.Protocol = l.Listeners[i].Protocol
		if err := checkListenerNumbers(&b); err != nil {
			return 0, nil, err
		}
		if err := mutable(l, false); err != nil {
			return 0, nil, err
		}
		ln := &l.Listeners[i]
		ln.Name, ln.Description = or(b.Name, ln.Name), or(b.Description, ln.Description)
		ln.ConnectionLimit = or(b.ConnectionLimit, ln.ConnectionLimit)
		ln.TimeoutClientData = or(b.TimeoutClientData, ln.TimeoutClientData)
		ln.TimeoutMemberConnect = or(b.TimeoutMemberConnect, ln.TimeoutMemberConnect)
		ln.TimeoutMemberData = or(b.TimeoutMemberData, ln.TimeoutMemberData)
		ln.TimeoutTCPInspect = or(b.TimeoutTCPInspect, ln.TimeoutTCPInspect)
		if b.AllowedCIDRs != nil {
			ln.AllowedCIDRs = slices.Clone(*b.AllowedCIDRs)
		}
		if b.Tags != nil {
			ln.Tags = slices.Clone(*b.Tags)
		}
		c.changed(l)
		return 200, map[string]any{"listener": listenerWire(l, *ln, false)}, nil
	case "listener-delete":
		if err := mutable(l, false); err != nil {
			return 0, nil, err
		}
		for j := range l.Pools {
			if l.Pools[j].ListenerID == id {
				l.Pools[j].ListenerID = ""
			}
		}
		l.Listeners = slices.Delete(l.Listeners, i, i+1)
		c.changed(l)
		return 204, nil, nil
	}
	return 0, nil, &apiError{405, "The method is not allowed for the requested URL."}
}

func (c *Cloud) poolCall(r *http.Request, method, id string, body any) (int, any, *apiError) {
	o := &c.octavia
	switch method {
	case "pool-list":
		var items []map[string]any
		for _, lid := range o.order {
			for _, p := range o.lbs[lid].Pools {
				w := poolWire(o.lbs[lid], p, false)
				w["_loadbalancer_id"], w["_listener_id"] = lid, p.ListenerID
				items = append(items, w)
			}
		}
		return c.list(r, "pools", items, []string{"loadbalancer_id", "listener_id", "name", "id", "protocol", "lb_algorithm", "healthmonitor_id"})
	case "pool-create":
		b := body.(*struct {
			P poolBody `json:"pool"`
		}).P
		var l *LoadBalancer
		lnProto, li := "", -1
		switch {
		case b.ListenerID != "":
			if l, li = c.findListener(b.ListenerID); l == nil {
				return 0, nil, &apiError{400, fmt.Sprintf("Validation failure: Listener %s not found.", b.ListenerID)}
			}
			if l.Listeners[li].DefaultPoolID != "" {
				return 0, nil, &apiError{409, fmt.Sprintf("Listener %s already has a default pool", b.ListenerID)}
			}
			lnProto = l.Listeners[li].Protocol
		case b.LoadbalancerID != "":
			if l = o.lbs[b.LoadbalancerID]; l == nil {
				return 0, nil, &apiError{400, fmt.Sprintf("Validation failure: Load Balancer %s not found.", b.LoadbalancerID)}
			}
		default:
			return 0, nil, invalid("a pool needs listener_id or loadbalancer_id")
		}
		p, err := b.pool(lnProto)
		if err != nil {
			return 0, nil, err
		}
		if err := mutable(l, false); err != nil {
			return 0, nil, err
		}
		p.ListenerID = b.ListenerID
		l.Pools = append(l.Pools, p)
		l.fill(l.Updated)
		np := &l.Pools[len(l.Pools)-1]
		if li >= 0 {
			l.Listeners[li].DefaultPoolID = np.ID
		}
		c.changed(l)
		return 201, map[string]any{"pool": poolWire(l, *np, true)}, nil
	}
	l, i := c.findPool(id)
	if l == nil {
		return 0, nil, notFound("Pool", id)
	}
	p := &l.Pools[i]
	switch method {
	case "pool-get":
		return 200, map[string]any{"pool": poolWire(l, *p, false)}, nil
	case "member-list":
		var items []map[string]any
		for _, m := range p.Members {
			items = append(items, memberWire(l, *p, m))
		}
		return c.list(r, "members", items, []string{"name", "id", "address", "protocol_port", "subnet_id", "weight"})
	case "pool-update":
		b := body.(*struct {
			P poolBody `json:"pool"`
		}).P
		if b.Protocol != "" || b.ListenerID != "" || b.LoadbalancerID != "" || b.Members != nil || b.HealthMonitor != nil {
			return 0, nil, invalid("protocol, listener_id and loadbalancer_id can only be set at create time")
		}
		if b.LBAlgorithm != "" && !slices.Contains(algorithms, b.LBAlgorithm) {
			return 0, nil, notOption(b.LBAlgorithm, "lb_algorithm")
		}
		if sp := b.SessionPersistence; sp != nil && sp.Type != "" && !slices.Contains(persistenceTypes, sp.Type) {
			return 0, nil, notOption(sp.Type, "session_persistence.type")
		}
		if err := mutable(l, false); err != nil {
			return 0, nil, err
		}
		p.Algorithm = cmp.Or(b.LBAlgorithm, p.Algorithm)
		p.Name, p.Description = or(b.Name, p.Name), or(b.Description, p.Description)
		if b.SessionPersistence != nil {
			p.SessionPersistence = b.SessionPersistence.Type
		}
		if b.Tags != nil {
			p.Tags = slices.Clone(*b.Tags)
		}
		c.changed(l)
		return 200, map[string]any{"pool": poolWire(l, *p, false)}, nil
	case "pool-delete":
		if err := mutable(l, false); err != nil {
			return 0, nil, err
		}
		for j := range l.Listeners {
			if l.Listeners[j].DefaultPoolID == id {
				l.Listeners[j].DefaultPoolID = ""
			}
		}
		l.Pools = slices.Delete(l.Pools, i, i+1)
		c.changed(l)
		return 204, nil, nil
	case "member-batch":
		bs := body.(*struct {
			M []memberBody `json:"members"`
		}).M
		ms, err := members(bs)
		if err != nil {
			return 0, nil, err
		}
		if err := mutable(l, false); err != nil {
			return 0, nil, err
		}
		additive := r.URL.Query().Get("additive_only") == "true"
		old := p.Members
		var next []Member
		for _, m := range ms {
			for _, om := range old {
				if om.Address == m.Address && om.Port == m.Port {
					m.ID = om.ID
				}
			}
			next = append(next, m)
		}
		if additive {
			for _, om := range old {
				if !slices.ContainsFunc(next, func(m Member) bool { return m.Address == om.Address && m.Port == om.Port }) {
					next = append(next, om)
				}
			}
		}
		p.Members = next
		l.fill(l.Updated)
		c.changed(l)
		return 202, nil, nil
	}
	return 0, nil, &apiError{405, "The method is not allowed for the requested URL."}
}

func (c *Cloud) monitorCall(r *http.Request, method, id string, body any) (int, any, *apiError) {
	o := &c.octavia
	switch method {
	case "monitor-list":
		var items []map[string]any
		for _, lid := range o.order {
			for _, p := range o.lbs[lid].Pools {
				if p.Monitor != nil {
					w := monitorWire(p, *p.Monitor)
					w["_pool_id"] = p.ID
					items = append(items, w)
				}
			}
		}
		return c.list(r, "healthmonitors", items, []string{"pool_id", "name", "id", "type"})
	case "monitor-create":
		b := body.(*struct {
			M monitorBody `json:"healthmonitor"`
		}).M
		l, i := c.findPool(b.PoolID)
		if l == nil {
			return 0, nil, &apiError{400, fmt.Sprintf("Validation failure: Pool %s not found.", b.PoolID)}
		}
		m, err := b.monitor(l.Pools[i].Protocol)
		if err != nil {
			return 0, nil, err
		}
		if err := mutable(l, false); err != nil {
			return 0, nil, err
		}
		if l.Pools[i].Monitor != nil {
			return 0, nil, &apiError{409, "This pool already has a health monitor"}
		}
		l.Pools[i].Monitor = m
		l.fill(l.Updated)
		c.changed(l)
		return 201, map[string]any{"healthmonitor": monitorWire(l.Pools[i], *m)}, nil
	}
	l, i := c.findMonitor(id)
	if l == nil {
		return 0, nil, notFound("Health Monitor", id)
	}
	p := &l.Pools[i]
	switch method {
	case "monitor-get":
		return 200, map[string]any{"healthmonitor": monitorWire(*p, *p.Monitor)}, nil
	case "monitor-update":
		b := body.(*struct {
			M monitorBody `json:"healthmonitor"`
		}).M
		if b.Type != "" || b.PoolID != "" {
			return 0, nil, invalid("type and pool_id can only be set at create time")
		}
		m := *p.Monitor
		b.Type = m.Type
		b.Delay, b.Timeout, b.MaxRetries = cmp.Or(b.Delay, &m.Delay), cmp.Or(b.Timeout, &m.Timeout), cmp.Or(b.MaxRetries, &m.MaxRetries)
		b.MaxRetriesDown = cmp.Or(b.MaxRetriesDown, &m.MaxRetriesDown)
		if m.Type == "HTTP" || m.Type == "HTTPS" {
			b.URLPath, b.HTTPMethod, b.ExpectedCodes = cmp.Or(b.URLPath, &m.URLPath), cmp.Or(b.HTTPMethod, &m.HTTPMethod), cmp.Or(b.ExpectedCodes, &m.ExpectedCodes)
		}
		b.Name = cmp.Or(b.Name, &m.Name)
		nm, err := b.monitor(p.Protocol)
		if err != nil {
			return 0, nil, err
		}
		if err := mutable(l, false); err != nil {
			return 0, nil, err
		}
		nm.ID = m.ID
		p.Monitor = nm
		c.changed(l)
		return 200, map[string]any{"healthmonitor": monitorWire(*p, *nm)}, nil
	case "monitor-delete":
		if err := mutable(l, false); err != nil {
			return 0, nil, err
		}
		p.Monitor = nil
		c.changed(l)
		return 204, nil, nil
	}
	return 0, nil, &apiError{405, "The method is not allowed for the requested URL."}
}

// list filters and pages items as Octavia does: equality filters on
// fields, tags (tags, tags-any, not-tags, not-tags-any: repeated keys or
// comma lists), limit and marker (links under <plural>_links).
func (c *Cloud) list(r *http.Request, plural string, items []map[string]any, fields []string) (int, any, *apiError) {
	q := r.URL.Query()
	tagSets := map[string][]string{}
	for k, vs := range q {
		switch {
		case k == "limit" || k == "marker" || k == "fields" || k == "page_reverse" || k == "sort":
		case k == "tags" || k == "tags-any" || k == "not-tags" || k == "not-tags-any":
			for _, v := range vs {
				tagSets[k] = append(tagSets[k], strings.Split(v, ",")...)
			}
		case slices.Contains(fields, k):
		default:
			return 0, nil, &apiError{400, fmt.Sprintf("Invalid filter argument: %s", k)}
		}
	}
	var kept []map[string]any
	for _, it := range items {
		ok := true
		for _, f := range fields {
			v, hidden := it["_"+f] // a filter of no field of its own (a listener's loadbalancer_id)
			if !hidden {
				v = it[f]
			}
			if q.Has(f) && fmt.Sprint(v) != q.Get(f) {
				ok = false
			}
		}
		for k := range it {
			if strings.HasPrefix(k, "_") {
				delete(it, k)
			}
		}
		tags, _ := it["tags"].([]string)
		has := func(t string) bool { return slices.Contains(tags, t) }
		if s := tagSets["tags"]; len(s) > 0 && !all(s, has) || len(tagSets["tags-any"]) > 0 && !slices.ContainsFunc(tagSets["tags-any"], has) ||
			len(tagSets["not-tags"]) > 0 && all(tagSets["not-tags"], has) || slices.ContainsFunc(tagSets["not-tags-any"], has) {
			ok = false
		}
		if ok {
			kept = append(kept, it)
		}
	}
	if m := q.Get("marker"); m != "" {
		i := slices.IndexFunc(kept, func(it map[string]any) bool { return it["id"] == m })
		if i < 0 {
			return 0, nil, &apiError{400, fmt.Sprintf("Invalid marker: %s", m)}
		}
		kept = kept[i+1:]
	}
	limit := cloudtest.Positive(c.opts.LB.PageMax, 1000)
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return 0, nil, &apiError{400, fmt.Sprintf("Invalid limit: %s", s)}
		}
		if n > 0 {
			limit = min(n, limit)
		}
	}
	links := []map[string]any{}
	if len(kept) > limit {
		kept = kept[:limit]
		next := url.Values{}
		for k, v := range q {
			next[k] = v
		}
		next.Set("limit", strconv.Itoa(limit))
		next.Set("marker", fmt.Sprint(kept[len(kept)-1]["id"]))
		links = append(links, map[string]any{"rel": "next", "href": "http://" + r.Host + r.URL.Path + "?" + next.Encode()})
	}
	if kept == nil {
		kept = []map[string]any{}
	}
	return 200, map[string]any{plural: kept, plural + "_links": links}, nil
}

func all(s []string, f func(string) bool) bool {
	for _, v := range s {
		if !f(v) {
			return false
		}
	}
	return true
}

func ids(s []string) []map[string]any {
	out := []map[string]any{}
	for _, id := range s {
		out = append(out, map[string]any{"id": id})
	}
	return out
}

func tagList(t []string) []string {
	if t == nil {
		return []string{}
	}
	return slices.Clone(t)
}

// childStatus is a child's provisioning status: its load balancer's while
// that is being made or changed, else ACTIVE.
func childStatus(l *LoadBalancer) string {
	if l.ProvisioningStatus == StatusPendingCreate || l.ProvisioningStatus == StatusError {
		return l.ProvisioningStatus
	}
	return StatusActive
}

func lbWire(l *LoadBalancer, graph bool) map[string]any {
	var lnIDs, poolIDs []string
	for _, ln := range l.Listeners {
		lnIDs = append(lnIDs, ln.ID)
	}
	for _, p := range l.Pools {
		poolIDs = append(poolIDs, p.ID)
	}
	out := map[string]any{"id": l.ID, "name": l.Name, "description": l.Description, "project_id": DefaultProjectID, "tenant_id": DefaultProjectID,
		"admin_state_up": true, "provisioning_status": l.ProvisioningStatus, "operating_status": l.OperatingStatus,
		"vip_address": l.VIPAddress, "vip_port_id": l.VIPPortID, "vip_subnet_id": l.VIPSubnetID, "vip_network_id": l.VIPNetworkID,
		"vip_qos_policy_id": nil, "provider": l.Provider, "flavor_id": nilIfEmpty(l.FlavorID), "availability_zone": nilIfEmpty(l.AvailabilityZone),
		"tags": tagList(l.Tags), "additional_vips": []any{}, "vip_vnic_type": "normal", "vip_sg_ids": nil,
		"created_at": l.Created.Format(octaviaTime), "updated_at": l.Updated.Format(octaviaTime),
		"listeners": ids(lnIDs), "pools": ids(poolIDs)}
	if graph {
		var lns, pools []map[string]any
		for _, ln := range l.Listeners {
			lns = append(lns, listenerWire(l, ln, true))
		}
		for _, p := range l.Pools {
			pools = append(pools, poolWire(l, p, true))
		}
		out["listeners"], out["pools"] = lns, pools
	}
	return out
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func listenerWire(l *LoadBalancer, ln Listener, graph bool) map[string]any {
	cidrs := any(nil)
	if len(ln.AllowedCIDRs) > 0 {
		cidrs = slices.Clone(ln.AllowedCIDRs)
	}
	out := map[string]any{"id": ln.ID, "name": ln.Name, "description": ln.Description, "project_id": DefaultProjectID, "tenant_id": DefaultProjectID,
		"protocol": ln.Protocol, "protocol_port": ln.Port, "default_pool_id": nilIfEmpty(ln.DefaultPoolID),
		"loadbalancers": ids([]string{l.ID}), "connection_limit": ln.ConnectionLimit, "admin_state_up": true,
		"provisioning_status": childStatus(l), "operating_status": l.OperatingStatus,
		"timeout_client_data": ln.TimeoutClientData, "timeout_member_connect": ln.TimeoutMemberConnect,
		"timeout_member_data": ln.TimeoutMemberData, "timeout_tcp_inspect": ln.TimeoutTCPInspect,
		"insert_headers": map[string]string{}, "allowed_cidrs": cidrs, "tags": tagList(ln.Tags), "l7policies": []any{},
		"sni_container_refs": []string{}, "default_tls_container_ref": nil, "tls_ciphers": nil, "tls_versions": nil, "alpn_protocols": nil,
		"client_authentication": "NONE", "client_ca_tls_container_ref": nil, "client_crl_container_ref": nil,
		"hsts_include_subdomains": false, "hsts_max_age": nil, "hsts_preload": false,
		"created_at": l.Created.Format(octaviaTime), "updated_at": l.Updated.Format(octaviaTime)}
	if graph && ln.DefaultPoolID != "" {
		out["default_pool"] = map[string]any{"id": ln.DefaultPoolID}
	}
	return out
}

func poolWire(l *LoadBalancer, p Pool, graph bool) map[string]any {
	var listeners, memberIDs []string
	if p.ListenerID != "" {
		listeners = append(listeners, p.ListenerID)
	}
	var fullMembers []map[string]any
	for _, m := range p.Members {
		memberIDs = append(memberIDs, m.ID)
		fullMembers = append(fullMembers, memberWire(l, p, m))
	}
	var sp any
	if p.SessionPersistence != "" {
		sp = map[string]any{"type": p.SessionPersistence, "cookie_name": nil, "persistence_timeout": nil, "persistence_granularity": nil}
	}
	var monID any
	if p.Monitor != nil {
		monID = p.Monitor.ID
	}
	out := map[string]any{"id": p.ID, "name": p.Name, "description": p.Description, "project_id": DefaultProjectID, "tenant_id": DefaultProjectID,
		"protocol": p.Protocol, "lb_algorithm": p.Algorithm, "session_persistence": sp, "admin_state_up": true,
		"listeners": ids(listeners), "loadbalancers": ids([]string{l.ID}), "members": ids(memberIDs), "healthmonitor_id": monID,
		"provisioning_status": childStatus(l), "operating_status": l.OperatingStatus, "tags": tagList(p.Tags),
		"tls_enabled": false, "tls_container_ref": nil, "ca_tls_container_ref": nil, "crl_container_ref": nil,
		"tls_ciphers": nil, "tls_versions": nil, "alpn_protocols": nil,
		"created_at": l.Created.Format(octaviaTime), "updated_at": l.Updated.Format(octaviaTime)}
	if graph {
		if fullMembers == nil {
			fullMembers = []map[string]any{}
		}
		out["members"] = fullMembers
		if p.Monitor != nil {
			out["healthmonitor"] = monitorWire(p, *p.Monitor)
		}
	}
	return out
}

func memberWire(l *LoadBalancer, p Pool, m Member) map[string]any {
	op := OperatingNoMonitor
	if p.Monitor != nil {
		op = OperatingOnline
	}
	var mport any
	if m.MonitorPort != 0 {
		mport = m.MonitorPort
	}
	return map[string]any{"id": m.ID, "name": m.Name, "address": m.Address, "protocol_port": m.Port, "subnet_id": nilIfEmpty(m.SubnetID),
		"weight": m.Weight, "admin_state_up": true, "backup": false, "monitor_address": nil, "monitor_port": mport,
		"project_id": DefaultProjectID, "tenant_id": DefaultProjectID, "provisioning_status": childStatus(l), "operating_status": op,
		"tags": tagList(m.Tags), "vnic_type": "normal",
		"created_at": l.Created.Format(octaviaTime), "updated_at": l.Updated.Format(octaviaTime)}
}

func monitorWire(p Pool, m Monitor) map[string]any {
	out := map[string]any{"id": m.ID, "name": m.Name, "type": m.Type, "delay": m.Delay, "timeout": m.Timeout,
		"max_retries": m.MaxRetries, "max_retries_down": m.MaxRetriesDown, "pools": ids([]string{p.ID}),
		"project_id": DefaultProjectID, "tenant_id": DefaultProjectID, "admin_state_up": true, "provisioning_status": StatusActive,
		"operating_status": OperatingOnline, "tags": []string{}, "domain_name": nil, "http_version": nil,
		"http_method": nilIfEmpty(m.HTTPMethod), "url_path": nilIfEmpty(m.URLPath), "expected_codes": nilIfEmpty(m.ExpectedCodes)}
	return out
}

// statusTree is GET /loadbalancers/{id}/status.
func statusTree(l *LoadBalancer) map[string]any {
	var lns []map[string]any
	for _, ln := range l.Listeners {
		var pools []map[string]any
		for _, p := range l.Pools {
			if p.ListenerID != ln.ID {
				continue
			}
			var ms []map[string]any
			for _, m := range p.Members {
				w := memberWire(l, p, m)
				ms = append(ms, map[string]any{"id": m.ID, "name": m.Name, "address": m.Address, "protocol_port": m.Port,
					"provisioning_status": w["provisioning_status"], "operating_status": w["operating_status"]})
			}
			pw := map[string]any{"id": p.ID, "name": p.Name, "provisioning_status": childStatus(l), "operating_status": l.OperatingStatus, "members": ms}
			if p.Monitor != nil {
				pw["health_monitor"] = map[string]any{"id": p.Monitor.ID, "name": p.Monitor.Name, "type": p.Monitor.Type,
					"provisioning_status": StatusActive, "operating_status": OperatingOnline}
			}
			pools = append(pools, pw)
		}
		lns = append(lns, map[string]any{"id": ln.ID, "name": ln.Name, "provisioning_status": childStatus(l),
			"operating_status": l.OperatingStatus, "pools": pools})
	}
	return map[string]any{"loadbalancer": map[string]any{"id": l.ID, "name": l.Name, "provisioning_status": l.ProvisioningStatus,
		"operating_status": l.OperatingStatus, "listeners": lns}}
}
