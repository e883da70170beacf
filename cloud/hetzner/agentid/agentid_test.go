package agentid

import (
	"testing"

	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/nodeid/nodeidtest"
)

// nodeidtest.Check: registered, Node names, providerIDs and refusals as
// every backend. Its own: the one policy ServerName, the one setting a
// network id, and the metadata URL plain http.
func TestShared(t *testing.T) {
	nodeidtest.Check(t, nodeidtest.Spec[*NodeIdentity]{Name: Name, NodeName: NodeName, New: NewNodeIdentity,
		ProviderIDs: map[string]string{ProviderID(10000001): "hcloud://10000001"}, Policy: PolicyServerName,
		Refusals: map[string]nodeid.Config{
			"another policy":          {NodeNamePolicy: "ServerID"},
			"an unknown setting":      {Settings: map[string]string{"x": "y"}},
			"a network that is no id": {Settings: map[string]string{SettingNetwork: "net-1"}},
			"https":                   {MetadataURL: "https://169.254.169.254/hetzner/v1/metadata"},
		}})
}
