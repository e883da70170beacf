package cloudinit

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/mooring-dev/mooring/agent/cloudinit/cloudinittest"
)

// The built-in key is pkgs.k8s.io's: its fingerprint is the one the
// Kubernetes docs give, by go-crypto and, when installed, by gpg. Judged on
// a day before its expiry (2026-12-29), which the test logs: past it, the
// key must be re-pinned (user-data refuses an expired key).
func TestPinnedKey(t *testing.T) {
	k, err := CheckRepoKey(PkgsK8sIOKey, time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(k.Fingerprints, []string{PkgsK8sIOFingerprint}) {
		t.Fatalf("fingerprints %v, want %s", k.Fingerprints, PkgsK8sIOFingerprint)
	}
	t.Logf("pkgs.k8s.io key %s expires %s", PkgsK8sIOFingerprint, k.Expires.UTC().Format(time.DateOnly))
	if got := k.Expires.UTC().Format(time.DateOnly); got != "2026-12-29" {
		t.Errorf("expiry %s; docs/join.md says 2026-12-29", got)
	}
	if _, err := exec.LookPath("gpg"); err != nil {
		t.Skip("gpg not installed")
	}
	cmd := exec.Command("gpg", "--show-keys", "--with-colons", "--with-fingerprint")
	cmd.Stdin = strings.NewReader(PkgsK8sIOKey)
	cmd.Env = append(os.Environ(), "GNUPGHOME="+t.TempDir())
	out, err := cmd.Output()
	if err != nil || !strings.Contains(string(out), "\nfpr:::::::::"+PkgsK8sIOFingerprint+":") ||
		!strings.Contains(string(out), "isv\\x3akubernetes OBS Project <isv\\x3akubernetes@build.opensuse.org>") {
		t.Fatalf("gpg --show-keys: %v\n%s", err, out)
	}
}

func TestCheckRepoKeyRefuses(t *testing.T) {
	now := time.Now()
	if _, err := CheckRepoKey(cloudinittest.ArmoredKey(t, now.Add(-time.Hour), 24*time.Hour, false), now); err != nil {
		t.Fatalf("a valid key: %v", err)
	}
	for name, c := range map[string]struct {
		key  string
		want string
	}{
		"expired": {cloudinittest.ArmoredKey(t, now.Add(-48*time.Hour), 24*time.Hour, false), "expired on"},
		"secret":  {cloudinittest.ArmoredKey(t, now.Add(-time.Hour), 0, true), "not an ASCII-armored OpenPGP public key"},
		"garbage": {"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nnope\n-----END PGP PUBLIC KEY BLOCK-----\n", "not an OpenPGP public key"},
		"pem":     {"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", "not an ASCII-armored"},
	} {
		if _, err := CheckRepoKey(c.key, now); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

func kubernetesParams() Params {
	p := params()
	p.Kubernetes = &KubernetesPackages{Version: "v1.36.3"}
	// Before the built-in key's expiry (2026-12-29), whatever the date the
	// tests run.
	p.Now = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	return p
}

// The Kubernetes package path: the repository of the minor release with
// the pinned key, the kubelet of the version, containerd configured after
// the packages, and in the one runcmd script the kubelet's version checked
// and held and containerd restarted before the agent is installed. The
// result passes cloud-init's schema.
func TestRenderKubernetesPackages(t *testing.T) {
	out, err := Render(kubernetesParams())
	if err != nil {
		t.Fatal(err)
	}
	var ud userData
	if err := yaml.UnmarshalStrict(out, &ud); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ud.Packages, []string{"containerd", "kubelet=1.36.3-*"}) {
		t.Errorf("packages %v", ud.Packages)
	}
	files := map[string]file{}
	for _, f := range ud.WriteFiles {
		files[f.Path] = f
	}
	if f := files[KeyringPath]; f.Content != strings.TrimSpace(PkgsK8sIOKey)+"\n" || f.Defer {
		t.Errorf("key file %+v", f)
	}
	if f := files[SourcesPath]; !strings.Contains(f.Content, "\ndeb [signed-by="+KeyringPath+"] https://pkgs.k8s.io/core:/stable:/v1.36/deb/ /\n") || f.Defer {
		t.Errorf("sources file %+v", f)
	}
	if f := files[ContainerdConfigPath]; f.Content != ContainerdConfig || !f.Defer {
		t.Errorf("containerd config %+v", f)
	}
	script := ud.RunCmd[0][2]
	order := []string{"kubelet --version", `[ "$v" = 'Kubernetes v1.36.3' ]`, "apt-mark hold kubelet", "systemctl restart containerd.service",
		"curl ", "install -m 0755", "systemctl enable --now --no-block mooring-agent.service"}
	at := -1
	for _, s := range order {
		i := strings.Index(script, s)
		if i <= at {
			t.Fatalf("%q not after the step before it in:\n%s", s, script)
		}
		at = i
	}
	path := filepath.Join(t.TempDir(), "user-data.yaml")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	checkSchema(t, path)
}

func TestRenderKubernetesPackagesRefuses(t *testing.T) {
	for name, mutate := range map[string]func(*Params){
		"version":       func(p *Params) { p.Kubernetes.Version = "1.36.3" },
		"minor only":    func(p *Params) { p.Kubernetes.Version = "v1.36" },
		"pre-release":   func(p *Params) { p.Kubernetes.Version = "v1.37.0-rc.1" },
		"repo scheme":   func(p *Params) { p.Kubernetes.RepoURL = "ftp://mirror.example/k8s/" },
		"repo option":   func(p *Params) { p.Kubernetes.RepoURL = "https://mirror.example/] trusted=yes [" },
		"key":           func(p *Params) { p.Kubernetes.RepoKey = "not a key" },
		"with packages": func(p *Params) { p.Packages = []string{"kubelet"} },
	} {
		p := kubernetesParams()
		mutate(&p)
		if _, err := Render(p); err == nil {
			t.Errorf("%s: rendered", name)
		}
	}
	p := kubernetesParams()
	p.Kubernetes.RepoURL = "http://127.0.0.1:8080/k8s"
	out, err := Render(p)
	if err != nil || !strings.Contains(string(out), "] http://127.0.0.1:8080/k8s/ /") {
		t.Fatalf("a mirror: %v\n%s", err, out)
	}
}

// The containerd configuration loads in the containerd the test machine
// has (Debian 12's 1.6), and the runc runtime has the systemd cgroup
// driver in the configuration it makes of it.
func TestContainerdConfigLoads(t *testing.T) {
	if _, err := exec.LookPath("containerd"); err != nil {
		t.Skip("containerd not installed (make deps installs it)")
	}
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte(ContainerdConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("containerd", "--config", path, "config", "dump").CombinedOutput()
	if err != nil {
		t.Fatalf("containerd config dump: %v\n%s", err, out)
	}
	_, opts, ok := strings.Cut(string(out), `[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]`)
	if opts, _, _ = strings.Cut(opts, "\n\n"); !ok || !strings.Contains(opts, "SystemdCgroup = true") {
		t.Fatalf("runc's options in containerd's configuration:\n%s", out)
	}
}

// The package path's script run by sh with stand-ins for kubelet, apt-mark,
// systemctl and curl, into a scratch directory: the kubelet of the version
// is held and containerd restarted before the agent is installed and
// enabled; another kubelet, none, a download that fails or a containerd
// that does not restart stops it with a line naming why, before the
// agent's unit is enabled.
func TestKubernetesScript(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip(err)
	}
	const binary = "agent binary\n"
	for name, c := range map[string]struct {
		kubelet, curl, restart string // the stand-ins' exit codes; kubelet "": none
		version                string
		calls, out             string
		fails                  bool
	}{
		"installed": {kubelet: "0", curl: "0", restart: "0", version: "Kubernetes v1.36.3",
			calls: "apt-mark hold kubelet\nsystemctl restart containerd.service\nsystemctl daemon-reload\nsystemctl enable --now --no-block mooring-agent.service\n"},
		"other kubelet": {kubelet: "0", curl: "0", restart: "0", version: "Kubernetes v1.35.0", fails: true,
			out: `mooring: kubelet --version says "Kubernetes v1.35.0", want Kubernetes v1.36.3; mooring-agent.service is not enabled`},
		"no kubelet": {curl: "0", restart: "0", fails: true, out: "mooring: no kubelet: the packages did not install"},
		"containerd": {kubelet: "0", curl: "0", restart: "1", version: "Kubernetes v1.36.3", fails: true,
			calls: "apt-mark hold kubelet\nsystemctl restart containerd.service\n",
			out:   "mooring: containerd did not restart with /etc/containerd/config.toml; mooring-agent.service is not enabled"},
		"download": {kubelet: "0", curl: "22", restart: "0", version: "Kubernetes v1.36.3", fails: true,
			calls: "apt-mark hold kubelet\nsystemctl restart containerd.service\n",
			out:   "mooring: downloading the agent from https://downloads.example/mooring-agent failed; mooring-agent.service is not enabled"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			bin := filepath.Join(dir, "bin")
			calls := filepath.Join(dir, "calls")
			stand := map[string]string{
				"apt-mark":  "#!/bin/sh\necho \"apt-mark $*\" >> " + calls + "\n",
				"systemctl": "#!/bin/sh\necho \"systemctl $*\" >> " + calls + "\n[ \"$1\" = restart ] && exit " + c.restart + "\nexit 0\n",
				"curl":      "#!/bin/sh\n[ " + c.curl + " = 0 ] || exit " + c.curl + "\nwhile [ $# -gt 1 ]; do [ \"$1\" = -o ] && out=$2; shift; done\nprintf 'agent binary\\n' > \"$out\"\n",
			}
			if c.kubelet != "" {
				stand["kubelet"] = "#!/bin/sh\necho '" + c.version + "'\nexit " + c.kubelet + "\n"
			}
			if err := os.Mkdir(bin, 0o755); err != nil {
				t.Fatal(err)
			}
			for n, s := range stand {
				if err := os.WriteFile(filepath.Join(bin, n), []byte(s), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			p := kubernetesParams()
			sum := sha256.Sum256([]byte(binary))
			p.AgentSHA256 = hex.EncodeToString(sum[:])
			// Only the stand-ins and the tools the script runs (none of
			// the host's kubelet, systemctl...).
			for _, tool := range []string{"sha256sum", "install", "cut", "rm"} {
				path, err := exec.LookPath(tool)
				if err != nil {
					t.Skipf("%s: %v", tool, err)
				}
				if err := os.Symlink(path, filepath.Join(bin, tool)); err != nil {
					t.Fatal(err)
				}
			}
			target := filepath.Join(dir, "mooring-agent")
			shOut, err := runInstallScript(t, p, dir, target, bin)
			got, _ := os.ReadFile(calls)
			if string(got) != c.calls {
				t.Errorf("calls %q, want %q", got, c.calls)
			}
			_, statErr := os.Stat(target)
			if c.fails {
				if err == nil || statErr == nil || !strings.HasPrefix(string(shOut), c.out) {
					t.Errorf("exit %v, agent installed: %v; output %q, want it to start %q", err, statErr == nil, shOut, c.out)
				}
				return
			}
			if err != nil || statErr != nil {
				t.Errorf("exit %v, agent %v\n%s", err, statErr, shOut)
			}
		})
	}
}
