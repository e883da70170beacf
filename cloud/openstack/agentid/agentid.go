// Package agentid is the OpenStack backend's side of the node agent: the
// server's record from the Nova metadata service (the OpenStack
// meta_data.json, and the EC2-compatible local-ipv4). OpenStack signs
// nothing about a server that mooring can check (the metadata service
// answers anything on the server, unsigned), so Evidence wraps
// nodeid.ErrNoEvidence: the server joins with a join ticket. It registers
// the node identity of the backend "openstack" (cloud/nodeid), and holds
// what the provider shares with it (names.go): providerIDs, Node names and
// the node name policy. It imports no provider and no gophercloud
// (mooring-agent links it without them).
package agentid

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/internal/evidence"
)

// Name is the backend's name, the agent config's cloud: openstack.
const Name = "openstack"

func init() {
	nodeid.Register(Name, func(cfg nodeid.Config) (nodeid.Identity, error) { return NewNodeIdentity(cfg) })
}

// DefaultMetadataURL is the Nova metadata service's address.
const DefaultMetadataURL = "http://169.254.169.254"

// The paths read: the OpenStack metadata document, and the EC2-compatible
// fixed address (network_data.json leaves it out for subnets with DHCP).
const (
	MetaDataPath  = "/openstack/latest/meta_data.json"
	LocalIPv4Path = "/latest/meta-data/local-ipv4"
)

// SettingRegion is the agent's cloudSettings key that makes the kubelet's
// providerID the regional form openstack://<region>/<id>; it must be the
// provider config's region, set when the provider's regionalProviderID
// is.
const SettingRegion = "region"

// metadataTimeout bounds one metadata request; maxMetadataSize its answer.
const (
	metadataTimeout = 10 * time.Second
	maxMetadataSize = 1 << 20
)

// MetaData is the part of meta_data.json the agent reads. The document
// holds more (public keys, devices, the server's metadata items); it is
// decoded into these fields only and never logged.
type MetaData struct {
	UUID             string `json:"uuid"`
	Name             string `json:"name"`
	Hostname         string `json:"hostname"`
	AvailabilityZone string `json:"availability_zone"`
	ProjectID        string `json:"project_id"`
}

// NodeIdentity is an OpenStack server as its node agent sees it: the
// metadata service, read with a small typed client (gophercloud has no
// metadata client). OpenStack signs no identity that the approver could
// check: Evidence always fails with nodeid.ErrNoEvidence, and the server
// joins with a join ticket.
type NodeIdentity struct {
	base   string
	region string
	client *http.Client
}

var _ nodeid.Identity = (*NodeIdentity)(nil)

// NewNodeIdentity reads the agent's configuration of the openstack
// backend: cfg.MetadataURL ("" is http://169.254.169.254; else
// http://host[:port]), cfg.NodeNamePolicy ("" or ServerName), and the one
// cloudSetting region. It calls nothing.
func NewNodeIdentity(cfg nodeid.Config) (*NodeIdentity, error) {
	if cfg.NodeNamePolicy != "" && cfg.NodeNamePolicy != PolicyServerName {
		return nil, fmt.Errorf("%s: node name policy %q: the only policy is %s", Name, cfg.NodeNamePolicy, PolicyServerName)
	}
	n := &NodeIdentity{base: DefaultMetadataURL}
	for k, v := range cfg.Settings {
		if k != SettingRegion {
			return nil, fmt.Errorf("%s: cloudSettings: unknown key %q (the only key is %s)", Name, k, SettingRegion)
		}
		if v == "" || strings.ContainsAny(v, "/ \t\n") {
			return nil, fmt.Errorf("%s: cloudSettings: %s %q is not a region name", Name, SettingRegion, v)
		}
		n.region = v
	}
	if cfg.MetadataURL != "" {
		u, err := url.Parse(cfg.MetadataURL)
		if err != nil || u.Scheme != "http" || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("%s: metadataURL %q: want http://host[:port] (the metadata service speaks plain http)", Name, cfg.MetadataURL)
		}
		n.base = "http://" + u.Host
	}
	// No proxy: the metadata service is link-local, and a proxy would
	// answer for another machine.
	n.client = &http.Client{
		Timeout: metadataTimeout,
		Transport: &http.Transport{Proxy: nil, DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
			ResponseHeaderTimeout: metadataTimeout},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return n, nil
}

// errNotThere: the metadata service answered 404 for a path.
var errNotThere = errors.New("not in the metadata service")

// get reads one metadata path.
func (n *NodeIdentity) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.base+path, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: metadata: %w", Name, err)
	}
	resp, err := n.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: metadata %s: %w", Name, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxMetadataSize+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s: metadata %s: %w", Name, path, err)
	case resp.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("%s: metadata %s: %w", Name, path, errNotThere)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%s: metadata %s: HTTP %d", Name, path, resp.StatusCode)
	case len(data) > maxMetadataSize:
		return nil, fmt.Errorf("%s: metadata %s: larger than %d bytes", Name, path, maxMetadataSize)
	}
	return data, nil
}

// MetaData reads meta_data.json.
func (n *NodeIdentity) MetaData(ctx context.Context) (MetaData, error) {
	var md MetaData
	data, err := n.get(ctx, MetaDataPath)
	if err != nil {
		return md, err
	}
	if err := json.Unmarshal(data, &md); err != nil {
		// The error names a type or an offset, never the document's text.
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return md, fmt.Errorf("%s: metadata %s is not JSON (at byte %d)", Name, MetaDataPath, syn.Offset)
		}
		return md, fmt.Errorf("%s: metadata %s: %w", Name, MetaDataPath, err)
	}
	return md, nil
}

// Instance reads the server's UUID and name from meta_data.json and its
// fixed IPv4 address from local-ipv4 (none when the service has none).
// The Node name is the server name, lower-cased.
func (n *NodeIdentity) Instance(ctx context.Context) (nodeid.Instance, error) {
	md, err := n.MetaData(ctx)
	if err != nil {
		return nodeid.Instance{}, err
	}
	switch {
	case !IsServerID(md.UUID):
		return nodeid.Instance{}, fmt.Errorf("%s: metadata uuid %.80q is not a server id", Name, md.UUID)
	case md.Name == "":
		return nodeid.Instance{}, fmt.Errorf("%s: metadata name is empty", Name)
	}
	nodeName := NodeName(md.Name)
	if nodeName == "" {
		return nodeid.Instance{}, fmt.Errorf("%s: server name %.80q (metadata name) is not a valid Node name (a DNS-1123 subdomain)", Name, md.Name)
	}
	ip := ""
	data, err := n.get(ctx, LocalIPv4Path)
	switch {
	case errors.Is(err, errNotThere):
	case err != nil:
		return nodeid.Instance{}, err
	default:
		s := strings.TrimSpace(string(data))
		if s != "" {
			parsed := net.ParseIP(s)
			if parsed == nil || parsed.To4() == nil {
				return nodeid.Instance{}, fmt.Errorf("%s: metadata local-ipv4 %.80q is not an IPv4 address", Name, s)
			}
			ip = parsed.String()
		}
	}
	return nodeid.Instance{
		ID: md.UUID, Name: md.Name, NodeName: nodeName,
		ProviderID: ProviderID(n.region, md.UUID), InternalIP: ip,
	}, nil
}

// Evidence is never given: OpenStack signs no server identity mooring can
// check. The agent joins with a join ticket instead (joinTicketFile).
func (n *NodeIdentity) Evidence(context.Context, string) (evidence.Block, error) {
	return evidence.Block{}, fmt.Errorf("%s: %w: an OpenStack server joins with a join ticket (docs/tickets.md)", Name, nodeid.ErrNoEvidence)
}
