package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/mooring-dev/mooring/agent"
	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/internal/ticket"
	"github.com/mooring-dev/mooring/internal/version"
)

// runCLI runs mooring-agent in the test's process.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := newCommand()
	cmd.SetArgs(args)
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	code = execute(cmd, &errOut)
	return out.String(), errOut.String(), code
}

var (
	caHash = "sha256:" + strings.Repeat("a", 64)
	token  = "abcdef.0123456789abcdef"
	digest = strings.Repeat("0f", 32)
)

func baseArgs(cloudName string) []string {
	return []string{"user-data", "--cloud=" + cloudName, "--api-server=https://10.0.0.1:6443",
		"--agent-url=https://downloads.example/mooring-agent", "--agent-sha256=" + digest}
}

// backendArgs are the flags each registered backend needs besides the
// common ones; a backend added without a case here fails the test.
var backendArgs = map[string][]string{
	"local": {"--metadata-url=http://127.41.0.5:8169"},
	"aws":   nil,
	"gce":   nil,
	"azure": nil,
	"oci":   nil,
	// Hetzner servers join with a join ticket, whose flags are every
	// backend's (ticketClouds).
	"hetzner": nil,
	// Droplets too.
	"digitalocean": nil,
	// vSphere VMs too; the VM's name comes from the hostname unless
	// given.
	"vsphere": {"--cloud-setting=vmName=web-1"},
	// OpenStack servers too.
	"openstack": nil,
	// Linodes too.
	"linode": nil,
}

// ticketClouds are the backends whose clouds sign no instance identity:
// user-data for them needs a join ticket (TestTicketClouds checks the
// backends say so).
var ticketClouds = map[string]bool{"hetzner": true, "digitalocean": true, "vsphere": true, "openstack": true, "linode": true}

// writeTicket writes a join ticket for an instance web-1 of cluster c1
// into dir and returns its path.
func writeTicket(t *testing.T, dir string) string {
	t.Helper()
	keys := &ticket.KeySet{}
	if _, err := keys.AddKey(); err != nil {
		t.Fatal(err)
	}
	tok, _, err := keys.Issue("web-1", "c1", time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "join-ticket")
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestUserDataPassesCloudInitSchema renders user-data for every registered
// backend, with and without --install-packages, and checks it with
// cloud-init's schema; make unit installs cloud-init first (make deps).
func TestUserDataPassesCloudInitSchema(t *testing.T) {
	if _, err := exec.LookPath("cloud-init"); err != nil {
		t.Skip("cloud-init is not installed (make deps installs it)")
	}
	dir := t.TempDir()
	caFile := writeCA(t, dir)
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ticketFile := writeTicket(t, dir)
	for _, name := range nodeid.Backends() {
		extra, ok := backendArgs[name]
		if !ok {
			t.Errorf("backend %s has no case in backendArgs", name)
			continue
		}
		if ticketClouds[name] {
			extra = append(slices.Clip(extra), "--join-ticket-file="+ticketFile)
		}
		for i, variant := range [][]string{
			{"--ca-cert-hash=" + caHash, "--bootstrap-token=" + token},
			{"--ca-file=" + caFile, "--bootstrap-token-file=" + tokenFile, "--install-packages"},
			{"--ca-cert-hash=" + caHash, "--bootstrap-token=" + token, "--install-packages=containerd,kubelet=1.36.3-1.1"},
		} {
			out := filepath.Join(dir, name+"-"+string(rune('a'+i))+".yaml")
			args := append(append(append(baseArgs(name), extra...), variant...), "--output="+out)
			if stdout, stderr, code := runCLI(t, args...); code != 0 || stdout != "" {
				t.Fatalf("%v: exit %d\n%s%s", args, code, stdout, stderr)
			}
			if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("%s: %v %v (the token is in it: want mode 0600)", out, fi, err)
			}
			checkUserData(t, out, name, strings.Contains(strings.Join(variant, " "), "--install-packages"))
			schema, err := exec.Command("cloud-init", "schema", "--config-file", out).CombinedOutput()
			if err != nil || !strings.Contains(string(schema), "Valid") {
				t.Fatalf("cloud-init schema --config-file %s (%v): %v\n%s", out, args, err, schema)
			}
		}
	}
}

// checkUserData reads back the agent's config and the package list.
func checkUserData(t *testing.T, path, cloudName string, packages bool) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ud struct {
		Packages   []string `json:"packages"`
		WriteFiles []struct {
			Path, Content string
		} `json:"write_files"`
	}
	if err := yaml.Unmarshal(data, &ud); err != nil {
		t.Fatal(err)
	}
	if packages != (len(ud.Packages) > 0) {
		t.Errorf("%s: packages %v", path, ud.Packages)
	}
	for _, f := range ud.WriteFiles {
		if f.Path != agent.DefaultConfigPath {
			continue
		}
		var cfg agent.Config
		if err := yaml.UnmarshalStrict([]byte(f.Content), &cfg); err != nil {
			t.Fatal(err)
		}
		if cfg.Cloud != cloudName || cfg.APIServer != "https://10.0.0.1:6443" || cfg.Validate() != nil {
			t.Fatalf("%s: config %+v (%v)", path, cfg, cfg.Validate())
		}
		return
	}
	t.Fatalf("%s: no %s", path, agent.DefaultConfigPath)
}

// TestUserDataToStdout: without --output the user-data goes to stdout.
func TestUserDataToStdout(t *testing.T) {
	args := append(baseArgs("aws"), "--ca-cert-hash="+caHash, "--bootstrap-token="+token,
		"--cloud-setting=region=eu-west-1", "--node-name-policy=InstanceID", "--agent-sha256=sha256:"+strings.ToUpper(digest),
		"--tpm=required", "--tpm-device=/run/tpm/tpm.sock")
	stdout, stderr, code := runCLI(t, args...)
	if code != 0 || !strings.HasPrefix(stdout, "#cloud-config\n") {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	for _, want := range []string{"cloud: aws", "region: eu-west-1", "nodeNamePolicy: InstanceID", "caCertHash: " + caHash, digest + "  ",
		"tpm: required", "tpmDevice: /run/tpm/tpm.sock"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("no %q in\n%s", want, stdout)
		}
	}
}

// Bad input exits 2 with a message naming the flag.
func TestUserDataRefusesBadFlags(t *testing.T) {
	ok := append(baseArgs("local"), "--metadata-url=http://127.0.0.1:1", "--ca-cert-hash="+caHash, "--bootstrap-token="+token)
	with := func(extra ...string) []string { return append(append([]string{}, ok...), extra...) }
	notPEM := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"user-data"}, "--cloud is required"},
		{with("--cloud=nimbus"), "--cloud=nimbus: not a known cloud (one of: " + strings.Join(nodeid.Backends(), ", ") + ")"},
		{with("--api-server=http://plain"), "--api-server"},
		{with("--ca-file=/x"), "--ca-cert-hash and --ca-file"},
		{with("--ca-cert-hash=sha256:00"), "--ca-cert-hash"},
		{append(baseArgs("aws"), "--ca-file="+notPEM, "--bootstrap-token="+token), "--ca-file: " + notPEM + ": no PEM certificate"},
		{with("--bootstrap-token=nope"), "--bootstrap-token: want"},
		{with("--bootstrap-token-file=/nonexistent"), "--bootstrap-token and --bootstrap-token-file"},
		{with("--agent-url=ftp://x"), "--agent-url"},
		{with("--agent-sha256=xyz"), "--agent-sha256"},
		{with("--metadata-url=127.0.0.1"), "--metadata-url"},
		{with("--cloud-setting=x"), `--cloud-setting "x": want key=value`},
		{with("--cloud-setting=region=x"), "--cloud-setting: local cloud: cloudSettings"},
		{with("--node-name-policy=Bogus"), "--node-name-policy:"},
		{with("--install-packages=kubelet;reboot"), "--install-packages"},
		{with("--install-packages="), "--install-packages: empty list"},
		{with("--tpm=maybe"), "--tpm: want auto, off or required"},
		{with("--tpm-device=tpmrm0"), "--tpm-device: want an absolute path"},
		{with("--tpm=required"), "--tpm=required: the local backend proves no join with a TPM"},
		{with("--bogus"), "unknown flag: --bogus"},
		{with("extra"), `unexpected argument "extra"`},
		{append(baseArgs("local"), "--ca-cert-hash="+caHash, "--bootstrap-token="+token), "--metadata-url: local cloud: metadataURL is required"},
		{append(baseArgs("aws"), "--ca-cert-hash="+caHash, "--bootstrap-token="+token, "--cloud-setting=stsEndpont=x"), "--cloud-setting: aws: cloudSettings: unknown key"},
	} {
		stdout, stderr, code := runCLI(t, c.args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, want 2 and %q; stdout %q stderr:\n%s", c.args[1:], code, c.want, stdout, stderr)
		}
	}
}

func TestVersionAndHelp(t *testing.T) {
	stdout, _, code := runCLI(t, "--version")
	if code != 0 || stdout != "mooring-agent "+version.Get().String()+"\n" {
		t.Errorf("--version: exit %d, %q", code, stdout)
	}
	// As cobra's own --version did: arguments and other flags are ignored,
	// the config is not read; help wins.
	for _, args := range [][]string{{"--version", "extra"}, {"--config=/nonexistent", "--version"}} {
		if stdout, stderr, code := runCLI(t, args...); code != 0 || stdout != "mooring-agent "+version.Get().String()+"\n" {
			t.Errorf("%v: exit %d, %q\n%s", args, code, stdout, stderr)
		}
	}
	if stdout, _, code := runCLI(t, "--version", "--help"); code != 0 || !strings.Contains(stdout, "Exit codes") {
		t.Errorf("--version --help: exit %d, %q", code, stdout)
	}
	stdout, _, code = runCLI(t, "--help")
	for _, want := range []string{"joins this machine to a Kubernetes cluster", "Exit codes", "--config", "--systemd-user", "--no-start-kubelet", "-v, --v", "--version", "user-data"} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("--help: exit %d, no %q in\n%s", code, want, stdout)
		}
	}
	if strings.Contains(stdout, "help for") || strings.Contains(stdout, "completion") {
		t.Errorf("--help has cobra's boilerplate:\n%s", stdout)
	}
	stdout, _, code = runCLI(t, "user-data", "--help")
	if code != 0 || !strings.Contains(stdout, "one of: "+strings.Join(nodeid.Backends(), ", ")) {
		t.Errorf("user-data --help: exit %d, does not list the clouds:\n%s", code, stdout)
	}
	// Go's single-dash flags are gone; the harness's --v=2 still works.
	if _, stderr, code := runCLI(t, "-config=/x"); code != 2 {
		t.Errorf("-config: exit %d\n%s", code, stderr)
	}
}

// A config that does not load exits 2, as before.
func TestBadConfigExits2(t *testing.T) {
	_, _, code := runCLI(t, "--config="+filepath.Join(t.TempDir(), "none.yaml"), "--systemd-user", "--v=2")
	if code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
}

// writeCA writes a self-signed CA certificate.
func writeCA(t *testing.T, dir string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
