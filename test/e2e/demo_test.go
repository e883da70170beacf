package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/test/harness"
)

// TestDemo runs `make demo`'s program non-interactively: every node must
// reach Ready, traffic must pass the load balancer, the stolen-token join
// must be denied, and the demo must stop everything it started.
func TestDemo(t *testing.T) {
	bin, err := harness.Build("hack/demo", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--non-interactive", "--skip-deps", "--state-dir="+filepath.Join(t.TempDir(), "demo"))
	cmd.Dir = harness.RepoRoot()
	out, err := cmd.CombinedOutput()
	t.Logf("demo output:\n%s", out)
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
	text := string(out)
	for _, node := range []string{"node-1", "node-2", "node-3"} {
		ready := false
		for _, line := range strings.Split(text, "\n") {
			f := strings.Fields(line)
			if len(f) > 0 && f[0] == node && f[len(f)-1] == "Ready" && strings.Count(line, "approved by mooring") == 2 {
				ready = true
			}
		}
		if !ready {
			t.Errorf("%s never showed Ready with both certificates approved by mooring", node)
		}
	}
	for _, want := range []string{"3 nodes Ready", "-> hello from node-1", "denied: NoEvidence", "all processes stopped"} {
		if !strings.Contains(text, want) {
			t.Errorf("the demo did not show %q", want)
		}
	}
	// The samples of the README and the quick start show the denial as the
	// demo prints it (the CSR's name aside): they drifted once.
	_, denial, ok := strings.Cut(text, " denied: ")
	denial, _, _ = strings.Cut(denial, "\n")
	if !ok || denial == "" {
		t.Fatal("the demo printed no denial")
	}
	for _, doc := range []string{"README.md", "docs/quickstart.md"} {
		data, err := os.ReadFile(filepath.Join(harness.RepoRoot(), doc))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), " denied: "+denial+"\n") {
			t.Errorf("%s's sample does not show the denial as the demo prints it: %q", doc, denial)
		}
	}
}
