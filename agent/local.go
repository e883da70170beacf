package agent

import (
	"context"
	"net/http"
	"time"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/attest"
	"github.com/mooring-dev/mooring/cloud/local/client"
	"github.com/mooring-dev/mooring/internal/evidence"
)

// LocalIdentity is the local cloud's instance metadata service.
type LocalIdentity struct{ md *client.Metadata }

// NewLocalIdentity talks to the metadata service at url.
func NewLocalIdentity(url string) *LocalIdentity {
	return &LocalIdentity{md: client.NewMetadata(url, &http.Client{Timeout: 10 * time.Second})}
}

// Instance reads the instance's record.
func (l *LocalIdentity) Instance(ctx context.Context) (Instance, error) {
	in, err := l.md.Instance(ctx)
	if err != nil {
		return Instance{}, err
	}
	out := Instance{ID: in.ID, Name: in.Name, ProviderID: attest.ProviderIDPrefix + in.ID}
	for _, a := range in.Addresses {
		if a.Type == api.InternalIP {
			out.InternalIP = a.Address
			break
		}
	}
	return out, nil
}

// Evidence is an identity token whose audience is the binding.
func (l *LocalIdentity) Evidence(ctx context.Context, binding string) (evidence.Block, error) {
	tok, err := l.md.IdentityToken(ctx, binding)
	if err != nil {
		return evidence.Block{}, err
	}
	return evidence.Block{Type: attest.Type, Data: []byte(tok)}, nil
}
