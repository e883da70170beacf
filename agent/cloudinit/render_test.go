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

	"sigs.k8s.io/yaml"
)

// Packages go to cloud-init's packages module (which runs before runcmd
// executes, so the agent finds the kubelet's unit); none by default.
func TestRenderInstallsPackages(t *testing.T) {
	out, err := Render(params())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "packages:") {
		t.Fatalf("packages without asking:\n%s", out)
	}
	p := params()
	p.Packages = append(slices.Clone(DefaultPackages), "kubelet=1.36.3-1.1")
	if out, err = Render(p); err != nil {
		t.Fatal(err)
	}
	var ud userData
	if err := yaml.UnmarshalStrict(out, &ud); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ud.Packages, p.Packages) {
		t.Fatalf("packages %v, want %v", ud.Packages, p.Packages)
	}
	for _, bad := range []string{"", "-rf", "containerd kubelet", "kubelet;reboot", "a=", "$(x)"} {
		p.Packages = []string{bad}
		if _, err := Render(p); err == nil {
			t.Errorf("package %q rendered", bad)
		}
	}
}

// The agent's URL reaches the shell as one word, whatever it holds.
func TestAgentURLIsOneShellWord(t *testing.T) {
	p := params()
	p.AgentURL = "https://downloads.example/a'b$(touch x)`y`"
	out, err := Render(p)
	if err != nil {
		t.Fatal(err)
	}
	var ud userData
	if err := yaml.UnmarshalStrict(out, &ud); err != nil {
		t.Fatal(err)
	}
	script := ud.RunCmd[0][2]
	_, word, _ := strings.Cut(script, "\nurl=")
	word, _, _ = strings.Cut(word, "\n")
	sh := exec.Command("sh", "-c", `printf %s `+word)
	sh.Dir = t.TempDir() // were the quoting wrong, x would land there
	got, err := sh.Output()
	if err != nil || string(got) != p.AgentURL {
		t.Fatalf("sh reads %s as %q (%v)", word, got, err)
	}
}

// TestExampleSchema checks the example with cloud-init's own schema
// (make unit installs cloud-init first, through make deps).
func TestExampleSchema(t *testing.T) {
	checkSchema(t, "example-user-data.yaml")
}

func checkSchema(t *testing.T, path string) {
	t.Helper()
	if _, err := exec.LookPath("cloud-init"); err != nil {
		t.Skip("cloud-init is not installed (make deps installs it)")
	}
	path, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("cloud-init", "schema", "--config-file", path).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Valid") {
		t.Fatalf("cloud-init schema --config-file %s: %v\n%s", path, err, out)
	}
}

// The install command installs the download only when its SHA-256 is the
// one given, and only then enables the agent's unit: run with stand-ins
// for curl and systemctl, into a scratch directory. A mismatch exits
// non-zero (cloud-init's status is then error) with a line naming the URL
// and both digests, and systemctl never runs.
func TestInstallChecksTheDigest(t *testing.T) {
	for _, tool := range []string{"sh", "sha256sum", "install", "cut"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s: %v", tool, err)
		}
	}
	const binary = "agent binary\n"
	sum := sha256.Sum256([]byte(binary))
	for name, digest := range map[string]string{"match": hex.EncodeToString(sum[:]), "mismatch": strings.Repeat("ab", 32)} {
		dir := t.TempDir()
		bin := filepath.Join(dir, "bin")
		if err := os.Mkdir(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		// curl -fsSL --retry 5 -o FILE URL: writes the binary to FILE and
		// records the URL.
		fake := "#!/bin/sh\nwhile [ $# -gt 1 ]; do [ \"$1\" = -o ] && out=$2; shift; done\nprintf '%s' \"$1\" > " + filepath.Join(dir, "url") + "\nprintf 'agent binary\\n' > \"$out\"\n"
		if err := os.WriteFile(filepath.Join(bin, "curl"), []byte(fake), 0o755); err != nil {
			t.Fatal(err)
		}
		systemctl := "#!/bin/sh\necho \"$*\" >> " + filepath.Join(dir, "systemctl") + "\n"
		if err := os.WriteFile(filepath.Join(bin, "systemctl"), []byte(systemctl), 0o755); err != nil {
			t.Fatal(err)
		}
		p := params()
		p.AgentSHA256 = digest
		target := filepath.Join(dir, "mooring-agent")
		shOut, err := runInstallScript(t, p, dir, target, bin+":"+os.Getenv("PATH"))
		got, readErr := os.ReadFile(target)
		calls, _ := os.ReadFile(filepath.Join(dir, "systemctl"))
		switch name {
		case "match":
			if err != nil || readErr != nil || string(got) != binary {
				t.Fatalf("not installed: %v %v\n%s", err, readErr, shOut)
			}
			if fi, _ := os.Stat(target); fi.Mode().Perm() != 0o755 {
				t.Errorf("mode %v", fi.Mode())
			}
			if u, _ := os.ReadFile(filepath.Join(dir, "url")); string(u) != p.AgentURL {
				t.Errorf("fetched %q, want %q", u, p.AgentURL)
			}
			if string(calls) != "daemon-reload\nenable --now --no-block mooring-agent.service\n" {
				t.Errorf("systemctl calls %q", calls)
			}
		case "mismatch":
			if err == nil || readErr == nil {
				t.Fatalf("installed a binary with another digest (%v)\n%s", err, shOut)
			}
			if len(calls) > 0 {
				t.Errorf("systemctl ran after a failed install: %q", calls)
			}
			want := "mooring: the agent from " + p.AgentURL + " has SHA-256 " + hex.EncodeToString(sum[:]) + ", want " + digest +
				": not installed; mooring-agent.service is not enabled\n"
			if string(shOut) != want {
				t.Errorf("output %q, want %q", shOut, want)
			}
			if _, err := os.Stat(target + ".download"); err == nil {
				t.Error("the refused download is left behind")
			}
		}
	}
}

// runInstallScript renders p and runs its install script (runcmd's first
// item) with sh in dir, installing the agent at target instead of AgentBin,
// with PATH path: the script's output and exit.
func runInstallScript(t *testing.T, p Params, dir, target, path string) ([]byte, error) {
	t.Helper()
	out, err := Render(p)
	if err != nil {
		t.Fatal(err)
	}
	var ud userData
	if err := yaml.UnmarshalStrict(out, &ud); err != nil {
		t.Fatal(err)
	}
	sh := exec.Command("sh", "-c", strings.ReplaceAll(ud.RunCmd[0][2], AgentBin, target))
	sh.Dir = dir
	sh.Env = append(os.Environ(), "PATH="+path)
	return sh.CombinedOutput()
}
