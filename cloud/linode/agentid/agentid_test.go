package agentid

import (
	"testing"

	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/nodeid/nodeidtest"
)

func TestNames(t *testing.T) {
	if got := ProviderID(42); got != "linode://42" {
		t.Errorf("ProviderID = %s", got)
	}
}

// nodeidtest.Check: registered, Node names and refusals as every backend,
// and the metadata service's own address unless one is configured.
// Its own refusals: the policy is Label, there are no settings, and the
// metadata URL is plain http to a host without a path.
func TestShared(t *testing.T) {
	nodeidtest.Check(t, nodeidtest.Spec[*NodeIdentity]{Name: Name, NodeName: NodeName, Names: map[string]string{"a--b": "a--b"}, New: NewNodeIdentity,
		Reads: func(id *NodeIdentity) string { return id.md.Base() }, Default: "http://169.254.169.254",
		Refusals: map[string]nodeid.Config{
			"another policy": {NodeNamePolicy: "LinodeID"},
			"a setting":      {Settings: map[string]string{"x": "y"}},
			"https":          {MetadataURL: "https://169.254.169.254"},
			"a path":         {MetadataURL: "http://169.254.169.254/v1/instance"},
		}})
}
