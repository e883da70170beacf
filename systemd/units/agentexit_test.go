package units_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/internal/pki"
	"github.com/mooring-dev/mooring/systemd/systemdtest"
	"github.com/mooring-dev/mooring/systemd/units"
	"github.com/mooring-dev/mooring/test/harness"
)

// testRestartDelay stands in for the unit's RestartSec, so that a restart
// would come within the test's wait.
const testRestartDelay = 200 * time.Millisecond

// agentUnit is the shipped mooring-agent.service made to run in the test
// bed's systemd --user: its ExecStartPre (which creates the kubelet's
// directories on the host) dropped, ExecStart running execStart,
// ReadWritePaths pointed at rw, ProtectHome=tmpfs (the user manager cannot
// make paths inaccessible; sandbox_test.go), and RestartSec shortened.
// Everything else, Type=notify, Restart= and RestartPreventExitStatus=
// included, is as shipped.
func agentUnit(t *testing.T, execStart, rw string) string {
	t.Helper()
	var out []string
	seen := map[string]bool{}
	for _, line := range strings.Split(units.Agent, "\n") {
		key, _, _ := strings.Cut(line, "=")
		switch key {
		case "ExecStartPre":
			continue
		case "ExecStart":
			line = "ExecStart=" + execStart
		case "ReadWritePaths":
			line = "ReadWritePaths=" + rw
		case "ProtectHome":
			line = "ProtectHome=tmpfs"
		case "RestartSec":
			line = fmt.Sprintf("RestartSec=%dms", testRestartDelay.Milliseconds())
		}
		seen[key] = true
		out = append(out, line)
	}
	for _, key := range []string{"Type", "Restart", "RestartPreventExitStatus", "ExecStart", "ReadWritePaths", "RestartSec"} {
		if !seen[key] {
			t.Fatalf("mooring-agent.service has no %s=", key)
		}
	}
	return strings.Join(out, "\n")
}

// show reads unit properties with systemctl --user show.
func show(t *testing.T, unit string) map[string]string {
	t.Helper()
	out, err := exec.Command("systemctl", "--user", "show", "--no-pager",
		"-p", "ActiveState,Result,ExecMainStatus,NRestarts,StatusText", unit).CombinedOutput()
	if err != nil {
		t.Fatalf("systemctl show %s: %v\n%s", unit, err, out)
	}
	props := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		props[k] = v
	}
	return props
}

// TestBadConfigIsNotRestarted runs the real mooring-agent, built as it
// ships, under the shipped unit in a real systemd --user, with a malformed
// bootstrap token and a metadata service that cannot be reached: the agent
// must exit 2 at once, and systemd must leave the unit failed, not restart
// it (RestartPreventExitStatus=2 3), with the reason in its StatusText for
// systemctl status. A unit that exits 1 under the same settings is
// restarted (the control).
func TestBadConfigIsNotRestarted(t *testing.T) {
	if _, err := exec.LookPath("systemd"); err != nil {
		t.Skip("systemd not installed (hack/install-deps.sh installs it)")
	}
	if os.Getuid() != 0 {
		t.Skip("needs root: the test bed's systemd --user runs in its own mount namespace and cgroup")
	}
	// PrivateTmp and ProtectHome hide /tmp and the homes from the unit:
	// everything it reads lives under /var/lib (as in sandbox_test.go).
	base, err := os.MkdirTemp("/var/lib", "mooring-agent-exit-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	agent, err := harness.Build(harness.AgentPkg, base)
	if err != nil {
		t.Fatal(err)
	}
	rw := filepath.Join(base, "rw")
	if err := os.Mkdir(rw, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) string {
		p := filepath.Join(base, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	badToken := "abcdef-0123456789abcdef" // '-' where the '.' goes
	config := write("agent.yaml", strings.Join([]string{
		"apiServer: https://127.0.0.1:6443",
		"caFile: " + write("ca.crt", caPEM(t)),
		"bootstrapTokenFile: " + write("token", badToken+"\n"),
		"cloud: local",
		"metadataURL: http://127.0.0.1:1", // nothing listens: the agent would retry it for ever
		"certDir: " + filepath.Join(rw, "pki"),
		"kubeconfig: " + filepath.Join(rw, "kubelet.conf"),
		"kubeletEnvFile: " + filepath.Join(rw, "kubelet.env"),
		"kubeletConfigFile: " + filepath.Join(rw, "config.yaml"),
	}, "\n")+"\n")

	us := systemdtest.Start(t, filepath.Join(base, "systemd"))
	unitFiles := map[string]string{
		"mooring-agent.service": agentUnit(t, agent+" --config="+config+" --no-start-kubelet", rw),
		"exit1.service":         agentUnit(t, "/bin/sh -c 'exit 1'", rw),
	}
	for name, content := range unitFiles {
		if err := os.WriteFile(filepath.Join(us.UnitDir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	u := systemdtest.Units(ctx, t)

	// The control: exit 1 is restarted, again and again.
	if err := u.Start(ctx, "exit1.service"); err != nil {
		t.Fatal(err)
	}
	for {
		if n, _ := strconv.Atoi(show(t, "exit1.service")["NRestarts"]); n >= 2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("exit1.service was not restarted: %v", show(t, "exit1.service"))
		case <-time.After(50 * time.Millisecond):
		}
	}
	if out, err := exec.Command("systemctl", "--user", "stop", "exit1.service").CombinedOutput(); err != nil {
		t.Fatalf("stop exit1.service: %v\n%s", err, out)
	}

	began := time.Now()
	if err := u.Start(ctx, "mooring-agent.service"); err != nil {
		t.Fatal(err)
	}
	if state := systemdtest.WaitSettled(ctx, t, u, "mooring-agent.service"); state != "failed" {
		t.Fatalf("mooring-agent.service is %s, want failed: %v", state, show(t, "mooring-agent.service"))
	}
	failedAfter := time.Since(began)
	// Ten times RestartSec: a restart would have come by now.
	time.Sleep(10 * testRestartDelay)
	p := show(t, "mooring-agent.service")
	t.Logf("mooring-agent.service failed %v after its start: %v", failedAfter.Round(time.Millisecond), p)
	if p["ActiveState"] != "failed" || p["Result"] != "exit-code" || p["ExecMainStatus"] != "2" || p["NRestarts"] != "0" {
		t.Errorf("want failed, exit-code, status 2 and no restart; got %v", p)
	}
	want := "bad configuration: bootstrapTokenFile " + filepath.Join(base, "token") + ": not a bootstrap token"
	if !strings.HasPrefix(p["StatusText"], want) {
		t.Errorf("StatusText %q, want it to start with %q", p["StatusText"], want)
	}
	if strings.Contains(p["StatusText"], badToken) {
		t.Error("StatusText holds the token")
	}
	// What systemctl status shows the operator.
	out, _ := exec.Command("systemctl", "--user", "status", "--no-pager", "mooring-agent.service").CombinedOutput()
	if !strings.Contains(string(out), "Status: \""+want) {
		t.Errorf("systemctl status does not show the reason:\n%s", out)
	}
	t.Logf("systemctl status:\n%s", out)
}

// caPEM is a CA certificate, PEM.
func caPEM(t *testing.T) string {
	t.Helper()
	ca, err := pki.NewCA("test-cluster-ca")
	if err != nil {
		t.Fatal(err)
	}
	return string(ca.CertPEM)
}
