package cloudinit

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/mooring-dev/mooring/agent"
	"github.com/mooring-dev/mooring/systemd/units"
)

func params() Params {
	return Params{
		Agent: agent.Config{
			APIServer: "https://127.0.0.1:6443", Cloud: "local", MetadataURL: "http://127.41.0.5:8169",
		},
		CACertPEM:      "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
		BootstrapToken: "abcdef.0123456789abcdef",
		AgentURL:       "https://downloads.example/mooring-agent",
		AgentSHA256:    strings.Repeat("ab", 32),
	}
}

// TestUserDataMatchesWhatTheAgentExpects renders user-data and checks it
// against the agent's config loader and the unit files.
func TestUserDataMatchesWhatTheAgentExpects(t *testing.T) {
	out, err := Render(params())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(out), "#cloud-config\n") {
		t.Fatal("no #cloud-config header")
	}
	var ud userData
	if err := yaml.UnmarshalStrict(out, &ud); err != nil {
		t.Fatal(err)
	}
	files := map[string]file{}
	for _, f := range ud.WriteFiles {
		files[f.Path] = f
	}

	// The config, written where the unit's ExecStart reads it, loads.
	cfgFile, ok := files[agent.DefaultConfigPath]
	if !ok || cfgFile.Permissions != "0600" {
		t.Fatalf("agent config: %+v", cfgFile)
	}
	if !strings.Contains(units.Agent, "--config="+agent.DefaultConfigPath) {
		t.Fatal("the unit reads another config path")
	}
	tmp := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(tmp, []byte(cfgFile.Content), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := agent.LoadConfig(tmp)
	if err != nil {
		t.Fatalf("the rendered config does not load: %v", err)
	}
	if cfg.CAFile != CAPath || cfg.BootstrapTokenFile != TokenPath {
		t.Fatalf("config points at %s and %s", cfg.CAFile, cfg.BootstrapTokenFile)
	}
	for _, p := range []string{CAPath, TokenPath, units.AgentPath, units.KubeletDropInPath} {
		if _, ok := files[p]; !ok {
			t.Errorf("%s is not written", p)
		}
	}
	if files[TokenPath].Permissions != "0600" || files[units.AgentPath].Content != units.Agent || files[units.KubeletDropInPath].Content != units.KubeletDropIn {
		t.Fatal("token mode or unit contents differ")
	}

	// The sandbox lets the agent write where its config says it writes.
	for _, dir := range []string{cfg.CertDir, filepath.Dir(cfg.Kubeconfig), filepath.Dir(cfg.KubeletEnvFile)} {
		if !strings.Contains(units.Agent, dir) {
			t.Errorf("the agent writes %s, which mooring-agent.service does not make writable", dir)
		}
	}
	// The kubelet reads what the agent writes.
	for _, want := range []string{"EnvironmentFile=-" + cfg.KubeletEnvFile, "--kubeconfig=" + cfg.Kubeconfig, "--cert-dir=" + cfg.CertDir, "$" + agent.KubeletArgsVar} {
		if !strings.Contains(units.KubeletDropIn, want) {
			t.Errorf("the kubelet drop-in lacks %q", want)
		}
	}
	if cfg.KubeletUnit != "kubelet.service" || !strings.Contains(units.Agent, "Before=kubelet.service") {
		t.Error("the agent's kubelet unit and the ordering disagree")
	}

	// The unit is enabled without blocking cloud-init; the binary is checked.
	// One runcmd item (see installScript), enabling last.
	if len(ud.RunCmd) != 1 || len(ud.RunCmd[0]) != 3 || ud.RunCmd[0][0] != "sh" {
		t.Fatalf("runcmd %v", ud.RunCmd)
	}
	script := ud.RunCmd[0][2]
	if !strings.HasPrefix(script, "set -eu\n") || !strings.HasSuffix(script, "\nsystemctl enable --now --no-block mooring-agent.service\n") ||
		!strings.Contains(script, "sha256sum") || !strings.Contains(script, AgentBin) {
		t.Fatalf("install script:\n%s", script)
	}
}

func TestRenderRefusesBadParams(t *testing.T) {
	for name, mutate := range map[string]func(*Params){
		"token":     func(p *Params) { p.BootstrapToken = "nope" },
		"digest":    func(p *Params) { p.AgentSHA256 = "xyz" },
		"url":       func(p *Params) { p.AgentURL = "ftp://x" },
		"no CA":     func(p *Params) { p.CACertPEM = "" },
		"apiserver": func(p *Params) { p.Agent.APIServer = "http://plain" },
		"ticket":    func(p *Params) { p.JoinTicket = "not.a.ticket" },
	} {
		p := params()
		mutate(&p)
		if _, err := Render(p); err == nil {
			t.Errorf("%s: rendered", name)
		}
	}
}

// TestUnitsVerify runs systemd-analyze verify on the agent's unit, when
// systemd is installed (make deps installs it).
func TestUnitsVerify(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze not installed")
	}
	dir := t.TempDir()
	unit := strings.ReplaceAll(units.Agent, AgentBin, "/bin/true")
	path := filepath.Join(dir, "mooring-agent.service")
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("systemd-analyze", "verify", "--man=no", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// Bootstrap tokens are checked as the apiserver checks them
// (k8s.io/cluster-bootstrap): a malformed one is refused before it reaches a
// machine that could never join with it.
func TestBootstrapTokenForm(t *testing.T) {
	for token, ok := range map[string]bool{
		"abcdef.0123456789abcdef":   true,
		"ABCDEF.0123456789abcdef":   false, // upper case
		"abcdef.0123456789abcde":    false, // short secret
		"abcdef-0123456789abcdef":   false,
		"abcdef.0123456789abcdef\n": false,
		"":                          false,
	} {
		p := params()
		p.BootstrapToken = token
		if _, err := Render(p); (err == nil) != ok {
			t.Errorf("token %q: err %v, want ok=%v", token, err, ok)
		}
	}
}
