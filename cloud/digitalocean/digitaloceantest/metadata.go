package digitaloceantest

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// The metadata document's parts (GET /metadata/v1.json).
type mdDocument struct {
	DropletID  int          `json:"droplet_id"`
	Hostname   string       `json:"hostname"`
	UserData   string       `json:"user_data,omitempty"`
	VendorData string       `json:"vendor_data"`
	PublicKeys []string     `json:"public_keys"`
	AuthKey    string       `json:"auth_key"`
	Region     string       `json:"region"`
	Interfaces mdInterfaces `json:"interfaces"`
	FloatingIP mdFloating   `json:"floating_ip"`
	ReservedIP mdFloating   `json:"reserved_ip"`
	DNS        mdDNS        `json:"dns"`
	Tags       []string     `json:"tags"`
	Features   mdFeatures   `json:"features"`
}

type mdInterfaces struct {
	Public  []mdInterface `json:"public"`
	Private []mdInterface `json:"private"`
}

type mdInterface struct {
	IPv4       *mdIPv4 `json:"ipv4,omitempty"`
	IPv6       *mdIPv6 `json:"ipv6,omitempty"`
	AnchorIPv4 *mdIPv4 `json:"anchor_ipv4,omitempty"`
	MAC        string  `json:"mac"`
	Type       string  `json:"type"`
}

type mdIPv4 struct {
	IPAddress string `json:"ip_address"`
	Netmask   string `json:"netmask"`
	Gateway   string `json:"gateway"`
}

type mdIPv6 struct {
	IPAddress string `json:"ip_address"`
	CIDR      int    `json:"cidr"`
	Gateway   string `json:"gateway"`
}

type mdFloating struct {
	IPv4 struct {
		Active bool `json:"active"`
	} `json:"ipv4"`
}

type mdDNS struct {
	Nameservers []string `json:"nameservers"`
}

type mdFeatures struct {
	DHCPEnabled bool `json:"dhcp_enabled"`
}

// serveMetadata answers a droplet's metadata service: only
// /metadata/v1.json is modelled. A droplet that is not active answers
// nothing (its connections are closed), as a machine that is off.
func (c *Cloud) serveMetadata(id int, w http.ResponseWriter, r *http.Request) {
	st := c.count(MethodMetadata)
	d, ok := c.Get(id)
	if cloudtest.Unserved(w, ok && d.Status == StatusActive, st) {
		return
	}
	switch {
	case r.Method != http.MethodGet:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	case r.URL.Path == "/metadata/v1":
		// An index asked without its trailing slash.
		http.Redirect(w, r, "/metadata/v1/", http.StatusMovedPermanently)
		return
	case r.URL.Path != "/metadata/v1.json":
		http.NotFound(w, r)
		return
	}
	doc := mdDocument{
		DropletID: d.ID, Hostname: d.Name, UserData: d.UserData, Region: d.Region,
		VendorData: "#cloud-config\ndisable_root: false\nmanage_etc_hosts: true\n",
		PublicKeys: []string{},
		AuthKey:    fmt.Sprintf("%032x", d.ID),
		DNS:        mdDNS{Nameservers: []string{"127.0.0.53"}},
		Tags:       d.Tags,
		Features:   mdFeatures{DHCPEnabled: false},
		Interfaces: mdInterfaces{Public: []mdInterface{}, Private: []mdInterface{}},
	}
	if doc.Tags == nil {
		doc.Tags = []string{}
	}
	if d.PrivateIP != "" {
		doc.Interfaces.Private = append(doc.Interfaces.Private, mdInterface{
			IPv4: &mdIPv4{IPAddress: d.PrivateIP, Netmask: "255.255.0.0"},
			MAC:  mac(d.ID, 2), Type: "private",
		})
	}
	if d.PublicIP != "" || d.PublicIPv6 != "" {
		nic := mdInterface{MAC: mac(d.ID, 1), Type: "public"}
		if d.PublicIP != "" {
			nic.IPv4 = &mdIPv4{IPAddress: d.PublicIP, Netmask: "255.255.240.0", Gateway: "127.0.0.1"}
			// The anchor address a reserved IP is routed to, on the
			// public interface of every droplet with a public IPv4 (in
			// both documents of cloud-init's samples).
			nic.AnchorIPv4 = &mdIPv4{IPAddress: fmt.Sprintf("127.10.%d.%d", byte(d.ID>>8), byte(d.ID)),
				Netmask: "255.255.0.0", Gateway: "127.10.0.1"}
		}
		if d.PublicIPv6 != "" {
			nic.IPv6 = &mdIPv6{IPAddress: d.PublicIPv6, CIDR: 64, Gateway: "::1"}
		}
		doc.Interfaces.Public = append(doc.Interfaces.Public, nic)
	}
	writeJSON(w, http.StatusOK, doc)
}

// mac is a stable, locally administered MAC address of a droplet's nic.
func mac(id, nic int) string {
	return strings.ToLower(fmt.Sprintf("06:%02x:%02x:%02x:%02x:%02x", nic, byte(id>>24), byte(id>>16), byte(id>>8), byte(id)))
}
