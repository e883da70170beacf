// Package azuretest is an Azure-compatible endpoint for tests, on
// loopback: per-VM IMDS (instance record and attested documents, the
// Metadata: true header required), an attested-document signer under a
// test root (github.com/smallstep/pkcs7), ARM's list and get endpoints for
// VMs, scale sets, scale-set VMs, NICs and public IPs in Azure's JSON with
// nextLink pagination, and a managed identity token endpoint in App
// Service's protocol (IDENTITY_ENDPOINT, IDENTITY_HEADER), which azidentity
// reads. It models no throttling, no long-running operations and no
// writes; ARM requires the bearer token it issued.
package azuretest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/google/uuid"
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
}

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
}

// Cloud is the endpoint.
type Cloud struct {
	opts Options

	// Root is the test root the attested documents' signer chains to,
	// through Intermediate; Signer signs IMDS's documents.
	Root, Intermediate *CA
	Signer             *Signer

	mu        sync.Mutex
	vms       map[string]*VM // by VMID
	scaleSets map[string]map[string]string
	calls     map[string]int
	token     string
	header    string

	ln  net.Listener
	srv *http.Server
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
	c := &Cloud{opts: o, vms: map[string]*VM{}, scaleSets: map[string]map[string]string{}, calls: map[string]int{},
		token: randomHex(24), header: randomHex(16)}
	var err error
	if c.Root, err = NewRootCA("mooring test Azure root"); err != nil {
		return nil, err
	}
	if c.Intermediate, err = c.Root.NewIntermediate("mooring test Azure TLS issuing CA"); err != nil {
		return nil, err
	}
	if c.Signer, err = c.Intermediate.NewSigner([]string{SignerName}, time.Time{}, time.Time{}); err != nil {
		return nil, err
	}
	return c, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Start serves on 127.0.0.1 and a free port.
func (c *Cloud) Start() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	c.ln = ln
	c.srv = &http.Server{Handler: http.HandlerFunc(c.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = c.srv.Serve(ln) }()
	return nil
}

// Close stops serving.
func (c *Cloud) Close() error {
	if c.srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.srv.Shutdown(ctx)
}

// Endpoint is ARM's URL (armEndpoint).
func (c *Cloud) Endpoint() string { return "http://" + c.ln.Addr().String() }

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

// WritePKI writes the root and the intermediate as PEM files into dir
// (the config's attestationRootsFile and attestationIntermediatesFile).
func (c *Cloud) WritePKI(dir string) (roots, intermediates string, err error) {
	roots, intermediates = filepath.Join(dir, "azure-roots.pem"), filepath.Join(dir, "azure-intermediates.pem")
	if err = os.WriteFile(roots, PEM(c.Root.Cert), 0o600); err != nil {
		return "", "", err
	}
	return roots, intermediates, os.WriteFile(intermediates, PEM(c.Intermediate.Cert), 0o600)
}

// Put adds or replaces a VM; it returns it with its VMID and defaults.
func (c *Cloud) Put(vm VM) VM {
	c.mu.Lock()
	defer c.mu.Unlock()
	if vm.VMID == "" {
		vm.VMID = uuid.NewString()
	}
	if vm.Size == "" {
		vm.Size = "Standard_D2s_v5"
	}
	if vm.Power == "" {
		vm.Power = "running"
	}
	if vm.ScaleSet != "" && vm.ComputerName == "" {
		vm.ComputerName = fmt.Sprintf("%s%06s", vm.ScaleSet, vm.InstanceID)
	}
	if old, ok := c.vms[vm.VMID]; ok && vm.Created.IsZero() {
		vm.Created = old.Created
	}
	if vm.Created.IsZero() {
		vm.Created = time.Now()
	}
	cp := vm
	c.vms[vm.VMID] = &cp
	return vm
}

// PutScaleSet adds or replaces a scale set with its tags.
func (c *Cloud) PutScaleSet(name string, tags map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.scaleSets[name] = tags
}

// SetPower sets a VM's power state (running, stopped, deallocated, ...).
func (c *Cloud) SetPower(vmID, power string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if vm, ok := c.vms[vmID]; ok {
		vm.Power = power
	}
}

// Delete removes a VM.
func (c *Cloud) Delete(vmID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.vms, vmID)
}

// Calls is how many requests of an operation were answered: "ListVMs",
// "ListVMStatuses", "GetVM", "ListScaleSets", "GetScaleSet",
// "ListScaleSetVMs", "GetScaleSetVM", "ListNICs", "ListPublicIPs",
// "Token", "Instance", "AttestedDocument".
func (c *Cloud) Calls(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[op]
}

func (c *Cloud) count(op string) {
	c.mu.Lock()
	c.calls[op]++
	c.mu.Unlock()
}

// sortedVMs is a snapshot of the VMs, by name and instance id.
func (c *Cloud) sortedVMs() []VM {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]VM, 0, len(c.vms))
	for _, vm := range c.vms {
		out = append(out, *vm)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].ScaleSet+out[i].Name != out[j].ScaleSet+out[j].Name {
			return out[i].ScaleSet+out[i].Name < out[j].ScaleSet+out[j].Name
		}
		return out[i].InstanceID < out[j].InstanceID
	})
	return out
}

func (c *Cloud) vm(vmID string) (VM, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	vm, ok := c.vms[vmID]
	if !ok {
		return VM{}, false
	}
	return *vm, true
}

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
