package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/mooring-dev/mooring/cloud/hetzner/hetznertest"
)

// HetznerCloud is a Hetzner Cloud-compatible endpoint (cloud/hetzner/
// hetznertest: the Cloud API's servers and a metadata service per server,
// on loopback) as mooring's binaries are set up for Hetzner: the CCM and
// the approver call the API with a token from a file, nodes read their
// metadata service and join with join tickets (Hetzner signs nothing),
// issued by Tickets.
type HetznerCloud struct {
	*hetznertest.Cloud
	// Tickets issues the machines' join tickets.
	Tickets *TicketIssuer
	// TokenFile holds the API token the binaries' config names.
	TokenFile string

	mu        sync.Mutex
	nextOctet int
	byName    map[string]hetznertest.Server
}

// Hetzner test addresses (loopback; nobody else in test/ uses 127.0.85.x
// and 127.0.86.x): a server's private network address is 127.0.85.N, its
// public IPv4 127.0.86.N, N from 10 up.
const (
	hetznerFirstOctet = 10
	// HetznerLabel is the cluster label key (the backend's default).
	HetznerLabel = "mooring.dev/cluster"
	// HetznerNetwork is the private network the servers are attached to,
	// named in the provider config and the agents' cloudSettings.
	HetznerNetwork = hetznertest.DefaultNetworkID
)

// StartHetznerCloud starts the endpoint; the test's cleanup stops it.
// Machines it provisions get their tickets from tickets.
func StartHetznerCloud(t testing.TB, tickets *TicketIssuer) *HetznerCloud {
	t.Helper()
	h := &HetznerCloud{Cloud: hetznertest.NewStarted(t, hetznertest.Options{}), Tickets: tickets,
		nextOctet: hetznerFirstOctet, byName: map[string]hetznertest.Server{}}
	// The private network the servers' 127.0.85.N addresses are in.
	h.PutNetwork(hetznertest.Network{ID: HetznerNetwork, IPRange: "127.0.85.0/24"})
	h.TokenFile = filepath.Join(t.TempDir(), "hcloud-token")
	if err := os.WriteFile(h.TokenFile, []byte(h.Token()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return h
}

// AddNode makes a running server labelled as cluster's, on the next free
// loopback addresses.
func (h *HetznerCloud) AddNode(cluster, name string) hetznertest.Server {
	return h.AddServer(hetznertest.Server{Name: name, Labels: map[string]string{HetznerLabel: cluster}})
}

// AddServer makes s (its addresses, and its id unless set, assigned here)
// and remembers it by name: the last one made of a name.
func (h *HetznerCloud) AddServer(s hetznertest.Server) hetznertest.Server {
	h.mu.Lock()
	n := h.nextOctet
	h.nextOctet++
	h.mu.Unlock()
	if n > 254 {
		panic("harness: out of Hetzner test addresses")
	}
	s.PublicIPv4 = fmt.Sprintf("127.0.86.%d", n)
	s.PrivateNets = []hetznertest.PrivateNet{{Network: HetznerNetwork, IP: fmt.Sprintf("127.0.85.%d", n)}}
	s = h.Put(s)
	h.mu.Lock()
	h.byName[s.Name] = s
	h.mu.Unlock()
	return s
}

// Server is the server last made under name.
func (h *HetznerCloud) Server(name string) (hetznertest.Server, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.byName[name]
	return s, ok
}

// Provisioner makes fleet machines as Hetzner servers of cluster, as an
// admin's provisioning does: the join ticket for the name first, then the
// server; their agents use `cloud: hetzner` against their metadata
// services and present the ticket (FleetOptions.Provision).
func (h *HetznerCloud) Provisioner(cluster string) func(ctx context.Context, name string) (Provisioned, error) {
	return func(_ context.Context, name string) (Provisioned, error) {
		tok, err := h.Tickets.Issue(name, cluster, 0)
		if err != nil {
			return Provisioned{}, err
		}
		s := h.AddNode(cluster, name)
		md, err := h.MetadataURL(s.ID)
		if err != nil {
			return Provisioned{}, err
		}
		return Provisioned{NodeName: name, Address: s.PrivateNets[0].IP, AgentConfig: h.AgentConfig(md), JoinTicket: tok}, nil
	}
}

// AgentConfig is the agent config's cloud part for a server whose metadata
// service is at metadataURL.
func (h *HetznerCloud) AgentConfig(metadataURL string) string {
	return fmt.Sprintf("cloud: hetzner\nmetadataURL: %s\ncloudSettings:\n  network: %q\n", metadataURL, fmt.Sprint(HetznerNetwork))
}

// ProviderName is "hetzner".
func (h *HetznerCloud) ProviderName() string { return "hetzner" }

// WriteProviderConfig writes the Hetzner provider's config
// (docs/hetzner.md) for cluster, the API and its token pointing here.
func (h *HetznerCloud) WriteProviderConfig(dir, cluster, extra string) (string, error) {
	path := filepath.Join(dir, "cloud.yaml")
	cfg := fmt.Sprintf("endpoint: %s\ntokenFile: %s\nclusterID: %s\nnetwork: %d\n%s", h.Endpoint(), h.TokenFile, cluster, HetznerNetwork, extra)
	return path, os.WriteFile(path, []byte(cfg), 0o600)
}

// ProviderEnv clears HCLOUD_TOKEN: the config names the token file, and a
// real token in the test's environment must not reach the binaries.
func (h *HetznerCloud) ProviderEnv() []string { return []string{"HCLOUD_TOKEN="} }
