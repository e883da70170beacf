package harness

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/mooring-dev/mooring/cloud/azure/azuretest"
	"github.com/mooring-dev/mooring/cloud/tpm/tpmtest"
)

// AzureCloud is an Azure-compatible endpoint (cloud/azure/azuretest: ARM,
// per-VM IMDS with attested documents signed under a test root through an
// issuing CA published at its AIA URL, a managed
// identity token endpoint) as mooring's binaries are set up for Azure: the
// CCM and the approver take an ARM token from azidentity's managed identity
// credential (App Service's protocol, pointed here by IdentityEnv) and
// trust the test root for attested documents.
type AzureCloud struct {
	*azuretest.Cloud

	// TrustedLaunch makes the VMs AddVM makes Trusted Launch VMs
	// (securityProfile: vTPM and secure boot on), whose vTPM ProvisionTPM
	// provisions as Azure does.
	TrustedLaunch bool

	mu     sync.Mutex
	nextIP netip.Addr
	vmIDs  map[string]string // VM name -> vmId
}

// AzureAddressBase is where VMs' private addresses start (loopback; AWS
// uses 127.0.77.x, GCE 127.0.79.x and 127.0.80.x).
const AzureAddressBase = "127.0.81.10"

// StartAzureCloud starts the endpoint; the test's cleanup stops it.
func StartAzureCloud(t testing.TB) *AzureCloud {
	t.Helper()
	return StartAzureCloudWith(t, azuretest.Options{})
}

// StartAzureCloudWith starts the endpoint with opts (a benchmark's page
// size); the test's cleanup stops it.
func StartAzureCloudWith(t testing.TB, opts azuretest.Options) *AzureCloud {
	t.Helper()
	c := azuretest.Started(t, opts)
	return &AzureCloud{Cloud: c, nextIP: netip.MustParseAddr(AzureAddressBase), vmIDs: map[string]string{}}
}

// AzureClusterTag is the tag name of cluster's VMs.
func AzureClusterTag(cluster string) string { return "kubernetes.io_cluster_" + cluster }

// AddVM makes a running VM of cluster on the next free loopback address.
func (a *AzureCloud) AddVM(cluster, name string) azuretest.VM {
	a.mu.Lock()
	ip := a.nextIP
	a.nextIP = ip.Next()
	a.mu.Unlock()
	vm := azuretest.VM{Name: name, Zone: "1", PrivateIP: ip.String(), Tags: map[string]string{AzureClusterTag(cluster): "owned"}}
	if a.TrustedLaunch {
		vm.SecurityType, vm.VTPM, vm.SecureBoot = azuretest.SecurityTypeTrustedLaunch, true, true
	}
	vm = a.Put(vm)
	a.mu.Lock()
	a.vmIDs[name] = vm.VMID
	a.mu.Unlock()
	return vm
}

// VMID is the vmId of the VM AddVM made for name.
func (a *AzureCloud) VMID(name string) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	id, ok := a.vmIDs[name]
	return id, ok
}

// ProvisionTPM provisions machine name's TPM (BootOptions.ProvisionTPM) as
// Azure provisions a Trusted Launch VM's vTPM: an AK persisted at
// 0x81000003, its certificate from the cloud's test vTPM CA naming the
// VM in NV 0x01C101D0.
func (a *AzureCloud) ProvisionTPM(_ context.Context, name string, _ Provisioned, sim *tpmtest.Sim) error {
	vmID, ok := a.VMID(name)
	if !ok {
		return fmt.Errorf("no VM %s", name)
	}
	rw, err := sim.Open()
	if err != nil {
		return err
	}
	defer rw.Close()
	_, err = a.ProvisionVTPM(vmID, rw)
	return err
}

// Provisioner makes fleet machines as VMs of cluster whose agents use
// `cloud: azure` against this endpoint's IMDS.
func (a *AzureCloud) Provisioner(cluster string) func(ctx context.Context, name string) (Provisioned, error) {
	return func(_ context.Context, name string) (Provisioned, error) {
		vm := a.AddVM(cluster, name)
		return Provisioned{NodeName: name, Address: vm.PrivateIP,
			AgentConfig: fmt.Sprintf("cloud: azure\nmetadataURL: %s\n", a.IMDS(vm.VMID))}, nil
	}
}

// ProviderName is "azure".
func (a *AzureCloud) ProviderName() string { return "azure" }

// WriteProviderConfig writes the Azure provider's config (docs/azure.md)
// for cluster: ARM here, the test root as the attested documents' trust,
// and this endpoint on the AIA allow-list, so that the issuing CA is
// fetched from the signer's CA Issuers URL (no intermediates file: the
// CA may rotate mid-run); the test vTPM CA as the vTPMs' AK certificates'.
func (a *AzureCloud) WriteProviderConfig(dir, cluster, extra string) (string, error) {
	roots, err := a.WriteRoots(dir)
	if err != nil {
		return "", err
	}
	vroots, vinter, err := a.WriteVTPMRoots(dir)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "cloud.yaml")
	cfg := fmt.Sprintf("subscriptionID: %s\nresourceGroup: %s\nclusterID: %s\narmEndpoint: %s\nattestationRootsFile: %s\nattestationAIAAllowedHosts: [%q]\nvtpmRootsFile: %s\nvtpmIntermediatesFile: %s\n%s",
		a.Subscription(), a.ResourceGroup(), cluster, a.Endpoint(), roots, a.AIAHost(), vroots, vinter, extra)
	return path, os.WriteFile(path, []byte(cfg), 0o600)
}

// ProviderEnv points azidentity's managed identity credential here.
func (a *AzureCloud) ProviderEnv() []string { return a.IdentityEnv() }
