package units

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/systemd"
	"github.com/mooring-dev/mooring/systemd/systemdtest"
)

// The test binary doubles as the probe that runs inside the sandbox: with
// probeDirEnv set it does the agent's kinds of work and exits.
const (
	probeDirEnv  = "MOORING_SANDBOX_PROBE_DIR"
	probeAddrEnv = "MOORING_SANDBOX_PROBE_ADDR"
	probeUnitEnv = "MOORING_SANDBOX_PROBE_UNIT"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(probeDirEnv); dir != "" {
		os.Exit(runProbe(dir))
	}
	os.Exit(m.Run())
}

// probeResult is what the probe saw, written to result.json.
type probeResult struct {
	Wrote, Dialed, Started      string // "" when it worked, else the error
	Addresses                   int    // interfaces' addresses (netlink)
	AddressesErr                string
	ReadOnlyErrno               int    // errno writing outside ReadWritePaths
	CapEff, NoNewPrivs, Seccomp string // from /proc/self/status
	ProcOptions                 string // the /proc mount's options
	ProcSysSeen                 bool
	RootEntries                 int // what is left of /root
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func runProbe(dir string) int {
	var r probeResult
	// A file in a ReadWritePaths directory, as the agent writes its files.
	r.Wrote = errText(os.WriteFile(filepath.Join(dir, "written"), []byte("from the sandbox\n"), 0o600))
	// A file anywhere else: the file system is read-only.
	if err := os.WriteFile(filepath.Join(filepath.Dir(dir), "outside"), nil, 0o600); err != nil {
		var errno syscall.Errno
		if errors.As(err, &errno) {
			r.ReadOnlyErrno = int(errno)
		}
	}
	// TCP, as to the metadata service and the apiserver.
	if c, err := net.DialTimeout("tcp", os.Getenv(probeAddrEnv), 10*time.Second); err != nil {
		r.Dialed = err.Error()
	} else {
		_, err = io.WriteString(c, "probe\n")
		r.Dialed = errText(errors.Join(err, c.Close()))
	}
	// Netlink, as the agent lists the machine's addresses for --node-ip.
	addrs, err := net.InterfaceAddrs()
	r.Addresses, r.AddressesErr = len(addrs), errText(err)
	// D-Bus, as the agent starts the kubelet: mooring's own wrapper.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if conn, err := systemd.DialUser(ctx); err != nil {
		r.Started = err.Error()
	} else {
		u := systemd.NewUnits(conn)
		r.Started = errText(u.Start(ctx, os.Getenv(probeUnitEnv)))
		u.Close()
	}
	if status, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(status), "\n") {
			k, v, _ := strings.Cut(line, ":")
			switch k {
			case "CapEff":
				r.CapEff = strings.TrimSpace(v)
			case "NoNewPrivs":
				r.NoNewPrivs = strings.TrimSpace(v)
			case "Seccomp":
				r.Seccomp = strings.TrimSpace(v)
			}
		}
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(mi), "\n") {
			if f := strings.Fields(line); len(f) > 4 && f[4] == "/proc" {
				r.ProcOptions = f[len(f)-1]
			}
		}
	}
	if entries, err := os.ReadDir("/root"); err == nil {
		r.RootEntries = len(entries)
	}
	_, err = os.Stat("/proc/sys/kernel")
	r.ProcSysSeen = err == nil
	out, _ := json.Marshal(r)
	if err := os.WriteFile(filepath.Join(dir, "result.json"), out, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// notSandbox are the agent's [Service] settings that are not part of its
// sandbox; every other one is carried into the probe's unit.
var notSandbox = map[string]bool{
	"Type": true, "NotifyAccess": true, "ExecStartPre": true, "ExecStart": true, "RemainAfterExit": true,
	"Restart": true, "RestartSec": true, "RestartPreventExitStatus": true, "TimeoutStartSec": true, "WatchdogSec": true,
}

// sandboxLines extracts the sandbox settings from mooring-agent.service,
// with ReadWritePaths pointed at rw.
func sandboxLines(t *testing.T, rw string) []string {
	t.Helper()
	var lines []string
	sawRW := false
	for _, e := range parseUnit(t, Agent) {
		if e.section != "Service" || notSandbox[e.key] {
			continue
		}
		switch {
		case e.key == "ReadWritePaths":
			e.value, sawRW = rw, true
		case e.key == "ProtectHome" && e.value == "yes":
			// The test bed's user manager cannot make paths inaccessible
			// (InaccessiblePaths=, which ProtectHome=yes uses, fails with
			// status 226 there); an empty tmpfs hides the homes just as well.
			e.value = "tmpfs"
		}
		lines = append(lines, e.key+"="+e.value)
	}
	if !sawRW || len(lines) < 20 {
		t.Fatalf("the agent's sandbox looks wrong: %q", lines)
	}
	return lines
}

// TestSandboxAllowsTheAgentsWork runs a program under the agent's sandbox
// settings, taken from the shipped unit, in a real systemd --user (root's,
// so the settings that need privileges apply), and checks that it can do
// what the agent does (write under ReadWritePaths, dial TCP, list addresses
// over netlink, start a unit over D-Bus) and that the sandbox is really on.
func TestSandboxAllowsTheAgentsWork(t *testing.T) {
	if _, err := exec.LookPath("systemd"); err != nil {
		t.Skip("systemd not installed (hack/install-deps.sh installs it)")
	}
	if os.Getuid() != 0 {
		t.Skip("needs root: the test bed's systemd --user runs in its own mount namespace and cgroup")
	}
	// PrivateTmp and ProtectHome hide /tmp, /var/tmp and home directories
	// from the probe, so everything it touches (its binary, the bus, the
	// writable directory) lives under /var/lib.
	base, err := os.MkdirTemp("/var/lib", "mooring-sandbox-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	rw := filepath.Join(base, "rw")
	if err := os.Mkdir(rw, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	probe := filepath.Join(base, "probe")
	if err := copyFile(self, probe); err != nil {
		t.Fatal(err)
	}

	us := systemdtest.Start(t, filepath.Join(base, "systemd"))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		line, _ := bufio.NewReader(c).ReadString('\n')
		got <- line
	}()

	other := "[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/bin/true\n"
	probeUnit := "[Unit]\nDescription=mooring-agent's sandbox, with a probe\n\n[Service]\nType=oneshot\nRemainAfterExit=yes\n" +
		fmt.Sprintf("Environment=%s=%s %s=%s %s=%s\n", probeDirEnv, rw, probeAddrEnv, ln.Addr(), probeUnitEnv, "other.service") +
		"Environment=DBUS_SESSION_BUS_ADDRESS=unix:path=" + filepath.Join(us.RuntimeDir, "bus") + "\n" +
		"ExecStart=" + probe + "\n" + strings.Join(sandboxLines(t, rw), "\n") + "\n"
	for name, content := range map[string]string{"other.service": other, "probe.service": probeUnit} {
		if err := os.WriteFile(filepath.Join(us.UnitDir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	u := systemdtest.Units(ctx, t)
	if err := u.Start(ctx, "probe.service"); err != nil {
		t.Fatal(err)
	}
	state := systemdtest.WaitSettled(ctx, t, u, "probe.service")
	if state != "active" {
		out, _ := exec.Command("systemctl", "--user", "show", "--no-pager", "-p", "Result,ExecMainCode,ExecMainStatus,StatusErrno", "probe.service").CombinedOutput()
		t.Fatalf("probe.service is %s:\n%s", state, out)
	}

	var r probeResult
	b, err := os.ReadFile(filepath.Join(rw, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	t.Logf("probe saw: %+v", r)
	// The agent's work.
	if r.Wrote != "" {
		t.Errorf("write under ReadWritePaths: %s", r.Wrote)
	}
	if written, err := os.ReadFile(filepath.Join(rw, "written")); err != nil || string(written) != "from the sandbox\n" {
		t.Errorf("the written file: %q, %v", written, err)
	}
	if r.Dialed != "" {
		t.Errorf("TCP: %s", r.Dialed)
	}
	select {
	case line := <-got:
		if line != "probe\n" {
			t.Errorf("the listener read %q", line)
		}
	case <-time.After(10 * time.Second):
		t.Error("the listener got no connection")
	}
	if r.AddressesErr != "" || r.Addresses == 0 {
		t.Errorf("listing addresses: %d, %s", r.Addresses, r.AddressesErr)
	}
	if r.Started != "" {
		t.Errorf("starting a unit over D-Bus: %s", r.Started)
	}
	if s := systemdtest.WaitSettled(ctx, t, u, "other.service"); s != "active" {
		t.Errorf("other.service is %s", s)
	}
	// The sandbox was on.
	if syscall.Errno(r.ReadOnlyErrno) != syscall.EROFS {
		t.Errorf("writing outside ReadWritePaths: errno %d, want EROFS", r.ReadOnlyErrno)
	}
	if r.CapEff != "0000000000000000" || r.NoNewPrivs != "1" || r.Seccomp != "2" {
		t.Errorf("capabilities %s, no_new_privs %s, seccomp %s: want none, 1, 2 (filter)", r.CapEff, r.NoNewPrivs, r.Seccomp)
	}
	// ProtectProc and ProcSubset: a /proc of its own. (Root sees every
	// process even so: hidepid never hides from the group it trusts, 0.)
	if !strings.Contains(r.ProcOptions, "hidepid=invisible") || !strings.Contains(r.ProcOptions, "subset=pid") || r.ProcSysSeen {
		t.Errorf("/proc mounted with %q, /proc/sys visible %v", r.ProcOptions, r.ProcSysSeen)
	}
	if r.RootEntries != 0 {
		t.Errorf("ProtectHome: /root shows %d entries", r.RootEntries)
	}
	if _, err := os.Stat(filepath.Join(base, "outside")); err == nil {
		t.Error("the probe wrote outside ReadWritePaths")
	}
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// TestKubeletCommandLineInSystemd has a real systemd --user compose
// kubelet.service with the drop-ins and run it, the kubelet replaced by a
// script that records its arguments: systemd itself must give the command
// lines TestKubeletDropInComposesWithKubeadm derives, with and without
// kubeadm's drop-in. Paths of the environment files move into the test's
// directory; nothing else changes.
func TestKubeletCommandLineInSystemd(t *testing.T) {
	if _, err := exec.LookPath("systemd"); err != nil {
		t.Skip("systemd not installed (hack/install-deps.sh installs it)")
	}
	if os.Getuid() != 0 {
		t.Skip("needs root: the test bed's systemd --user runs in its own mount namespace and cgroup")
	}
	for _, tc := range []struct {
		name    string
		kubeadm bool
		want    []string
	}{{"alone", false, wantAlone}, {"with kubeadm", true, wantWithKubeadm}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			us := systemdtest.Start(t, filepath.Join(dir, "systemd"))
			args := filepath.Join(dir, "args")
			kubelet := filepath.Join(dir, "kubelet")
			if err := os.WriteFile(kubelet, []byte("#!/bin/sh\nprintf '%s\\n' \"$@\" > "+args+".tmp && mv "+args+".tmp "+args+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			envFiles := map[string]string{"/etc/mooring/kubelet.env": mooringEnv, "/var/lib/kubelet/kubeadm-flags.env": kubeadmFlagsEnv, "/etc/default/kubelet": defaultKubelet}
			var pairs []string
			for path, content := range envFiles {
				moved := filepath.Join(dir, "env", path)
				if err := os.MkdirAll(filepath.Dir(moved), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(moved, []byte(content+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				pairs = append(pairs, "-"+path, "-"+moved)
			}
			pairs = append(pairs, "/usr/bin/kubelet", kubelet)
			moved := strings.NewReplacer(pairs...)
			units := map[string]string{
				"kubelet.service":                   readTestdata(t, "kubelet.service"),
				"kubelet.service.d/" + dropInName(): KubeletDropIn,
			}
			if tc.kubeadm {
				units["kubelet.service.d/10-kubeadm.conf"] = readTestdata(t, "10-kubeadm.conf")
			}
			for rel, content := range units {
				p := filepath.Join(us.UnitDir, rel)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(moved.Replace(content)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			u := systemdtest.Units(ctx, t)
			if err := u.Start(ctx, "kubelet.service"); err != nil {
				t.Fatal(err)
			}
			var (
				got []byte
				err error
			)
			for got == nil {
				if got, err = os.ReadFile(args); err != nil {
					got = nil
					select {
					case <-ctx.Done():
						t.Fatalf("the kubelet stand-in never ran: %v", ctx.Err())
					case <-time.After(50 * time.Millisecond):
					}
				}
			}
			argv := append([]string{"/usr/bin/kubelet"}, strings.Fields(string(got))...)
			if !slices.Equal(argv, tc.want) {
				t.Fatalf("systemd ran\n %q\nwant %q", argv, tc.want)
			}
		})
	}
}
