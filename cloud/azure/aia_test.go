package azure_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/azure"
	"github.com/mooring-dev/mooring/cloud/azure/azuretest"
	"github.com/mooring-dev/mooring/cloud/nodeid"
)

// join has the VM's agent ask its IMDS for a document bound to a new key
// and the provider's verifier check it.
func join(t *testing.T, c *azuretest.Cloud, p *azure.Cloud, vm azuretest.VM) (cloud.Attestation, error) {
	t.Helper()
	data, bnd := imdsEvidence(t, c, vm)
	return p.EvidenceVerifiers()[0].Verify(context.Background(), data, bnd, time.Now())
}

// imdsEvidence is what the VM's agent files: an attested document from
// its IMDS bound to a new key, and that key's binding.
func imdsEvidence(t *testing.T, c *azuretest.Cloud, vm azuretest.VM) (data []byte, bnd string) {
	t.Helper()
	id, err := nodeid.New("azure", nodeid.Config{MetadataURL: c.IMDS(vm.VMID)})
	if err != nil {
		t.Fatal(err)
	}
	bnd = binding(t)
	ev, err := id.Evidence(context.Background(), bnd)
	if err != nil {
		t.Fatal(err)
	}
	return ev.Data, bnd
}

// TestJoinsSurviveIntermediateRotation: the approver is configured with
// the root and the AIA allow-list only; joins before and after the cloud
// rotates its issuing CA mid-run (new CA, new AIA URL in the new signer)
// verify with no change of config, each issuing CA fetched once (cached).
func TestJoinsSurviveIntermediateRotation(t *testing.T) {
	c := start(t)
	p := provider(t, c)
	a := c.Put(azuretest.VM{Name: "before", PrivateIP: "127.0.81.230", Tags: tags()})
	b := c.Put(azuretest.VM{Name: "after", PrivateIP: "127.0.81.231", Tags: tags()})
	for i := 0; i < 2; i++ {
		if att, err := join(t, c, p, a); err != nil || att.InstanceID != a.VMID {
			t.Fatalf("join before the rotation: %+v %v", att, err)
		}
	}
	if c.Calls("AIA") != 1 {
		t.Fatalf("AIA downloads %d, want 1 (cached)", c.Calls("AIA"))
	}
	old, _ := c.Current()
	fresh, err := c.RotateIntermediate()
	if err != nil {
		t.Fatal(err)
	}
	if fresh.URL == old.URL || fresh.Cert.Equal(old.Cert) {
		t.Fatal("the rotation kept the CA")
	}
	if att, err := join(t, c, p, b); err != nil || att.InstanceID != b.VMID {
		t.Fatalf("join after the rotation: %+v %v", att, err)
	}
	if c.Calls("AIA") != 2 {
		t.Fatalf("AIA downloads %d, want 2", c.Calls("AIA"))
	}
}

// TestPinnedIntermediatesStillWork: the old config (roots and a pinned
// intermediates file, AIA off with "none") still verifies, and a rotated
// signer is then refused rather than fetched: the pinned file is why joins
// stopped before.
func TestPinnedIntermediatesStillWork(t *testing.T) {
	c := start(t)
	roots, inter, err := c.WritePKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := providerWith(t, c, azure.Config{AttestationRootsFile: roots, AttestationIntermediatesFile: inter, AttestationAIAAllowedHosts: []string{"none"}})
	vm := c.Put(azuretest.VM{Name: "pinned", PrivateIP: "127.0.81.232", Tags: tags()})
	if _, err := join(t, c, p, vm); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RotateIntermediate(); err != nil {
		t.Fatal(err)
	}
	_, err = join(t, c, p, vm)
	if r, ok := cloud.IsRejection(err); !ok || r.Reason != cloud.RejectIssuer {
		t.Fatalf("rotated signer with a pinned file and no AIA: %v", err)
	}
	if c.Calls("AIA") != 0 {
		t.Fatalf("AIA downloads %d with AIA off", c.Calls("AIA"))
	}
}

// TestAIAIssuerRejections: with the default allow-list (Microsoft's and
// DigiCert's hosts) a signer whose CA Issuers URL is elsewhere is
// rejected and nothing is fetched (without the allow-list check the
// verifier fetched it and approved); an issuer fetched from an allowed
// host that chains to a root the approver does not trust is rejected.
func TestAIAIssuerRejections(t *testing.T) {
	trusted := start(t)
	roots, err := trusted.WriteRoots(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		foreign   bool // the VM's cloud has a root of its own
		allowList bool // the VM's cloud's host is allowed
		fetches   int
	}{
		{"AIA URL off the allow-list", false, false, 0},
		{"issuer under another root", true, true, 1},
	} {
		c := trusted
		if tc.foreign {
			c = start(t)
		}
		att := azure.Config{AttestationRootsFile: roots}
		if tc.allowList {
			att.AttestationAIAAllowedHosts = []string{c.AIAHost()}
		}
		before := c.Calls("AIA")
		vm := c.Put(azuretest.VM{Name: "n", PrivateIP: "127.0.81.233", Tags: tags()})
		_, err = join(t, c, providerWith(t, c, att), vm)
		if r, ok := cloud.IsRejection(err); !ok || r.Reason != cloud.RejectIssuer {
			t.Errorf("%s: want %s, got %v", tc.name, cloud.RejectIssuer, err)
		}
		if got := c.Calls("AIA") - before; got != tc.fetches {
			t.Errorf("%s: %d AIA downloads, want %d", tc.name, got, tc.fetches)
		}
	}
}

// TestAIAIssuerNotThereIsAVerdict: a signer whose allowed CA Issuers URL
// answers 404 can never verify: it is denied, not retried for ever
// (before, every attempt was a transient error and the CSR held its place
// at the approver's gate).
func TestAIAIssuerNotThereIsAVerdict(t *testing.T) {
	c := start(t)
	p := provider(t, c)
	ca, err := c.RotateIntermediate()
	if err != nil {
		t.Fatal(err)
	}
	c.Unpublish(ca)
	vm := c.Put(azuretest.VM{Name: "n", PrivateIP: "127.0.81.236", Tags: tags()})
	_, err = join(t, c, p, vm)
	if r, ok := cloud.IsRejection(err); !ok || r.Reason != cloud.RejectIssuer {
		t.Fatalf("issuer not at its URL: want %s, got %v", cloud.RejectIssuer, err)
	}
}

// TestAIADownloadFailureIsTransient: an allowed issuer that cannot be
// downloaded is an error to retry on, never a verdict or an approval;
// once it can, the same document verifies.
func TestAIADownloadFailureIsTransient(t *testing.T) {
	c := start(t)
	p := provider(t, c)
	vm := c.Put(azuretest.VM{Name: "n", PrivateIP: "127.0.81.235", Tags: tags()})
	data, bnd := imdsEvidence(t, c, vm)
	c.FailAIA(true)
	_, err := p.EvidenceVerifiers()[0].Verify(context.Background(), data, bnd, time.Now())
	if _, ok := cloud.IsRejection(err); err == nil || ok {
		t.Fatalf("download failing: want a transient error, got %v", err)
	}
	c.FailAIA(false)
	if _, err := p.EvidenceVerifiers()[0].Verify(context.Background(), data, bnd, time.Now()); err != nil {
		t.Fatalf("download back: %v", err)
	}
}

// TestAIAConfig: the default allow-list is Microsoft's and DigiCert's;
// bad entries are refused at start.
func TestAIAConfig(t *testing.T) {
	good := "subscriptionID: 3f2c1a5e-0b7d-4c1e-9a8f-5d6e7f801234\nresourceGroup: rg\nclusterID: c1\n"
	cfg, err := azure.ParseConfig(strings.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.AttestationAIAAllowedHosts) != len(azure.DefaultAIAAllowedHosts) || cfg.AttestationAIACacheTTL.Duration != azure.DefaultAIACacheTTL {
		t.Fatalf("defaults: %+v", cfg)
	}
	for _, bad := range []string{"attestationAIAAllowedHosts: [\"http://www.microsoft.com\"]\n", "attestationAIAAllowedHosts: [\"*.microsoft.com\"]\n",
		"attestationAIAAllowedHosts: [\"/pkiops\"]\n", "attestationAIACacheTTL: -1s\n"} {
		if _, err := azure.ParseConfig(strings.NewReader(good + bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
