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
			"local-ipv4": "", "public-keys": []string{}, "vendor_data": "",
			"private-networks": nets,
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
// the gateway .1 of the network).
func privateNetworks(s Server) []mdPrivateNetwork {
	out := []mdPrivateNetwork{}
	for i, pn := range s.PrivateNets {
		ip := net.ParseIP(pn.IP).To4()
		e := mdPrivateNetwork{IP: pn.IP, AliasIPs: []string{}, InterfaceNum: i + 1, MACAddress: mac(s.ID, i),
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
