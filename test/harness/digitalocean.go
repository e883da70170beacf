package harness

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud/digitalocean/digitaloceantest"
)

// DigitalOceanCloud is a DigitalOcean-compatible endpoint
// (cloud/digitalocean/digitaloceantest: the API's droplet list and get,
// and a metadata service per droplet, on loopback) as mooring's binaries
// are set up for DigitalOcean: the CCM and the approver list droplets with
// the API token from a file, nodes read their metadata service and join
// with join tickets, which Tickets issues.
type DigitalOceanCloud struct {
	*digitaloceantest.Cloud
	// Tickets issues the droplets' join tickets; the approver is given
	// its keys (ApproverArgs, CCMArgs).
	Tickets *TicketIssuer
	// TokenFile holds the API token (the config's tokenFile).
	TokenFile string

	mu     sync.Mutex
	nextIP netip.Addr
}

// DigitalOcean test addresses (loopback; nobody else in test/ uses
// 127.0.83.x and 127.0.84.x).
const (
	// DigitalOceanAddressBase is where droplets' private (VPC) IPv4
	// addresses start; the public one is 127.0.84.x, same last octet.
	DigitalOceanAddressBase = "127.0.83.10"
	// DigitalOceanTagPrefix makes a cluster's droplet tag, k8s:<cluster>
	// (the backend's default).
	DigitalOceanTagPrefix = "k8s:"
)

// StartDigitalOceanCloud starts the endpoint, whose droplets join with
// tickets of issuer; the test's cleanup stops it.
func StartDigitalOceanCloud(t testing.TB, issuer *TicketIssuer) *DigitalOceanCloud {
	t.Helper()
	// A new load balancer is active (with its IP) two seconds after its
	// creation, as DigitalOcean's are after a while; its health checks run
	// four times as fast as the seconds they are set in.
	return StartDigitalOceanCloudWith(t, issuer, digitaloceantest.Options{LBBuildTime: 2 * time.Second,
		HealthCheckSecond: 250 * time.Millisecond})
}

// StartDigitalOceanCloudWith is StartDigitalOceanCloud with the endpoint's
// options as given (its load balancer limit and build time, the pace of
// its health checks, ...).
func StartDigitalOceanCloudWith(t testing.TB, issuer *TicketIssuer, opts digitaloceantest.Options) *DigitalOceanCloud {
	t.Helper()
	do := digitaloceantest.NewStarted(t, opts)
	tokenFile := filepath.Join(t.TempDir(), "do-token")
	if err := os.WriteFile(tokenFile, []byte(do.Token()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return &DigitalOceanCloud{Cloud: do, Tickets: issuer, TokenFile: tokenFile,
		nextIP: netip.MustParseAddr(DigitalOceanAddressBase)}
}

// ClusterTag is cluster's droplet tag.
func (d *DigitalOceanCloud) ClusterTag(cluster string) string { return DigitalOceanTagPrefix + cluster }

// AddDroplet makes an active droplet with tags on the next free loopback
// addresses (private 127.0.83.x, public 127.0.84.x); edit, when set,
// changes it first (its creation time, its status, ...).
func (d *DigitalOceanCloud) AddDroplet(name string, tags []string, edit func(*digitaloceantest.Droplet)) digitaloceantest.Droplet {
	d.mu.Lock()
	ip := d.nextIP
	d.nextIP = ip.Next()
	d.mu.Unlock()
	b := ip.As4()
	if b[2] != 83 {
		panic("harness: out of DigitalOcean test addresses")
	}
	pub := netip.AddrFrom4([4]byte{127, 0, 84, b[3]})
	dr := digitaloceantest.Droplet{Name: name, PrivateIP: ip.String(), PublicIP: pub.String(), Tags: tags}
	if edit != nil {
		edit(&dr)
	}
	return d.Put(dr)
}

// Provisioner makes fleet machines as droplets of cluster, as an admin's
// provisioning does on DigitalOcean: it issues the droplet's join ticket
// first, then creates the droplet tagged k8s:<cluster> with user data
// that carries the ticket; the machine's agent uses `cloud: digitalocean`
// against the droplet's metadata service and joins with the ticket.
func (d *DigitalOceanCloud) Provisioner(cluster string) func(ctx context.Context, name string) (Provisioned, error) {
	return func(_ context.Context, name string) (Provisioned, error) {
		tok, err := d.Tickets.Issue(name, cluster, 0)
		if err != nil {
			return Provisioned{}, err
		}
		dr := d.AddDroplet(name, []string{d.ClusterTag(cluster)}, func(dr *digitaloceantest.Droplet) {
			dr.UserData = "#cloud-config\nwrite_files:\n- path: /etc/mooring/join-ticket\n  permissions: '0600'\n  content: " + tok + "\n"
		})
		md, err := d.MetadataURL(dr.ID)
		if err != nil {
			return Provisioned{}, err
		}
		return Provisioned{NodeName: dr.Name, Address: dr.PrivateIP, AgentConfig: d.AgentConfig(md), JoinTicket: tok}, nil
	}
}

// AgentConfig is the agent config's cloud part for a droplet whose
// metadata service is at metadataURL.
func (d *DigitalOceanCloud) AgentConfig(metadataURL string) string {
	return fmt.Sprintf("cloud: digitalocean\nmetadataURL: %s\n", metadataURL)
}

// ProviderName is "digitalocean".
func (d *DigitalOceanCloud) ProviderName() string { return "digitalocean" }

// WriteProviderConfig writes the DigitalOcean provider's config
// (docs/digitalocean.md) for cluster, the API pointing here and the token
// in TokenFile.
func (d *DigitalOceanCloud) WriteProviderConfig(dir, cluster, extra string) (string, error) {
	path := filepath.Join(dir, "cloud.yaml")
	cfg := fmt.Sprintf("clusterID: %s\napiEndpoint: %s\ntokenFile: %s\n%s",
		cluster, d.Endpoint(), d.TokenFile, extra)
	return path, os.WriteFile(path, []byte(cfg), 0o600)
}

// ProviderEnv empties DO_ACCESS_TOKEN: the token comes from TokenFile only.
func (d *DigitalOceanCloud) ProviderEnv() []string { return []string{"DO_ACCESS_TOKEN="} }
