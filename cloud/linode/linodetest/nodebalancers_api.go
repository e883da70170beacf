package linodetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// The handlers of /v4/nodebalancers, its configs and their nodes.

// nbCollection reports whether p is a collection of the NodeBalancer API
// (for the limit of collections' GETs).
func nbCollection(p string) bool {
	return p == nbPath || strings.HasSuffix(p, "/configs") || strings.HasSuffix(p, "/nodes") || strings.HasSuffix(p, "/firewalls") || strings.HasSuffix(p, "/devices")
}

// serveNodeBalancers routes /v4/nodebalancers/...
func (c *Cloud) serveNodeBalancers(w http.ResponseWriter, r *http.Request) {
	rest := strings.Trim(strings.TrimPrefix(r.URL.Path, nbPath), "/")
	var parts []string
	if rest != "" {
		parts = strings.Split(rest, "/")
	}
	ids := make([]int, 0, 2)
	for i := 0; i < len(parts); i += 2 {
		n, err := strconv.Atoi(parts[i])
		if err != nil || n <= 0 {
			writeError(w, http.StatusNotFound, "", "Not found")
			return
		}
		ids = append(ids, n)
	}
	shape := make([]string, 0, 3)
	for i := 1; i < len(parts); i += 2 {
		shape = append(shape, parts[i])
	}
	route := r.Method + " " + strings.Join(shape, "/")
	switch {
	case len(parts) == 0 && r.Method == http.MethodGet:
		c.nbList(w, r)
	case len(parts) == 0 && r.Method == http.MethodPost:
		c.nbCreate(w, r)
	case len(parts) == 1 && r.Method == http.MethodGet:
		c.nbGet(w, ids[0])
	case len(parts) == 1 && r.Method == http.MethodPut:
		c.nbUpdate(w, r, ids[0])
	case len(parts) == 1 && r.Method == http.MethodDelete:
		c.nbDelete(w, ids[0])
	case len(parts) == 2 && route == "GET firewalls":
		c.nbFirewalls(w, ids[0])
	case len(parts) == 2 && route == "GET configs":
		c.configList(w, ids[0])
	case len(parts) == 2 && route == "POST configs":
		c.configCreate(w, r, ids[0])
	case len(parts) == 3 && (r.Method == http.MethodGet || r.Method == http.MethodPut || r.Method == http.MethodDelete) && route == r.Method+" configs":
		c.configOne(w, r, ids[0], ids[1])
	case len(parts) == 4 && route == "POST configs/rebuild" && parts[3] == "rebuild":
		c.configRebuild(w, r, ids[0], ids[1])
	case len(parts) == 4 && route == "GET configs/nodes" && parts[3] == "nodes":
		c.nodeList(w, ids[0], ids[1])
	default:
		if len(parts) == 4 && (parts[3] == "rebuild" || parts[3] == "nodes") {
			writeError(w, http.StatusMethodNotAllowed, "", "Method not allowed")
			return
		}
		writeError(w, http.StatusNotFound, "", "Not found")
	}
}

// decode reads a request body strictly: a field the endpoint does not
// model is a 400 naming it.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	field, err := cloudtest.DecodeStrict(r.Body, v)
	switch {
	case field != "":
		writeError(w, http.StatusBadRequest, field, "linodetest does not model this field")
	case err != nil:
		writeError(w, http.StatusBadRequest, "", "Invalid JSON")
	}
	return err == nil
}

func writeInvalid(w http.ResponseWriter, err *invalid) {
	writeError(w, http.StatusBadRequest, err.field, err.reason)
}

func (c *Cloud) nbList(w http.ResponseWriter, r *http.Request) {
	page, perPage, ok := c.listQuery(w, r, MethodLBList)
	if !ok {
		return
	}
	match, ferr := nbFilter(r.Header.Get("X-Filter"))
	if ferr != nil {
		writeError(w, http.StatusBadRequest, "X-Filter", ferr.Error())
		return
	}
	var all []NodeBalancer
	for _, n := range c.NodeBalancers() {
		if match(n) {
			all = append(all, n)
		}
	}
	from, to, last := cloudtest.Page(len(all), page, perPage)
	out := listAnswer[wireNB]{Data: []wireNB{}, Page: page, Pages: last, Results: len(all)}
	for _, n := range all[from:to] {
		out.Data = append(out.Data, wireNodeBalancer(n))
	}
	cloudtest.WriteJSON(w, http.StatusOK, out)
}

// nbFilter reads X-Filter: {"ipv4": "<address>"}, {"label": "<label>"}
// or {"tags": "<tag>"} (one key) are modelled.
func nbFilter(raw string) (func(NodeBalancer) bool, error) {
	if raw == "" {
		return func(NodeBalancer) bool { return true }, nil
	}
	var f map[string]string
	if err := json.Unmarshal([]byte(raw), &f); err != nil || len(f) != 1 {
		return nil, fmt.Errorf("linodetest models one of ipv4, label or tags, a string")
	}
	for k, v := range f {
		switch k {
		case "ipv4":
			return func(n NodeBalancer) bool { return n.IPv4 == v }, nil
		case "label":
			return func(n NodeBalancer) bool { return n.Label == v }, nil
		case "tags":
			return func(n NodeBalancer) bool { return slices.Contains(n.Tags, v) }, nil
		}
		return nil, fmt.Errorf("linodetest does not model filtering on %q", k)
	}
	return nil, nil
}

func (c *Cloud) nbCreate(w http.ResponseWriter, r *http.Request) {
	if c.faulted(w, MethodLBCreate) {
		return
	}
	var b nbCreateBody
	if !decode(w, r, &b) {
		return
	}
	if b.Region == "" {
		writeError(w, http.StatusBadRequest, "region", "region is required")
		return
	}
	if b.Type != "" && b.Type != "common" && b.Type != "premium" && b.Type != "premium_40gb" {
		writeError(w, http.StatusBadRequest, "type", "Must be one of common, premium, premium_40gb")
		return
	}
	if err := checkSettings(b.ClientConnThrottle, b.ClientUDPSessThrottle, b.Tags); err != nil {
		writeInvalid(w, err)
		return
	}
	n := NodeBalancer{Region: b.Region, Type: cmpOr(b.Type, "common"), Tags: slices.Clone(b.Tags)}
	if n.Tags == nil {
		n.Tags = []string{}
	}
	if b.ClientConnThrottle != nil {
		n.Throttle = *b.ClientConnThrottle
	}
	ports := map[int]bool{}
	for i, cb := range b.Configs {
		cf, err := c.config(fmt.Sprintf("configs[%d].", i), cb, true)
		if err != nil {
			writeInvalid(w, err)
			return
		}
		if ports[cf.Port] {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("configs[%d].port", i), "Port is already in use by another config")
			return
		}
		ports[cf.Port] = true
		n.Configs = append(n.Configs, cf)
	}
	vpcs, verr := c.checkVPCs(b.VPCs)
	if verr != nil {
		writeInvalid(w, verr)
		return
	}
	n.VPCs = vpcs
	for i, cf := range n.Configs {
		if err := checkNodeSubnets(fmt.Sprintf("configs[%d].", i), &n, cf); err != nil {
			writeInvalid(w, err)
			return
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if b.Label != nil {
		if err := c.checkNewLabel(*b.Label, 0); err != nil {
			writeInvalid(w, err)
			return
		}
		n.Label = *b.Label
	}
	n.ID = c.nextID()
	if n.Label == "" {
		n.Label = "nodebalancer" + strconv.Itoa(n.ID)
	}
	n.Created = c.opts.Now().UTC().Truncate(time.Second)
	for i := range n.Configs {
		c.assignIDs(&n.Configs[i])
	}
	for i := range n.VPCs {
		n.VPCs[i].ID = c.nextID()
	}
	if b.FirewallID != 0 {
		// Attached before the data plane serves it: never open.
		if err := c.attachAtCreate(b.FirewallID, n.ID); err != nil {
			writeInvalid(w, err)
			return
		}
	}
	if err := c.serveLocked(&n); err != nil {
		c.detachAll(n.ID)
		writeError(w, http.StatusInternalServerError, "", err.Error())
		return
	}
	c.nb.byID[n.ID] = &n
	cloudtest.WriteJSON(w, http.StatusOK, wireNodeBalancer(n))
}

// held answers the NodeBalancer of id (under c.mu), or writes 404.
func (c *Cloud) held(w http.ResponseWriter, id int) *NodeBalancer {
	n, ok := c.nb.byID[id]
	if !ok {
		writeError(w, http.StatusNotFound, "", "Not found")
		return nil
	}
	return n
}

func (c *Cloud) nbGet(w http.ResponseWriter, id int) {
	if c.faulted(w, MethodLBGet) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.held(w, id); n != nil {
		cloudtest.WriteJSON(w, http.StatusOK, wireNodeBalancer(*n))
	}
}

func (c *Cloud) nbUpdate(w http.ResponseWriter, r *http.Request, id int) {
	if c.faulted(w, MethodLBUpdate) {
		return
	}
	var b nbUpdateBody
	if !decode(w, r, &b) {
		return
	}
	var tags []string
	if b.Tags != nil {
		tags = *b.Tags
	}
	if err := checkSettings(b.ClientConnThrottle, b.ClientUDPSessThrottle, tags); err != nil {
		writeInvalid(w, err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.held(w, id)
	if n == nil {
		return
	}
	if b.Label != nil {
		if err := c.checkNewLabel(*b.Label, id); err != nil {
			writeInvalid(w, err)
			return
		}
		n.Label = *b.Label
	}
	if b.ClientConnThrottle != nil {
		n.Throttle = *b.ClientConnThrottle
	}
	if b.Tags != nil {
		n.Tags = slices.Clone(*b.Tags)
		if n.Tags == nil {
			n.Tags = []string{}
		}
	}
	cloudtest.WriteJSON(w, http.StatusOK, wireNodeBalancer(*n))
}

func (c *Cloud) nbDelete(w http.ResponseWriter, id int) {
	if c.faulted(w, MethodLBDelete) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held(w, id) == nil {
		return
	}
	delete(c.nb.byID, id)
	c.detachAll(id)
	c.nb.plane.Remove(strconv.Itoa(id))
	cloudtest.WriteJSON(w, http.StatusOK, struct{}{})
}

// configOf finds a config (under c.mu), or writes 404.
func (c *Cloud) configOf(w http.ResponseWriter, id, cid int) (*NodeBalancer, int) {
	n := c.held(w, id)
	if n == nil {
		return nil, -1
	}
	for i := range n.Configs {
		if n.Configs[i].ID == cid {
			return n, i
		}
	}
	writeError(w, http.StatusNotFound, "", "Not found")
	return nil, -1
}

// page answers a whole collection as its one page.
func page[T any](w http.ResponseWriter, items []T) {
	if items == nil {
		items = []T{}
	}
	cloudtest.WriteJSON(w, http.StatusOK, listAnswer[T]{items, 1, 1, len(items)})
}

func (c *Cloud) configList(w http.ResponseWriter, id int) {
	if c.faulted(w, MethodLBGet) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.held(w, id)
	if n == nil {
		return
	}
	var out []wireConfig
	for _, cf := range n.Configs {
		out = append(out, c.wireConfig(n.ID, cf))
	}
	page(w, out)
}

func (c *Cloud) nodeList(w http.ResponseWriter, id, cid int) {
	if c.faulted(w, MethodLBGet) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n, i := c.configOf(w, id, cid)
	if n == nil {
		return
	}
	var out []wireNode
	for _, nd := range n.Configs[i].Nodes {
		out = append(out, c.wireNode(*n, n.Configs[i], nd))
	}
	page(w, out)
}

func (c *Cloud) configCreate(w http.ResponseWriter, r *http.Request, id int) {
	if c.faulted(w, MethodLBUpdate) {
		return
	}
	var b configBody
	if !decode(w, r, &b) {
		return
	}
	cf, err := c.config("", b, true)
	if err != nil {
		writeInvalid(w, err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.held(w, id)
	if n == nil {
		return
	}
	if portTaken(n.Configs, cf.Port, -1) {
		writeError(w, http.StatusBadRequest, "port", "Port is already in use by another config")
		return
	}
	if err := checkNodeSubnets("", n, cf); err != nil {
		writeInvalid(w, err)
		return
	}
	c.assignIDs(&cf)
	c.change(w, n, func(n *NodeBalancer) { n.Configs = append(n.Configs, cf) }, func(n *NodeBalancer) any {
		return c.wireConfig(n.ID, cf)
	})
}

// change applies f to a copy of n, serves it, keeps it and answers
// answer's (under c.mu).
func (c *Cloud) change(w http.ResponseWriter, n *NodeBalancer, f func(*NodeBalancer), answer func(*NodeBalancer) any) {
	m := n.clone()
	f(&m)
	if err := c.serveLocked(&m); err != nil {
		writeError(w, http.StatusInternalServerError, "", err.Error())
		return
	}
	*n = m
	cloudtest.WriteJSON(w, http.StatusOK, answer(n))
}

func (c *Cloud) configOne(w http.ResponseWriter, r *http.Request, id, cid int) {
	method := map[string]string{http.MethodGet: MethodLBGet, http.MethodPut: MethodLBUpdate, http.MethodDelete: MethodLBUpdate}[r.Method]
	if c.faulted(w, method) {
		return
	}
	var b configBody
	if r.Method == http.MethodPut && !decode(w, r, &b) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n, i := c.configOf(w, id, cid)
	if n == nil {
		return
	}
	switch r.Method {
	case http.MethodGet:
		cloudtest.WriteJSON(w, http.StatusOK, c.wireConfig(n.ID, n.Configs[i]))
	case http.MethodDelete:
		c.change(w, n, func(n *NodeBalancer) { n.Configs = slices.Delete(n.Configs, i, i+1) }, func(*NodeBalancer) any { return struct{}{} })
	case http.MethodPut:
		c.replaceConfig(w, n, i, b, false)
	}
}

func (c *Cloud) configRebuild(w http.ResponseWriter, r *http.Request, id, cid int) {
	if c.faulted(w, MethodLBUpdate) {
		return
	}
	var b configBody
	if !decode(w, r, &b) {
		return
	}
	if b.Nodes == nil {
		writeError(w, http.StatusBadRequest, "nodes", "nodes is required")
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n, i := c.configOf(w, id, cid)
	if n == nil {
		return
	}
	c.replaceConfig(w, n, i, b, true)
}

// replaceConfig is PUT (the config's settings) and rebuild (its settings
// and its nodes: a node with the id of one it has is updated, one without
// added, the others deleted), under c.mu.
func (c *Cloud) replaceConfig(w http.ResponseWriter, n *NodeBalancer, i int, b configBody, rebuild bool) {
	old := n.Configs[i]
	cf, err := c.config("", b, rebuild)
	if err != nil {
		writeInvalid(w, err)
		return
	}
	if portTaken(n.Configs, cf.Port, i) {
		writeError(w, http.StatusBadRequest, "port", "Port is already in use by another config")
		return
	}
	if err := checkNodeSubnets("", n, cf); rebuild && err != nil {
		writeInvalid(w, err)
		return
	}
	cf.ID = old.ID
	if !rebuild {
		cf.Nodes = old.Nodes
	} else {
		for j, nd := range cf.Nodes {
			if nd.ID != 0 && !slices.ContainsFunc(old.Nodes, func(o NBNode) bool { return o.ID == nd.ID }) {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("nodes[%d].id", j), "Not found")
				return
			}
		}
		c.assignIDs(&cf)
	}
	c.change(w, n, func(n *NodeBalancer) { n.Configs[i] = cf }, func(n *NodeBalancer) any { return c.wireConfig(n.ID, cf) })
}
