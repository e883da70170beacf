package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mooring-dev/mooring/cloud/nodeid"
)

// TestTicketClouds: the backends that mark themselves as signing no
// identity (nodeid.Unsigned) are those whose Evidence says so (asked with
// a cancelled context: the others fail without calling their cloud), and
// user-data for them without a join ticket is refused, naming the flags.
func TestTicketClouds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, name := range nodeid.Backends() {
		cfg := nodeid.Config{}
		if name == "local" {
			cfg.MetadataURL = "http://127.0.0.1:1"
		}
		id, err := nodeid.New(name, cfg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		_, err = id.Evidence(ctx, "binding")
		if noEvidence := errors.Is(err, nodeid.ErrNoEvidence); noEvidence != nodeid.NeedsTicket(id) || noEvidence != ticketClouds[name] {
			t.Errorf("%s: Evidence %v; NeedsTicket %v; the test's list %v", name, err, nodeid.NeedsTicket(id), ticketClouds[name])
		}
		args := append(append(baseArgs(name), backendArgs[name]...), "--ca-cert-hash="+caHash, "--bootstrap-token="+token)
		stdout, stderr, code := runCLI(t, args...)
		if !ticketClouds[name] {
			if code != 0 {
				t.Errorf("%s without a ticket: exit %d\n%s", name, code, stderr)
			}
			continue
		}
		if want := "--cloud=" + name + " signs no instance identity: its machine can join only with a join ticket; give --join-ticket-file, or --ticket-name"; code != 2 || stdout != "" || !strings.Contains(stderr, want) {
			t.Errorf("%s without a ticket: exit %d, want 2 and %q; stderr:\n%s", name, code, want, stderr)
		}
	}
}

// fakeRelease is a release's files as hack/release.sh names them: the
// agent for both architectures and SHA256SUMS.
func fakeRelease(t *testing.T, dir, version string) map[string]string {
	t.Helper()
	digests := map[string]string{}
	var sums strings.Builder
	for _, name := range []string{"mooring-agent_" + version + "_linux_amd64.tar.gz", "mooring-agent_" + version + "_linux_amd64", "mooring-agent_" + version + "_linux_arm64"} {
		data := []byte("binary " + name)
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o755); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		digests[name] = hex.EncodeToString(sum[:])
		sums.WriteString(digests[name] + "  " + name + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(sums.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return digests
}

// TestUserDataFromRelease: --version takes the agent's URL and digest from
// a release's SHA256SUMS, over HTTP or from a downloaded directory; what
// goes wrong is said, with the URL and status.
func TestUserDataFromRelease(t *testing.T) {
	const version = "v1.2.3-rc.1"
	root := t.TempDir()
	dir := filepath.Join(root, "releases", version)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	digests := fakeRelease(t, dir, version)
	bodies := map[string]string{
		"/bad/v1.0.0/SHA256SUMS":   digests["mooring-agent_"+version+"_linux_amd64"] + "  mooring-agent_v1.0.0_linux_amd64\nnot a line\n",
		"/twice/v1.0.0/SHA256SUMS": strings.Repeat(strings.Repeat("a", 64)+"  mooring-agent_v1.0.0_linux_amd64\n", 2),
		"/big/v1.0.0/SHA256SUMS":   strings.Repeat(strings.Repeat("a", 64)+"  x\n", 1<<20/66+1),
	}
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.URL.Path)
		if b, ok := bodies[r.URL.Path]; ok {
			_, _ = w.Write([]byte(b))
			return
		}
		if strings.HasPrefix(r.URL.Path, "/broken/") {
			http.Error(w, "no", http.StatusInternalServerError)
			return
		}
		http.FileServer(http.Dir(root)).ServeHTTP(w, r)
	}))
	defer srv.Close()

	common := append(baseArgs("aws")[:3], "--ca-cert-hash="+caHash, "--bootstrap-token="+token)
	with := func(extra ...string) []string { return append(append([]string{}, common...), extra...) }
	for _, c := range []struct {
		args     []string
		url, sum string
	}{
		{with("--version="+version, "--release-url="+srv.URL+"/releases"),
			srv.URL + "/releases/" + version + "/mooring-agent_" + version + "_linux_amd64", digests["mooring-agent_"+version+"_linux_amd64"]},
		{with("--version", version, "--release-url="+srv.URL+"/releases/", "--arch=arm64"),
			srv.URL + "/releases/" + version + "/mooring-agent_" + version + "_linux_arm64", digests["mooring-agent_"+version+"_linux_arm64"]},
		// A downloaded release, and where the machines fetch it.
		{with("--version="+version, "--release-url="+dir, "--agent-base-url=https://mirror.example/mooring/"+version+"/"),
			"https://mirror.example/mooring/" + version + "/mooring-agent_" + version + "_linux_amd64", digests["mooring-agent_"+version+"_linux_amd64"]},
	} {
		asked = nil
		stdout, stderr, code := runCLI(t, c.args...)
		if code != 0 {
			t.Errorf("%v: exit %d\n%s", c.args[3:], code, stderr)
			continue
		}
		for _, want := range []string{c.url, c.sum} {
			if !strings.Contains(stdout, want) {
				t.Errorf("%v: no %q in\n%s", c.args[3:], want, stdout)
			}
		}
		if strings.HasPrefix(c.args[len(c.args)-2], "--release-url=http") && (len(asked) != 1 || asked[0] != "/releases/"+version+"/SHA256SUMS") {
			t.Errorf("%v: asked for %v, want the release's SHA256SUMS once", c.args[3:], asked)
		}
	}

	// A downloaded binary that is not the one SHA256SUMS lists.
	tampered := filepath.Join(t.TempDir(), version)
	if err := os.MkdirAll(tampered, 0o755); err != nil {
		t.Fatal(err)
	}
	fakeRelease(t, tampered, version)
	if err := os.WriteFile(filepath.Join(tampered, "mooring-agent_"+version+"_linux_amd64"), []byte("other"), 0o755); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{with("--version=v9.9.9", "--release-url="+srv.URL+"/releases"), 1,
			"--version v9.9.9: GET " + srv.URL + "/releases/v9.9.9/SHA256SUMS: 404 Not Found (is there a release of that version?)"},
		{with("--version=v1.0.0", "--release-url="+srv.URL+"/broken"), 1, "GET " + srv.URL + "/broken/v1.0.0/SHA256SUMS: 500 Internal Server Error"},
		{with("--version=v1.0.0", "--release-url="+srv.URL+"/bad"), 1, `SHA256SUMS line 2: want "<64 lower-case hex digits>  <file>", got "not a line"`},
		{with("--version=v1.0.0", "--release-url="+srv.URL+"/twice"), 1, "SHA256SUMS: mooring-agent_v1.0.0_linux_amd64 listed twice"},
		{with("--version=v1.0.0", "--release-url="+srv.URL+"/big"), 1, "more than 1048576 bytes"},
		{with("--version="+version, "--release-url="+srv.URL+"/releases", "--arch=arm64", "--agent-base-url=http://x"), 2, "--agent-base-url: only with a directory"},
		{with("--version="+version, "--release-url=http://127.0.0.1:1"), 1, "GET http://127.0.0.1:1/" + version + "/SHA256SUMS: dial tcp 127.0.0.1:1"},
		{with("--version=v1.2.3", "--release-url="+filepath.Dir(dir), "--agent-base-url=http://x"), 1, "SHA256SUMS: no such file"},
		{with("--version=v1.2.4", "--release-url="+dir, "--agent-base-url=http://x"), 1, "SHA256SUMS has no line for mooring-agent_v1.2.4_linux_amd64"},
		{with("--version="+version, "--release-url="+tampered, "--agent-base-url=http://x"), 1, "mooring-agent_" + version + "_linux_amd64: sha256 "},
		{with("--version="+version, "--release-url="+dir), 2, "--release-url=" + dir + " is a directory: give --agent-base-url"},
		{with("--version="+version, "--release-url="+dir, "--agent-base-url=/srv"), 2, `--agent-base-url: want an http(s) URL, got "/srv"`},
		{with("--version="+version, "--release-url=ftp://x"), 2, `--release-url: want an http(s) URL or a directory, got "ftp://x"`},
		{with("--version=1.2.3"), 2, `--version: want a release's version, vMAJOR.MINOR.PATCH[-PRERELEASE], got "1.2.3"`},
		{with("--version=v1.2.3+build"), 2, "--version: want a release's version"},
		{with("--version=v1.2.3/../x"), 2, "--version: want a release's version"},
		{with("--version=v1.2.3", "--arch=386"), 2, `--arch: want one of amd64, arm64, got "386"`},
		{with("--version=v1.2.3", "--agent-url=http://x"), 2, "--version and --agent-url/--agent-sha256: give --version (the release's agent) or --agent-url and --agent-sha256"},
		{with("--version=v1.2.3", "--agent-sha256="+digest), 2, "--version and --agent-url/--agent-sha256"},
		{with("--release-url=http://x", "--agent-url=http://x", "--agent-sha256="+digest), 2, "--release-url: only with --version"},
		{with("--arch=arm64", "--agent-url=http://x", "--agent-sha256="+digest), 2, "--arch: only with --version"},
		{with(), 2, `--agent-url: want an http(s) URL (or --version, the release's agent), got ""`},
		{with("--version"), 2, "flag needs an argument: --version"},
	} {
		stdout, stderr, code := runCLI(t, c.args...)
		if code != c.code || stdout != "" || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, want %d and %q; stdout %q stderr:\n%s", c.args[3:], code, c.code, c.want, stdout, stderr)
		}
	}
	// The root command's --version still prints the version.
	if stdout, _, code := runCLI(t, "--version"); code != 0 || !strings.HasPrefix(stdout, "mooring-agent ") {
		t.Errorf("--version: exit %d, %q", code, stdout)
	}
}
