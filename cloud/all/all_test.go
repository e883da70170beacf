package all_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/nodeid"

	_ "github.com/mooring-dev/mooring/cloud/all"
)

// TestEveryBackendWhole: each backend cloud/all registers has a provider
// and a node identity under the same name, so mooring-agent (which links
// only cloud/all/agentid) knows every cloud the control plane does.
func TestEveryBackendWhole(t *testing.T) {
	all, nodes := cloud.Backends(), nodeid.Backends()
	if !slices.Equal(all, nodes) {
		t.Fatalf("backends %v, node identities %v", all, nodes)
	}
	for _, name := range all {
		// Without a cloud-config every provider refuses to build; a name
		// without a provider is not supported at all.
		_, err := cloud.NewProvider(name, "")
		if err == nil || strings.Contains(err.Error(), "not supported here") {
			t.Errorf("%s: %v; want its provider's refusal of no cloud-config", name, err)
		}
	}
	for _, want := range []string{"aws", "azure", "digitalocean", "gce", "hetzner", "linode", "local", "openstack", "vsphere"} {
		if !slices.Contains(nodes, want) {
			t.Errorf("%s is not registered: %v", want, nodes)
		}
	}
}
