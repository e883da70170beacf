package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAgentBuildTagsAreTheShippedOnes: the tests build mooring-agent with
// the tags make build and the release build it with.
func TestAgentBuildTagsAreTheShippedOnes(t *testing.T) {
	for file, want := range map[string][]string{
		"Makefile": {
			"AGENT_PKG = github.com/mooring-dev/mooring/" + AgentPkg + "\n",
			"AGENT_TAGS := " + AgentBuildTags + "\n",
			"-tags '$(AGENT_TAGS)' -ldflags '$(LDFLAGS)' -o $(BIN)/ $(AGENT_PKG)\n",
		},
		"hack/release.sh": {
			"\nagent_tags=" + AgentBuildTags + "\n",
			"mooring-agent=./" + AgentPkg + "\n",
			`-tags "$agent_tags" -ldflags "$ldflags" -o "$work/bin/${os}_$arch/" "$agent"` + "\n",
		},
	} {
		data, err := os.ReadFile(filepath.Join(RepoRoot(), file))
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !strings.Contains(string(data), w) {
				t.Errorf("%s has no %q", file, w)
			}
		}
	}
}
