package agentid

import (
	"testing"

	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/nodeid/nodeidtest"
)

func TestRegistered(t *testing.T) { nodeidtest.Registered(t, Name) }

func TestNames(t *testing.T) {
	if got := ProviderID(10000001); got != "hcloud://10000001" {
		t.Errorf("ProviderID = %s", got)
	}
	nodeidtest.NodeNames(t, NodeName, nil)
}

// The policy is ServerName, the one setting a network id, and the
// metadata URL plain http.
func TestRefusesBadConfig(t *testing.T) {
	nodeidtest.Refuses(t, NewNodeIdentity, map[string]nodeid.Config{
		"another policy":          {NodeNamePolicy: "ServerID"},
		"an unknown setting":      {Settings: map[string]string{"x": "y"}},
		"a network that is no id": {Settings: map[string]string{SettingNetwork: "net-1"}},
		"https":                   {MetadataURL: "https://169.254.169.254/hetzner/v1/metadata"},
	})
}
