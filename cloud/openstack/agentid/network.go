package agentid

import (
	"fmt"
	"net/netip"
)

// NetworkData is the part of network_data.json the agent reads (Nova
// writes it from Liberty on, to the metadata service and the config
// drive): the server's links (its ports) and its networks, one per port
// and IP version, in the order of the server's ports. Routes, DNS
// services and MTUs are left undecoded.
type NetworkData struct {
	Links    []NetworkLink `json:"links"`
	Networks []Network     `json:"networks"`
}

// NetworkLink is a port of the server.
type NetworkLink struct {
	ID  string `json:"id"`
	MAC string `json:"ethernet_mac_address"`
}

// Network is one IP network of a port. Nova writes the port's first
// address of that version as ip_address when the subnet has no DHCP
// (type ipv4 or ipv6), or when IPv6 addresses are assigned by
// ipv6_address_mode (ipv6_slaac, ipv6_dhcpv6-stateful,
// ipv6_dhcpv6-stateless); with DHCP it writes ipv4_dhcp or ipv6_dhcp and
// no address.
type Network struct {
	ID        string `json:"id"`
	Type      string `json:"type"`
	Link      string `json:"link"`
	IPAddress string `json:"ip_address"`
	NetworkID string `json:"network_id"`
}

// The network types whose ip_address counts: Nova's, and the static and
// static6 that cloud-init also reads.
var (
	ipv4Types = map[string]bool{"ipv4": true, "static": true}
	ipv6Types = map[string]bool{"ipv6": true, "static6": true, "ipv6_slaac": true,
		"ipv6_dhcpv6-stateful": true, "ipv6_dhcpv6-stateless": true}
)

// NodeAddress is the server's address from network_data.json: the
// address of the first IPv4 network that has one (the address Nova gives
// as the EC2 local-ipv4: the first fixed IPv4 address of the first port
// that has one). A server with IPv4 networks none of which has an address
// (their subnets have DHCP) has none: its IPv6 address would make a dual-
// stack Node's primary family IPv6. Only a server without any IPv4 network
// gets the address of its first IPv6 network that has one. An address that
// is not one of its network's IP version is an error.
func (d *NetworkData) NodeAddress() (string, error) {
	v6, hasIPv4 := "", false
	for _, nw := range d.Networks {
		if nw.Type == "ipv4_dhcp" {
			hasIPv4 = true
		}
		if nw.IPAddress == "" || (!ipv4Types[nw.Type] && !ipv6Types[nw.Type]) {
			continue
		}
		a, err := netip.ParseAddr(nw.IPAddress)
		if err != nil || a.Zone() != "" {
			return "", fmt.Errorf("network_data.json network %.40q: ip_address %.80q is not an IP address", nw.ID, nw.IPAddress)
		}
		a = a.Unmap()
		switch {
		case ipv4Types[nw.Type] && a.Is4():
			return a.String(), nil
		case ipv6Types[nw.Type] && a.Is6():
			if v6 == "" {
				v6 = a.String()
			}
		default:
			return "", fmt.Errorf("network_data.json network %.40q: ip_address %s is not an address of type %s", nw.ID, a, nw.Type)
		}
	}
	if hasIPv4 {
		return "", nil
	}
	return v6, nil
}
