package azuretest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/google/uuid"
)

// A standalone VM's NIC by name: GET, and PUT of its IP configurations'
// loadBalancerBackendAddressPools (a NIC joins a load balancer's backend
// pool by naming it, as Azure's NIC-based pools work); the rest of the
// NIC is the VM's and must be sent back as read. A PUT carries If-Match
// as any ARM write; it is answered 200 with the NIC and an
// Azure-AsyncOperation that is done. Calls: GetNIC, PutNIC.

// nicETag is the NIC's etag (made on first use).
func (c *Cloud) nicETag(nicID string) string {
	c.lbs.mu.Lock()
	defer c.lbs.mu.Unlock()
	k := strings.ToLower(nicID)
	if c.lbs.etags[k] == "" {
		c.lbs.etags[k] = newETag()
	}
	return c.lbs.etags[k]
}

// nicPools are the backend pools the NIC's IP configuration names.
func (c *Cloud) nicPools(nicID string) []string {
	c.lbs.mu.Lock()
	defer c.lbs.mu.Unlock()
	return slices.Clone(c.lbs.pools[strings.ToLower(nicID)])
}

func (c *Cloud) serveNIC(w http.ResponseWriter, r *http.Request, name string) {
	var vm VM
	found := false
	for _, v := range c.sortedVMs() {
		if v.ScaleSet == "" && strings.EqualFold(c.nicID(v)[strings.LastIndex(c.nicID(v), "/")+1:], name) {
			vm, found = v, true
		}
	}
	method := map[string]string{http.MethodGet: "GetNIC", http.MethodPut: "PutNIC"}[r.Method]
	if method == "" {
		armError(w, http.StatusMethodNotAllowed, "MethodNotAllowed", "The requested resource does not support http method '"+r.Method+"'.")
		return
	}
	if c.fault(w, method) {
		return
	}
	if !found {
		armError(w, http.StatusNotFound, "ResourceNotFound", fmt.Sprintf("The Resource 'Microsoft.Network/networkInterfaces/%s' under resource group '%s' was not found.", name, c.opts.ResourceGroup))
		return
	}
	id := c.nicID(vm)
	if r.Method == http.MethodGet {
		writeJSON(w, http.StatusOK, c.nicJSON(vm))
		return
	}
	if m := r.Header.Get("If-Match"); m != "" && m != "*" && m != c.nicETag(id) {
		armError(w, http.StatusPreconditionFailed, "PreconditionFailed", "Precondition failed: the resource's etag does not match the request's If-Match header.")
		return
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	var body map[string]any
	if err == nil {
		err = json.Unmarshal(data, &body)
	}
	if err != nil || body == nil {
		armError(w, http.StatusBadRequest, "InvalidRequestFormat", "Cannot parse the request.")
		return
	}
	configs := list(m(body, "properties"), "ipConfigurations")
	if len(configs) != 1 || !strings.EqualFold(str(configs[0], "name"), "ipconfig1") {
		armError(w, http.StatusBadRequest, "InvalidRequestFormat", "NIC "+id+": its one IP configuration, ipconfig1, must be sent back.")
		return
	}
	cp := m(configs[0], "properties")
	if str(cp, "privateIPAddress") != vm.PrivateIP {
		armError(w, http.StatusBadRequest, "InvalidRequestFormat", "NIC "+id+": privateIPAddress is the VM's; this endpoint does not change it.")
		return
	}
	var pools []string
	for _, p := range list(cp, "loadBalancerBackendAddressPools") {
		pid := str(p, "id")
		if !c.poolExists(pid) {
			armError(w, http.StatusBadRequest, "InvalidResourceReference", fmt.Sprintf("Resource %s referenced by resource %s/ipConfigurations/ipconfig1 was not found.", pid, id))
			return
		}
		pools = append(pools, pid)
	}
	slices.SortFunc(pools, func(a, b string) int { return strings.Compare(strings.ToLower(a), strings.ToLower(b)) })
	c.lbs.mu.Lock()
	if len(pools) == 0 {
		delete(c.lbs.pools, strings.ToLower(id))
	} else {
		c.lbs.pools[strings.ToLower(id)] = pools
	}
	c.lbs.etags[strings.ToLower(id)] = newETag()
	c.lbs.mu.Unlock()
	c.applyDataPlane()
	op := uuid.NewString()
	c.arm.mu.Lock()
	c.arm.init()
	c.arm.ops[op] = &armOp{id: op, resource: strings.ToLower(id), done: true}
	c.arm.mu.Unlock()
	w.Header().Set("Azure-AsyncOperation", c.opURL(op, false))
	writeJSON(w, http.StatusOK, c.nicJSON(vm))
}

// poolExists reports whether pool is a backend pool of a load balancer
// ARM holds.
func (c *Cloud) poolExists(pool string) bool {
	i := strings.Index(strings.ToLower(pool), "/backendaddresspools/")
	if i < 0 {
		return false
	}
	l, ok := c.ARMGet(pool[:i])
	if !ok {
		return false
	}
	for _, p := range list(m(l, "properties"), "backendAddressPools") {
		if strings.EqualFold(str(p, "id"), pool) {
			return true
		}
	}
	return false
}

// SetNICPools sets the backend pools of a VM's NIC out of band (a load
// balancer made by another tool, a test's tampering).
func (c *Cloud) SetNICPools(vmID string, pools ...string) {
	vm, ok := c.vm(vmID)
	if !ok {
		return
	}
	c.lbs.mu.Lock()
	k := strings.ToLower(c.nicID(vm))
	if len(pools) == 0 {
		delete(c.lbs.pools, k)
	} else {
		c.lbs.pools[k] = slices.Clone(pools)
	}
	c.lbs.etags[k] = newETag()
	c.lbs.mu.Unlock()
	c.applyDataPlane()
}

// VMByName is the standalone VM of name.
func (c *Cloud) VMByName(name string) (VM, bool) {
	for _, vm := range c.sortedVMs() {
		if vm.ScaleSet == "" && strings.EqualFold(vm.Name, name) {
			return vm, true
		}
	}
	return VM{}, false
}

// NICID is the id of a VM's NIC.
func (c *Cloud) NICID(vm VM) string { return c.nicID(vm) }
