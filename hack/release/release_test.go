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
	"sigs.k8s.io/yaml"

	"github.com/mooring-dev/mooring/hack/chart/helmchart"
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
// temporary directory, building each platform once, and checks it: every
// artifact is in SHA256SUMS with its digest, sha256sum -c agrees, the
// tarballs of this machine's platform hold binaries that report the
// version, the agent's binary alone is the tarball's, the SBOMs list the
// modules, the chart and the rendered overlays carry the version. Then it
// makes one command's release again and compares the bytes.
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
			if c == "mooring-agent" {
				want = append(want, base) // the binary alone, for user-data
			}
		}
	}
	want = append(want, "mooring-"+version+".tgz")
	overlays, err := os.ReadDir(filepath.Join(root, "deploy", "overlays"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range overlays {
		want = append(want, "mooring_"+version+"_"+o.Name()+".yaml")
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
			bin := checkTarball(t, filepath.Join(out, c+"_"+version+"_linux_"+runtime.GOARCH+".tar.gz"), c, version, commit)
			if c == "mooring-agent" {
				checkAgentAsset(t, filepath.Join(out, c+"_"+version+"_linux_"+runtime.GOARCH), bin, version, commit)
			}
		}
	} else {
		t.Logf("no tarball for %s to run", runtime.GOARCH)
	}

	for _, arch := range []string{"amd64", "arm64"} {
		checkSBOM(t, filepath.Join(out, "mooring-ccm_"+version+"_linux_"+arch+".cdx.json"), version,
			"k8s.io/client-go", "k8s.io/api", "k8s.io/cloud-provider", "k8s.io/component-base")
		checkSBOM(t, filepath.Join(out, "mooring-agent_"+version+"_linux_"+arch+".cdx.json"), version, "k8s.io/client-go", "k8s.io/api")
	}

	checkChart(t, root, filepath.Join(out, "mooring-"+version+".tgz"), version)
	for _, o := range overlays {
		checkManifest(t, filepath.Join(out, "mooring_"+version+"_"+o.Name()+".yaml"), version)
	}

	// Reproducible: one binary again, for this machine's platform (its
	// packages are in Go's build cache by now, so this links and packs),
	// with the chart and the manifests: the same bytes as the first time.
	// The agent's, so its binary alone is compared too.
	if t.Failed() || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		return
	}
	start = time.Now()
	again := filepath.Join(t.TempDir(), "again")
	cmd = exec.Command("hack/release.sh")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "RELEASE_DIR="+again, "RELEASE_PLATFORMS=linux/"+runtime.GOARCH, "RELEASE_COMMANDS=mooring-agent")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/release.sh again: %v\n%s", err, b)
	}
	t.Logf("hack/release.sh of mooring-agent again took %s", time.Since(start).Round(time.Second))
	entries, err = os.ReadDir(again)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "SHA256SUMS" {
			continue
		}
		if got, want := sha256File(t, filepath.Join(again, e.Name())), sums[e.Name()]; got != want {
			t.Errorf("%s built again: sha256 %s, the release's %s", e.Name(), got, want)
		}
	}
	if len(entries) != 4+len(overlays)+1 {
		t.Errorf("the second release holds %d files, want a tarball, an SBOM, the agent's binary, the chart, %d manifests and SHA256SUMS", len(entries), len(overlays))
	}
}

// checkChart checks the packaged chart: Chart.yaml's version and appVersion
// are the release's, and helm template (the Helm CLI hack/install-helm.sh
// pins) installs the release's images.
func checkChart(t *testing.T, root, path, version string) {
	t.Helper()
	tgz, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, md, err := helmchart.ReadChart(tgz)
	if err != nil {
		t.Fatal(err)
	}
	if md.Name != "mooring" || md.Version != version || md.AppVersion != version {
		t.Errorf("%s: Chart.yaml name %q, version %q, appVersion %q; want mooring and %s", path, md.Name, md.Version, md.AppVersion, version)
	}
	helm := run(t, root, nil, "hack/install-helm.sh")
	home := t.TempDir()
	for values, image := range map[string]string{"aws-values.yaml": "mooring-ccm", "approver-only-values.yaml": "mooring-csr-approver"} {
		out := run(t, root, []string{"HELM_CONFIG_HOME=" + home, "HELM_CACHE_HOME=" + home, "HELM_DATA_HOME=" + home},
			helm, "template", "mooring", path, "--namespace", "kube-system", "--kube-version", "v1.36.3",
			"--values", filepath.Join("deploy/helm/mooring/ci", values))
		got := images(t, out)
		if want := "ghcr.io/mooring-dev/" + image + ":" + version; len(got) != 1 || got[0] != want {
			t.Errorf("helm template %s with %s: images %v, want [%s]", path, values, got, want)
		}
	}
}

// checkManifest checks a rendered overlay parses and runs the release's
// image (hack/manifests' test checks the rest).
func checkManifest(t *testing.T, path, version string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := images(t, string(b))
	if len(got) != 1 || !strings.HasPrefix(got[0], "ghcr.io/mooring-dev/mooring-") || !strings.HasSuffix(got[0], ":"+version) {
		t.Errorf("%s: images %v, want one ghcr.io/mooring-dev/mooring-*:%s", path, got, version)
	}
}

// images are the container images of the objects in a YAML stream.
func images(t *testing.T, manifests string) []string {
	t.Helper()
	var out []string
	for _, doc := range strings.Split(manifests, "\n---") {
		var obj struct {
			Spec struct {
				Template struct {
					Spec struct {
						Containers []struct {
							Image string `json:"image"`
						} `json:"containers"`
					} `json:"spec"`
				} `json:"template"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		for _, c := range obj.Spec.Template.Spec.Containers {
			out = append(out, c.Image)
		}
	}
	return out
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

// checkAgentAsset checks the agent's binary published alone: executable,
// the same bytes as the tarball's (bin), and its --version reports version
// and commit.
func checkAgentAsset(t *testing.T, path, bin, version, commit string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o755 {
		t.Errorf("%s: mode %o, want 755", path, fi.Mode().Perm())
	}
	if got, want := sha256File(t, path), sha256File(t, bin); got != want {
		t.Errorf("%s: sha256 %s, the tarball's binary %s", path, got, want)
	}
	out := run(t, filepath.Dir(path), nil, path, "--version")
	if want := "mooring-agent " + version + " (commit " + commit + ", built "; !strings.HasPrefix(out, want) {
		t.Errorf("%s --version: %q, want it to start with %q", path, out, want)
	}
}

// checkTarball unpacks a tarball, checks its entries (one directory named
// after the tarball, the binary, LICENSE, README.md, owned by root) and
// that the binary's --version reports version and commit. It returns the
// unpacked binary's path.
func checkTarball(t *testing.T, path, command, version, commit string) string {
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
	return bin
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
