package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooring-dev/mooring/cloud/gce/gcetest"
	"github.com/mooring-dev/mooring/cloud/tpm/tpmtest"
	"github.com/mooring-dev/mooring/test/testbed"
)

// GCECloud is a GCE-compatible endpoint (cloud/gce/gcetest: the Compute
// API, Google's published signing keys and a metadata server per instance,
// on loopback) as mooring's binaries are set up for GCE: the CCM and the
// approver call the Compute API (without credentials: the endpoint does
// not model them), nodes ask their metadata server for identity tokens.
type GCECloud struct {
	*gcetest.Cloud

	mu     sync.Mutex
	nextIP netip.Addr
	// adc is a credentials file for Google's Application Default
	// Credentials that no call uses (ProviderEnv).
	adc string
}

// GCE test addresses (loopback; nobody else in test/ uses 127.0.79.x and
// 127.0.80.x).
const (
	// GCEAddressBase is where instances' internal IPs start.
	GCEAddressBase = "127.0.79.10"
	// GCELabel is the cluster label key (the backend's default).
	GCELabel = "mooring-cluster"
)

// StartGCECloud starts the endpoint; the test's cleanup stops it.
func StartGCECloud(t testing.TB) *GCECloud {
	t.Helper()
	adc := filepath.Join(t.TempDir(), "adc.json")
	if err := os.WriteFile(adc, []byte(`{"type":"authorized_user","client_id":"gcetest","client_secret":"gcetest","refresh_token":"gcetest"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return &GCECloud{Cloud: gcetest.NewStarted(t, gcetest.Options{}), nextIP: netip.MustParseAddr(GCEAddressBase), adc: adc}
}

// AddNode makes a running instance labelled as cluster's, on the next free
// loopback address, with a NAT IP in 127.0.80.x.
func (g *GCECloud) AddNode(cluster, name string) gcetest.Instance {
	return g.AddInstance(name, map[string]string{GCELabel: cluster})
}

// AddInstance makes a running instance with labels on the next free
// loopback address.
func (g *GCECloud) AddInstance(name string, labels map[string]string) gcetest.Instance {
	g.mu.Lock()
	ip := g.nextIP
	g.nextIP = ip.Next()
	g.mu.Unlock()
	b := ip.As4()
	nat := netip.AddrFrom4([4]byte{127, 0, 80, b[3]})
	return g.Put(gcetest.Instance{Name: name, InternalIP: ip.String(), ExternalIP: nat.String(), Labels: labels})
}

// Provisioner makes fleet machines as GCE instances of cluster whose agents
// use `cloud: gce` against their metadata servers (FleetOptions.Provision).
func (g *GCECloud) Provisioner(cluster string) func(ctx context.Context, name string) (Provisioned, error) {
	return func(_ context.Context, name string) (Provisioned, error) {
		in := g.AddNode(cluster, name)
		md, err := g.MetadataURL(in.Project, in.Zone, in.Name)
		if err != nil {
			return Provisioned{}, err
		}
		return Provisioned{NodeName: in.Name, Address: in.InternalIP, AgentConfig: g.AgentConfig(md)}, nil
	}
}

// AgentConfig is the agent config's cloud part for an instance whose
// metadata server is at metadataURL.
func (g *GCECloud) AgentConfig(metadataURL string) string {
	return fmt.Sprintf("cloud: gce\nmetadataURL: %s\n", metadataURL)
}

// ProviderName is "gce".
func (g *GCECloud) ProviderName() string { return "gce" }

// WriteProviderConfig writes the GCE provider's config (docs/gce.md) for
// cluster, the Compute API and the keys pointing here, and the endpoint's
// EK/AK CA as the roots of vTPMs' AK certificates (tpm.rootsFile,
// tpm.intermediatesFile) unless extra configures tpm itself.
func (g *GCECloud) WriteProviderConfig(dir, cluster, extra string) (string, error) {
	path := filepath.Join(dir, "cloud.yaml")
	cfg := fmt.Sprintf("projects: [%s]\nclusterID: %s\ncomputeEndpoint: %s\nwithoutAuthentication: true\ncertsURL: %s\ntokenIssuer: %s\n%s",
		gcetest.DefaultProject, cluster, g.Endpoint(), g.CertsURL(), g.Issuer(), extra)
	if !strings.Contains("\n"+extra, "\ntpm:") {
		roots, inter := filepath.Join(dir, "gce-tpm-roots.pem"), filepath.Join(dir, "gce-tpm-intermediates.pem")
		for file, get := range map[string]func() ([]byte, error){roots: g.TPMRootPEM, inter: g.TPMIntermediatePEM} {
			data, err := get()
			if err != nil {
				return "", err
			}
			if err := os.WriteFile(file, data, 0o600); err != nil {
				return "", err
			}
		}
		cfg += fmt.Sprintf("tpm:\n  rootsFile: %s\n  intermediatesFile: %s\n", roots, inter)
	}
	return path, os.WriteFile(path, []byte(cfg), 0o600)
}

// ProvisionTPM makes a machine's TPM simulator its instance's vTPM, as
// GCE provisions a Shielded VM's (gcetest.ProvisionVTPM: the AK template
// and the AK certificate the endpoint's EK/AK CA issues in NV, the
// instance's shieldedInstanceConfig with enableVtpm):
// BootOptions.ProvisionTPM.
func (g *GCECloud) ProvisionTPM(_ context.Context, name string, _ Provisioned, sim *tpmtest.Sim) error {
	rw, err := sim.Open()
	if err != nil {
		return err
	}
	defer rw.Close()
	_, err = g.ProvisionVTPM(rw, gcetest.DefaultProject, gcetest.DefaultZone, name, gcetest.VTPMOptions{})
	return err
}

// ProviderEnv keeps the Google libraries off any real metadata server and
// credentials: the credentials file is an authorized user's that no call
// uses (the Compute API is called without credentials), there because the
// upstream GCE provider (loadBalancers: upstream) builds a TPU API client
// with Application Default Credentials alone, and fails without them.
func (g *GCECloud) ProviderEnv() []string {
	return []string{"GCE_METADATA_HOST=127.0.0.1:9", "GOOGLE_APPLICATION_CREDENTIALS=" + g.adc, "NO_GCE_CHECK=True"}
}

// CCMSetup readies the cluster for mooring-ccm with the config's extra
// lines (RunCCM): with loadBalancers: upstream, SetupUpstream.
func (g *GCECloud) CCMSetup(ctx context.Context, c *testbed.ControlPlane, extra string) error {
	if !strings.Contains(extra, "loadBalancers: upstream") {
		return nil
	}
	return SetupGCEUpstream(ctx, c)
}

// SetupGCEUpstream makes what the upstream GCE provider's load balancers
// need of the cluster, as docs/gce.md has an operator make it: the RBAC of
// deploy/components/gce-upstream-load-balancers and the ConfigMap
// kube-system/ingress-uid (a random uid; kept when it exists).
func SetupGCEUpstream(ctx context.Context, c *testbed.ControlPlane) error {
	if err := ApplyRBACWith(ctx, c, "ccm", "components/gce-upstream-load-balancers"); err != nil {
		return err
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	uid := hex.EncodeToString(b[:])
	_, err := c.Client.CoreV1().ConfigMaps("kube-system").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "ingress-uid", Namespace: "kube-system"},
		Data:       map[string]string{"uid": uid, "provider-uid": uid},
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
