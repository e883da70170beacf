package agentid

import (
	"testing"

	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/nodeid/nodeidtest"
)

func TestNames(t *testing.T) {
	if got := ProviderID(10000001); got != "hcloud://10000001" {
		t.Errorf("ProviderID = %s", got)
	}
}

// nodeidtest.Check: registered, Node names and refusals as every backend.
// Its own refusals: the policy is ServerName, the one setting a network id,
// and the metadata URL plain http.
func TestShared(t *testing.T) {
	nodeidtest.Check(t, nodeidtest.Spec[*NodeIdentity]{Name: Name, NodeName: NodeName, New: NewNodeIdentity,
		Refusals: map[string]nodeid.Config{
			"another policy":          {NodeNamePolicy: "ServerID"},
			"an unknown setting":      {Settings: map[string]string{"x": "y"}},
			"a network that is no id": {Settings: map[string]string{SettingNetwork: "net-1"}},
			"https":                   {MetadataURL: "https://169.254.169.254/hetzner/v1/metadata"},
		}})
}
