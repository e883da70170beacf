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

// TestDefaultMetadataURL: with no metadataURL the agent reads the droplet
// metadata service's own address; a configured one keeps only its host.
func TestDefaultMetadataURL(t *testing.T) {
	for cfg, want := range map[string]string{
		"":                       "http://169.254.169.254/metadata/v1.json",
		"http://127.0.0.1:8080/": "http://127.0.0.1:8080/metadata/v1.json",
	} {
		id, err := NewNodeIdentity(nodeid.Config{MetadataURL: cfg})
		if err != nil || id.md.Base()+metadataPath != want {
			t.Errorf("%q: %+v %v; want %s", cfg, id, err, want)
		}
	}
}

func TestNames(t *testing.T) {
	if got := ProviderID(42); got != "digitalocean://42" {
		t.Errorf("ProviderID = %s", got)
	}
	for name, want := range map[string]string{"Node-7": "node-7", "under_score": "", "": ""} {
		if got := NodeName(name); got != want {
			t.Errorf("NodeName(%q) = %q, want %q", name, got, want)
		}
	}
}
