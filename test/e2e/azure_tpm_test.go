package e2e

import (
	"context"
	"testing"
	"time"

	azureagentid "github.com/mooring-dev/mooring/cloud/azure/agentid"
	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/tpm/node"
	"github.com/mooring-dev/mooring/cloud/tpm/tpmtest"
	"github.com/mooring-dev/mooring/internal/evidence"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// azureTPMRequired (TestBootedMachines/azure, whose approver runs with
// --tpm=required): the attested document alone is denied
// TPMEvidenceRequired, for a Standard VM and for the booted Trusted Launch
// VM's own document (what a process that reaches its IMDS but not its vTPM
// gets); the booted VM's document with the quote of another Trusted Launch
// VM's vTPM (its AK certificate names that VM) is denied
// TPMKeyNotOfInstance. booted is the booted machine's VM name.
func azureTPMRequired(t *testing.T, c *testbed.Cluster, az *harness.AzureCloud, booted string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	document := func(vmID string) func(string) []evidence.Block {
		id, err := azureagentid.NewNodeIdentity(nodeid.Config{MetadataURL: az.IMDS(vmID)})
		if err != nil {
			t.Fatal(err)
		}
		return func(binding string) []evidence.Block {
			b, err := id.Evidence(ctx, binding)
			if err != nil {
				t.Fatal(err)
			}
			return []evidence.Block{b}
		}
	}
	bootedID, ok := az.VMID(booted)
	if !ok {
		t.Fatalf("no VM %s", booted)
	}
	az.TrustedLaunch = false
	standard := az.AddVM(e2eCluster, "boot-azure-standard")
	az.TrustedLaunch = true
	other := az.AddVM(e2eCluster, "boot-azure-other")
	sim := tpmtest.Start(t, t.TempDir())
	rw, err := sim.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	if _, err := az.ProvisionVTPM(other.VMID, rw); err != nil {
		t.Fatal(err)
	}
	withOthersQuote := func(binding string) []evidence.Block {
		q, err := node.Quote(rw, (&azureagentid.NodeIdentity{}).TPMKey(), binding, time.Now(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return append(document(bootedID)(binding), q)
	}
	runAttacks(ctx, t, c, []attack{
		{"a Standard VM, its document alone", standard.Name, document(standard.VMID), "TPMEvidenceRequired"},
		{"the Trusted Launch VM's document without its vTPM's quote", booted, document(bootedID), "TPMEvidenceRequired"},
		{"the Trusted Launch VM's document with another VM's vTPM quote", booted, withOthersQuote, "TPMKeyNotOfInstance"},
	})
}
