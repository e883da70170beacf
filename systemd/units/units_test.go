package units

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// entry is one "Key=value" line of a unit file, with its section.
type entry struct{ section, key, value string }

// parseUnit reads unit-file syntax: [Section] headers, Key=value lines,
// comments starting with # or ;, and lines continued by a trailing
// backslash.
func parseUnit(t *testing.T, text string) []entry {
	t.Helper()
	var out []entry
	section := ""
	sc := bufio.NewScanner(strings.NewReader(text))
	var cont string
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cont == "" && (line == "" || line[0] == '#' || line[0] == ';') {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cont += strings.TrimSuffix(line, `\`) + " "
			continue
		}
		line, cont = cont+line, ""
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = line[1 : len(line)-1]
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("unit line without '=': %q", line)
		}
		out = append(out, entry{section, strings.TrimSpace(k), strings.TrimSpace(v)})
	}
	return out
}

// unquoteWords splits a value into words as systemd does for Environment=
// and environment files: whitespace separates, double or single quotes
// group.
func unquoteWords(s string) []string {
	var words []string
	var cur strings.Builder
	in, quote := false, byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			cur.WriteByte(c)
		case c == '"' || c == '\'':
			quote, in = c, true
		case c == ' ' || c == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// composed is kubelet.service as systemd sees it after merging drop-ins.
type composed struct {
	execStart string   // the last ExecStart after the last reset
	env       []string // Environment= assignments, in order
	envFiles  []string // EnvironmentFile= paths, "-" kept
}

// compose merges the base unit and the drop-ins the way systemd does:
// base first, then drop-ins in the lexical order of their file names; an
// empty ExecStart= clears the list, so the last one after it runs.
func compose(t *testing.T, base string, dropIns map[string]string) composed {
	t.Helper()
	names := make([]string, 0, len(dropIns))
	for n := range dropIns {
		names = append(names, n)
	}
	sort.Strings(names)
	files := []string{base}
	for _, n := range names {
		files = append(files, dropIns[n])
	}
	var c composed
	var execs []string
	for _, f := range files {
		for _, e := range parseUnit(t, f) {
			if e.section != "Service" {
				continue
			}
			switch e.key {
			case "ExecStart":
				if e.value == "" {
					execs = nil
				} else {
					execs = append(execs, e.value)
				}
			case "Environment":
				c.env = append(c.env, unquoteWords(e.value)...)
			case "EnvironmentFile":
				c.envFiles = append(c.envFiles, e.value)
			}
		}
	}
	if len(execs) != 1 {
		t.Fatalf("a simple service needs exactly one ExecStart, the composition has %q", execs)
	}
	c.execStart = execs[0]
	return c
}

// argv expands the command line as systemd would with these environment
// files present (path -> content): Environment= first, then the files in
// order, each overriding what came before; "$NAME" as a whole word becomes
// its value split at whitespace, or no word at all when unset.
func (c composed) argv(t *testing.T, files map[string]string) []string {
	t.Helper()
	env := map[string]string{}
	set := func(assignments []string) {
		for _, a := range assignments {
			k, v, ok := strings.Cut(a, "=")
			if !ok {
				t.Fatalf("bad assignment %q", a)
			}
			env[k] = v
		}
	}
	set(c.env)
	for _, f := range c.envFiles {
		content, ok := files[strings.TrimPrefix(f, "-")]
		if !ok {
			if !strings.HasPrefix(f, "-") {
				t.Fatalf("required environment file %s is missing", f)
			}
			continue
		}
		for _, line := range strings.Split(content, "\n") {
			if line = strings.TrimSpace(line); line != "" && line[0] != '#' {
				k, v, _ := strings.Cut(line, "=")
				set([]string{k + "=" + strings.Join(unquoteWords(v), " ")})
			}
		}
	}
	var out []string
	for _, w := range strings.Fields(c.execStart) {
		if name, ok := strings.CutPrefix(w, "$"); ok {
			out = append(out, strings.Fields(env[name])...)
			continue
		}
		if strings.Contains(w, "$") {
			t.Fatalf("word %q: only whole-word $VARIABLES are modelled", w)
		}
		out = append(out, w)
	}
	return out
}

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// dropInName is the shipped drop-in's file name.
func dropInName() string { return filepath.Base(KubeletDropInPath) }

// Environment files as a kubeadm-joined node and the agent leave them.
var (
	kubeadmFlagsEnv = `KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock --pod-infra-container-image=registry.k8s.io/pause:3.10"`
	defaultKubelet  = `KUBELET_EXTRA_ARGS="--max-pods=50 --node-labels=pool=a"`
	mooringEnv      = `KUBELET_MOORING_ARGS="--provider-id=local://i-1 --node-ip=10.0.0.5"`
)

// The kubelet's command lines these environment files give: the agent's
// drop-in alone, and with kubeadm's.
var (
	wantAlone = []string{"/usr/bin/kubelet", "--config=/var/lib/kubelet/config.yaml", "--kubeconfig=/etc/kubernetes/kubelet.conf", "--cert-dir=/var/lib/kubelet/pki", "--cloud-provider=external",
		"--provider-id=local://i-1", "--node-ip=10.0.0.5"}
	wantWithKubeadm = []string{"/usr/bin/kubelet", "--config=/var/lib/kubelet/config.yaml", "--kubeconfig=/etc/kubernetes/kubelet.conf", "--cert-dir=/var/lib/kubelet/pki", "--cloud-provider=external",
		"--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf", "--kubeconfig=/etc/kubernetes/kubelet.conf", "--config=/var/lib/kubelet/config.yaml",
		"--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock", "--pod-infra-container-image=registry.k8s.io/pause:3.10",
		"--max-pods=50", "--node-labels=pool=a", "--provider-id=local://i-1", "--node-ip=10.0.0.5"}
)

func TestKubeletDropInComposesWithKubeadm(t *testing.T) {
	base, kubeadm := readTestdata(t, "kubelet.service"), readTestdata(t, "10-kubeadm.conf")
	if dropInName() <= "10-kubeadm.conf" {
		t.Fatalf("%s does not sort after 10-kubeadm.conf", dropInName())
	}
	withKubeadm := compose(t, base, map[string]string{"10-kubeadm.conf": kubeadm, dropInName(): KubeletDropIn})
	alone := compose(t, base, map[string]string{dropInName(): KubeletDropIn})

	// One command line serves both: each variable exactly once.
	for _, c := range []composed{withKubeadm, alone} {
		words := strings.Fields(c.execStart)
		if words[0] != "/usr/bin/kubelet" {
			t.Errorf("runs %s", words[0])
		}
		for _, v := range []string{"$KUBELET_KUBECONFIG_ARGS", "$KUBELET_CONFIG_ARGS", "$KUBELET_KUBEADM_ARGS", "$KUBELET_EXTRA_ARGS", "$KUBELET_MOORING_ARGS", "--cloud-provider=external"} {
			if n := strings.Count(" "+c.execStart+" ", " "+v+" "); n != 1 {
				t.Errorf("%s appears %d times in %q", v, n, c.execStart)
			}
		}
	}
	if !slices.Contains(withKubeadm.envFiles, "-/etc/mooring/kubelet.env") || !slices.Contains(withKubeadm.envFiles, "-/var/lib/kubelet/kubeadm-flags.env") {
		t.Errorf("environment files %q", withKubeadm.envFiles)
	}

	// Without kubeadm: a working kubelet command line with the agent's flags.
	got := alone.argv(t, map[string]string{"/etc/mooring/kubelet.env": mooringEnv})
	want := wantAlone
	if !slices.Equal(got, want) {
		t.Errorf("alone:\n got %q\nwant %q", got, want)
	}
	t.Logf("without kubeadm: %s", strings.Join(got, " "))

	// With kubeadm: kubeadm's flags, the admin's and the agent's, the agent's last.
	got = withKubeadm.argv(t, map[string]string{
		"/etc/mooring/kubelet.env":           mooringEnv,
		"/var/lib/kubelet/kubeadm-flags.env": kubeadmFlagsEnv,
		"/etc/default/kubelet":               defaultKubelet,
	})
	want = wantWithKubeadm
	if !slices.Equal(got, want) {
		t.Errorf("with kubeadm:\n got %q\nwant %q", got, want)
	}
	t.Logf("with kubeadm: %s", strings.Join(got, " "))
	// The kubelet keeps the last value of a repeated flag: kubeadm's paths
	// win over the defaults, the agent's over everything.
	last := map[string]string{}
	for _, a := range got[1:] {
		k, v, _ := strings.Cut(a, "=")
		last[k] = v
	}
	if last["--kubeconfig"] != "/etc/kubernetes/kubelet.conf" || last["--provider-id"] != "local://i-1" || last["--cloud-provider"] != "external" {
		t.Errorf("effective flags %v", last)
	}

	// Before the agent has run: no kubeadm and no env file still starts.
	if got := alone.argv(t, nil); !slices.Equal(got, wantAlone[:5]) {
		t.Errorf("no env file: %q", got)
	}
}

// TestKubeletUnitsVerify has systemd-analyze load kubelet.service with the
// drop-ins, with and without kubeadm's, from a private unit path (no host
// unit directory is read). Binaries that are not on this machine become
// /bin/true so the existence checks pass.
func TestKubeletUnitsVerify(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze not installed (hack/install-deps.sh installs systemd)")
	}
	for _, tc := range []struct {
		name                 string
		withKubeadm, invalid bool
	}{{"with kubeadm", true, false}, {"alone", false, false}, {"a broken drop-in is caught", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			files := map[string]string{
				"kubelet.service":                   readTestdata(t, "kubelet.service"),
				"kubelet.service.d/" + dropInName(): KubeletDropIn,
				filepath.Base(AgentPath):            Agent,
				"sysinit.target":                    "[Unit]\nDescription=stub\n",
				"basic.target":                      "[Unit]\nDescription=stub\n",
				"shutdown.target":                   "[Unit]\nDescription=stub\n",
				"network-online.target":             "[Unit]\nDescription=stub\n",
				"multi-user.target":                 "[Unit]\nDescription=stub\n",
			}
			if tc.withKubeadm {
				files["kubelet.service.d/10-kubeadm.conf"] = readTestdata(t, "10-kubeadm.conf")
			}
			if tc.invalid {
				// Proves the drop-in directory is read: its last ExecStart names
				// a binary that does not exist.
				files["kubelet.service.d/99-broken.conf"] = "[Service]\nExecStart=\nExecStart=/nonexistent/kubelet\n"
			}
			for rel, content := range files {
				content = strings.NewReplacer("/usr/bin/kubelet", "/bin/true", "/usr/local/bin/mooring-agent", "/bin/true").Replace(content)
				p := filepath.Join(dir, rel)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command("systemd-analyze", "verify", "--man=no", "kubelet.service", "mooring-agent.service")
			// verify reads a unit named without a slash from the working
			// directory; the unit path supplies its drop-ins and dependencies.
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "SYSTEMD_UNIT_PATH="+dir, "SYSTEMD_LOG_LEVEL=notice")
			out, err := cmd.CombinedOutput()
			if tc.invalid {
				if err == nil || !strings.Contains(string(out), "/nonexistent/kubelet") {
					t.Fatalf("systemd-analyze verify did not see the broken drop-in: %v\n%s", err, out)
				}
				return
			}
			if err != nil || strings.TrimSpace(string(out)) != "" {
				t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
			}
		})
	}
}

var exposureLine = regexp.MustCompile(`Overall exposure level for mooring-agent\.service: ([0-9]+\.[0-9])`)

// TestAgentExposure measures mooring-agent.service with systemd-analyze
// security --offline (no running systemd needed): at most 3.0.
func TestAgentExposure(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze not installed (hack/install-deps.sh installs systemd)")
	}
	if v := systemdVersion(t); v < 250 {
		t.Skipf("systemd %d: security --offline needs 250 or later", v)
	}
	path := filepath.Join(t.TempDir(), "mooring-agent.service")
	unit := strings.ReplaceAll(Agent, "/usr/local/bin/mooring-agent", "/bin/true")
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	// --threshold is on the 0-100 scale the tool prints as 0.0-10.0.
	out, err := exec.Command("systemd-analyze", "security", "--offline=true", "--threshold=30", "--no-pager", path).CombinedOutput()
	m := exposureLine.FindSubmatch(out)
	if m == nil {
		t.Fatalf("no overall exposure in the output (%v):\n%s", err, out)
	}
	exposure, _ := strconv.ParseFloat(string(m[1]), 64)
	t.Logf("mooring-agent.service exposure %.1f", exposure)
	if exposure > 3.0 || err != nil {
		t.Fatalf("exposure %.1f (%v), want at most 3.0:\n%s", exposure, err, out)
	}
}

func systemdVersion(t *testing.T) int {
	t.Helper()
	out, err := exec.Command("systemd-analyze", "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(out))
	if len(f) < 2 {
		t.Fatalf("systemd-analyze --version: %q", out)
	}
	v, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatalf("systemd-analyze --version: %q", out)
	}
	return v
}
