package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/mooring-dev/mooring/cloud/oci/ocitest"
)

// OCICloud is an OCI-compatible endpoint (cloud/oci/ocitest: the Core
// Services API and the auth service's instance identity roots, checking
// OCI request signatures, and a metadata service per instance serving its
// instance principal's certificate, on loopback)
// as mooring's binaries are set up for OCI: the CCM and the approver sign
// their API calls with the API key of an OCI config file, nodes sign their
// CSR key's binding with their instance certificate's key.
type OCICloud struct {
	*ocitest.Cloud
	// LBConfig are lines every provider config written gets (a
	// loadBalancer block), besides the caller's.
	LBConfig string

	mu   sync.Mutex
	next int
}

// OCI test addresses (loopback; nobody else in test/ uses 127.0.96.x and
// 127.0.97.x): an instance's private IP is 127.0.96.N, its public IP
// 127.0.97.N, N from 10 up.
const (
	OCIPrivateNet = "127.0.96."
	OCIPublicNet  = "127.0.97."
	// OCITag is the cluster's freeform tag key (the backend's default).
	OCITag = "mooring-cluster"
)

// StartOCICloud starts the endpoint; the test's cleanup stops it.
func StartOCICloud(t testing.TB) *OCICloud {
	t.Helper()
	return &OCICloud{Cloud: ocitest.NewStarted(t, ocitest.Options{MaxPageSize: 2}), next: 10}
}

// AddNode makes a running instance tagged as cluster's, named name.
func (o *OCICloud) AddNode(cluster, name string) ocitest.Instance {
	return o.AddInstance(name, map[string]string{OCITag: cluster})
}

// AddInstance makes a running instance with freeform tags on the next free
// loopback addresses.
func (o *OCICloud) AddInstance(name string, tags map[string]string) ocitest.Instance {
	o.mu.Lock()
	n := o.next
	o.next++
	o.mu.Unlock()
	return o.Put(ocitest.Instance{DisplayName: name, PrivateIP: fmt.Sprintf("%s%d", OCIPrivateNet, n),
		PublicIP: fmt.Sprintf("%s%d", OCIPublicNet, n), FreeformTags: tags})
}

// Provisioner makes fleet machines as OCI instances of cluster whose agents
// use `cloud: oci` against their metadata services (FleetOptions.Provision).
func (o *OCICloud) Provisioner(cluster string) func(ctx context.Context, name string) (Provisioned, error) {
	return func(_ context.Context, name string) (Provisioned, error) {
		in := o.AddNode(cluster, name)
		md, err := o.MetadataURL(in.ID)
		if err != nil {
			return Provisioned{}, err
		}
		return Provisioned{NodeName: name, Address: in.PrivateIP, AgentConfig: o.AgentConfig(md)}, nil
	}
}

// AgentConfig is the agent config's cloud part for an instance whose
// metadata service is at metadataURL.
func (o *OCICloud) AgentConfig(metadataURL string) string {
	return fmt.Sprintf("cloud: oci\nmetadataURL: %s\n", metadataURL)
}

// ProviderName is "oci".
func (o *OCICloud) ProviderName() string { return "oci" }

// WriteProviderConfig writes the OCI provider's config (docs/oci.md) for
// cluster, with the OCI config file and API key it names, the endpoints
// pointing here: the instance identity roots are fetched from the
// endpoint's auth service with that key, as from a region's (no
// rootCAFile).
func (o *OCICloud) WriteProviderConfig(dir, cluster, extra string) (string, error) {
	cfgFile, err := o.WriteAPIConfig(dir)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "cloud.yaml")
	cfg := fmt.Sprintf("tenancy: %s\ncompartments: [%s]\nregion: %s\nclusterID: %s\nconfigFile: %s\nauthEndpoint: %s\ncomputeEndpoint: %s\nnetworkEndpoint: %s\nnetworkLoadBalancerEndpoint: %s\n%s",
		o.Tenancy(), o.Compartment(), o.Region(), cluster, cfgFile, o.AuthEndpoint(), o.Endpoint(), o.Endpoint(), o.Endpoint(), o.LBConfig+extra)
	return path, os.WriteFile(path, []byte(cfg), 0o600)
}

// ProviderEnv keeps the SDK off any real metadata service and the user's
// own OCI config.
func (o *OCICloud) ProviderEnv() []string {
	return []string{"OCI_METADATA_BASE_URL=http://127.0.0.1:9/opc/v2", "OCI_CONFIG_FILE=/nonexistent/oci/config", "OCI_CLI_PROFILE="}
}
