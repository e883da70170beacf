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
	if got := ProviderID(10000001); got != "hcloud://10000001" {
		t.Errorf("ProviderID = %s", got)
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
