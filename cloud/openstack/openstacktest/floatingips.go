package openstacktest

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// Neutron's floating IPs, as far as load balancers use them: made on the
// external network (DefaultFloatingNetworkID), associated with a load
// balancer's VIP port, where the data plane carries its traffic too.

// FloatingIP is a Neutron floating IP.
type FloatingIP struct {
	// ID is a UUID, assigned when "".
	ID string
	// Address is assigned on the data plane when "".
	Address     string
	NetworkID   string
	SubnetID    string
	Description string
	// PortID is the port it is associated with ("" none); FixedIP that
	// port's address.
	PortID, FixedIP string
	Created         time.Time
	Revision        int
}

func init() { neutronResources["floatingips"] = (*Cloud).serveFloatingIPs }

// PutFloatingIP adds or replaces a floating IP (its address on the data
// plane, serving the load balancer of its port).
func (c *Cloud) PutFloatingIP(f FloatingIP) (FloatingIP, error) {
	o := &c.octavia
	o.mu.Lock()
	defer o.mu.Unlock()
	o.init()
	f.ID = cmp.Or(f.ID, uuid.NewString())
	f.NetworkID = cmp.Or(f.NetworkID, DefaultFloatingNetworkID)
	f.SubnetID = cmp.Or(f.SubnetID, DefaultFloatingSubnetID)
	if f.Created.IsZero() {
		f.Created = c.opts.Now().UTC()
	}
	if _, ok := o.fips[f.ID]; !ok {
		o.fipN = append(o.fipN, f.ID)
	}
	o.fips[f.ID] = &f
	if err := c.serveFIP(&f); err != nil {
		return FloatingIP{}, err
	}
	return f, nil
}

// FloatingIPs are every floating IP, oldest first.
func (c *Cloud) FloatingIPs() []FloatingIP {
	o := &c.octavia
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []FloatingIP
	for _, id := range o.fipN {
		out = append(out, *o.fips[id])
	}
	return out
}

// serveFIP puts f's address on the data plane, forwarding what the load
// balancer of its port serves (o.mu held).
func (c *Cloud) serveFIP(f *FloatingIP) error {
	o := &c.octavia
	for _, l := range o.lbs {
		if f.PortID != "" && l.VIPPortID == f.PortID {
			f.FixedIP = l.VIPAddress
			if l.ProvisioningStatus == StatusActive || l.OperatingStatus == OperatingOnline {
				ls, ranges := planeListeners(l)
				addr, err := o.plane.Serve(fipPlaneID(f.ID), ls, ranges)
				f.Address = cmp.Or(f.Address, addr)
				return err
			}
		}
	}
	addr, err := o.plane.Serve(fipPlaneID(f.ID), nil, nil)
	f.Address = cmp.Or(f.Address, addr)
	return err
}

func (f *FloatingIP) wire() map[string]any {
	status := "DOWN"
	var port, fixed, router any
	if f.PortID != "" {
		status, port, fixed, router = StatusActive, f.PortID, f.FixedIP, "f8a44de0-fc8e-45df-93c7-f79bf3b01c95"
	}
	return map[string]any{"id": f.ID, "floating_ip_address": f.Address, "floating_network_id": f.NetworkID,
		"port_id": port, "fixed_ip_address": fixed, "router_id": router, "status": status, "description": f.Description,
		"project_id": DefaultProjectID, "tenant_id": DefaultProjectID, "tags": []string{}, "port_details": nil,
		"dns_domain": "", "dns_name": "", "qos_policy_id": nil,
		"created_at": f.Created.Format(neutronTime), "updated_at": f.Created.Format(neutronTime), "revision_number": f.Revision}
}

// fipRequest is the body of POST and PUT /v2.0/floatingips, the fields
// Neutron takes.
type fipRequest struct {
	FloatingIP struct {
		FloatingNetworkID string          `json:"floating_network_id"`
		PortID            json.RawMessage `json:"port_id"` // null detaches

		SubnetID          string  `json:"subnet_id"`
		FloatingIPAddress string  `json:"floating_ip_address"`
		FixedIPAddress    string  `json:"fixed_ip_address"`
		Description       *string `json:"description"`
		ProjectID         string  `json:"project_id"`
		TenantID          string  `json:"tenant_id"`
		QoSPolicyID       string  `json:"qos_policy_id"`
		DNSName           string  `json:"dns_name"`
		DNSDomain         string  `json:"dns_domain"`
	} `json:"floatingip"`
}

// fipFilters are the list's filters served.
var fipFilters = []string{"port_id", "floating_ip_address", "floating_network_id", "description", "id", "status", "fields"}

func (c *Cloud) serveFloatingIPs(w http.ResponseWriter, r *http.Request, rest string) {
	id := strings.TrimPrefix(rest, "/")
	if strings.Contains(id, "/") {
		neutronError(w, http.StatusNotFound, "HTTPNotFound", "The resource could not be found.")
		return
	}
	method := map[string]string{http.MethodGet: "fip-list", http.MethodPost: "fip-create", http.MethodPut: "fip-update",
		http.MethodDelete: "fip-delete"}[r.Method]
	if id != "" && r.Method == http.MethodGet {
		method = "fip-get"
	}
	if method == "" || (id == "") != (r.Method == http.MethodGet || r.Method == http.MethodPost) {
		neutronError(w, http.StatusMethodNotAllowed, "HTTPMethodNotAllowed", "The method is not allowed for the requested URL.")
		return
	}
	if f := c.count(method); f != nil {
		neutronError(w, f.Status, cmp.Or(f.Code, http.StatusText(f.Status)), "injected fault")
		return
	}
	o := &c.octavia
	var req fipRequest
	if r.Method == http.MethodPost || r.Method == http.MethodPut {
		if field, err := cloudtest.DecodeStrict(r.Body, &req); err != nil {
			msg := "Invalid input: " + err.Error()
			if field != "" {
				msg = fmt.Sprintf("Unrecognized attribute(s) '%s'", field)
			}
			neutronError(w, http.StatusBadRequest, "HTTPBadRequest", msg)
			return
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.init()
	var f *FloatingIP
	if id != "" {
		if f = o.fips[id]; f == nil {
			neutronError(w, http.StatusNotFound, "FloatingIPNotFound", fmt.Sprintf("Floating IP %s could not be found", id))
			return
		}
	}
	switch method {
	case "fip-get":
		cloudtest.WriteJSON(w, http.StatusOK, map[string]any{"floatingip": f.wire()})
	case "fip-list":
		q := r.URL.Query()
		for k := range q {
			if !slices.Contains(fipFilters, k) {
				neutronError(w, http.StatusBadRequest, "HTTPBadRequest", fmt.Sprintf("%s is invalid attribute for filtering", k))
				return
			}
		}
		out := []map[string]any{}
		for _, fid := range o.fipN {
			f := o.fips[fid]
			if q.Has("port_id") && q.Get("port_id") != f.PortID || q.Has("floating_ip_address") && q.Get("floating_ip_address") != f.Address ||
				q.Has("floating_network_id") && q.Get("floating_network_id") != f.NetworkID ||
				q.Has("description") && q.Get("description") != f.Description || q.Has("id") && q.Get("id") != f.ID {
				continue
			}
			out = append(out, f.wire())
		}
		cloudtest.WriteJSON(w, http.StatusOK, map[string]any{"floatingips": out})
	case "fip-create":
		b := req.FloatingIP
		switch {
		case b.FloatingNetworkID == "":
			neutronError(w, http.StatusBadRequest, "HTTPBadRequest", "Invalid input for floating_network_id. Reason: 'None' is not a valid UUID.")
			return
		case b.FloatingNetworkID != DefaultFloatingNetworkID:
			neutronError(w, http.StatusNotFound, "NetworkNotFound", fmt.Sprintf("Network %s could not be found.", b.FloatingNetworkID))
			return
		case b.SubnetID != "" && b.SubnetID != DefaultFloatingSubnetID:
			neutronError(w, http.StatusBadRequest, "BadRequest", fmt.Sprintf("Bad floatingip request: Subnet %s does not belong to network %s.", b.SubnetID, b.FloatingNetworkID))
			return
		case b.FloatingIPAddress != "":
			neutronError(w, http.StatusForbidden, "PolicyNotAuthorized", "(rule:create_floatingip:floating_ip_address) is disallowed by policy")
			return
		case c.opts.LB.FloatingIPQuota > 0 && len(o.fips) >= c.opts.LB.FloatingIPQuota:
			neutronError(w, http.StatusConflict, "OverQuota", "Quota exceeded for resources: ['floatingip'].")
			return
		}
		nf := &FloatingIP{ID: uuid.NewString(), NetworkID: b.FloatingNetworkID, SubnetID: cmp.Or(b.SubnetID, DefaultFloatingSubnetID),
			Created: c.opts.Now().UTC()}
		if b.Description != nil {
			nf.Description = *b.Description
		}
		port, set, ok := portOf(b.PortID)
		if !ok {
			neutronError(w, http.StatusBadRequest, "HTTPBadRequest", "Invalid input for port_id: not a string or null")
			return
		}
		if set && port != "" {
			if msg := c.associable(port, ""); msg != "" {
				neutronError(w, http.StatusConflict, "FloatingIPPortAlreadyAssociated", msg)
				return
			}
			if !c.vipPort(port) {
				neutronError(w, http.StatusNotFound, "PortNotFound", fmt.Sprintf("Port %s could not be found.", port))
				return
			}
			nf.PortID = port
		}
		o.fips[nf.ID] = nf
		o.fipN = append(o.fipN, nf.ID)
		if err := c.serveFIP(nf); err != nil {
			neutronError(w, http.StatusInternalServerError, "HTTPInternalServerError", err.Error())
			return
		}
		cloudtest.WriteJSON(w, http.StatusCreated, map[string]any{"floatingip": nf.wire()})
	case "fip-update":
		b := req.FloatingIP
		if b.FloatingNetworkID != "" || b.SubnetID != "" || b.FloatingIPAddress != "" {
			neutronError(w, http.StatusBadRequest, "HTTPBadRequest", "Cannot update read-only attribute floating_network_id")
			return
		}
		if b.Description != nil {
			f.Description = *b.Description
		}
		port, set, ok := portOf(b.PortID)
		if !ok {
			neutronError(w, http.StatusBadRequest, "HTTPBadRequest", "Invalid input for port_id: not a string or null")
			return
		}
		if set {
			if port != "" {
				if msg := c.associable(port, f.ID); msg != "" {
					neutronError(w, http.StatusConflict, "FloatingIPPortAlreadyAssociated", msg)
					return
				}
				if !c.vipPort(port) {
					neutronError(w, http.StatusNotFound, "PortNotFound", fmt.Sprintf("Port %s could not be found.", port))
					return
				}
			}
			f.PortID, f.FixedIP = port, ""
		}
		f.Revision++
		if err := c.serveFIP(f); err != nil {
			neutronError(w, http.StatusInternalServerError, "HTTPInternalServerError", err.Error())
			return
		}
		cloudtest.WriteJSON(w, http.StatusOK, map[string]any{"floatingip": f.wire()})
	case "fip-delete":
		delete(o.fips, id)
		o.fipN = slices.DeleteFunc(o.fipN, func(s string) bool { return s == id })
		o.plane.Remove(fipPlaneID(id))
		w.WriteHeader(http.StatusNoContent)
	}
}

// vipPort reports whether port is a load balancer's VIP port (the only
// ports modelled) (o.mu held).
func (c *Cloud) vipPort(port string) bool {
	for _, l := range c.octavia.lbs {
		if l.VIPPortID == port {
			return true
		}
	}
	return false
}

// associable is Neutron's refusal to associate a second floating IP with
// port, "" when it may (o.mu held; self is the floating IP asking).
func (c *Cloud) associable(port, self string) string {
	for _, f := range c.octavia.fips {
		if f.PortID == port && f.ID != self {
			return fmt.Sprintf("Cannot associate floating IP with port %s: it already has floating IP %s.", port, f.Address)
		}
	}
	return ""
}

// portOf reads port_id: set (absent is no change), "" for null (detach);
// ok is false for a value neither a string nor null.
func portOf(raw json.RawMessage) (port string, set, ok bool) {
	if len(raw) == 0 {
		return "", false, true
	}
	if string(raw) == "null" {
		return "", true, true
	}
	if err := json.Unmarshal(raw, &port); err != nil {
		return "", false, false
	}
	return port, true, true
}
