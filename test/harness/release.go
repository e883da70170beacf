package harness

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// BuildRelease makes a release as `make release` does (hack/release.sh)
// into a temporary directory, of the given commands for this machine's
// platform only, and returns it (BootOptions.Release).
func BuildRelease(t testing.TB, commands ...string) *Release {
	t.Helper()
	root := RepoRoot()
	dir := filepath.Join(t.TempDir(), "release")
	start := time.Now()
	cmd := exec.Command(filepath.Join(root, "hack", "release.sh"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "RELEASE_DIR="+dir, "RELEASE_PLATFORMS=linux/"+runtime.GOARCH,
		"RELEASE_COMMANDS="+strings.Join(commands, " "))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/release.sh: %v\n%s", err, out)
	}
	// The version, from the agent's name (hack/version.sh, run by the
	// script, may say -dirty or not as the tree changes).
	agents, err := filepath.Glob(filepath.Join(dir, "mooring-agent_v*_linux_"+runtime.GOARCH))
	if err != nil || len(agents) != 1 {
		t.Fatalf("the release in %s: agents %v (%v), want one", dir, agents, err)
	}
	version := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(agents[0]), "mooring-agent_"), "_linux_"+runtime.GOARCH)
	t.Logf("made the release %s of %v for linux/%s in %s", version, commands, runtime.GOARCH, time.Since(start).Round(100*time.Millisecond))
	return &Release{Dir: dir, Version: version}
}
