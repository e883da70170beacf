package harness

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/test/harness/boot"
)

// KubeletRepo is an apt repository of the Kubernetes package repository's
// layout (pkgs.k8s.io's: flat, "deb URL /") served on loopback, holding a
// kubelet package of one version built from a kubelet binary: what
// `mooring-agent user-data --kubernetes-version --kubernetes-repo
// --kubernetes-repo-key` installs from on the booted machines.
type KubeletRepo struct {
	// URL is the repository; KeyFile its signing key, ASCII-armored (a
	// per-test key: the Release file is signed with gpg in a temporary
	// GNUPGHOME).
	URL, KeyFile string
	// Version is the kubelet's (vX.Y.Z); Package the package's version, as
	// pkgs.k8s.io numbers them (1.36.3-1.1).
	Version, Package string
}

// ServeKubeletRepo builds the repository with Debian's own tools (dpkg-deb
// for the package, apt-ftparchive for Packages and Release, gpg for
// InRelease) and serves it until the test ends. The package holds the
// kubelet at /usr/bin/kubelet and the distribution's kubelet.service
// (systemd/units/testdata), as the Kubernetes package does.
func ServeKubeletRepo(t testing.TB, kubeletBin, version string) *KubeletRepo {
	t.Helper()
	for _, tool := range []string{"dpkg-deb", "apt-ftparchive", "gpg", "gpgconf"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s: %v (make deps installs apt-utils and gnupg)", tool, err)
		}
	}
	r := &KubeletRepo{Version: version, Package: strings.TrimPrefix(version, "v") + "-1.1"}
	dir := t.TempDir()
	root, repo := filepath.Join(dir, "root"), filepath.Join(dir, "repo")
	arch, err := exec.Command("dpkg", "--print-architecture").Output()
	if err != nil {
		t.Fatal(err)
	}
	service, err := os.ReadFile(filepath.Join(RepoRoot(), "systemd", "units", "testdata", "kubelet.service"))
	if err != nil {
		t.Fatal(err)
	}
	kubelet, err := os.ReadFile(kubeletBin)
	if err != nil {
		t.Fatal(err)
	}
	control := fmt.Sprintf("Package: kubelet\nVersion: %s\nArchitecture: %s\nMaintainer: mooring tests <tests@mooring.invalid>\n"+
		"Section: admin\nPriority: optional\nDescription: Kubernetes node agent (mooring's test package)\n", r.Package, strings.TrimSpace(string(arch)))
	for path, f := range map[string]struct {
		data []byte
		mode os.FileMode
	}{
		"DEBIAN/control":                         {[]byte(control), 0o644},
		"usr/bin/kubelet":                        {kubelet, 0o755},
		"usr/lib/systemd/system/kubelet.service": {service, 0o644},
	} {
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.data, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(dir string, env []string, name string, args ...string) []byte {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
		}
		return out
	}
	// Uncompressed: the kubelet is large and the machine reads it over
	// loopback.
	run(dir, nil, "dpkg-deb", "--root-owner-group", "-Znone", "--build", root, filepath.Join(repo, "kubelet_"+r.Package+"_"+strings.TrimSpace(string(arch))+".deb"))
	writeOut := func(name string, data []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(repo, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeOut("Packages", run(repo, nil, "apt-ftparchive", "packages", "."))
	writeOut("Release", run(repo, nil, "apt-ftparchive", "release", "."))

	// A short GNUPGHOME: gpg-agent's socket path must fit.
	home, err := os.MkdirTemp("", "gpg")
	if err != nil {
		t.Fatal(err)
	}
	gpgEnv := []string{"GNUPGHOME=" + home}
	t.Cleanup(func() {
		// gpg started an agent for this home: stop it (by its socket).
		_ = exec.Command("gpgconf", "--homedir", home, "--kill", "gpg-agent").Run()
		_ = os.RemoveAll(home)
	})
	run(dir, gpgEnv, "gpg", "--batch", "--passphrase", "", "--quick-generate-key", "mooring test repository <repo@mooring.invalid>", "ed25519", "sign", "1d")
	run(repo, gpgEnv, "gpg", "--batch", "--yes", "--clearsign", "--output", "InRelease", "Release")
	r.KeyFile = filepath.Join(dir, "key.asc")
	if err := os.WriteFile(r.KeyFile, run(dir, gpgEnv, "gpg", "--armor", "--export"), 0o644); err != nil {
		t.Fatal(err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.URL = "http://" + l.Addr().String() + "/kubernetes/"
	mux := http.NewServeMux()
	mux.Handle("GET /kubernetes/", http.StripPrefix("/kubernetes/", http.FileServer(http.Dir(repo))))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return r
}

// UserDataArgs are the `mooring-agent user-data` flags that install from
// the repository.
func (r *KubeletRepo) UserDataArgs() []string {
	return []string{"--kubernetes-version=" + r.Version, "--kubernetes-repo=" + r.URL, "--kubernetes-repo-key=" + r.KeyFile}
}

// packageImage is what a machine image whose kubelet comes from a package
// repository has instead: no apt sources of its own (each of the host's
// emptied: apt-get update reaches only the repository the user-data adds),
// and containerd.service a stand-in (the test's fake CRI serves
// containerd's socket) that checks the configuration the user-data wrote
// with the image's real containerd at each (re)start and prints the
// configuration containerd makes of it.
func packageImage() ([]boot.File, error) {
	var files []boot.File
	lists, err := filepath.Glob("/etc/apt/sources.list.d/*")
	if err != nil {
		return nil, err
	}
	for _, p := range append(lists, "/etc/apt/sources.list") {
		if strings.HasSuffix(p, ".list") || strings.HasSuffix(p, ".sources") {
			if _, err := os.Stat(p); err == nil {
				files = append(files, boot.File{Path: p, Content: nil})
			}
		}
	}
	files = append(files, boot.File{Path: "/etc/systemd/system/containerd.service", Content: []byte(`# The test machine image: a stand-in for containerd (the test's fake CRI
# serves /run/containerd/containerd.sock). It loads /etc/containerd/config.toml
# with the real containerd at each start, and fails as containerd would on a
# configuration it cannot read.
[Unit]
Description=containerd stand-in (mooring's booted test machines)

[Service]
ExecStartPre=/usr/bin/containerd --config /etc/containerd/config.toml config dump
ExecStart=/bin/sleep infinity

[Install]
WantedBy=multi-user.target
`)})
	return files, nil
}

// packaged turns a machine's image into one without the kubelet (neither
// the bind-mounted binary nor the image's kubelet.service: the package
// brings both) and with packageImage.
func packaged(files []boot.File, binds []boot.Bind) ([]boot.File, []boot.Bind, error) {
	files = slices.DeleteFunc(files, func(f boot.File) bool { return f.Path == "/usr/lib/systemd/system/kubelet.service" })
	binds = slices.DeleteFunc(binds, func(b boot.Bind) bool { return b.Target == "/usr/bin/kubelet" })
	more, err := packageImage()
	return append(files, more...), binds, err
}
