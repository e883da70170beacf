// Package agentid is the DigitalOcean backend's side of the node agent: a
// droplet's record from its metadata service (/metadata/v1.json). DigitalOcean
// signs nothing about a droplet, so Evidence wraps nodeid.ErrNoEvidence:
// the droplet joins with a join ticket. It registers the node identity of
// the backend "digitalocean" (cloud/nodeid), and holds what the provider
// shares with it (names.go): providerIDs, Node names and the node name
// policy. It imports no provider and no godo (mooring-agent links it
// without them).
package agentid

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"

	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/nodeid/linklocal"
)

// Name is the backend's name, the agent config's cloud: digitalocean.
const Name = "digitalocean"

func init() { nodeid.Register(Name, nodeid.Of(NewNodeIdentity)) }

// metadataPath is the document with all of a droplet's metadata at once.
const metadataPath = "/metadata/v1.json"

// Metadata is the part of /metadata/v1.json the agent reads (the documented
// droplet metadata: droplet_id, hostname, region, interfaces). The
// document also holds user_data, and with it the join ticket: it is
// decoded into nothing and never logged.
type Metadata struct {
	DropletID  DropletID `json:"droplet_id"`
	Hostname   string    `json:"hostname"`
	Region     string    `json:"region"`
	Interfaces struct {
		Private []MetadataInterface `json:"private"`
		Public  []MetadataInterface `json:"public"`
	} `json:"interfaces"`
}

// DropletID is a droplet's id as the metadata document gives it: a JSON
// number, as DigitalOcean documents it, or a string of its decimal digits,
// as in the document cloud-init's tests keep from a droplet
// ("droplet_id": "22532410"). null is 0 (no id).
type DropletID int

// UnmarshalJSON reads a number or a string of decimal digits in canonical
// form (no sign, no leading zeros, no fraction).
func (d *DropletID) UnmarshalJSON(data []byte) error {
	text := string(data)
	if text == "null" {
		return nil
	}
	if len(text) >= 2 && text[0] == '"' && text[len(text)-1] == '"' {
		text = text[1 : len(text)-1]
	}
	n, err := strconv.Atoi(text)
	if err != nil || n < 0 || strconv.Itoa(n) != text {
		return fmt.Errorf("droplet_id %.40s is not a droplet id", data)
	}
	*d = DropletID(n)
	return nil
}

// MetadataInterface is one network interface of a droplet.
type MetadataInterface struct {
	MAC  string `json:"mac"`
	Type string `json:"type"`
	IPv4 *struct {
		IPAddress string `json:"ip_address"`
		Netmask   string `json:"netmask"`
		Gateway   string `json:"gateway"`
	} `json:"ipv4"`
	IPv6 *struct {
		IPAddress string `json:"ip_address"`
		CIDR      int    `json:"cidr"`
		Gateway   string `json:"gateway"`
	} `json:"ipv6"`
}

// NodeIdentity is a droplet as its node agent sees it: the metadata
// service's JSON document. godo has no metadata client; this is a small
// typed one (linklocal's limits: 10s, 1 MiB, which user data, at most 64
// KiB, fits in). DigitalOcean signs no identity: Evidence always fails
// with nodeid.ErrNoEvidence, and the droplet joins with a join ticket.
type NodeIdentity struct {
	nodeid.Ticketed
	md *linklocal.Client
}

var _ nodeid.Unsigned = (*NodeIdentity)(nil)

// NewNodeIdentity reads the agent's configuration of the digitalocean
// backend: cfg.MetadataURL ("" is http://169.254.169.254; else
// http://host[:port]), cfg.NodeNamePolicy ("" or DropletName). The backend
// has no cloudSettings. It calls nothing.
func NewNodeIdentity(cfg nodeid.Config) (*NodeIdentity, error) {
	if err := cfg.CheckPlain(Name, PolicyDropletName); err != nil {
		return nil, err
	}
	md, err := linklocal.Open(Name, cfg.MetadataURL, linklocal.DefaultURL, linklocal.Options{Header: http.Header{"Accept": {"application/json"}}})
	if err != nil {
		return nil, err
	}
	return &NodeIdentity{Ticketed: nodeid.Ticketed{Backend: Name, Machine: "a droplet"}, md: md}, nil
}

// Metadata reads the droplet's metadata document.
func (n *NodeIdentity) Metadata(ctx context.Context) (Metadata, error) {
	var md Metadata
	return md, n.md.GetJSON(ctx, metadataPath, &md)
}

// Instance reads the droplet's id, name and first private IPv4 from the
// metadata service. The Node name is the droplet name, lower-cased.
func (n *NodeIdentity) Instance(ctx context.Context) (nodeid.Instance, error) {
	md, err := n.Metadata(ctx)
	if err != nil {
		return nodeid.Instance{}, err
	}
	switch {
	case md.DropletID < 1:
		return nodeid.Instance{}, fmt.Errorf("%s: metadata droplet_id %d is not a droplet id", Name, md.DropletID)
	case md.Hostname == "":
		return nodeid.Instance{}, fmt.Errorf("%s: metadata hostname is empty", Name)
	}
	var ip string
	for _, nic := range md.Interfaces.Private {
		if nic.IPv4 == nil || nic.IPv4.IPAddress == "" {
			continue
		}
		if net.ParseIP(nic.IPv4.IPAddress) == nil {
			return nodeid.Instance{}, fmt.Errorf("%s: metadata private ipv4 %q is not an IP address", Name, nic.IPv4.IPAddress)
		}
		ip = nic.IPv4.IPAddress
		break
	}
	nodeName := NodeName(md.Hostname)
	if nodeName == "" {
		return nodeid.Instance{}, fmt.Errorf("%s: droplet name %.80q is not a valid Node name (a DNS-1123 subdomain)", Name, md.Hostname)
	}
	id := strconv.Itoa(int(md.DropletID))
	return nodeid.Instance{
		ID: id, Name: md.Hostname, NodeName: nodeName,
		ProviderID: ProviderIDPrefix + id,
		InternalIP: ip,
	}, nil
}
