package hetznertest

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
	"sigs.k8s.io/yaml"
)

// metadataBase is the metadata service's path; userdata is next to it.
const (
	metadataBase = "/hetzner/v1/metadata"
	userdataPath = "/hetzner/v1/userdata"
)

// mdPrivateNetwork is one entry of the private-networks document.
type mdPrivateNetwork struct {
	IP           string   `json:"ip"`
	AliasIPs     []string `json:"alias_ips"`
	InterfaceNum int      `json:"interface_num"`
	MACAddress   string   `json:"mac_address"`
	NetworkID    int64    `json:"network_id"`
	NetworkName  string   `json:"network_name"`
	Network      string   `json:"network"`
	Subnet       string   `json:"subnet"`
	Gateway      string   `json:"gateway"`
}

func (c *Cloud) serveMetadata(id int64, w http.ResponseWriter, r *http.Request) {
	s, ok := c.Get(id)
	if !ok || s.Status != "running" {
		cloudtest.HangUp(w) // a machine that is not running answers nothing
		return
	}
	if f := c.count("metadata", 0); f != nil {
		http.Error(w, "injected fault", f.Status)
		return
	}
	if r.Method != http.MethodGet {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if r.URL.Path == userdataPath {
		writeText(w, s.UserData)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, metadataBase)
	if !ok {
		http.NotFound(w, r)
		return
	}
	nets := privateNetworks(s)
	switch rest {
	case "", "/":
		doc := map[string]any{
			"hostname": s.Name, "instance-id": s.ID, "public-ipv4": s.PublicIPv4,
			"region": location(s.Location).NetworkZone, "availability-zone": datacenter(s.Location),
			"local-ipv4": "", "public-keys": []string{}, "vendor_data": "", "private-networks": nets,
			"network-config": networkConfig(s), "network-sysconfig": networkSysconfig(s),
		}
		writeYAML(w, doc)
	case "/hostname":
		writeText(w, s.Name)
	case "/instance-id":
		writeText(w, strconv.FormatInt(s.ID, 10))
	case "/public-ipv4":
		writeText(w, s.PublicIPv4)
	case "/region":
		writeText(w, location(s.Location).NetworkZone)
	case "/availability-zone":
		writeText(w, datacenter(s.Location))
	case "/private-networks":
		writeYAML(w, nets)
	default:
		http.NotFound(w, r)
	}
}

// privateNetworks describes a server's private networks as the metadata
// service does (each network a /16 of its address, its subnet the /24,
// the gateway .1 of the network). Interfaces are numbered after the
// public one, which is 1: cloud-init's sample numbers a server's one
// private network 2. A server without a public network numbers them from 1
// (an assumption: no sample shows one).
func privateNetworks(s Server) []mdPrivateNetwork {
	out := []mdPrivateNetwork{}
	first := 1
	if hasPublic(s) {
		first = 2
	}
	for i, pn := range s.PrivateNets {
		ip := net.ParseIP(pn.IP).To4()
		e := mdPrivateNetwork{IP: pn.IP, AliasIPs: []string{}, InterfaceNum: first + i, MACAddress: mac(s.ID, i),
			NetworkID: pn.Network, NetworkName: fmt.Sprintf("network-%d", pn.Network)}
		if ip != nil {
			e.Network = fmt.Sprintf("%d.%d.0.0/16", ip[0], ip[1])
			e.Subnet = fmt.Sprintf("%d.%d.%d.0/24", ip[0], ip[1], ip[2])
			e.Gateway = fmt.Sprintf("%d.%d.0.1", ip[0], ip[1])
		}
		out = append(out, e)
	}
	return out
}

func hasPublic(s Server) bool { return s.PublicIPv4 != "" || s.PublicIPv6 != "" }

// publicMAC is the MAC address of a server's public interface (Hetzner's
// start with 96:00, the private ones with 86:00).
func publicMAC(id int64) string {
	return fmt.Sprintf("96:00:%02x:%02x:%02x:%02x", byte(id>>24), byte(id>>16), byte(id>>8), byte(id))
}

// mdNameservers are the resolvers the documents name (loopback here).
var mdNameservers = []string{"127.0.0.53"}

// networkConfig is the document's network-config: cloud-init's network
// config version 1 for the public interface, eth0: DHCP for IPv4, the
// server's IPv6 host address statically with the gateway fe80::1, as in
// cloud-init's sample. A server without a public network has none.
func networkConfig(s Server) map[string]any {
	config := []any{}
	if hasPublic(s) {
		subnets := []any{}
		if s.PublicIPv4 != "" {
			subnets = append(subnets, map[string]any{"ipv4": true, "type": "dhcp", "dns_nameservers": mdNameservers})
		}
		if s.PublicIPv6 != "" {
			subnets = append(subnets, map[string]any{"ipv6": true, "address": ipv6Host(s.PublicIPv6) + "/64",
				"gateway": "fe80::1", "dns_nameservers": []string{"::1"}})
		}
		config = append(config, map[string]any{"type": "physical", "name": "eth0", "mac_address": publicMAC(s.ID),
			"subnets": subnets})
	}
	return map[string]any{"version": 1, "config": config}
}

// networkSysconfig is the document's network-sysconfig: the public
// interface as an ifcfg file of Red Hat's network scripts.
func networkSysconfig(s Server) string {
	if !hasPublic(s) {
		return ""
	}
	lines := []string{"DEVICE='eth0'", "TYPE=Ethernet", "BOOTPROTO=dhcp", "ONBOOT='yes'", "HWADDR=" + publicMAC(s.ID)}
	if s.PublicIPv6 != "" {
		lines = append(lines, "IPV6INIT=yes", "IPV6ADDR="+ipv6Host(s.PublicIPv6)+"/64", "IPV6_DEFAULTGW=fe80::1%eth0",
			"IPV6_AUTOCONF=no")
	}
	for i, ns := range mdNameservers {
		lines = append(lines, fmt.Sprintf("DNS%d=%s", i+1, ns))
	}
	return strings.Join(lines, "\n") + "\n"
}

// ipv6Host is the host address (::1) of a server's IPv6 /64.
func ipv6Host(network string) string {
	_, n, err := net.ParseCIDR(network)
	if err != nil {
		return ""
	}
	ip := append(net.IP(nil), n.IP.To16()...)
	ip[net.IPv6len-1] |= 1
	return ip.String()
}

func writeText(w http.ResponseWriter, s string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte(s))
}

func writeYAML(w http.ResponseWriter, v any) {
	data, err := yaml.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write(data)
}
