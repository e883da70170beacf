package agentid

import (
	"testing"

	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/nodeid/nodeidtest"
)

// TestDefaultMetadataURL: with no metadataURL the agent reads the Metadata
// service's own address; a configured one keeps only its host.
func TestDefaultMetadataURL(t *testing.T) {
	for cfg, want := range map[string]string{
		"":                       "http://169.254.169.254",
		"http://127.0.0.1:8080/": "http://127.0.0.1:8080",
	} {
		id, err := NewNodeIdentity(nodeid.Config{MetadataURL: cfg})
		if err != nil || id.md.Base() != want {
			t.Errorf("%q: %+v %v; want %s", cfg, id, err, want)
		}
	}
}

func TestNames(t *testing.T) {
	if got := ProviderID(42); got != "linode://42" {
		t.Errorf("ProviderID = %s", got)
	}
}

// nodeidtest.Check: registered, Node names and refusals as every backend.
// Its own refusals: the policy is Label, there are no settings, and the
// metadata URL is plain http to a host without a path.
func TestShared(t *testing.T) {
	nodeidtest.Check(t, nodeidtest.Spec[*NodeIdentity]{Name: Name, NodeName: NodeName, Names: map[string]string{"a--b": "a--b"}, New: NewNodeIdentity,
		Refusals: map[string]nodeid.Config{
			"another policy": {NodeNamePolicy: "LinodeID"},
			"a setting":      {Settings: map[string]string{"x": "y"}},
			"https":          {MetadataURL: "https://169.254.169.254"},
			"a path":         {MetadataURL: "http://169.254.169.254/v1/instance"},
		}})
}
