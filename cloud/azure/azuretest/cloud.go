// Package azuretest is an Azure-compatible endpoint for tests, on
// loopback. What it models, from Microsoft's documentation and genuine
// documents:
//
//   - per-VM IMDS: the instance record and attested documents; GET only,
//     header Metadata: true required, X-Forwarded-For refused, an
//     api-version required, the nonce at most 32 alphanumerics (without
//     one, IMDS's own timestamp such as 20251119-185330, which genuine
//     documents show equal to their expiresOn);
//   - IMDS's throttling: more than IMDSRateLimit requests (5) in a second
//     from one VM are answered 429 Too Many Requests;
//   - IMDS's document cache: "due to IMDS's caching mechanism, a previously
//     cached nonce value might be returned": within DocumentCacheWindow of a
//     VM's last document, a request with another nonce gets that document
//     again (switchable);
//   - documents as genuine ones are: the PKCS#7 carries the signer
//     certificate only, no signed attributes, the digest algorithm stated
//     as sha256WithRSAEncryption, JSON keys in genuine order, timestamps
//     "01/02/06 15:04:05 -0000" with createdOn at the request and
//     expiresOn six hours after it (see Sign, DocumentAt);
//   - the signer's chain: a test root, an issuing CA published at the
//     signer's CA Issuers (AIA) URL on this endpoint, and its rotation
//     mid-run (RotateIntermediate: a new CA at a new URL; the old one stays
//     published, as Microsoft's do);
//   - ARM's list and get endpoints for VMs, scale sets, scale-set VMs,
//     NICs and public IPs in Azure's JSON with nextLink pagination,
//     requiring the bearer token it issued, and a managed identity token
//     endpoint in App Service's protocol (IDENTITY_ENDPOINT,
//     IDENTITY_HEADER), which azidentity reads;
//   - ARM's writes (arm.go): long-running operations (Azure-AsyncOperation
//     and Location), provisioningState, etags with If-Match and 412,
//     AnotherOperationInProgress and injected faults (429 with
//     Retry-After), for the kinds of resource registered;
//   - the network resource provider's load balancers, public IPs, network
//     security groups and NICs' backend pool membership, checked as it
//     checks them, with a data plane on 127.87.0.0/16 that forwards each
//     frontend's rules to the pool members (loadbalancers.go);
//   - Trusted Launch (vtpm.go): VMs' securityProfile, a test CA standing
//     for Azure's vTPM CA, and ProvisionVTPM, which provisions a TPM (a
//     go-tpm-tools simulator) as Azure provisions a VM's vTPM: the AK at
//     0x81000003, its certificate naming the VM at NV 0x01C101D0.
//
// What it does not model: ARM's own throttling limits and caching, IMDS's 410/500 answers while a VM starts, the
// exact window of IMDS's document cache (not documented; ours is a
// parameter), national clouds' names, and CRL or OCSP.
package azuretest

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/google/uuid"
	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// Options describe the cloud.
type Options struct {
	// Subscription (a UUID), ResourceGroup (ARM keeps its case; default
	// Mooring-RG) and Location (default westeurope).
	Subscription, ResourceGroup, Location string
	// PageSize is how many items one list page holds (default 2).
	PageSize int
	// DocumentLifetime is createdOn to expiresOn (default 6h, as Azure's).
	DocumentLifetime time.Duration
	// DocumentCacheWindow: a VM asking again within it gets its previous
	// document, whatever nonce it sends, as IMDS's cache may answer
	// (default DefaultDocumentCacheWindow; negative: no cache).
	DocumentCacheWindow time.Duration
	// IMDSRateLimit is how many IMDS requests per second one VM is
	// answered before 429s (default 5, IMDS's documented limit;
	// negative: no limit).
	IMDSRateLimit int
	// ProvisionTime is how long an ARM write stays in progress
	// (provisioningState Updating or Deleting) before it is done; 0: done
	// at once, still answered as a long-running operation (arm.go).
	ProvisionTime time.Duration
	// RetryAfter is the Retry-After ARM answers with its 429s and
	// operations in progress (whole seconds, at least 1).
	RetryAfter time.Duration
}

// DefaultDocumentCacheWindow is the modelled window of IMDS's document
// cache (Azure documents the cache, not its window).
const DefaultDocumentCacheWindow = 2 * time.Second

// VM is a virtual machine, standalone or of a scale set.
type VM struct {
	// Name of a standalone VM; "" for a scale-set VM.
	Name string
	// ScaleSet and InstanceID of a scale-set VM, and its ComputerName.
	ScaleSet, InstanceID, ComputerName string
	// VMID is set by Put when empty.
	VMID string
	// Zone ("1", "2", "3" or ""), Size (default Standard_D2s_v5).
	Zone, Size string
	Tags       map[string]string
	// PrivateIP (loopback in tests) and PublicIP (loopback or "").
	PrivateIP, PublicIP string
	// Power is the PowerState/<Power> code (default running).
	Power string
	// Created is the VM's properties.timeCreated; Put sets it to Now when
	// zero, keeping the one of the VM it replaces.
	Created time.Time
	// SecurityType is properties.securityProfile.securityType
	// (SecurityTypeTrustedLaunch, SecurityTypeConfidentialVM; "" writes no
	// securityProfile, a Standard VM), VTPM and SecureBoot its
	// uefiSettings' vTpmEnabled and secureBootEnabled (vtpm.go).
	SecurityType     string
	VTPM, SecureBoot bool
}

// Cloud is the endpoint.
type Cloud struct {
	opts Options

	// Root is the test root the attested documents' signer chains to,
	// through Intermediate; Signer signs IMDS's documents. Read them
	// through Current while documents are served (RotateIntermediate
	// replaces them).
	Root, Intermediate *CA
	Signer             *Signer
	// VTPMRoot stands for Azure's vTPM root CA and VTPMIntermediate for an
	// issuing CA under it, which certifies the vTPMs' AKs (vtpm.go).
	VTPMRoot, VTPMIntermediate *CA

	mu        sync.Mutex
	published map[string]*x509.Certificate // AIA path -> CA certificate
	caSerial  int
	failAIA   bool
	lastDoc   map[string]cachedDoc         // by VMID
	imdsHits  map[string]*cloudtest.Window // by VMID
	scaleSets map[string]map[string]string
	token     string
	header    string

	vms     cloudtest.Store[string, VM]
	servers cloudtest.Servers[string] // the one listener: ARM, IMDS, AIA, identity
	addr    string
	calls   cloudtest.Counter
	faults  cloudtest.Faults // Fail, FailCode (arm.go)
	arm     armStore         // ARM's written resources (arm.go)
	lbs     lbState          // NICs' pools, the data plane (loadbalancers.go)
}

type cachedDoc struct {
	der []byte
	at  time.Time
}

// SignerName is the DNS name of the test signer, Azure's.
const SignerName = "metadata.azure.com"

// New makes the cloud and its PKI; Start serves it.
func New(o Options) (*Cloud, error) {
	if o.Subscription == "" {
		o.Subscription = "3f2c1a5e-0b7d-4c1e-9a8f-5d6e7f801234"
	}
	if o.ResourceGroup == "" {
		o.ResourceGroup = "Mooring-RG"
	}
	if o.Location == "" {
		o.Location = "westeurope"
	}
	if o.PageSize <= 0 {
		o.PageSize = 2
	}
	if o.DocumentLifetime == 0 {
		o.DocumentLifetime = 6 * time.Hour
	}
	if o.DocumentCacheWindow == 0 {
		o.DocumentCacheWindow = DefaultDocumentCacheWindow
	}
	if o.IMDSRateLimit == 0 {
		o.IMDSRateLimit = 5
	}
	c := &Cloud{opts: o, scaleSets: map[string]map[string]string{},
		vms: cloudtest.Store[string, VM]{
			Key:     func(vm *VM) *string { return &vm.VMID },
			NewKey:  func(int) string { return uuid.NewString() },
			Created: func(vm *VM) *time.Time { return &vm.Created },
			// By name (a scale set's VMs by the set's) and instance id.
			Order: func(a, b *VM) int {
				return cmp.Or(strings.Compare(a.ScaleSet+a.Name, b.ScaleSet+b.Name), strings.Compare(a.InstanceID, b.InstanceID))
			},
		},
		token: randomHex(24), header: randomHex(16),
		published: map[string]*x509.Certificate{}, lastDoc: map[string]cachedDoc{}, imdsHits: map[string]*cloudtest.Window{}}
	c.registerNetwork() // loadbalancers.go
	// The address is taken now: the signer's AIA URL names it.
	addr, err := c.servers.Listen()
	if err != nil {
		return nil, err
	}
	c.addr = addr
	if c.Root, err = NewRootCA("mooring test Azure root"); err != nil {
		_ = c.servers.Close()
		return nil, err
	}
	if _, err := c.RotateIntermediate(); err != nil {
		_ = c.servers.Close()
		return nil, err
	}
	if err := c.newVTPMCA(); err != nil {
		_ = c.servers.Close()
		return nil, err
	}
	return c, nil
}

// RotateIntermediate replaces the issuing CA, as Microsoft does without
// notice: a new CA under the root, published at a new AIA URL, and a new
// signer under it naming that URL; documents are signed by the new signer
// from now on. The old CA stays published. It returns the new CA.
func (c *Cloud) RotateIntermediate() (*CA, error) {
	c.mu.Lock()
	c.caSerial++
	n := c.caSerial
	c.mu.Unlock()
	path := fmt.Sprintf("/pkiops/certs/mooring%%20test%%20Azure%%20TLS%%20Issuing%%20CA%%20%02d.crt", n)
	inter, err := c.Root.newIntermediate(fmt.Sprintf("mooring test Azure TLS Issuing CA %02d", n), c.Endpoint()+path)
	if err != nil {
		return nil, err
	}
	signer, err := inter.NewSigner([]string{SignerName, "westeurope." + SignerName}, time.Time{}, time.Time{})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.published[path] = inter.Cert
	c.Intermediate, c.Signer = inter, signer
	return inter, nil
}

// Unpublish stops serving ca at its AIA URL (which then answers 404), as
// for an issuer that is not where its certificates say.
func (c *Cloud) Unpublish(ca *CA) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for path, cert := range c.published {
		if cert.Equal(ca.Cert) {
			delete(c.published, path)
		}
	}
}

// Current is the issuing CA and the signer documents are signed with now.
func (c *Cloud) Current() (*CA, *Signer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Intermediate, c.Signer
}

// FailAIA makes the AIA downloads answer 503 (true) or serve again.
func (c *Cloud) FailAIA(fail bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failAIA = fail
}

// AIAHost is this endpoint's host:port, the entry of the verifier's AIA
// allow-list that lets it fetch the issuing CAs.
func (c *Cloud) AIAHost() string { return c.addr }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Start serves on the address New took (127.0.0.1, a free port).
func (c *Cloud) Start() error { return c.servers.Serve(http.HandlerFunc(c.serve)) }

// Started is a started cloud that the test's cleanup closes.
func Started(t testing.TB, o Options) *Cloud {
	t.Helper()
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	cloudtest.Start(t, c)
	return c
}

// Close stops serving and ARM's running operations.
func (c *Cloud) Close() error {
	c.arm.mu.Lock()
	for _, t := range c.arm.timers {
		t.Stop()
	}
	c.arm.mu.Unlock()
	_ = c.lbs.dp.Close()
	return c.servers.Close()
}

// Endpoint is ARM's URL (armEndpoint).
func (c *Cloud) Endpoint() string { return "http://" + c.addr }

// Subscription, ResourceGroup and Location of the cloud.
func (c *Cloud) Subscription() string  { return c.opts.Subscription }
func (c *Cloud) ResourceGroup() string { return c.opts.ResourceGroup }
func (c *Cloud) Location() string      { return c.opts.Location }

// IMDS is the metadata URL of a VM (the agent's metadataURL).
func (c *Cloud) IMDS(vmID string) string { return c.Endpoint() + "/vm/" + vmID }

// IdentityEnv points azidentity's managed identity credential at this
// cloud's token endpoint (App Service's protocol).
func (c *Cloud) IdentityEnv() []string {
	return []string{"IDENTITY_ENDPOINT=" + c.Endpoint() + "/msi/token", "IDENTITY_HEADER=" + c.header}
}

// Credential is a token credential holding this cloud's ARM token, for
// tests that build the SDK's clients themselves.
func (c *Cloud) Credential() azcore.TokenCredential { return fakeCredential{token: c.token} }

type fakeCredential struct{ token string }

func (f fakeCredential) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	return azcore.AccessToken{Token: f.token, ExpiresOn: time.Now().Add(time.Hour)}, nil
}

// WritePKI writes the root and the current intermediate as PEM files into
// dir (the config's attestationRootsFile and the pinned
// attestationIntermediatesFile of older configs).
func (c *Cloud) WritePKI(dir string) (roots, intermediates string, err error) {
	roots, err = c.WriteRoots(dir)
	if err != nil {
		return "", "", err
	}
	inter, _ := c.Current()
	intermediates = filepath.Join(dir, "azure-intermediates.pem")
	return roots, intermediates, os.WriteFile(intermediates, PEM(inter.Cert), 0o600)
}

// WriteRoots writes the root as a PEM file into dir (attestationRootsFile).
func (c *Cloud) WriteRoots(dir string) (string, error) {
	roots := filepath.Join(dir, "azure-roots.pem")
	return roots, os.WriteFile(roots, PEM(c.Root.Cert), 0o600)
}

// Put adds or replaces a VM; it returns it with its VMID and defaults.
func (c *Cloud) Put(vm VM) VM {
	if vm.Size == "" {
		vm.Size = "Standard_D2s_v5"
	}
	if vm.Power == "" {
		vm.Power = "running"
	}
	if vm.ScaleSet != "" && vm.ComputerName == "" {
		vm.ComputerName = fmt.Sprintf("%s%06s", vm.ScaleSet, vm.InstanceID)
	}
	return c.vms.Put(vm, func(vm, old *VM) {
		if old != nil && vm.Created.IsZero() {
			vm.Created = old.Created
		}
	})
}

// PutScaleSet adds or replaces a scale set with its tags.
func (c *Cloud) PutScaleSet(name string, tags map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.scaleSets[name] = tags
}

// SetPower sets a VM's power state (running, stopped, deallocated, ...).
func (c *Cloud) SetPower(vmID, power string) {
	_ = c.vms.Update(vmID, func(vm *VM) { vm.Power = power }) // none: nothing to set
}

// Delete removes a VM.
func (c *Cloud) Delete(vmID string) { c.vms.Delete(vmID) }

// NextPage is the name under which Calls counts the list calls that asked
// for a page after the first (following a nextLink).
const NextPage = "NextPage"

// Calls is how many requests of an operation were answered: "ListVMs",
// "ListVMStatuses", "GetVM", "ListScaleSets", "GetScaleSet",
// "ListScaleSetVMs", "GetScaleSetVM", "ListNICs", "ListPublicIPs",
// "Token", "Instance", "AttestedDocument", "StaleDocument" (a cached
// document answered for another nonce), "Throttled" (429s), "AIA"
// (issuing CA downloads) and NextPage. Every page of a list counts as a
// call of its list.
func (c *Cloud) Calls(op string) int { return c.calls.Get(op) }

func (c *Cloud) count(op string) { c.calls.Add(op) }

// sortedVMs is a snapshot of the VMs, by name and instance id.
func (c *Cloud) sortedVMs() []VM { return c.vms.List(nil) }

func (c *Cloud) vm(vmID string) (VM, bool) { return c.vms.Get(vmID) }

func (c *Cloud) scaleSet(name string) (map[string]string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for n, tags := range c.scaleSets {
		if strings.EqualFold(n, name) {
			return tags, true
		}
	}
	return nil, false
}
