// Package agentid is the Hetzner Cloud backend's side of the node agent:
// the server's record from its metadata service, read with hcloud-go's
// metadata client (instance-id, hostname, private-networks). Hetzner signs
// nothing about a server, so Evidence wraps nodeid.ErrNoEvidence: the node
// joins with a join ticket. It registers the node identity of the backend
// "hetzner" (cloud/nodeid), and holds what the provider shares with it
// (names.go): providerIDs, Node names and the node name policy. It imports
// no provider (mooring-agent links it without one).
package agentid

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"time"

	hcmetadata "github.com/hetznercloud/hcloud-go/v2/hcloud/metadata"
	"sigs.k8s.io/yaml"

	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/nodeid/linklocal"
)

// Name is the backend's name, the agent config's cloud: hetzner.
const Name = "hetzner"

func init() { nodeid.Register(Name, nodeid.Of(NewNodeIdentity)) }

// metadataTimeout bounds one metadata call.
const metadataTimeout = 5 * time.Second

// SettingNetwork is the agent's cloudSettings key naming the private
// network (its ID) whose address is the node's internal IP, as the
// provider config's network.
const SettingNetwork = "network"

// NodeIdentity is a Hetzner Cloud server as its node agent sees it: the
// server metadata service (http://169.254.169.254/hetzner/v1/metadata),
// read with hcloud-go's metadata client. Hetzner signs nothing about a
// server, so it gives no evidence: the node joins with a join ticket.
type NodeIdentity struct {
	nodeid.Ticketed
	md      *hcmetadata.Client
	network int64
}

var _ nodeid.Unsigned = (*NodeIdentity)(nil)

// NewNodeIdentity reads the agent's configuration of the hetzner backend:
// cfg.MetadataURL ("" is the metadata service's own address; else the
// http URL of its base, .../hetzner/v1/metadata), cfg.NodeNamePolicy (""
// or ServerName), and the one cloudSetting network (a private network's
// ID). It calls nothing.
func NewNodeIdentity(cfg nodeid.Config) (*NodeIdentity, error) {
	if err := cfg.CheckPolicy(Name, PolicyServerName); err != nil {
		return nil, err
	}
	id := &NodeIdentity{Ticketed: nodeid.Ticketed{Backend: Name, Machine: "a Hetzner Cloud server"}}
	for k, v := range cfg.Settings {
		if k != SettingNetwork {
			return nil, fmt.Errorf("hetzner: cloudSettings: unknown key %q (the only key is %s)", k, SettingNetwork)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("hetzner: cloudSettings: %s %q is not a network ID", SettingNetwork, v)
		}
		id.network = n
	}
	endpoint, err := linklocal.BaseURL(cfg.MetadataURL, hcmetadata.Endpoint, linklocal.AllowPath())
	if err != nil {
		return nil, fmt.Errorf("hetzner: %w", err)
	}
	// linklocal's client: no proxy (the metadata service answers only the
	// server itself), no redirect, each answer bounded.
	id.md = hcmetadata.NewClient(hcmetadata.WithEndpoint(endpoint), hcmetadata.WithHTTPClient(linklocal.NewHTTPClient(metadataTimeout, 0)),
		hcmetadata.WithTimeout(metadataTimeout))
	return id, nil
}

// privateNetwork is one entry of the metadata service's private-networks
// document (YAML); only the fields read here.
type privateNetwork struct {
	IP           string `json:"ip"`
	NetworkID    int64  `json:"network_id"`
	InterfaceNum int    `json:"interface_num"`
}

// Instance reads the server's id, name and private address from the
// metadata service. The Node name is the server name, lower-cased; the
// internal IP is the address in the configured network, else in the
// private network of the lowest interface number, else none.
func (n *NodeIdentity) Instance(ctx context.Context) (nodeid.Instance, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*metadataTimeout)
	defer cancel()
	id, err := n.md.InstanceIDWithContext(ctx)
	if err != nil {
		return nodeid.Instance{}, fmt.Errorf("hetzner: metadata instance-id: %w", err)
	}
	if id <= 0 {
		return nodeid.Instance{}, fmt.Errorf("hetzner: metadata instance-id %d is not a server id", id)
	}
	name, err := n.md.HostnameWithContext(ctx)
	if err != nil {
		return nodeid.Instance{}, fmt.Errorf("hetzner: metadata hostname: %w", err)
	}
	nodeName := NodeName(name)
	if nodeName == "" {
		return nodeid.Instance{}, fmt.Errorf("hetzner: server name %.80q (metadata hostname) is not a valid Node name (a DNS-1123 subdomain)", name)
	}
	doc, err := n.md.PrivateNetworksWithContext(ctx)
	if err != nil {
		return nodeid.Instance{}, fmt.Errorf("hetzner: metadata private-networks: %w", err)
	}
	ip, err := n.internalIP(doc)
	if err != nil {
		return nodeid.Instance{}, err
	}
	return nodeid.Instance{
		ID: strconv.FormatInt(id, 10), Name: name, NodeName: nodeName,
		ProviderID: ProviderID(id), InternalIP: ip,
	}, nil
}

func (n *NodeIdentity) internalIP(doc string) (string, error) {
	var nets []privateNetwork
	if err := yaml.Unmarshal([]byte(doc), &nets); err != nil {
		return "", fmt.Errorf("hetzner: metadata private-networks: %w", err)
	}
	sort.SliceStable(nets, func(i, j int) bool { return nets[i].InterfaceNum < nets[j].InterfaceNum })
	for _, pn := range nets {
		if n.network != 0 && pn.NetworkID != n.network {
			continue
		}
		ip := net.ParseIP(pn.IP)
		if ip == nil {
			return "", fmt.Errorf("hetzner: metadata private-networks: %q (network %d) is not an IP address", pn.IP, pn.NetworkID)
		}
		return ip.String(), nil
	}
	if n.network != 0 {
		return "", fmt.Errorf("hetzner: the server is not attached to network %d (metadata private-networks)", n.network)
	}
	return "", nil
}
