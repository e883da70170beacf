package agentid

import (
	"testing"

	"github.com/mooring-dev/mooring/cloud/nodeid"
)

func TestRegistered(t *testing.T) {
	if _, err := nodeid.New(Name, nodeid.Config{}); err != nil {
		t.Fatalf("%s: %v (registered: %v)", Name, err, nodeid.Backends())
	}
}

func TestNames(t *testing.T) {
	const id = "9e5476bd-a4ec-4653-93d6-72c93aa682ba"
	if got := ProviderID("", id); got != "openstack:///"+id {
		t.Errorf("ProviderID = %s", got)
	}
	if got := ProviderID("RegionOne", id); got != "openstack://RegionOne/"+id {
		t.Errorf("regional ProviderID = %s", got)
	}
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
	for name, want := range map[string]string{
		"Node-1": "node-1", "web.example.com": "web.example.com",
		"under_score": "", "": "", "-dash": "", "a..b": "",
	} {
		if got := NodeName(name); got != want {
			t.Errorf("NodeName(%q) = %q, want %q", name, got, want)
		}
	}
}
