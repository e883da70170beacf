package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/mooring-dev/mooring/agent/cloudinit"
	"github.com/mooring-dev/mooring/agent/cloudinit/cloudinittest"
	"github.com/mooring-dev/mooring/internal/doctest"
	"github.com/mooring-dev/mooring/internal/pki"
	"github.com/mooring-dev/mooring/test/harness"
)

// TestJoinDocExamples runs docs/join.md's command examples
// (internal/doctest; those that need a cloud account are marked skip with
// their reason), as the doc's reader has what they name: the local cloud's
// `mooring-agent user-data` with this checkout's mooring-agent as
// bin/mooring-agent and a cluster CA as ca.crt; the release examples (the
// release's SHA256SUMS over HTTP, and a downloaded release's directory)
// with a release hack/release.sh made, served on loopback in the place of
// GitHub's downloads; the package path on Hetzner with a join ticket. Each
// user-data must be cloud-config that installs the agent by its digest.
func TestJoinDocExamples(t *testing.T) {
	examples, err := doctest.Parse(filepath.Join(harness.RepoRoot(), "docs", "join.md"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	agent := harness.BuildBinary(t, "agent/cmd/mooring-agent")
	data, err := os.ReadFile(agent)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "mooring-agent"), data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), testCA(t), 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	env := []string{"PATH=" + filepath.Join(dir, "bin") + string(os.PathListSeparator) + os.Getenv("PATH")}

	r := &doctest.Runner{Dir: dir, Env: env}
	outputs := r.Run(t, doctest.Select(examples, "local"))
	if len(outputs) == 0 {
		t.Fatal("docs/join.md has no example of group local that runs")
	}
	for place, out := range outputs {
		checkUserData(t, place, out, hex.EncodeToString(sum[:]))
	}
	r.Run(t, doctest.Select(examples, "")) // the skipped ones: logged
	r.CheckReplacements(t)

	// The release examples: the release's agent and its SHA256SUMS line.
	rel := harness.BuildRelease(t, "mooring-agent")
	asset := "mooring-agent_" + rel.Version + "_linux_" + runtime.GOARCH
	sums, err := os.ReadFile(filepath.Join(rel.Dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	var digest string
	for _, line := range strings.Split(string(sums), "\n") {
		if d, name, ok := strings.Cut(line, "  "); ok && name == asset {
			digest = d
		}
	}
	if digest == "" {
		t.Fatalf("the release's SHA256SUMS has no %s:\n%s", asset, sums)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/"+rel.Version+"/", http.StripPrefix("/"+rel.Version+"/", http.FileServer(http.Dir(rel.Dir))))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	releaseURL := "http://" + l.Addr().String()
	if err := os.WriteFile(filepath.Join(dir, "token.txt"), []byte("abcdef.0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ticket, err := harness.NewTicketIssuer(t).Issue("node-doc", "doc-cluster", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ticket.txt"), []byte(ticket+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(rel.Dir, filepath.Join(dir, "mooring-"+rel.Version)); err != nil {
		t.Fatal(err)
	}
	caPin := doctest.Replacement{Old: "sha256:<hex, as kubeadm token create --print-join-command prints it>", New: "sha256:" + strings.Repeat("ab", 32)}
	// --version=v1.2.3 with GitHub's downloads: this release, from loopback.
	fromRelease := doctest.Replacement{Old: "--version=v1.2.3", New: "--version=" + rel.Version + " --release-url=" + releaseURL + " --arch=" + runtime.GOARCH}
	packages := []doctest.Replacement{caPin, fromRelease}
	if _, err := cloudinit.CheckRepoKey(cloudinit.PkgsK8sIOKey, time.Now()); err != nil {
		// The built-in key has expired (docs/join.md says when): the
		// command as the doc says it to do then, with a key of the test's.
		t.Logf("the built-in pkgs.k8s.io key: %v; the package example runs with --kubernetes-repo-key", err)
		key := cloudinittest.ArmoredKey(t, time.Now().Add(-time.Hour), 24*time.Hour, false)
		if err := os.WriteFile(filepath.Join(dir, "k8s.asc"), []byte(key), 0o644); err != nil {
			t.Fatal(err)
		}
		packages = append(packages, doctest.Replacement{Old: "--kubernetes-version=v1.36.3", New: "--kubernetes-version=v1.36.3 --kubernetes-repo-key=k8s.asc"})
	}
	for _, c := range []struct {
		group    string
		replace  []doctest.Replacement
		agentURL string
		more     []string
	}{
		{"release", []doctest.Replacement{caPin, fromRelease}, releaseURL + "/" + rel.Version + "/" + asset, nil},
		{"mirror", []doctest.Replacement{caPin, {Old: "v1.2.3", New: rel.Version}, {Old: "--agent-base-url=", New: "--arch=" + runtime.GOARCH + " --agent-base-url="}},
			"https://mirror.internal/mooring/" + rel.Version + "/" + asset, nil},
		{"packages", packages, releaseURL + "/" + rel.Version + "/" + asset, []string{"kubelet=1.36.3-*", "pkgs.k8s.io/core:/stable:/v1.36/deb/", "/etc/mooring/join-ticket"}},
	} {
		r := &doctest.Runner{Dir: dir, Env: env, Replace: c.replace}
		if len(doctest.Select(examples, c.group)) == 0 {
			t.Fatalf("docs/join.md has no example of group %s", c.group)
		}
		_ = os.Remove(filepath.Join(dir, "user-data.yaml"))
		r.Run(t, doctest.Select(examples, c.group))
		r.CheckReplacements(t)
		out, err := os.ReadFile(filepath.Join(dir, "user-data.yaml"))
		if err != nil {
			t.Fatalf("group %s: %v", c.group, err)
		}
		checkUserData(t, c.group, string(out), digest)
		for _, want := range append([]string{c.agentURL}, c.more...) {
			if !strings.Contains(string(out), want) {
				t.Errorf("group %s: the user-data lacks %q:\n%s", c.group, want, out)
			}
		}
	}
	for _, g := range doctest.Groups(examples) {
		if !slices.Contains([]string{"", "local", "release", "mirror", "packages"}, g) {
			t.Errorf("docs/join.md has examples of group %q that this test does not run", g)
		}
	}
}

// checkUserData checks that out is cloud-config naming the agent's digest.
func checkUserData(t *testing.T, place, out, digest string) {
	t.Helper()
	if !strings.HasPrefix(out, "#cloud-config\n") {
		t.Fatalf("%s printed no cloud-config:\n%s", place, out)
	}
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%s: the user-data does not parse: %v", place, err)
	}
	if !strings.Contains(out, digest) {
		t.Errorf("%s: the user-data does not name the agent's digest %s", place, digest)
	}
}

// testCA is a cluster's ca.crt: a new CA's certificate (PEM).
func testCA(t *testing.T) []byte {
	t.Helper()
	ca, err := pki.NewCA("kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	return ca.CertPEM
}
