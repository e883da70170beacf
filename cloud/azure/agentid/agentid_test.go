package agentid

import (
	"strings"
	"testing"

	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/nodeid/nodeidtest"
)

// nodeidtest.Check: registered and refusing what every backend refuses;
// its own refusals: another policy, a setting. The configs it takes.
func TestShared(t *testing.T) {
	nodeidtest.Check(t, nodeidtest.Spec[*NodeIdentity]{Name: Name, New: NewNodeIdentity,
		Policy: NodeNamePolicyVMName, Plain: true,
		Refusals: map[string]nodeid.Config{
			"another policy": {NodeNamePolicy: "ComputerName"},
			"a setting":      {Settings: map[string]string{"region": "westeurope"}},
		}})
	for _, cfg := range []nodeid.Config{{}, {MetadataURL: "http://127.0.0.1:1"}} {
		if _, err := NewNodeIdentity(cfg); err != nil {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
}

// TestNonce: 32 hex digits of the binding's digest; non-bindings fail.
func TestNonce(t *testing.T) {
	n, err := Nonce("47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU")
	if err != nil || n != "e3b0c44298fc1c149afbf4c8996fb924" {
		t.Fatalf("%q %v", n, err)
	}
	for _, bad := range []string{"", "short", strings.Repeat("A", 44)} {
		if _, err := Nonce(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestProviderIDs: both forms round-trip; others are refused.
func TestProviderIDs(t *testing.T) {
	for _, s := range []string{
		"azure:///subscriptions/3f2c1a5e-0b7d-4c1e-9a8f-5d6e7f801234/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/Vm1",
		"azure:///subscriptions/3f2c1a5e-0b7d-4c1e-9a8f-5d6e7f801234/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/ss/virtualMachines/3",
	} {
		r, err := ParseProviderID(s)
		if err != nil || r.ProviderID() != s {
			t.Errorf("%s: %+v %v", s, r, err)
		}
	}
	for _, s := range []string{"aws:///z/i-1", "azure://", "azure:///subscriptions/x/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/a",
		"azure:///subscriptions/3f2c1a5e-0b7d-4c1e-9a8f-5d6e7f801234/resourceGroups/rg/providers/Microsoft.Network/virtualMachines/a"} {
		if _, err := ParseProviderID(s); err == nil {
			t.Errorf("%s: accepted", s)
		}
	}
}

// TestNodeName: a VM's name or a scale-set VM's computer name, lower case;
// none when that is no Node name.
func TestNodeName(t *testing.T) {
	vm := Resource{Subscription: "s", ResourceGroup: "g", Name: "Node-1"}
	member := Resource{Subscription: "s", ResourceGroup: "g", ScaleSet: "pool", InstanceID: "3"}
	for _, c := range []struct {
		r        Resource
		computer string
		want     string
	}{
		{vm, "", "node-1"}, {vm, "ignored", "node-1"}, {member, "Pool000003", "pool000003"}, {member, "", ""},
		{Resource{Name: "under_score"}, "", ""}, {member, "under_score", ""}, {Resource{Name: "ends."}, "", ""},
	} {
		if got := NodeName(c.r, c.computer); got != c.want {
			t.Errorf("NodeName(%+v, %q) = %q, want %q", c.r, c.computer, got, c.want)
		}
	}
}
