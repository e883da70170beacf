package harness

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/mooring-dev/mooring/cloud/linode/linodetest"
)

// LinodeCloud is a Linode-compatible endpoint (cloud/linode/linodetest:
// the API's instance list and get, and a Metadata service per Linode, on
// loopback) as mooring's binaries are set up for Linode: the CCM and the
// approver list Linodes with the personal access token from a file, nodes
// read their Metadata service and join with join tickets, which Tickets
// issues.
type LinodeCloud struct {
	*linodetest.Cloud
	// Tickets issues the Linodes' join tickets; the approver is given its
	// keys (ApproverArgs, CCMArgs).
	Tickets *TicketIssuer
	// TokenFile holds the API token (the config's tokenFile).
	TokenFile string

	mu     sync.Mutex
	nextIP netip.Addr
}

// Linode test addresses (loopback; nobody else in test/ uses 127.0.97.x
// and 127.0.98.x).
const (
	// LinodeAddressBase is where Linodes' private IPv4 addresses start
	// (192.168.128.0/17 on Linode); the public one is 127.0.98.x, same
	// last octet.
	LinodeAddressBase = "127.0.97.10"
	// LinodePrivateCIDR is the provider config's privateCIDRs here.
	LinodePrivateCIDR = "127.0.97.0/24"
	// LinodeTagPrefix makes a cluster's Linode tag, k8s:<cluster> (the
	// backend's default).
	LinodeTagPrefix = "k8s:"
)

// StartLinodeCloud starts the endpoint, whose Linodes join with tickets of
// issuer; the test's cleanup stops it.
func StartLinodeCloud(t testing.TB, issuer *TicketIssuer) *LinodeCloud {
	t.Helper()
	ln := linodetest.NewStarted(t, linodetest.Options{})
	tokenFile := filepath.Join(t.TempDir(), "linode-token")
	if err := os.WriteFile(tokenFile, []byte(ln.Token()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return &LinodeCloud{Cloud: ln, Tickets: issuer, TokenFile: tokenFile, nextIP: netip.MustParseAddr(LinodeAddressBase)}
}

// ClusterTag is cluster's Linode tag.
func (l *LinodeCloud) ClusterTag(cluster string) string { return LinodeTagPrefix + cluster }

// AddLinode makes a running Linode with tags on the next free loopback
// addresses (private 127.0.97.x, public 127.0.98.x); edit, when set,
// changes it first (its creation time, its status, ...).
func (l *LinodeCloud) AddLinode(label string, tags []string, edit func(*linodetest.Instance)) linodetest.Instance {
	l.mu.Lock()
	ip := l.nextIP
	l.nextIP = ip.Next()
	l.mu.Unlock()
	b := ip.As4()
	if b[2] != 97 {
		panic("harness: out of Linode test addresses")
	}
	pub := netip.AddrFrom4([4]byte{127, 0, 98, b[3]})
	in := linodetest.Instance{Label: label, PrivateIP: ip.String(), PublicIP: pub.String(), Tags: tags}
	if edit != nil {
		edit(&in)
	}
	return l.Put(in)
}

// Provisioner makes fleet machines as Linodes of cluster, as an admin's
// provisioning does on Linode: it issues the Linode's join ticket first,
// then creates the Linode tagged k8s:<cluster> with user data (metadata.
// user_data) that carries the ticket; the machine's agent uses `cloud:
// linode` against the Linode's Metadata service and joins with the ticket.
func (l *LinodeCloud) Provisioner(cluster string) func(ctx context.Context, name string) (Provisioned, error) {
	return func(_ context.Context, name string) (Provisioned, error) {
		tok, err := l.Tickets.Issue(name, cluster, 0)
		if err != nil {
			return Provisioned{}, err
		}
		in := l.AddLinode(name, []string{l.ClusterTag(cluster)}, func(in *linodetest.Instance) {
			in.UserData = "#cloud-config\nwrite_files:\n- path: /etc/mooring/join-ticket\n  permissions: '0600'\n  content: " + tok + "\n"
		})
		md, err := l.MetadataURL(in.ID)
		if err != nil {
			return Provisioned{}, err
		}
		return Provisioned{NodeName: in.Label, Address: in.PrivateIP, AgentConfig: l.AgentConfig(md), JoinTicket: tok}, nil
	}
}

// AgentConfig is the agent config's cloud part for a Linode whose Metadata
// service is at metadataURL.
func (l *LinodeCloud) AgentConfig(metadataURL string) string {
	return fmt.Sprintf("cloud: linode\nmetadataURL: %s\n", metadataURL)
}

// ProviderName is "linode".
func (l *LinodeCloud) ProviderName() string { return "linode" }

// WriteProviderConfig writes the Linode provider's config (docs/linode.md)
// for cluster, the API pointing here, the token in TokenFile and the
// private range of the test addresses.
func (l *LinodeCloud) WriteProviderConfig(dir, cluster, extra string) (string, error) {
	path := filepath.Join(dir, "cloud.yaml")
	cfg := fmt.Sprintf("clusterID: %s\napiEndpoint: %s\ntokenFile: %s\nprivateCIDRs: [%s]\n%s",
		cluster, l.Endpoint(), l.TokenFile, LinodePrivateCIDR, extra)
	return path, os.WriteFile(path, []byte(cfg), 0o600)
}

// ProviderEnv empties LINODE_API_TOKEN: the token comes from TokenFile
// only.
func (l *LinodeCloud) ProviderEnv() []string { return []string{"LINODE_API_TOKEN="} }
