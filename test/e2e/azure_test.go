package e2e

import (
	"bytes"
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	azureagentid "github.com/mooring-dev/mooring/cloud/azure/agentid"
	"github.com/mooring-dev/mooring/cloud/azure/azuretest"
	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/internal/evidence"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// azureNodesJoin (TestSignedClouds/Azure): mooring on Azure, against the Azure-compatible
// endpoint (cloud/azure/azuretest: ARM lists with nextLink pages, per-VM
// IMDS with attested documents signed under a test root through an issuing
// CA the approver fetches from its AIA URL, a managed identity token
// endpoint) with the real Azure SDK and azidentity in the
// binaries. Three VMs join the shared bed: each mooring-agent (cloud: azure)
// reads IMDS and sends an attested document whose nonce is derived from
// its CSR key; the standalone mooring-csr-approver (--cloud-provider=azure)
// verifies it and the ARM record; mooring-ccm initializes the Nodes with
// azure:/// providerIDs; serving certificates are approved. Then
// Azure-specific attacks are denied by the real approver.
func azureNodesJoin(t *testing.T, bed *signedBed) {
	j := joinThreeWith(t, bed, startAzureCloud, "VMs", "vm", azureLBOptions(azureJoinOptions())) // azure_routes_test.go, azure_lb_test.go
	c, az, ctx, start, fleet := j.C, j.Cloud, j.Ctx, j.Start, j.Fleet

	prefix := "azure:///subscriptions/" + az.Subscription() + "/resourceGroups/mooring-rg/providers/Microsoft.Compute/virtualMachines/"
	for _, m := range fleet.Machines {
		name := m.Name
		node := waitInitialized(ctx, t, c, name)
		if node.Spec.ProviderID != prefix+name || node.Labels[corev1.LabelTopologyZone] != az.Location()+"-1" ||
			node.Labels[corev1.LabelTopologyRegion] != az.Location() || node.Labels[corev1.LabelInstanceTypeStable] != "Standard_D2s_v5" {
			t.Fatalf("%s: providerID %q, labels %v", name, node.Spec.ProviderID, node.Labels)
		}
		servingApprovedByMooring(ctx, t, c, name)
	}
	t.Logf("3 nodes Ready, initialized with azure:/// providerIDs, serving certificates approved, %v after the agents started",
		time.Since(start).Round(time.Millisecond))
	if n := az.Calls("AttestedDocument"); n < 3 {
		t.Errorf("IMDS signed %d attested documents, want at least one per join", n)
	}
	t.Logf("cloud calls: ListVMs %d, ListVMStatuses %d, ListNICs %d, Token %d, AttestedDocument %d",
		az.Calls("ListVMs"), az.Calls("ListVMStatuses"), az.Calls("ListNICs"), az.Calls("Token"), az.Calls("AttestedDocument"))

	var names []string
	for _, m := range fleet.Machines {
		names = append(names, m.Name)
	}
	azureRoutes(ctx, t, c, az, names) // azure_routes_test.go

	// Service load balancers (azure_lb_test.go).
	testCloudLB(ctx, t, c, names, azureLB(t, az, c))

	azureAttacks(ctx, t, c, az, fleet.Machines[0].Name)
}

// azureAttacks joins through the real approver with attested documents an
// attacker can make or obtain: each CSR is denied with its reason, and a
// good one passes. joined is a machine's node name.
func azureAttacks(ctx context.Context, t *testing.T, c *testbed.Cluster, az *harness.AzureCloud, joined string) {
	t.Helper()
	mine := az.AddVM(e2eCluster, "attacker")
	id, err := azureagentid.NewNodeIdentity(nodeid.Config{MetadataURL: az.IMDS(mine.VMID)})
	if err != nil {
		t.Fatal(err)
	}
	imds := func(binding string) []evidence.Block {
		b, err := id.Evidence(ctx, binding)
		if err != nil {
			t.Fatal(err)
		}
		return []evidence.Block{b}
	}
	nonce := func(binding string) string {
		n, err := azureagentid.Nonce(binding)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	signed := func(s *azuretest.Signer, content []byte) []evidence.Block {
		der, err := s.Sign(content)
		if err != nil {
			t.Fatal(err)
		}
		return []evidence.Block{{Type: azureagentid.EvidenceType, Data: der}}
	}
	foreignRoot, err := azuretest.NewRootCA("a CA that is not Azure's")
	if err != nil {
		t.Fatal(err)
	}
	outside, err := foreignRoot.NewSigner([]string{azuretest.SignerName}, time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	current, _ := az.Current()
	unnamed, err := current.NewSigner([]string{"metadata.example.com"}, time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	// An issuing CA under the right root, published on a host off the
	// approver's AIA allow-list: never fetched, so never chained.
	elsewhere, err := az.Root.NewIntermediate("an issuing CA published elsewhere")
	if err != nil {
		t.Fatal(err)
	}
	elsewhere.URL = "http://198.51.100.7/pki/elsewhere.crt"
	offList, err := elsewhere.NewSigner([]string{azuretest.SignerName}, time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var replayed []evidence.Block
	runAttacks(ctx, t, c, []attack{
		{"signed by a certificate outside the Azure roots", "attacker", func(b string) []evidence.Block {
			return signed(outside, az.Document(mine, nonce(b), time.Now()))
		}, "EvidenceWrongIssuer"},
		{"signed by a certificate without the Azure name", "attacker", func(b string) []evidence.Block {
			return signed(unnamed, az.Document(mine, nonce(b), time.Now()))
		}, "EvidenceWrongIssuer"},
		{"content substituted beside the signature", "attacker", func(b string) []evidence.Block {
			// IMDS's document for the key, its embedded content rewritten
			// in place (same length) to name another VM.
			ev := imds(b)
			victim := az.AddVM(e2eCluster, "victim")
			ev[0].Data = bytes.Replace(ev[0].Data, []byte(mine.VMID), []byte(victim.VMID), 1)
			return ev
		}, "EvidenceSignatureInvalid"},
		{"another nonce", "attacker", func(string) []evidence.Block {
			return imds("47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU")
		}, "EvidenceNotBoundToKey"},
		{"signed under an issuing CA whose AIA URL is off the allow-list", "attacker", func(b string) []evidence.Block {
			return signed(offList, az.DocumentAt(mine, nonce(b), time.Now()))
		}, "EvidenceWrongIssuer"},
		{"another subscription", "attacker", func(b string) []evidence.Block {
			_, s := az.Current()
			return signed(s, az.DocumentFor(mine.VMID, "11111111-2222-4333-8444-555555555555", nonce(b), time.Now().Add(-6*time.Hour), time.Now()))
		}, "EvidenceWrongIssuer"},
		{"another VM's node name", joined, imds, "NodeNameMismatch"},
		{"good evidence", "attacker", func(b string) []evidence.Block {
			replayed = imds(b)
			return replayed
		}, ""},
		{"the approved document copied onto another key", "attacker", func(string) []evidence.Block { return replayed }, "EvidenceNotBoundToKey"},
		{"good evidence after Azure rotated its issuing CA mid-run", "attacker", func(b string) []evidence.Block {
			if _, err := az.RotateIntermediate(); err != nil {
				t.Fatal(err)
			}
			return imds(b)
		}, ""},
	})
	if n := az.Calls("AIA"); n < 2 {
		t.Errorf("the approver fetched %d issuing CAs, want both (before and after the rotation)", n)
	}
}
