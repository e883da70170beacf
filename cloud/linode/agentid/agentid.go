// Package agentid is the Linode backend's side of the node agent: the
// Linode's record from the Metadata service (a token first, PUT /v1/token,
// then GET /v1/instance and /v1/network with it). Linode signs nothing
// about an instance, so Evidence wraps nodeid.ErrNoEvidence: the Linode
// joins with a join ticket. It registers the node identity of the backend
// "linode" (cloud/nodeid), and holds what the provider shares with it
// (names.go): providerIDs, Node names and the node name policy. It imports
// no provider and no linodego (mooring-agent links it without them).
package agentid

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/nodeid/linklocal"
)

// Name is the backend's name, the agent config's cloud: linode.
const Name = "linode"

func init() { nodeid.Register(Name, nodeid.Of(NewNodeIdentity)) }

// The Metadata service's paths and headers (API v1).
const (
	TokenPath    = "/v1/token"
	InstancePath = "/v1/instance"
	NetworkPath  = "/v1/network"
	UserDataPath = "/v1/user-data"
	// TokenHeader carries the metadata token on every call after the
	// first; TokenExpiryHeader asks for the token's life, in seconds, on
	// PUT /v1/token.
	TokenHeader       = "Metadata-Token"
	TokenExpiryHeader = "Metadata-Token-Expiry-Seconds"
)

// tokenExpiry is the life asked for the metadata token: the agent reads
// its instance once, within seconds.
const tokenExpiry = 60 * time.Second

// maxTokenSize bounds the token (a document, linklocal's 1 MiB).
const maxTokenSize = 4 << 10

// Instance is the part of GET /v1/instance the agent reads (the
// documented instance data: id, label, region, type, tags).
type Instance struct {
	ID     int      `json:"id"`
	Label  string   `json:"label"`
	Region string   `json:"region"`
	Type   string   `json:"type"`
	Tags   []string `json:"tags"`
}

// Network is the part of GET /v1/network the agent reads: the Linode's
// IPv4 addresses by kind, each an address with its prefix length.
type Network struct {
	IPv4 struct {
		Public  []string `json:"public"`
		Private []string `json:"private"`
		Shared  []string `json:"shared"`
	} `json:"ipv4"`
}

// NodeIdentity is a Linode as its node agent sees it: the Metadata
// service, through a small typed client (linodego has none). Linode signs
// no identity: Evidence always fails with nodeid.ErrNoEvidence, and the
// Linode joins with a join ticket.
type NodeIdentity struct {
	nodeid.Ticketed
	md *linklocal.Client
}

var _ nodeid.Unsigned = (*NodeIdentity)(nil)

// NewNodeIdentity reads the agent's configuration of the linode backend:
// cfg.MetadataURL ("" is http://169.254.169.254; else http://host[:port]),
// cfg.NodeNamePolicy ("" or Label). The backend has no cloudSettings. It
// calls nothing.
func NewNodeIdentity(cfg nodeid.Config) (*NodeIdentity, error) {
	if err := cfg.CheckPlain(Name, PolicyLabel); err != nil {
		return nil, err
	}
	md, err := linklocal.Open(Name, cfg.MetadataURL, linklocal.DefaultURL, linklocal.Options{})
	if err != nil {
		return nil, err
	}
	return &NodeIdentity{Ticketed: nodeid.Ticketed{Backend: Name, Machine: "a Linode"}, md: md}, nil
}

// token asks the Metadata service for a token (PUT /v1/token), as every
// session starts.
func (n *NodeIdentity) token(ctx context.Context) (string, error) {
	data, err := n.md.Do(ctx, linklocal.Request{Method: http.MethodPut, Path: TokenPath, MaxBody: maxTokenSize,
		Header: http.Header{TokenExpiryHeader: {strconv.Itoa(int(tokenExpiry / time.Second))}, "Accept": {"text/plain"}}})
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(data))
	if tok == "" || strings.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r > '~' }) {
		// Never the text itself: it may be anything a wrong service sent.
		return "", fmt.Errorf("%s: metadata %s: the answer is not a token (%d bytes)", Name, TokenPath, len(data))
	}
	return tok, nil
}

// getJSON reads a Metadata service document with the token.
func (n *NodeIdentity) getJSON(ctx context.Context, tok, path string, v any) error {
	return n.md.DoJSON(ctx, linklocal.Request{Path: path, Header: http.Header{TokenHeader: {tok}, "Accept": {"application/json"}}}, v)
}

// Metadata reads the Linode's instance and network documents with one
// token.
func (n *NodeIdentity) Metadata(ctx context.Context) (Instance, Network, error) {
	var (
		in Instance
		nw Network
	)
	tok, err := n.token(ctx)
	if err != nil {
		return in, nw, err
	}
	if err := n.getJSON(ctx, tok, InstancePath, &in); err != nil {
		return in, nw, err
	}
	if err := n.getJSON(ctx, tok, NetworkPath, &nw); err != nil {
		return in, nw, err
	}
	return in, nw, nil
}

// Instance reads the Linode's id, label and first private IPv4 address
// from the Metadata service. The Node name is the label, lower-cased.
func (n *NodeIdentity) Instance(ctx context.Context) (nodeid.Instance, error) {
	in, netw, err := n.Metadata(ctx)
	if err != nil {
		return nodeid.Instance{}, err
	}
	switch {
	case in.ID < 1:
		return nodeid.Instance{}, fmt.Errorf("%s: metadata %s: id %d is not a Linode id", Name, InstancePath, in.ID)
	case in.Label == "":
		return nodeid.Instance{}, fmt.Errorf("%s: metadata %s: the label is empty", Name, InstancePath)
	}
	nodeName := NodeName(in.Label)
	if nodeName == "" {
		return nodeid.Instance{}, fmt.Errorf("%s: Linode label %.80q is not a valid Node name (a DNS-1123 subdomain)", Name, in.Label)
	}
	var ip string
	if len(netw.IPv4.Private) > 0 {
		p, err := netip.ParsePrefix(netw.IPv4.Private[0])
		if err != nil || !p.Addr().Is4() {
			return nodeid.Instance{}, fmt.Errorf("%s: metadata %s: private ipv4 %q is not an IPv4 address with its prefix", Name, NetworkPath, netw.IPv4.Private[0])
		}
		ip = p.Addr().String()
	}
	return nodeid.Instance{
		ID: strconv.Itoa(in.ID), Name: in.Label, NodeName: nodeName,
		ProviderID: ProviderID(in.ID), InternalIP: ip,
	}, nil
}
