package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/agent/cloudinit"
	"github.com/mooring-dev/mooring/agent/cloudinit/cloudinittest"
)

// writeRepoKey writes an armored public key valid from created for
// lifetime.
func writeRepoKey(t *testing.T, dir, name string, created time.Time, lifetime time.Duration) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(cloudinittest.ArmoredKey(t, created, lifetime, false)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// --kubernetes-version renders pkgs.k8s.io's repository of the minor
// release with the built-in key, the kubelet of the version and
// containerd; with --kubernetes-repo and --kubernetes-repo-key, a mirror
// and its key. Both pass cloud-init's schema.
func TestUserDataKubernetesPackages(t *testing.T) {
	dir := t.TempDir()
	key := writeRepoKey(t, dir, "mirror.asc", time.Now().Add(-time.Hour), 24*time.Hour)
	keyData, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		flags []string
		want  []string
	}{
		"pkgs.k8s.io": {[]string{"--kubernetes-version=v1.36.3"}, []string{
			"deb [signed-by=" + cloudinit.KeyringPath + "] https://pkgs.k8s.io/core:/stable:/v1.36/deb/ /",
			"- kubelet=1.36.3-*", "- containerd", "mQENBGMHoXcBCADukGOEQyleViOgtkMVa7hKifP6POCTh+98xNW4TfHK/nBJN2sm", "SystemdCgroup = true",
			"apt-mark hold kubelet", "systemctl restart containerd.service"}},
		"mirror": {[]string{"--kubernetes-version=v1.35.0", "--kubernetes-repo=http://127.0.0.1:8080/k8s/v1.35/", "--kubernetes-repo-key=" + key}, []string{
			"deb [signed-by=" + cloudinit.KeyringPath + "] http://127.0.0.1:8080/k8s/v1.35/ /", "- kubelet=1.35.0-*",
			strings.Split(string(keyData), "\n")[3]}},
	} {
		args := append(append(baseArgs("aws"), "--ca-cert-hash="+caHash, "--bootstrap-token="+token), c.flags...)
		userDataNow = time.Now
		if name == "pkgs.k8s.io" {
			// Before the built-in key's expiry (2026-12-29), whatever the
			// date the test runs.
			userDataNow = func() time.Time { return time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC) }
		}
		stdout, stderr, code := runCLI(t, args...)
		userDataNow = time.Now
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s", name, code, stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(stdout, w) {
				t.Errorf("%s: no %q in\n%s", name, w, stdout)
			}
		}
		if _, err := exec.LookPath("cloud-init"); err != nil {
			continue
		}
		out := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(out, []byte(stdout), 0o600); err != nil {
			t.Fatal(err)
		}
		if schema, err := exec.Command("cloud-init", "schema", "--config-file", out).CombinedOutput(); err != nil || !strings.Contains(string(schema), "Valid") {
			t.Fatalf("%s: cloud-init schema: %v\n%s", name, err, schema)
		}
	}
}

func TestUserDataKubernetesPackagesRefused(t *testing.T) {
	dir := t.TempDir()
	expired := writeRepoKey(t, dir, "expired.asc", time.Now().Add(-48*time.Hour), 24*time.Hour)
	notKey := filepath.Join(dir, "not-a-key")
	if err := os.WriteFile(notKey, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ok := append(baseArgs("aws"), "--ca-cert-hash="+caHash, "--bootstrap-token="+token)
	with := func(extra ...string) []string { return append(append([]string{}, ok...), extra...) }
	for _, c := range []struct {
		args []string
		want string
	}{
		{with("--kubernetes-version=1.36.3"), "--kubernetes-version: want vMAJOR.MINOR.PATCH"},
		{with("--kubernetes-version=v1.36"), "--kubernetes-version: want vMAJOR.MINOR.PATCH"},
		{with("--kubernetes-repo=https://mirror.example/"), "--kubernetes-repo and --kubernetes-repo-key go with --kubernetes-version"},
		{with("--kubernetes-version=v1.36.3", "--install-packages"), "--install-packages and --kubernetes-version: give one"},
		{with("--kubernetes-version=v1.36.3", "--kubernetes-repo=ftp://mirror.example/"), "--kubernetes-repo: want an http(s) URL"},
		{with("--kubernetes-version=v1.36.3", "--kubernetes-repo-key="+filepath.Join(dir, "none")), "--kubernetes-repo-key: open"},
		{with("--kubernetes-version=v1.36.3", "--kubernetes-repo-key="+notKey), "--kubernetes-repo-key " + notKey + ": not an ASCII-armored OpenPGP public key"},
		{with("--kubernetes-version=v1.36.3", "--kubernetes-repo-key="+expired), "--kubernetes-repo-key " + expired + ": key "},
	} {
		stdout, stderr, code := runCLI(t, c.args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, want 2 and %q; stderr:\n%s", c.args[len(ok):], code, c.want, stderr)
		}
	}
}
