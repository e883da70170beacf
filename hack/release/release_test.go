package release

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// repoRoot is the checkout this test belongs to.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// run runs a command in dir with extra environment and returns its stdout;
// it fails the test on an error.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v in %s: %v\n%s", name, args, dir, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// The version scheme of hack/version.sh in a scratch repository, state by
// state; every version must parse as a semantic version, as
// k8s.io/component-base needs.
func TestVersionScheme(t *testing.T) {
	script := filepath.Join(repoRoot(t), "hack", "version.sh")
	dir := t.TempDir()
	gitEnv := []string{"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com",
		"GIT_AUTHOR_DATE=2026-01-02T03:04:05Z", "GIT_COMMITTER_DATE=2026-01-02T03:04:05Z"}
	git := func(args ...string) string { return run(t, dir, gitEnv, "git", args...) }
	file := filepath.Join(dir, "f")
	commit := func(content string) {
		if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		git("add", "f")
		git("commit", "-q", "-m", content)
	}
	check := func(env []string, want string) {
		t.Helper()
		got := run(t, dir, env, script)
		if got != want {
			t.Errorf("version %q, want %q", got, want)
		}
		if _, err := utilversion.ParseSemantic(got); err != nil {
			t.Errorf("version %q is not semantic: %v", got, err)
		}
	}
	short := func() string { return git("rev-parse", "--short=12", "HEAD") }

	git("init", "-q")
	commit("one")
	commit("two")
	check(nil, "v0.0.0-2-g"+short())
	if err := os.WriteFile(file, []byte("edited"), 0o644); err != nil {
		t.Fatal(err)
	}
	check(nil, "v0.0.0-2-g"+short()+"-dirty")
	git("checkout", "-q", "f")
	git("tag", "release-1") // not a version: ignored
	check(nil, "v0.0.0-2-g"+short())
	git("tag", "v1.2.3")
	check(nil, "v1.2.3")
	commit("three")
	check(nil, "v1.2.3-1-g"+short())
	git("tag", "-a", "-m", "rc", "v1.3.0-rc.1")
	check(nil, "v1.3.0-rc.1")
	check([]string{"VERSION=v2.0.0"}, "v2.0.0")

	// hack/ldflags.sh: the commit, the date from the commit or
	// SOURCE_DATE_EPOCH, never the clock.
	ldflags := filepath.Join(repoRoot(t), "hack", "ldflags.sh")
	head := git("rev-parse", "HEAD")
	for _, c := range []struct {
		env  []string
		want []string
	}{
		{nil, []string{"internal/version.version=v1.3.0-rc.1 ", "internal/version.commit=" + head + " ",
			"internal/version.buildDate=2026-01-02T03:04:05Z ", "component-base/version.gitVersion=v1.3.0-rc.1 ",
			"component-base/version.gitTreeState=clean ", "component-base/version.gitMajor=1 ", "component-base/version.gitMinor=3+ "}},
		{[]string{"SOURCE_DATE_EPOCH=86400"}, []string{"internal/version.buildDate=1970-01-02T00:00:00Z ", "component-base/version.buildDate=1970-01-02T00:00:00Z "}},
		{[]string{"VERSION=v2.0.0"}, []string{"component-base/version.gitVersion=v2.0.0 ", "component-base/version.gitMinor=0 "}},
	} {
		got := run(t, dir, c.env, ldflags) + " "
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%v: no %q in %s", c.env, w, got)
			}
		}
	}
	for _, env := range []string{"VERSION=1.2.3", "SOURCE_DATE_EPOCH=yesterday"} {
		if out, err := exec.Command("env", env, ldflags).CombinedOutput(); err == nil {
			t.Errorf("%s: accepted: %s", env, out)
		}
	}
}

var commands = []string{"mooring-ccm", "mooring-csr-approver", "mooring-agent", "mooring-localcloud"}

// TestRelease makes a release (hack/release.sh, as make release) into a
// temporary directory and checks it: every artifact is in SHA256SUMS with
// its digest, sha256sum -c agrees, the tarballs of this machine's platform
// hold binaries that report the version, and the SBOMs list the modules.
func TestRelease(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the release is built on Linux")
	}
	root := repoRoot(t)
	out := filepath.Join(t.TempDir(), "release")
	version := run(t, root, nil, "hack/version.sh")
	commit := run(t, root, nil, "git", "rev-parse", "HEAD")

	start := time.Now()
	cmd := exec.Command("hack/release.sh")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "RELEASE_DIR="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/release.sh: %v\n%s", err, b)
	} else {
		t.Logf("hack/release.sh took %s:\n%s", time.Since(start).Round(time.Second), b)
	}

	var want []string
	for _, c := range commands {
		for _, arch := range []string{"amd64", "arm64"} {
			base := c + "_" + version + "_linux_" + arch
			want = append(want, base+".tar.gz", base+".cdx.json")
		}
	}
	sums := readSums(t, filepath.Join(out, "SHA256SUMS"))
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(want)+1 || len(sums) != len(want) {
		t.Errorf("%d files and %d sums, want %d files and SHA256SUMS", len(entries), len(sums), len(want))
	}
	for _, name := range want {
		sum, ok := sums[name]
		if !ok {
			t.Errorf("%s is not in SHA256SUMS", name)
			continue
		}
		if got := sha256File(t, filepath.Join(out, name)); got != sum {
			t.Errorf("%s: sha256 %s, SHA256SUMS says %s", name, got, sum)
		}
	}
	if _, err := exec.LookPath("sha256sum"); err == nil {
		run(t, out, nil, "sha256sum", "--check", "--strict", "--quiet", "SHA256SUMS")
	}

	if runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64" {
		for _, c := range commands {
			checkTarball(t, filepath.Join(out, c+"_"+version+"_linux_"+runtime.GOARCH+".tar.gz"), c, version, commit)
		}
	} else {
		t.Logf("no tarball for %s to run", runtime.GOARCH)
	}

	for _, arch := range []string{"amd64", "arm64"} {
		checkSBOM(t, filepath.Join(out, "mooring-ccm_"+version+"_linux_"+arch+".cdx.json"), version,
			"k8s.io/client-go", "k8s.io/api", "k8s.io/cloud-provider", "k8s.io/component-base")
		checkSBOM(t, filepath.Join(out, "mooring-agent_"+version+"_linux_"+arch+".cdx.json"), version, "k8s.io/client-go", "k8s.io/api")
	}
}

// readSums reads sha256sum's format: "<hex>  <name>" per line.
func readSums(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sums := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		sum, name, ok := strings.Cut(s.Text(), "  ")
		if !ok || len(sum) != 64 || strings.Contains(name, "/") {
			t.Fatalf("SHA256SUMS: bad line %q", s.Text())
		}
		sums[name] = sum
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return sums
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// checkTarball unpacks a tarball, checks its entries (one directory named
// after the tarball, the binary, LICENSE, README.md, owned by root) and
// that the binary's --version reports version and commit.
func checkTarball(t *testing.T, path, command, version, commit string) {
	t.Helper()
	dir := t.TempDir()
	base := strings.TrimSuffix(filepath.Base(path), ".tar.gz")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	got := map[string]int64{}
	var mtime time.Time
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: %s owned by %d:%d", path, h.Name, h.Uid, h.Gid)
		}
		if !mtime.IsZero() && !h.ModTime.Equal(mtime) {
			t.Errorf("%s: %s has time %s, others %s", path, h.Name, h.ModTime, mtime)
		}
		mtime = h.ModTime
		got[h.Name] = h.Mode
		if h.Typeflag != tar.TypeReg {
			continue
		}
		dst := filepath.Join(dir, filepath.Base(h.Name))
		w, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, os.FileMode(h.Mode).Perm())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(w, tr); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]int64{base + "/": 0o755, base + "/" + command: 0o755, base + "/LICENSE": 0o644, base + "/README.md": 0o644}
	if len(got) != len(want) {
		t.Errorf("%s holds %v, want %v", path, got, want)
	}
	for name, mode := range want {
		if m, ok := got[name]; !ok || m&0o777 != mode {
			t.Errorf("%s: %s mode %o (present %v), want %o", path, name, m, ok, mode)
		}
	}

	bin := filepath.Join(dir, command)
	out := run(t, dir, nil, bin, "--version")
	if wantPrefix := command + " " + version + " (commit " + commit + ", built "; !strings.HasPrefix(out, wantPrefix) {
		t.Errorf("%s --version: %q, want it to start with %q", command, out, wantPrefix)
	}
	// The build date is the tarball's time (the commit's, unless
	// SOURCE_DATE_EPOCH says otherwise).
	if date := mtime.UTC().Format(time.RFC3339); !strings.Contains(out, "built "+date+",") {
		t.Errorf("%s --version: %q, want the build date %s", command, out, date)
	}
	if command == "mooring-ccm" || command == "mooring-csr-approver" {
		// component-base's own report, stamped by the same flags.
		raw := run(t, dir, nil, bin, "--version=raw")
		for _, w := range []string{`GitVersion:"` + version + `"`, `GitCommit:"` + commit + `"`, `BuildDate:"` + mtime.UTC().Format(time.RFC3339) + `"`} {
			if !strings.Contains(raw, w) {
				t.Errorf("%s --version=raw: no %s in %s", command, w, raw)
			}
		}
	}
}

// checkSBOM checks a CycloneDX SBOM names the binary's version and lists
// the modules.
func checkSBOM(t *testing.T, path, version string, modules ...string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var bom struct {
		BOMFormat string `json:"bomFormat"`
		Metadata  struct {
			Component struct {
				Name    string `json:"name"`
				Version string `json:"version"`
			} `json:"component"`
		} `json:"metadata"`
		Components []struct {
			Name    string `json:"name"`
			Version string `json:"version"`
			PURL    string `json:"purl"`
		} `json:"components"`
	}
	if err := json.Unmarshal(b, &bom); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if bom.BOMFormat != "CycloneDX" || bom.Metadata.Component.Name != "github.com/mooring-dev/mooring" || bom.Metadata.Component.Version != version {
		t.Errorf("%s: format %q, component %q %q; want CycloneDX, github.com/mooring-dev/mooring %s",
			path, bom.BOMFormat, bom.Metadata.Component.Name, bom.Metadata.Component.Version, version)
	}
	listed := map[string]string{}
	for _, c := range bom.Components {
		listed[c.Name] = c.Version
	}
	for _, m := range modules {
		if v := listed[m]; v == "" {
			t.Errorf("%s does not list %s", path, m)
		}
	}
}
