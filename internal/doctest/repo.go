package doctest

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TaggedRepo makes dst a git repository with one commit, tagged tag, of the
// files under root/dir that keep accepts (paths relative to root, kept
// so in the repository), and returns dst's absolute path. A doc's
// remote URL of the project at a release's tag
// (https://github.com/mooring-dev/mooring//deploy/overlays/aws?ref=v1.2.0)
// then works with "file://"+dst in place of the host and repository, the
// rest as written: kustomize fetches it with git as it would the real one.
func TaggedRepo(t testing.TB, root, dir, dst, tag string, keep func(rel string) bool) string {
	t.Helper()
	err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || !keep(rel) {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(rel)), 0o700); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "."},
		{"-c", "user.name=test", "-c", "user.email=test@example.invalid", "commit", "-q", "-m", "release " + tag}, {"tag", tag}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dst
		// No user's or system's git configuration.
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	abs, err := filepath.Abs(dst)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}
