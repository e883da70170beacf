package azure_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/azure"
	"github.com/mooring-dev/mooring/cloud/azure/agentid"
	"github.com/mooring-dev/mooring/cloud/azure/azuretest"
	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/view"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const cluster = "c1"

func start(t *testing.T) *azuretest.Cloud { return azuretest.Started(t, azuretest.Options{}) }

func tags() map[string]string { return map[string]string{azure.ClusterTagPrefix + cluster: "owned"} }

// provider trusts the cloud's test root and fetches its issuing CAs
// from the cloud's AIA URLs (no intermediates file).
func provider(t *testing.T, c *azuretest.Cloud) *azure.Cloud {
	t.Helper()
	roots, err := c.WriteRoots(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return providerWith(t, c, azure.Config{AttestationRootsFile: roots, AttestationAIAAllowedHosts: []string{c.AIAHost()}})
}

// providerWith builds the provider of the cloud with the attestation
// fields of att.
func providerWith(t *testing.T, c *azuretest.Cloud, att azure.Config) *azure.Cloud {
	t.Helper()
	att.SubscriptionID, att.ResourceGroup, att.ClusterID, att.ARMEndpoint = c.Subscription(), c.ResourceGroup(), cluster, c.Endpoint()
	p, err := azure.NewWithCredential(att, c.Credential())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func binding(t *testing.T) string {
	t.Helper()
	b, err := azuretest.Binding()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestViewThroughTheSDK: the real armcompute/armnetwork clients list VMs
// and scale-set VMs page by page (two per page), tagged ones only, with
// power states, NIC addresses, zones and the Azure CCM's providerIDs (the
// resource group lower-cased).
func TestViewThroughTheSDK(t *testing.T) {
	c := start(t)
	a := c.Put(azuretest.VM{Name: "Node-A", Zone: "1", PrivateIP: "127.0.81.201", PublicIP: "127.0.81.251", Tags: tags()})
	b := c.Put(azuretest.VM{Name: "node-b", PrivateIP: "127.0.81.202", Tags: tags(), Power: "deallocated"})
	c.Put(azuretest.VM{Name: "node-c", PrivateIP: "127.0.81.203", Tags: tags()})
	c.PutScaleSet("pool", tags())
	s0 := c.Put(azuretest.VM{ScaleSet: "pool", InstanceID: "0", PrivateIP: "127.0.81.205", Zone: "2"})
	c.Put(azuretest.VM{ScaleSet: "pool", InstanceID: "1", PrivateIP: "127.0.81.206"})
	c.Put(azuretest.VM{ScaleSet: "pool", InstanceID: "2", PrivateIP: "127.0.81.207", Power: "starting"})
	p := provider(t, c)
	ctx := context.Background()
	all, err := p.InstanceView().List(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 6 {
		t.Fatalf("listed %d instances, want 6: %+v", len(all), all)
	}
	in, err := p.InstanceView().ByID(ctx, a.VMID, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantPID := "azure:///subscriptions/" + c.Subscription() + "/resourceGroups/mooring-rg/providers/Microsoft.Compute/virtualMachines/Node-A"
	if in.ProviderID != wantPID || in.NodeName != "node-a" || in.State != view.StateRunning || in.Zone != "westeurope-1" ||
		in.Region != "westeurope" || in.InstanceType != "Standard_D2s_v5" {
		t.Fatalf("VM: %+v", in)
	}
	if len(in.Addresses) != 3 || in.Addresses[0].Address != "127.0.81.201" || in.Addresses[1].Address != "127.0.81.251" ||
		in.Addresses[1].Type != "ExternalIP" || in.Addresses[2].Address != "node-a" {
		t.Fatalf("addresses: %+v", in.Addresses)
	}
	if in, _ := p.InstanceView().ByID(ctx, b.VMID, 0); in.State != view.StateStopped {
		t.Fatalf("deallocated VM: %+v", in)
	}
	ss, err := p.InstanceView().ByID(ctx, s0.VMID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(ss.ProviderID, "/resourceGroups/mooring-rg/providers/Microsoft.Compute/virtualMachineScaleSets/pool/virtualMachines/0") ||
		ss.NodeName != "pool000000" || ss.Addresses[0].Address != "127.0.81.205" || ss.Zone != "westeurope-2" {
		t.Fatalf("scale-set VM: %+v", ss)
	}
	// Zones, by a providerID whose resource group is not lower-cased (as
	// an older Node's may be) and by Node name.
	zones, ok := p.Zones()
	if !ok {
		t.Fatal("Zones is not implemented")
	}
	z, err := zones.GetZoneByProviderID(ctx, strings.Replace(wantPID, "/mooring-rg/", "/Mooring-RG/", 1))
	if err != nil || z.FailureDomain != "westeurope-1" || z.Region != "westeurope" {
		t.Fatalf("zone by providerID: %+v %v", z, err)
	}
	if z, err := zones.GetZoneByNodeName(ctx, "pool000000"); err != nil || z.FailureDomain != "westeurope-2" {
		t.Fatalf("zone by node name: %+v %v", z, err)
	}
	if _, err := zones.GetZoneByProviderID(ctx, "gce://p/z/n"); err == nil {
		t.Fatal("another cloud's providerID got a zone")
	}
	if c.Calls("ListScaleSetVMs") < 2 {
		t.Fatalf("pages: ListScaleSetVMs %d; want the nextLinks followed", c.Calls("ListScaleSetVMs"))
	}
	// ConfirmInstance of a scale-set VM.
	if got, err := p.ConfirmInstance(ctx, ss.ProviderID); err != nil || got.ID != s0.VMID {
		t.Fatalf("scale-set VM confirmed: %+v, %v", got, err)
	}
}

// TestAgentEvidenceVerifies: the agent's identity from IMDS and its
// attested document verify in the provider's verifier.
func TestAgentEvidenceVerifies(t *testing.T) {
	c := start(t)
	vm := c.Put(azuretest.VM{Name: "Node-1", PrivateIP: "127.0.81.210", Tags: tags()})
	p := provider(t, c)
	id, err := nodeid.New("azure", nodeid.Config{MetadataURL: c.IMDS(vm.VMID)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ni, err := id.Instance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	in, err := p.InstanceView().ByID(ctx, vm.VMID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ni.ID != vm.VMID || ni.NodeName != "node-1" || ni.ProviderID != in.ProviderID || ni.InternalIP != "127.0.81.210" {
		t.Fatalf("agent's instance %+v, cloud's %+v", ni, in)
	}
	bnd := binding(t)
	ev, err := id.Evidence(ctx, bnd)
	if err != nil {
		t.Fatal(err)
	}
	v := p.EvidenceVerifiers()[0]
	att, err := v.Verify(ctx, ev.Data, bnd, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := v.Peek(ev.Data)
	if err != nil || att.InstanceID != vm.VMID || att.ReplayKey != key || !strings.HasPrefix(key, azure.ReplayKeyPrefix) {
		t.Fatalf("attestation %+v, peek %q %v", att, key, err)
	}
	if m, err := v.(cloud.MachinePeeker).PeekMachine(ev.Data); err != nil || m != att.InstanceID {
		t.Fatalf("PeekMachine = %q, %v; want %q", m, err, att.InstanceID)
	}
}

// TestIMDSHeaderRule: IMDS refuses requests without Metadata: true.
func TestIMDSHeaderRule(t *testing.T) {
	c := start(t)
	vm := c.Put(azuretest.VM{Name: "n", PrivateIP: "127.0.81.211"})
	resp, err := (&httpClient{}).get(c.IMDS(vm.VMID) + "/metadata/instance?api-version=2021-02-01")
	if err != nil || resp != 400 {
		t.Fatalf("without the header: %d %v", resp, err)
	}
}

// TestVerifierRejects: each bad document is denied with its reason; each
// check failed before it existed (the signer, name, content, nonce, time
// and subscription checks are separate returns).
func TestVerifierRejects(t *testing.T) {
	c := start(t)
	vm := c.Put(azuretest.VM{Name: "n1", PrivateIP: "127.0.81.212", Tags: tags()})
	p := provider(t, c)
	v := p.EvidenceVerifiers()[0]
	bnd := binding(t)
	nonce, err := agentid.Nonce(bnd)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	good := c.Document(vm, nonce, now)
	foreignRoot, err := azuretest.NewRootCA("not azure")
	if err != nil {
		t.Fatal(err)
	}
	foreignSigner, err := foreignRoot.NewSigner([]string{azuretest.SignerName}, time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	unnamed, err := c.Intermediate.NewSigner([]string{"metadata.example.com"}, time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	sign := func(s *azuretest.Signer, content []byte) []byte {
		der, err := s.Sign(content)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	substituted := sign(c.Signer, good)
	other := strings.Replace(string(good), vm.VMID, "00000000-0000-4000-8000-000000000000", 1)
	substituted = []byte(strings.Replace(string(substituted), string(good), other, 1))
	otherNonce, _ := agentid.Nonce(binding(t))
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"signer outside the roots", sign(foreignSigner, good), cloud.RejectIssuer},
		{"signer without the Azure name", sign(unnamed, good), cloud.RejectIssuer},
		{"content substituted beside the signature", substituted, cloud.RejectSignature},
		{"another nonce", sign(c.Signer, c.Document(vm, otherNonce, now)), cloud.RejectBinding},
		{"another subscription", sign(c.Signer, c.DocumentFor(vm.VMID, "11111111-2222-4333-8444-555555555555", nonce, now, now.Add(time.Hour))), cloud.RejectIssuer},
		{"not PKCS#7", []byte("garbage"), cloud.RejectMalformed},
		{"content not a document", sign(c.Signer, []byte(`{"nonce":"x"}`)), cloud.RejectMalformed},
	}
	for _, tc := range cases {
		_, err := v.Verify(context.Background(), tc.data, bnd, now)
		r, ok := cloud.IsRejection(err)
		if !ok || r.Reason != tc.want {
			t.Errorf("%s: want %s, got %v", tc.name, tc.want, err)
			continue
		}
		t.Logf("%s: %v", tc.name, err)
	}
	if _, err := v.Verify(context.Background(), sign(c.Signer, good), bnd, now); err != nil {
		t.Fatalf("good document: %v", err)
	}
}

// verifierFor starts a cloud with one VM of the cluster at ip, and gives
// the provider's verifier, a new key's binding and its nonce.
func verifierFor(t *testing.T, ip string) (*azuretest.Cloud, azuretest.VM, cloud.EvidenceVerifier, string, string) {
	t.Helper()
	c := start(t)
	vm := c.Put(azuretest.VM{Name: "n1", PrivateIP: ip, Tags: tags()})
	bnd := binding(t)
	nonce, err := agentid.Nonce(bnd)
	if err != nil {
		t.Fatal(err)
	}
	return c, vm, provider(t, c).EvidenceVerifiers()[0], bnd, nonce
}

// TestVerifierTakesFreshDocuments: a document as IMDS signs it verifies
// at once and a minute later, in the genuine PKCS#7 form and in the
// common one (signed attributes, digest sha256); its attestation runs
// from its createdOn to the end of the maximum age. The attacks on the
// timestamps are in TestAttacks.
func TestVerifierTakesFreshDocuments(t *testing.T) {
	c, vm, v, bnd, nonce := verifierFor(t, "127.0.81.214")
	fetched := time.Now().Truncate(time.Second)
	content := c.DocumentAt(vm, nonce, fetched)
	for form, sign := range map[string]func([]byte) ([]byte, error){"genuine": c.Signer.Sign, "with signed attributes": c.Signer.SignWithAttributes} {
		der, err := sign(content)
		if err != nil {
			t.Fatal(err)
		}
		for _, now := range []time.Time{fetched, fetched.Add(time.Minute)} {
			att, err := v.Verify(context.Background(), der, bnd, now)
			if err != nil || att.InstanceID != vm.VMID || !att.IssuedAt.Equal(fetched) || !att.ExpiresAt.Equal(fetched.Add(azure.DefaultMaxDocumentAge)) {
				t.Errorf("%s, at %s: %+v %v", form, now, att, err)
			}
		}
	}
}

// TestMaxDocumentAgeIsConfigured: maxDocumentAge and maxClockSkew of the
// cloud config reach the verifier: a document eight minutes old is
// refused with the defaults and taken with maxDocumentAge 10m; one dated
// two minutes ahead is taken with maxClockSkew 3m.
func TestMaxDocumentAgeIsConfigured(t *testing.T) {
	c, vm, def, bnd, nonce := verifierFor(t, "127.0.81.216")
	roots, err := c.WriteRoots(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	wider := providerWith(t, c, azure.Config{AttestationRootsFile: roots, AttestationAIAAllowedHosts: []string{c.AIAHost()},
		MaxDocumentAge: metav1.Duration{Duration: 10 * time.Minute}, MaxClockSkew: metav1.Duration{Duration: 3 * time.Minute}}).EvidenceVerifiers()[0]
	now := time.Now()
	for name, created := range map[string]time.Time{"eight minutes old": now.Add(-8 * time.Minute), "two minutes ahead": now.Add(2 * time.Minute)} {
		der, err := c.Signer.Sign(c.DocumentAt(vm, nonce, created))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := def.Verify(context.Background(), der, bnd, now); !isRejected(err, cloud.RejectExpired) {
			t.Errorf("%s, defaults: %v", name, err)
		}
		if _, err := wider.Verify(context.Background(), der, bnd, now); err != nil {
			t.Errorf("%s, configured: %v", name, err)
		}
	}
}

// TestFreshnessConfig: the defaults, and the limits on maxDocumentAge and
// maxClockSkew.
func TestFreshnessConfig(t *testing.T) {
	const base = "subscriptionID: 3f2c1a5e-0b7d-4c1e-9a8f-5d6e7f801234\nresourceGroup: rg\nclusterID: c1\n"
	cfg, err := azure.ParseConfig(strings.NewReader(base))
	if err != nil || cfg.MaxDocumentAge.Duration != azure.DefaultMaxDocumentAge || cfg.MaxClockSkew.Duration != azure.DefaultMaxClockSkew {
		t.Fatalf("defaults: %+v, %v", cfg, err)
	}
	if cfg, err := azure.ParseConfig(strings.NewReader(base + "maxDocumentAge: 15m\nmaxClockSkew: 5m\n")); err != nil || cfg.MaxDocumentAge.Duration != 15*time.Minute {
		t.Fatalf("at the limits: %+v, %v", cfg, err)
	}
	for _, bad := range []string{"maxDocumentAge: 16m\n", "maxDocumentAge: 6h\n", "maxClockSkew: 6m\n", "maxDocumentAge: -1m\n", "maxClockSkew: -1s\n"} {
		field, _, _ := strings.Cut(bad, ":")
		if _, err := azure.ParseConfig(strings.NewReader(base + bad)); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func isRejected(err error, reason string) bool {
	r, ok := cloud.IsRejection(err)
	return ok && r.Reason == reason
}

// TestVerifierSurvivesMangledDocuments: truncations and bit flips of a
// good document are rejected with a verdict and never panic; a flip in
// the signer's CA Issuers URL may instead fail the issuer's download, an
// error to retry on, never an approval.
func TestVerifierSurvivesMangledDocuments(t *testing.T) {
	c, vm, v, bnd, nonce := verifierFor(t, "127.0.81.213")
	good, err := c.Signer.Sign(c.Document(vm, nonce, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	try := func(what string, data []byte) {
		_, err := v.Verify(context.Background(), data, bnd, time.Now())
		if _, ok := cloud.IsRejection(err); !ok {
			t.Fatalf("%s: %v", what, err)
		}
		_, _, _ = v.Peek(data)
	}
	for n := 0; n < len(good); n += 7 {
		try("truncated", good[:n])
	}
	for i := 0; i < len(good); i += 3 {
		m := append([]byte(nil), good...)
		m[i] ^= 0x41
		// A flip outside what is signed may still verify (the replay
		// key is the content's digest); any failure must be a verdict.
		att, err := v.Verify(context.Background(), m, bnd, time.Now())
		if err == nil && att.InstanceID != vm.VMID {
			t.Fatalf("flip at %d accepted for %s", i, att.InstanceID)
		}
		if _, ok := cloud.IsRejection(err); err != nil && !ok && !strings.Contains(err.Error(), "the issuer of signer certificate") {
			t.Fatalf("flip at %d: %v", i, err)
		}
	}
}

// TestViewCreationTime: a scale-set VM's properties.timeCreated, as the
// real armcompute clients decode it from azuretest, is the view's creation
// time (a VM's, in the view and Named, is the conformance suite's): exactly
// the time set, to the nanosecond, Now by default, kept when the VM is put
// again, and ConfirmInstance reads it too.
func TestViewCreationTime(t *testing.T) {
	c := start(t)
	made := time.Date(2025, 3, 1, 10, 20, 30, 123456700, time.UTC)
	c.Put(azuretest.VM{Name: "ticketed", PrivateIP: "127.0.81.220", Tags: tags(), Created: made})
	c.PutScaleSet("pool", tags())
	member := c.Put(azuretest.VM{ScaleSet: "pool", InstanceID: "3", PrivateIP: "127.0.81.221", Created: made.Add(time.Minute)})
	before := time.Now()
	plain := c.Put(azuretest.VM{Name: "plain", PrivateIP: "127.0.81.222", Tags: tags()})
	if plain.Created.Before(before) || plain.Created.After(time.Now()) {
		t.Fatalf("default creation time %v, want the time of Put", plain.Created)
	}
	if again := c.Put(azuretest.VM{Name: "plain", VMID: plain.VMID, PrivateIP: "127.0.81.222", Tags: tags()}); !again.Created.Equal(plain.Created) {
		t.Fatalf("put again: created %v, want still %v", again.Created, plain.Created)
	}
	p := provider(t, c)
	ctx := context.Background()
	for _, want := range []azuretest.VM{member, plain} {
		got, err := p.InstanceView().ByID(ctx, want.VMID, 0)
		if err != nil || !got.Created.Equal(want.Created) {
			t.Errorf("%s: created %v (%v), want %v", want.VMID, got.Created, err, want.Created)
		}
	}
	// A single VM's lookup reads it too.
	got, err := p.ConfirmInstance(ctx, "azure:///subscriptions/"+c.Subscription()+"/resourceGroups/mooring-rg/providers/Microsoft.Compute/virtualMachines/ticketed")
	if err != nil || !got.Created.Equal(made) {
		t.Fatalf("ConfirmInstance: created %v (%v), want %v", got.Created, err, made)
	}
}

// TestConfirmedInstanceCarriesAddresses: a VM confirmed by itself (newer
// than the view's last list, its Node registered first) carries its
// network interfaces' addresses as a listed one does; without them its
// Node was initialized with its Hostname alone.
func TestConfirmedInstanceCarriesAddresses(t *testing.T) {
	c := start(t)
	p := provider(t, c)
	ctx := context.Background()
	c.PutScaleSet("pool", tags())
	for _, vm := range []azuretest.VM{
		c.Put(azuretest.VM{Name: "late", PrivateIP: "127.0.81.230", Tags: tags()}),
		c.Put(azuretest.VM{ScaleSet: "pool", InstanceID: "7", PrivateIP: "127.0.81.231"}),
	} {
		listed, err := p.InstanceView().ByID(ctx, vm.VMID, 0)
		if err != nil {
			t.Fatal(err)
		}
		got, err := p.ConfirmInstance(ctx, listed.ProviderID)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got.Addresses) != fmt.Sprint(listed.Addresses) ||
			!slices.Contains(got.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: vm.PrivateIP}) {
			t.Errorf("%s: confirmed with addresses %v, listed with %v", vm.VMID, got.Addresses, listed.Addresses)
		}
	}
}
