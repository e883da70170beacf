package agentid

import (
	"testing"

	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/nodeid/nodeidtest"
)

func TestNames(t *testing.T) {
	const id = "9e5476bd-a4ec-4653-93d6-72c93aa682ba"
	for pid, want := range map[string]string{"openstack:///" + id: "", "openstack://RegionOne/" + id: "RegionOne"} {
		region, got, err := ParseProviderID(pid)
		if err != nil || got != id || region != want {
			t.Errorf("ParseProviderID(%q) = %q %q %v", pid, region, got, err)
		}
	}
	for _, bad := range []string{"", id, "openstack://" + id, "openstack:///" + id + "/x", "openstack:///9E5476BD-A4EC-4653-93D6-72C93AA682BA",
		"openstack:///not-a-uuid", "openstack:///", "aws:///us-east-1a/i-1", "openstack://Region One/" + id, "openstack:///{" + id + "}"} {
		if _, _, err := ParseProviderID(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// nodeidtest.Check: registered, Node names, providerIDs (global and
// regional) and refusals as every backend. Its own: the one policy
// ServerName, its settings (a region), and the metadata URL plain http to
// a host without a path.
func TestShared(t *testing.T) {
	const id = "9e5476bd-a4ec-4653-93d6-72c93aa682ba"
	nodeidtest.Check(t, nodeidtest.Spec[*NodeIdentity]{Name: Name, NodeName: NodeName, New: NewNodeIdentity,
		ProviderIDs: map[string]string{ProviderID("", id): "openstack:///" + id, ProviderID("RegionOne", id): "openstack://RegionOne/" + id},
		Policy:      PolicyServerName, HostOnly: true,
		Refusals: map[string]nodeid.Config{
			"another policy":        {NodeNamePolicy: "ServerID"},
			"an unknown setting":    {Settings: map[string]string{"x": "y"}},
			"a region with a slash": {Settings: map[string]string{SettingRegion: "a/b"}},
			"an empty region":       {Settings: map[string]string{SettingRegion: ""}},
			"the openstack path":    {MetadataURL: "http://169.254.169.254/openstack"},
		}})
}
