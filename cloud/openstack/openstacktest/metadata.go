package openstacktest

import (
	"net/http"
	"net/netip"
	"strconv"

	"github.com/google/uuid"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// The metadata service's paths served.
const (
	metaDataPath    = "/openstack/latest/meta_data.json"
	networkDataPath = "/openstack/latest/network_data.json"
	userDataPath    = "/openstack/latest/user_data"
	localIPv4Path   = "/latest/meta-data/local-ipv4"
)

func (c *Cloud) serveMetadata(id string, w http.ResponseWriter, r *http.Request) {
	s, ok := c.Get(id)
	if !ok || s.Status != StatusActive || s.NoMetadataService {
		// A machine that is not running answers nothing, and neither does
		// a cloud without a metadata service.
		cloudtest.HangUp(w)
		return
	}
	if f := c.count("metadata"); f != nil {
		http.Error(w, "injected fault", f.Status)
		return
	}
	if r.Method != http.MethodGet {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	switch r.URL.Path {
	case metaDataPath:
		cloudtest.WriteJSON(w, http.StatusOK, metaData(s))
	case networkDataPath:
		cloudtest.WriteJSON(w, http.StatusOK, networkData(s))
	case userDataPath:
		if s.UserData == "" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write([]byte(s.UserData))
	case localIPv4Path:
		if a := localIPv4(s); a != "" {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = w.Write([]byte(a))
			return
		}
		http.NotFound(w, r)
	default:
		http.NotFound(w, r)
	}
}

// metaData is the server's meta_data.json.
func metaData(s Server) map[string]any {
	meta := map[string]string{}
	for k, v := range s.Metadata {
		meta[k] = v
	}
	return map[string]any{
		"uuid": s.ID, "name": s.Name, "hostname": hostname(s.Name) + ".novalocal",
		"availability_zone": s.AvailabilityZone, "project_id": DefaultProjectID, "launch_index": 0,
		"meta": meta, "public_keys": map[string]string{}, "keys": []any{}, "devices": []any{},
		"random_seed": "", "dedicated_cpus": []int{},
	}
}

// localIPv4 is the EC2-compatible local-ipv4 as Nova derives it: the
// first fixed IPv4 address of the server's ports; "" when it has none.
func localIPv4(s Server) string {
	for _, a := range s.Addresses {
		if ip, err := netip.ParseAddr(a.Addr); err == nil && ip.Is4() && !a.Floating {
			return a.Addr
		}
	}
	return ""
}

// port is one of a server's ports: its network, and its first fixed IPv4
// and IPv6 addresses.
type port struct {
	id, network, mac string
	ipv4, ipv6       string
}

// ports are a server's ports in the order of its addresses: one per
// network that holds a fixed address (floating IPs are not a port's).
func ports(s Server) []port {
	var out []port
	index := map[string]int{}
	for i, a := range s.Addresses {
		if a.Floating {
			continue
		}
		j, ok := index[a.Network]
		if !ok {
			j = len(out)
			index[a.Network] = j
			out = append(out, port{id: uuid.NewSHA1(uuid.NameSpaceURL, []byte(s.ID+"/"+a.Network)).String(), network: a.Network, mac: mac(s.ID, i)})
		}
		ip, err := netip.ParseAddr(a.Addr)
		switch {
		case err != nil:
		case ip.Is4() && out[j].ipv4 == "":
			out[j].ipv4 = a.Addr
		case ip.Is6() && out[j].ipv6 == "":
			out[j].ipv6 = a.Addr
		}
	}
	return out
}

// networkData is the server's network_data.json as Nova writes it: a link
// per port (its tap device, the port's MAC), and per port a network for
// its first IPv4 and its first IPv6 address, numbered in that order. On
// a server with DHCP the IPv4 networks are ipv4_dhcp without an address
// (and the links carry no MTU), as Nova writes them for a subnet with a
// DHCP server; IPv6 addresses are static (type ipv6). No subnet has a
// gateway or DNS servers.
func networkData(s Server) map[string]any {
	links := []map[string]any{}
	networks := []map[string]any{}
	for _, p := range ports(s) {
		link := "tap" + p.id[:11]
		var mtu any = 1500
		if s.DHCP {
			mtu = nil
		}
		links = append(links, map[string]any{"id": link, "vif_id": p.id, "type": "ovs", "mtu": mtu, "ethernet_mac_address": p.mac})
		netID := uuid.NewSHA1(uuid.NameSpaceURL, []byte("network/"+p.network)).String()
		if p.ipv4 != "" {
			if s.DHCP {
				networks = append(networks, map[string]any{"id": "network" + strconv.Itoa(len(networks)), "type": "ipv4_dhcp", "link": link, "network_id": netID})
			} else {
				networks = append(networks, map[string]any{"id": "network" + strconv.Itoa(len(networks)), "type": "ipv4", "link": link,
					"ip_address": p.ipv4, "netmask": "255.255.255.0", "routes": []any{}, "network_id": netID, "services": []any{}})
			}
		}
		if p.ipv6 != "" {
			networks = append(networks, map[string]any{"id": "network" + strconv.Itoa(len(networks)), "type": "ipv6", "link": link,
				"ip_address": p.ipv6, "netmask": "ffff:ffff:ffff:ffff::", "routes": []any{}, "network_id": netID, "services": []any{}})
		}
	}
	return map[string]any{"links": links, "networks": networks, "services": []any{}}
}
