// Package agentid is the local cloud's side of the node agent: the
// instance's metadata service, and identity tokens as evidence. It
// registers the node identity of the backend "local" (cloud/nodeid), and
// holds what the provider and the verifier share with it: the node name
// policy, the providerID's form and the evidence's type. It imports
// neither of them (mooring-agent links it without them).
package agentid

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/client"
	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/nodeid/linklocal"
	"github.com/mooring-dev/mooring/internal/evidence"
)

// Name is the backend's name, the config's cloud: local.
const Name = "local"

// EvidenceType is the evidence block type of a local cloud identity token.
const EvidenceType = "MOORING LOCAL IDENTITY TOKEN"

// ProviderIDPrefix starts every Node providerID of a local cloud instance
// (the backend's name, then "://"). It is the one definition: the cloud
// provider and the verifier write and read providerIDs with ProviderID
// and InstanceID.
const ProviderIDPrefix = Name + "://"

// ProviderID is the Node providerID of the instance of that id.
func ProviderID(instanceID string) string { return ProviderIDPrefix + instanceID }

// InstanceID is the instance id of a local cloud providerID (ProviderID's
// form).
func InstanceID(providerID string) (string, error) {
	id, ok := strings.CutPrefix(providerID, ProviderIDPrefix)
	if !ok || id == "" || strings.Contains(id, "/") {
		return "", fmt.Errorf("providerID %q is not %s<instance-id>", providerID, ProviderIDPrefix)
	}
	return id, nil
}

func init() { nodeid.Register(Name, nodeid.Of(New)) }

// Identity is the local cloud's instance metadata service.
type Identity struct {
	md     *client.Metadata
	policy NamePolicy
}

var _ nodeid.Identity = (*Identity)(nil)

// New talks to the metadata service at cfg.MetadataURL, which is required
// (the local cloud has no well-known metadata address), and names the Node
// by cfg.NodeNamePolicy. The local cloud has no settings of its own.
func New(cfg nodeid.Config) (*Identity, error) {
	if cfg.MetadataURL == "" {
		return nil, errors.New("local cloud: metadataURL is required")
	}
	if len(cfg.Settings) > 0 {
		return nil, fmt.Errorf("local cloud: cloudSettings: the local cloud has no settings (got %d)", len(cfg.Settings))
	}
	policy, err := ParseNamePolicy(cfg.NodeNamePolicy)
	if err != nil {
		return nil, err
	}
	// linklocal's HTTP client, as every cloud's: no proxy, no redirect,
	// 10s and 1 MiB an answer.
	return &Identity{md: client.NewMetadata(cfg.MetadataURL, linklocal.NewHTTPClient(0, 0)), policy: policy}, nil
}

// Instance reads the instance's record.
func (l *Identity) Instance(ctx context.Context) (nodeid.Instance, error) {
	in, err := l.md.Instance(ctx)
	if err != nil {
		return nodeid.Instance{}, err
	}
	out := nodeid.Instance{ID: in.ID, Name: in.Name, NodeName: l.policy.NodeName(in.ID, in.Name), ProviderID: ProviderID(in.ID)}
	for _, a := range in.Addresses {
		if a.Type == api.InternalIP {
			out.InternalIP = a.Address
			break
		}
	}
	return out, nil
}

// Evidence is an identity token whose audience is the binding.
func (l *Identity) Evidence(ctx context.Context, binding string) (evidence.Block, error) {
	tok, err := l.md.IdentityToken(ctx, binding)
	if err != nil {
		return evidence.Block{}, err
	}
	return evidence.Block{Type: EvidenceType, Data: []byte(tok)}, nil
}
