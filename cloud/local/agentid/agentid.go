// Package agentid is the local cloud's side of the node agent: the
// instance's metadata service, and identity tokens as evidence.
package agentid

import (
	"context"
	"net/http"
	"time"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/attest"
	"github.com/mooring-dev/mooring/cloud/local/client"
	"github.com/mooring-dev/mooring/internal/evidence"
)

// Identity is the local cloud's instance metadata service.
type Identity struct{ md *client.Metadata }

var _ cloud.NodeIdentity = (*Identity)(nil)

// New talks to the metadata service at url.
func New(url string) *Identity {
	return &Identity{md: client.NewMetadata(url, &http.Client{Timeout: 10 * time.Second})}
}

// Instance reads the instance's record.
func (l *Identity) Instance(ctx context.Context) (cloud.NodeInstance, error) {
	in, err := l.md.Instance(ctx)
	if err != nil {
		return cloud.NodeInstance{}, err
	}
	out := cloud.NodeInstance{ID: in.ID, Name: in.Name, ProviderID: attest.ProviderIDPrefix + in.ID}
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
	return evidence.Block{Type: attest.Type, Data: []byte(tok)}, nil
}
