package openstacktest

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// Port is a server's Neutron port: one per fixed address of a server
// (Put) that lies in a subnet PutSubnet made, with the server as its
// device. Its id is derived from the server's id and the address; what
// can change of it (allowed address pairs, port security) is kept by id.
type Port struct {
	ID        string
	NetworkID string
	SubnetID  string
	// DeviceID is the server's id; IPAddress its fixed address.
	DeviceID  string
	IPAddress string
	MAC       string
	// PortSecurity is port_security_enabled (Neutron's default: on).
	PortSecurity bool
	// AllowedAddressPairs are the pairs' ip_address (an address or a
	// CIDR); their mac_address is the port's.
	AllowedAddressPairs []string
	Revision            int
	Created, Updated    time.Time
}

// portState is what a port holds beyond what its server gives it.
type portState struct {
	noPortSecurity bool
	pairs          []string
	revision       int
	updated        time.Time
}

func init() { neutronResources["ports"] = (*Cloud).servePorts }

// portID is the stable id of server's port of addr.
func portID(server, addr string) string {
	sum := sha256.Sum256([]byte(server + "/" + addr))
	u, _ := uuid.FromBytes(sum[:16])
	return u.String()
}

// Ports are the ports of the servers' fixed addresses that lie in a
// subnet, with their state, server by server.
func (c *Cloud) Ports() []Port {
	servers := c.servers.List(nil)
	n := &c.neutron
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []Port
	for _, s := range servers {
		for i, a := range s.Addresses {
			if a.Floating {
				continue
			}
			ip, err := netip.ParseAddr(a.Addr)
			if err != nil {
				continue
			}
			for _, sn := range n.subnets {
				if p, err := netip.ParsePrefix(sn.CIDR); err != nil || !p.Contains(ip) {
					continue
				}
				id := portID(s.ID, a.Addr)
				st := n.ports[id]
				if st == nil {
					st = &portState{}
				}
				out = append(out, Port{ID: id, NetworkID: sn.NetworkID, SubnetID: sn.ID, DeviceID: s.ID, IPAddress: a.Addr,
					MAC: mac(s.ID, i), PortSecurity: !st.noPortSecurity, AllowedAddressPairs: slices.Clone(st.pairs),
					Revision: st.revision, Created: s.Created, Updated: cmpTime(st.updated, s.Created)})
				break
			}
		}
	}
	return out
}

func cmpTime(t, def time.Time) time.Time {
	if t.IsZero() {
		return def
	}
	return t
}

// SetPortSecurity turns port security of the port of server's address
// addr on or off.
func (c *Cloud) SetPortSecurity(server, addr string, on bool) {
	n := &c.neutron
	n.mu.Lock()
	defer n.mu.Unlock()
	n.port(portID(server, addr)).noPortSecurity = !on
}

// port is a port's state, made on first use (n.mu held).
func (n *neutron) port(id string) *portState {
	if n.ports == nil {
		n.ports = map[string]*portState{}
	}
	st := n.ports[id]
	if st == nil {
		st = &portState{}
		n.ports[id] = st
	}
	return st
}

// portUpdate is the body of PUT /v2.0/ports/{id}, the part modelled.
type portUpdate struct {
	Port *struct {
		AllowedAddressPairs *[]struct {
			IPAddress  string `json:"ip_address"`
			MACAddress string `json:"mac_address"`
		} `json:"allowed_address_pairs"`
	} `json:"port"`
}

// servePorts serves GET /v2.0/ports (filters device_id, network_id,
// fixed_ips=ip_address=...; others refused as unmodelled) and PUT
// /v2.0/ports/{id} (allowed_address_pairs, under If-Match).
func (c *Cloud) servePorts(w http.ResponseWriter, r *http.Request, rest string) {
	id := strings.TrimPrefix(rest, "/")
	switch {
	case id == "" && r.Method == http.MethodGet:
		c.listPorts(w, r)
	case id != "" && !strings.Contains(id, "/") && r.Method == http.MethodPut:
		c.updatePort(w, r, id)
	case id == "" || !strings.Contains(id, "/"):
		neutronError(w, http.StatusMethodNotAllowed, "HTTPMethodNotAllowed", "The method is not modelled by openstacktest.")
	default:
		neutronError(w, http.StatusNotFound, "HTTPNotFound", "The resource could not be found.")
	}
}

func (c *Cloud) listPorts(w http.ResponseWriter, r *http.Request) {
	if f := c.count("port-list"); f != nil {
		neutronError(w, f.Status, http.StatusText(f.Status), "injected fault")
		return
	}
	q := r.URL.Query()
	var ips []string
	for k, vs := range q {
		switch k {
		case "device_id", "network_id", "id":
		case "fixed_ips":
			for _, v := range vs {
				ip, ok := strings.CutPrefix(v, "ip_address=")
				if !ok {
					neutronError(w, http.StatusBadRequest, "HTTPBadRequest", "openstacktest models fixed_ips=ip_address=... only")
					return
				}
				ips = append(ips, ip)
			}
		default:
			neutronError(w, http.StatusBadRequest, "HTTPBadRequest", fmt.Sprintf("openstacktest does not model the filter %s", k))
			return
		}
	}
	out := []map[string]any{}
	for _, p := range c.Ports() {
		if v := q.Get("device_id"); v != "" && p.DeviceID != v || q.Get("network_id") != "" && p.NetworkID != q.Get("network_id") ||
			q.Get("id") != "" && p.ID != q.Get("id") {
			continue
		}
		if len(ips) > 0 && !slices.Contains(ips, p.IPAddress) {
			continue
		}
		out = append(out, portWire(p))
	}
	cloudtest.WriteJSON(w, http.StatusOK, map[string]any{"ports": out})
}

func (c *Cloud) updatePort(w http.ResponseWriter, r *http.Request, id string) {
	if f := c.count("port-update"); f != nil {
		neutronError(w, f.Status, http.StatusText(f.Status), "injected fault")
		return
	}
	var body portUpdate
	field, err := cloudtest.DecodeStrict(r.Body, &body)
	switch {
	case field != "":
		neutronError(w, http.StatusBadRequest, "HTTPBadRequest", fmt.Sprintf("Unrecognized attribute(s) '%s'", field))
		return
	case err != nil || body.Port == nil:
		neutronError(w, http.StatusBadRequest, "HTTPBadRequest", "Invalid input for operation: no port.")
		return
	}
	var cur *Port
	for _, p := range c.Ports() {
		if p.ID == id {
			cur = &p
		}
	}
	if cur == nil {
		neutronError(w, http.StatusNotFound, "PortNotFound", fmt.Sprintf("Port %s could not be found.", id))
		return
	}
	var pairs []string
	if body.Port.AllowedAddressPairs != nil {
		for _, p := range *body.Port.AllowedAddressPairs {
			if _, err := netip.ParsePrefix(p.IPAddress); err != nil {
				if _, err := netip.ParseAddr(p.IPAddress); err != nil {
					neutronError(w, http.StatusBadRequest, "InvalidInput",
						fmt.Sprintf("Invalid input for allowed_address_pairs. Reason: '%s' is not a valid IP address.", p.IPAddress))
					return
				}
			}
			if p.MACAddress != "" && p.MACAddress != cur.MAC {
				neutronError(w, http.StatusBadRequest, "InvalidInput", "openstacktest models pairs of the port's own MAC address only")
				return
			}
			if slices.Contains(pairs, p.IPAddress) {
				neutronError(w, http.StatusBadRequest, "DuplicateAddressPairInRequest",
					fmt.Sprintf("Request contains duplicate address pair: mac_address %s ip_address %s.", cur.MAC, p.IPAddress))
				return
			}
			pairs = append(pairs, p.IPAddress)
		}
		if len(pairs) > 0 && !cur.PortSecurity {
			neutronError(w, http.StatusConflict, "AddressPairAndPortSecurityRequired",
				"Port Security must be enabled in order to have allowed address pairs on a port.")
			return
		}
	}
	n := &c.neutron
	n.mu.Lock()
	st := n.port(id)
	if m := r.Header.Get("If-Match"); m != "" {
		want, err := strconv.Atoi(strings.TrimPrefix(m, "revision_number="))
		if err != nil || want != st.revision {
			n.mu.Unlock()
			neutronError(w, http.StatusPreconditionFailed, "RevisionNumberConstraintFailed",
				fmt.Sprintf("Constrained to %s, but current revision is %d", strings.TrimPrefix(m, "revision_number="), st.revision))
			return
		}
	}
	if body.Port.AllowedAddressPairs != nil {
		st.pairs = pairs
	}
	st.revision++
	st.updated = c.opts.Now()
	n.mu.Unlock()
	for _, p := range c.Ports() {
		if p.ID == id {
			cloudtest.WriteJSON(w, http.StatusOK, map[string]any{"port": portWire(p)})
			return
		}
	}
	neutronError(w, http.StatusNotFound, "PortNotFound", fmt.Sprintf("Port %s could not be found.", id))
}

// portWire is a port as Neutron shows it.
func portWire(p Port) map[string]any {
	pairs := []map[string]any{}
	for _, a := range p.AllowedAddressPairs {
		pairs = append(pairs, map[string]any{"ip_address": a, "mac_address": p.MAC})
	}
	return map[string]any{
		"id": p.ID, "name": "", "description": "", "network_id": p.NetworkID, "admin_state_up": true, "status": "ACTIVE",
		"mac_address": p.MAC, "fixed_ips": []map[string]any{{"subnet_id": p.SubnetID, "ip_address": p.IPAddress}},
		"device_id": p.DeviceID, "device_owner": "compute:" + DefaultZone, "security_groups": []string{},
		"allowed_address_pairs": pairs, "port_security_enabled": p.PortSecurity, "tags": []string{},
		"project_id": DefaultProjectID, "tenant_id": DefaultProjectID, "revision_number": p.Revision,
		"propagate_uplink_status": false, "created_at": p.Created.UTC().Format(neutronTime), "updated_at": p.Updated.UTC().Format(neutronTime),
	}
}
