package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/mooring-dev/mooring/cloud/openstack/openstacktest"
)

// OpenStackCloud is an OpenStack-compatible endpoint (cloud/openstack/
// openstacktest: Keystone, Nova's servers and a metadata service per
// server, on loopback) as mooring's binaries are set up for OpenStack: the
// CCM and the approver authenticate with an application credential whose
// secret is in a file, nodes read their metadata service and join with
// join tickets (OpenStack signs nothing mooring checks), issued by
// Tickets.
type OpenStackCloud struct {
	*openstacktest.Cloud
	// Tickets issues the machines' join tickets.
	Tickets *TicketIssuer
	// SecretFile holds the application credential's secret the binaries'
	// config names.
	SecretFile string
	// RouterID, set by UseRouter, is the Neutron router the config names
	// (routerID): mooring-ccm's routes go there.
	RouterID string
	// LBConfig, when set, gives the config a loadBalancer block: VIPs
	// on openstacktest's tenant subnet, floating IPs from its external
	// network.
	LBConfig bool

	mu        sync.Mutex
	nextOctet int
	byName    map[string]openstacktest.Server
	// driveOnly names the servers Provisioner makes without a metadata
	// service; driveDir holds their config drives.
	driveOnly map[string]bool
	driveDir  string
}

// OpenStack test addresses (loopback; nobody else in test/ uses 127.0.92.x
// and 127.0.93.x): a server's fixed address is 127.0.92.N, its floating IP
// 127.0.93.N, N from 10 up.
const (
	openstackFirstOctet = 10
	// OpenStackNetwork is the network of the servers' ports: their fixed
	// addresses, and the floating IPs Nova lists with them.
	OpenStackNetwork = "k8s-private"
)

// OpenStackTag is the tag of cluster's servers (the backend's default).
func OpenStackTag(cluster string) string { return "mooring-cluster=" + cluster }

// StartOpenStackCloud starts the endpoint; the test's cleanup stops it.
// Machines it provisions get their tickets from tickets.
func StartOpenStackCloud(t testing.TB, tickets *TicketIssuer, opts openstacktest.Options) *OpenStackCloud {
	t.Helper()
	o := &OpenStackCloud{Cloud: openstacktest.NewStarted(t, opts), Tickets: tickets,
		nextOctet: openstackFirstOctet, byName: map[string]openstacktest.Server{}, driveOnly: map[string]bool{}}
	t.Cleanup(func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.driveDir != "" {
			_ = os.RemoveAll(o.driveDir)
		}
	})
	_, secret := o.Credential()
	o.SecretFile = filepath.Join(t.TempDir(), "os-secret")
	if err := os.WriteFile(o.SecretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return o
}

// AddNode makes an ACTIVE server tagged as cluster's, on the next free
// loopback addresses.
func (o *OpenStackCloud) AddNode(cluster, name string) openstacktest.Server {
	return o.AddServer(openstacktest.Server{Name: name, Tags: []string{OpenStackTag(cluster)}})
}

// AddServer makes s (its addresses, and its id unless set, assigned here)
// and remembers it by name: the last one made of a name.
func (o *OpenStackCloud) AddServer(s openstacktest.Server) openstacktest.Server {
	o.mu.Lock()
	n := o.nextOctet
	o.nextOctet++
	o.mu.Unlock()
	if n > 254 {
		panic("harness: out of OpenStack test addresses")
	}
	s.Addresses = []openstacktest.Address{
		{Network: OpenStackNetwork, Addr: fmt.Sprintf("127.0.92.%d", n)},
		{Network: OpenStackNetwork, Addr: fmt.Sprintf("127.0.93.%d", n), Floating: true},
	}
	s = o.Put(s)
	o.mu.Lock()
	o.byName[s.Name] = s
	o.mu.Unlock()
	return s
}

// UseRouter makes a Neutron router with an interface on the servers'
// fixed subnet (127.0.92.0/24, the router's address 127.0.92.1) holding
// routes, and names it in the config WriteProviderConfig writes. Call it
// before the binaries start.
func (o *OpenStackCloud) UseRouter(routes ...openstacktest.Route) openstacktest.Router {
	sn := o.PutSubnet(openstacktest.Subnet{Name: OpenStackNetwork + "-subnet", CIDR: "127.0.92.0/24"})
	r := o.PutRouter(openstacktest.Router{Name: "k8s-router", Subnets: []string{sn.ID}, Routes: routes})
	o.RouterID = r.ID
	return r
}

// Server is the server last made under name.
func (o *OpenStackCloud) Server(name string) (openstacktest.Server, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	s, ok := o.byName[name]
	return s, ok
}

// ConfigDriveOnly makes Provisioner make the servers of these names as a
// cloud without a metadata service does: nothing answers at their metadata
// service's address, and their record is on a config drive (Nova's layout,
// without the EC2 documents, so the address is only in
// network_data.json), mounted where their agents' configDrive setting
// points.
func (o *OpenStackCloud) ConfigDriveOnly(names ...string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, n := range names {
		o.driveOnly[n] = true
	}
}

// Provisioner makes fleet machines as OpenStack servers of cluster, as an
// admin's provisioning does: the join ticket for the name first, then the
// server; their agents use `cloud: openstack` against their metadata
// services, or their config drives (ConfigDriveOnly), and present the
// ticket (FleetOptions.Provision).
func (o *OpenStackCloud) Provisioner(cluster string) func(ctx context.Context, name string) (Provisioned, error) {
	return func(_ context.Context, name string) (Provisioned, error) {
		tok, err := o.Tickets.Issue(name, cluster, 0)
		if err != nil {
			return Provisioned{}, err
		}
		o.mu.Lock()
		driveOnly := o.driveOnly[name]
		o.mu.Unlock()
		s := o.AddServer(openstacktest.Server{Name: name, Tags: []string{OpenStackTag(cluster)}, NoMetadataService: driveOnly})
		md, err := o.MetadataURL(s.ID)
		if err != nil {
			return Provisioned{}, err
		}
		cfg := o.AgentConfig(md)
		if driveOnly {
			dir, err := o.configDrive(s)
			if err != nil {
				return Provisioned{}, err
			}
			cfg += "cloudSettings:\n  configDrive: " + dir + "\n"
		}
		return Provisioned{NodeName: name, Address: s.Addresses[0].Addr, AgentConfig: cfg, JoinTicket: tok}, nil
	}
}

// configDrive writes the server's config drive, as mounted, into a
// directory of its own under /var/lib (the agent's unit has PrivateTmp=,
// so nothing under /tmp is visible to it).
func (o *OpenStackCloud) configDrive(s openstacktest.Server) (string, error) {
	o.mu.Lock()
	if o.driveDir == "" {
		dir, err := os.MkdirTemp("/var/lib", "mooring-openstack-drives-")
		if err != nil {
			o.mu.Unlock()
			return "", err
		}
		o.driveDir = dir
	}
	dir := filepath.Join(o.driveDir, s.Name)
	o.mu.Unlock()
	if err := o.WriteConfigDrive(s.ID, dir, openstacktest.DriveOptions{WithoutEC2: true}); err != nil {
		return "", err
	}
	return dir, nil
}

// AgentConfig is the agent config's cloud part for a server whose metadata
// service is at metadataURL.
func (o *OpenStackCloud) AgentConfig(metadataURL string) string {
	return fmt.Sprintf("cloud: openstack\nmetadataURL: %s\n", metadataURL)
}

// ProviderName is "openstack".
func (o *OpenStackCloud) ProviderName() string { return "openstack" }

// WriteProviderConfig writes the OpenStack provider's config
// (docs/openstack.md) for cluster, Keystone and the secret file pointing
// here.
func (o *OpenStackCloud) WriteProviderConfig(dir, cluster, extra string) (string, error) {
	id, _ := o.Credential()
	path := filepath.Join(dir, "cloud.yaml")
	if o.RouterID != "" {
		extra = "routerID: " + o.RouterID + "\n" + extra
	}
	if o.LBConfig {
		extra = fmt.Sprintf("loadBalancer:\n  subnetID: %s\n  floatingNetworkID: %s\n", openstacktest.DefaultSubnetID,
			openstacktest.DefaultFloatingNetworkID) + extra
	}
	cfg := fmt.Sprintf("authURL: %s\napplicationCredentialID: %s\nsecretFile: %s\nregion: %s\nclusterID: %s\n%s",
		o.AuthURL(), id, o.SecretFile, o.Region(), cluster, extra)
	return path, os.WriteFile(path, []byte(cfg), 0o600)
}

// ProviderEnv clears the OpenStack clients' variables: the config names
// the secret file, and a real credential in the test's environment must
// not reach the binaries.
func (o *OpenStackCloud) ProviderEnv() []string {
	return []string{"OS_APPLICATION_CREDENTIAL_SECRET=", "OS_CLOUD=", "OS_AUTH_URL="}
}
