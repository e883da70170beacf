package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/mooring-dev/mooring/cloud/local/api"
)

// Metadata calls an instance's own metadata service.
type Metadata struct {
	base string
	http *http.Client
}

// NewMetadata returns a client of the metadata service at baseURL (an
// instance's MetadataURL). A nil httpClient means one with a 10 s timeout.
func NewMetadata(baseURL string, httpClient *http.Client) *Metadata {
	if httpClient == nil {
		httpClient = &http.Client{Timeout: 10 * time.Second}
	}
	return &Metadata{base: strings.TrimSuffix(baseURL, "/"), http: httpClient}
}

func (m *Metadata) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.base+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set(api.MetadataHeader, "true")
	resp, err := m.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("metadata: GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("metadata: GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, apiError(resp, data)
	}
	return data, nil
}

// Instance returns what the metadata service says about its instance.
func (m *Metadata) Instance(ctx context.Context) (*api.InstanceIdentity, error) {
	data, err := m.get(ctx, v+"/instance")
	if err != nil {
		return nil, err
	}
	var id api.InstanceIdentity
	if err := json.Unmarshal(data, &id); err != nil {
		return nil, fmt.Errorf("metadata: decode instance: %w", err)
	}
	return &id, nil
}

// IdentityToken returns a signed identity token (a JWT) for audience.
func (m *Metadata) IdentityToken(ctx context.Context, audience string) (string, error) {
	data, err := m.get(ctx, v+"/identity?audience="+url.QueryEscape(audience))
	if err != nil {
		return "", err
	}
	return string(data), nil
}
