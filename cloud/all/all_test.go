package all_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/all/agentid"
	"github.com/mooring-dev/mooring/cloud/nodeid"

	_ "github.com/mooring-dev/mooring/cloud/all"
)

// TestEveryBackendWhole: cloud/all registers a provider, and a node
// identity under the same name, for exactly the backends agentid.Names
// lists, so mooring-agent (which links only cloud/all/agentid, whose own
// test checks its imports against the same list) knows every cloud the
// control plane does.
func TestEveryBackendWhole(t *testing.T) {
	names := agentid.Names()
	if all := cloud.Backends(); !slices.Equal(all, names) {
		t.Errorf("backends registered %v; agentid.Names() %v", all, names)
	}
	if nodes := nodeid.Backends(); !slices.Equal(nodes, names) {
		t.Errorf("node identities registered %v; agentid.Names() %v", nodes, names)
	}
	for _, name := range names {
		// Without a cloud-config every provider refuses to build; a name
		// without a provider is not supported at all.
		_, err := cloud.NewProvider(name, "")
		if err == nil || strings.Contains(err.Error(), "not supported here") {
			t.Errorf("%s: %v; want its provider's refusal of no cloud-config", name, err)
		}
	}
}

// TestEveryBackendDirectoryListed: a directory under cloud/ holding a
// backend (its registration, backend.go) is in agentid.Names, and every
// listed name has a directory with backend.go and its node half, agentid/.
func TestEveryBackendDirectoryListed(t *testing.T) {
	entries, err := os.ReadDir("..")
	if err != nil {
		t.Fatal(err)
	}
	names := agentid.Names()
	var dirs []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		_, errBackend := os.Stat(filepath.Join("..", e.Name(), "backend.go"))
		_, errAgent := os.Stat(filepath.Join("..", e.Name(), "agentid"))
		listed := slices.Contains(names, e.Name())
		switch {
		case errBackend == nil && !listed:
			t.Errorf("cloud/%s holds a backend but is not in agentid.Names()", e.Name())
		case listed && (errBackend != nil || errAgent != nil):
			t.Errorf("cloud/%s is in agentid.Names() but lacks backend.go or agentid/", e.Name())
		}
		dirs = append(dirs, e.Name())
	}
	for _, name := range names {
		if !slices.Contains(dirs, name) {
			t.Errorf("agentid.Names() lists %s, which has no directory cloud/%s", name, name)
		}
	}
}
