// Package agentid is the GCE backend's side of the node agent: the
// instance's record from the metadata server, and the identity token of
// its default service account, whose audience is the CSR key's binding, as
// evidence. It registers the node identity of the backend "gce"
// (cloud/nodeid), and holds what the approver's verifier and the provider
// share with it (names.go): the evidence type, providerIDs, the node name
// policy and the forms of GCE's names. It imports neither (mooring-agent
// links it without them).
package agentid

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"

	gcemetadata "cloud.google.com/go/compute/metadata"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/nodeid/linklocal"
	"github.com/mooring-dev/mooring/cloud/tpm/node"
	"github.com/mooring-dev/mooring/internal/evidence"
)

// Name is the backend's name, the agent config's cloud: gce.
const Name = "gce"

func init() { nodeid.Register(Name, nodeid.Of(NewNodeIdentity)) }

// identityPath is the metadata path of the default service account's
// identity token; format=full adds google.compute_engine (instance id,
// name, zone, project) to the claims.
const identityPath = "instance/service-accounts/default/identity"

// metadataTimeout bounds one metadata call (the library retries inside).
const metadataTimeout = 20 * time.Second

// NodeIdentity is a GCE instance as its node agent sees it: the metadata
// server (cloud.google.com/go/compute/metadata, which sends
// Metadata-Flavor: Google and honours GCE_METADATA_HOST) and the identity
// token of the instance's default service account.
type NodeIdentity struct {
	md *gcemetadata.Client
}

var (
	_ nodeid.Identity = (*NodeIdentity)(nil)
	_ nodeid.TPMKeyer = (*NodeIdentity)(nil)
)

// NewNodeIdentity reads the agent's configuration of the gce backend:
// cfg.MetadataURL ("" is the metadata server's own address, or
// GCE_METADATA_HOST; else an http URL whose host the requests go to),
// cfg.NodeNamePolicy ("" or InstanceName). The backend has no
// cloudSettings. It calls nothing.
func NewNodeIdentity(cfg nodeid.Config) (*NodeIdentity, error) {
	if err := cfg.CheckPlain(Name, PolicyInstanceName); err != nil {
		return nil, err
	}
	// linklocal's client (no proxy, no redirect, 10s and 1 MiB an answer)
	// under the library's retries.
	client := linklocal.NewHTTPClient(0, 0)
	if cfg.MetadataURL != "" {
		base, err := linklocal.ParseURL(cfg.MetadataURL)
		if err != nil {
			return nil, fmt.Errorf("gce: %w", err)
		}
		client.Transport = hostRewriter{host: strings.TrimPrefix(base, "http://"), next: client.Transport}
	}
	return &NodeIdentity{md: gcemetadata.NewWithOptions(&gcemetadata.Options{Client: client})}, nil
}

// hostRewriter sends every request to one host: the metadata library takes
// its host from GCE_METADATA_HOST only, and an agent's config names it.
type hostRewriter struct {
	host string
	next http.RoundTripper
}

func (h hostRewriter) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.URL.Host, r.Host = h.host, h.host
	return h.next.RoundTrip(r)
}

// Instance reads the instance's id, name, zone, project and first internal
// IP from the metadata server. The Node name is the instance name.
func (n *NodeIdentity) Instance(ctx context.Context) (nodeid.Instance, error) {
	// The library's InstanceID and ProjectID cache their first answer for
	// the process; read the paths themselves.
	var vals [5]string
	for i, path := range []string{"instance/id", "instance/name", "instance/zone", "project/project-id", "instance/network-interfaces/0/ip"} {
		v, err := n.get(ctx, path)
		if err != nil {
			return nodeid.Instance{}, err
		}
		vals[i] = v
	}
	id, name, zone, project, ip := vals[0], vals[1], lastSegment(vals[2]), vals[3], vals[4]
	switch {
	case !ValidInstanceID(id):
		return nodeid.Instance{}, fmt.Errorf("gce: metadata instance/id %q is not an instance id", id)
	case !ValidInstanceName(name):
		return nodeid.Instance{}, fmt.Errorf("gce: metadata instance/name %q is not an instance name", name)
	case !ValidZone(zone):
		return nodeid.Instance{}, fmt.Errorf("gce: metadata instance/zone %q is not a zone", vals[2])
	case !ValidProjectID(project):
		return nodeid.Instance{}, fmt.Errorf("gce: metadata project/project-id %q is not a project ID", project)
	case net.ParseIP(ip) == nil:
		return nodeid.Instance{}, fmt.Errorf("gce: metadata network-interfaces/0/ip %q is not an IP address", ip)
	}
	return nodeid.Instance{
		ID: id, Name: name, NodeName: strings.ToLower(name),
		ProviderID: ProviderID(project, zone, name),
		InternalIP: ip,
	}, nil
}

// Evidence asks the metadata server for an identity token whose audience
// is the binding, format=full.
func (n *NodeIdentity) Evidence(ctx context.Context, binding string) (evidence.Block, error) {
	if binding == "" || len(binding) > 256 || strings.ContainsFunc(binding, func(r rune) bool { return r > unicode.MaxASCII || unicode.IsControl(r) || r == ' ' }) {
		return evidence.Block{}, fmt.Errorf("gce: binding %.60q: want 1-256 printable ASCII characters", binding)
	}
	q := url.Values{"audience": {binding}, "format": {"full"}}
	tok, err := n.get(ctx, identityPath+"?"+q.Encode())
	if err != nil {
		return evidence.Block{}, err
	}
	if len(tok) > MaxTokenSize || strings.Count(tok, ".") != 2 {
		return evidence.Block{}, errors.New("gce: the metadata server's identity token is not a compact JWS")
	}
	klog.V(2).InfoS("Got an instance identity token as evidence")
	return evidence.Block{Type: EvidenceType, Data: []byte(tok)}, nil
}

// TPMKey names the attestation key of a Shielded VM's vTPM: GCE's RSA AK,
// whose template and certificate GCE provisions in NV (node.GCEKey). The
// agent quotes with it when the machine has a TPM (its tpm setting).
func (n *NodeIdentity) TPMKey() node.Key { return node.GCEKey }

func (n *NodeIdentity) get(ctx context.Context, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, metadataTimeout)
	defer cancel()
	v, err := n.md.GetWithContext(ctx, path)
	if err != nil {
		return "", fmt.Errorf("gce: metadata %s: %w", strings.SplitN(path, "?", 2)[0], err)
	}
	v = strings.TrimSpace(v)
	if v == "" {
		return "", fmt.Errorf("gce: metadata %s is empty", path)
	}
	return v, nil
}
