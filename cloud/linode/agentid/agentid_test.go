package agentid

import (
	"testing"

	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/nodeid/nodeidtest"
)

// nodeidtest.Check: registered, Node names, providerIDs and refusals as
// every backend, and the metadata service's own address unless one is
// configured. Its own: the one policy Label, no settings, and the
// metadata URL plain http to a host without a path.
func TestShared(t *testing.T) {
	nodeidtest.Check(t, nodeidtest.Spec[*NodeIdentity]{Name: Name, NodeName: NodeName, Names: map[string]string{"a--b": "a--b"}, New: NewNodeIdentity,
		ProviderIDs: map[string]string{ProviderID(42): "linode://42"},
		Reads:       func(id *NodeIdentity) string { return id.md.Base() }, Default: "http://169.254.169.254",
		Policy: PolicyLabel, Plain: true, HostOnly: true,
		Refusals: map[string]nodeid.Config{
			"another policy":    {NodeNamePolicy: "LinodeID"},
			"the instance path": {MetadataURL: "http://169.254.169.254/v1/instance"},
		}})
}
