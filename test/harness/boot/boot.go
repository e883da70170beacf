// Package boot boots test machines: each is a runc container whose root is
// an overlay of the host's "/" with a writable layer of its own (the
// machine's disk: its /etc, /var, /usr/local... as they change), private
// tmpfs /run and /tmp, and system-mode systemd as PID 1, sharing the host's
// network namespace (the machine uses its own loopback addresses). This is
// the safe recipe of ../shared/notes/testbed.md: systemd's boot-time
// cleanups reach only the machine's layer and tmpfs, never the host.
//
// The machine image is the host's file system with a few changes made in
// the machine's layer before the first boot (Image): cloud-init enabled
// (the host's /etc/cloud/cloud-init.disabled whited out) with a NoCloud
// seed and network configuration off, a machine-id of its own, and every
// unit or generator that would touch the host or its network masked.
//
// Machines are stopped by their recorded container id and PID (systemd is
// asked to halt, then killed after a bound), their overlay is unmounted
// and runc removes their cgroups; Remove deletes the layer.
package boot

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// File is a file of the machine image, written into the machine's layer
// before its first boot.
type File struct {
	// Path inside the machine; Mode its permissions (0644 when zero).
	Path    string
	Mode    os.FileMode
	Content []byte
}

// Bind is a host path mounted into the machine at every boot.
type Bind struct {
	Source, Target string
	ReadOnly       bool
}

// Config describes a machine.
type Config struct {
	// Name is the machine's hostname and container id; a DNS label.
	Name string
	// Dir holds the machine (its layer, runc bundle and state, console
	// log); it must be empty or missing, and not under /tmp (the machine
	// has a private /tmp, and the host's /tmp is not where a disk goes).
	Dir string
	// InstanceID and UserData make the NoCloud seed cloud-init finds at
	// /var/lib/cloud/seed/nocloud (meta-data: instance-id, local-hostname
	// Name; user-data as given).
	InstanceID string
	UserData   []byte
	// Files are added to the image; Binds are mounted at each boot.
	Files []File
	Binds []Bind
}

// Machine is a booted (or stopped) machine.
type Machine struct {
	Name, Dir string
	// Upper is the machine's layer: what the machine wrote lands there.
	Upper string
	// CgroupPath is the container's cgroup in every hierarchy.
	CgroupPath string

	cfg       Config
	rootfs    string
	bundle    string
	state     string
	pid       int
	startedAt time.Time
	mounted   bool
}

// Console is the machine's console log (systemd's and runc's output).
func (m *Machine) Console() string { return filepath.Join(m.Dir, "console.log") }

// StartedAt is when the container of the current boot was started.
func (m *Machine) StartedAt() time.Time { return m.startedAt }

// StateDir is runc's state directory of the machine (runc --root).
func (m *Machine) StateDir() string { return m.state }

// PID is the host PID of the machine's systemd, 0 when stopped.
func (m *Machine) PID() int { return m.pid }

// Boot lays the image out in the machine's layer and starts the machine.
func Boot(ctx context.Context, cfg Config) (m *Machine, err error) {
	if !validName(cfg.Name) {
		return nil, fmt.Errorf("boot: machine name %q is not a DNS label", cfg.Name)
	}
	if cfg.Dir == "" || !filepath.IsAbs(cfg.Dir) || strings.HasPrefix(filepath.Clean(cfg.Dir)+"/", "/tmp/") {
		return nil, fmt.Errorf("boot: machine %s: dir %q must be absolute and not under /tmp", cfg.Name, cfg.Dir)
	}
	m = &Machine{Name: cfg.Name, Dir: cfg.Dir, cfg: cfg,
		Upper: filepath.Join(cfg.Dir, "layer"), rootfs: filepath.Join(cfg.Dir, "rootfs"),
		bundle: filepath.Join(cfg.Dir, "bundle"), state: filepath.Join(cfg.Dir, "runc"),
		CgroupPath: fmt.Sprintf("/mooring-boot-%d-%s", os.Getpid(), cfg.Name)}
	for _, d := range []string{m.Upper, m.rootfs, m.bundle, m.state, filepath.Join(cfg.Dir, "work")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := m.layOutImage(); err != nil {
		return nil, err
	}
	if err := m.Start(ctx); err != nil {
		return m, errors.Join(err, m.Stop())
	}
	return m, nil
}

// Start boots the machine (again) on its layer: a reboot after Stop.
func (m *Machine) Start(ctx context.Context) error {
	if m.pid != 0 {
		return fmt.Errorf("machine %s is running (pid %d)", m.Name, m.pid)
	}
	if !m.mounted {
		opts := fmt.Sprintf("lowerdir=/,upperdir=%s,workdir=%s", m.Upper, filepath.Join(m.Dir, "work"))
		if err := syscall.Mount("overlay", m.rootfs, "overlay", 0, opts); err != nil {
			return fmt.Errorf("machine %s: mount its root (overlay %s): %w", m.Name, opts, err)
		}
		m.mounted = true
	}
	spec, err := m.spec()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(m.bundle, "config.json"), spec, 0o600); err != nil {
		return err
	}
	console, err := os.OpenFile(m.Console(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer console.Close()
	pidFile := filepath.Join(m.Dir, "pid")
	_ = os.Remove(pidFile)
	cmd := exec.CommandContext(ctx, "runc", "--root", m.state, "run", "--detach", "--bundle", m.bundle, "--pid-file", pidFile, m.Name)
	cmd.Stdout, cmd.Stderr = console, console
	m.startedAt = time.Now()
	if err := cmd.Run(); err != nil {
		_ = m.runc("delete", "--force", m.Name)
		return fmt.Errorf("machine %s: runc run: %w\n%s", m.Name, err, tailOf(m.Console(), 10))
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		return err
	}
	if m.pid, err = strconv.Atoi(strings.TrimSpace(string(data))); err != nil {
		return fmt.Errorf("machine %s: pid file: %w", m.Name, err)
	}
	return nil
}

// Stop shuts the machine down as a halt does (SIGRTMIN+3 to its systemd,
// which stops its units), kills what is left after grace, deletes the
// container (runc removes its cgroups) and unmounts its root. The layer
// stays: Start boots it again. Stopping a stopped machine does nothing.
func (m *Machine) Stop() error {
	var errs []error
	if m.pid != 0 {
		const sigRTMIN3 = 34 + 3
		_ = syscall.Kill(m.pid, syscall.Signal(sigRTMIN3))
		if !waitGone(m.pid, 30*time.Second) {
			_ = m.runc("kill", "--all", m.Name, "KILL")
			_ = syscall.Kill(m.pid, syscall.SIGKILL)
			if !waitGone(m.pid, 15*time.Second) {
				errs = append(errs, fmt.Errorf("machine %s: systemd (pid %d) did not exit after SIGKILL", m.Name, m.pid))
			}
		}
		m.pid = 0
	}
	if _, err := os.Stat(filepath.Join(m.state, m.Name)); err == nil {
		if err := m.runc("delete", "--force", m.Name); err != nil {
			errs = append(errs, err)
		}
	}
	if m.mounted {
		if err := syscall.Unmount(m.rootfs, 0); err != nil {
			// Busy: a process of the host holds it (a shell in it). Detach.
			if err := syscall.Unmount(m.rootfs, syscall.MNT_DETACH); err != nil {
				errs = append(errs, fmt.Errorf("machine %s: unmount %s: %w", m.Name, m.rootfs, err))
			}
		}
		m.mounted = false
	}
	return errors.Join(errs...)
}

// Remove stops the machine and deletes its directory, and reports anything
// the machine left on the host: a mount under its directory or its cgroup.
func (m *Machine) Remove() error {
	errs := []error{m.Stop()}
	if left := Leftovers(m.Dir, m.CgroupPath); len(left) > 0 {
		errs = append(errs, fmt.Errorf("machine %s left %s", m.Name, strings.Join(left, ", ")))
	} else {
		errs = append(errs, os.RemoveAll(m.Dir))
	}
	return errors.Join(errs...)
}

// Exec runs a command in the running machine (runc exec: in its
// namespaces and cgroup, as root) and returns its combined output.
func (m *Machine) Exec(ctx context.Context, args ...string) (string, error) {
	if m.pid == 0 {
		return "", fmt.Errorf("machine %s is not running", m.Name)
	}
	cmd := exec.CommandContext(ctx, "runc", append([]string{"--root", m.state, "exec", "--env", "SYSTEMD_PAGER=", "--env", "SYSTEMD_COLORS=0", m.Name}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("machine %s: %s: %w", m.Name, strings.Join(args, " "), err)
	}
	return out.String(), err
}

// Path is a path of the machine as the host sees it while it runs (under
// its mounted root).
func (m *Machine) Path(p string) string { return filepath.Join(m.rootfs, p) }

func (m *Machine) runc(args ...string) error {
	out, err := exec.Command("runc", append([]string{"--root", m.state}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("machine %s: runc %s: %w: %s", m.Name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Leftovers lists mounts at or under dir and the cgroup in any hierarchy.
func Leftovers(dir, cgroup string) []string {
	var left []string
	if data, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
				left = append(left, "mount "+f[4])
			}
		}
	}
	if cgroup != "" {
		matches, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", cgroup))
		for _, cg := range matches {
			left = append(left, "cgroup "+cg)
		}
	}
	return left
}

// waitGone waits until pid no longer exists (or is a zombie of another
// parent: the container's init is reaped by runc's parent, which is gone,
// so the host's init reaps it).
func waitGone(pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		if i := bytes.LastIndexByte(data, ')'); i > 0 && len(data) > i+2 && data[i+2] == 'Z' {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func validName(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

func tailOf(path string, n int) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// spec is the runc configuration (OCI runtime spec) of the machine.
func (m *Machine) spec() ([]byte, error) {
	caps, err := hostCapabilities()
	if err != nil {
		return nil, err
	}
	type mount struct {
		Destination string   `json:"destination"`
		Type        string   `json:"type"`
		Source      string   `json:"source"`
		Options     []string `json:"options,omitempty"`
	}
	mounts := []mount{
		{"/proc", "proc", "proc", []string{"nosuid", "noexec", "nodev"}},
		{"/dev", "tmpfs", "tmpfs", []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{"/dev/pts", "devpts", "devpts", []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{"/dev/shm", "tmpfs", "shm", []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{"/dev/mqueue", "mqueue", "mqueue", []string{"nosuid", "noexec", "nodev"}},
		// Read-only /sys: systemd-udevd and the like do not start.
		{"/sys", "sysfs", "sysfs", []string{"nosuid", "noexec", "nodev", "ro"}},
		// The container's own cgroup in each hierarchy, writable: systemd
		// and the kubelet make their cgroups below it.
		{"/sys/fs/cgroup", "cgroup", "cgroup", []string{"nosuid", "noexec", "nodev", "relatime", "rw"}},
		// Private /run and /tmp (never the host's).
		{"/run", "tmpfs", "tmpfs", []string{"nosuid", "nodev", "mode=755"}},
		{"/tmp", "tmpfs", "tmpfs", []string{"nosuid", "nodev", "mode=1777"}},
	}
	if _, err := os.Stat("/dev/kmsg"); err == nil {
		// The kubelet's OOM watcher reads the kernel log.
		mounts = append(mounts, mount{"/dev/kmsg", "bind", "/dev/kmsg", []string{"bind", "ro"}})
	}
	for _, b := range m.cfg.Binds {
		opts := []string{"rbind", "rw"}
		if b.ReadOnly {
			opts = []string{"rbind", "ro"}
		}
		mounts = append(mounts, mount{b.Target, "bind", b.Source, opts})
	}
	spec := map[string]any{
		"ociVersion": "1.0.2",
		"hostname":   m.Name,
		"root":       map[string]any{"path": m.rootfs, "readonly": false},
		"process": map[string]any{
			"terminal": false,
			"user":     map[string]any{"uid": 0, "gid": 0},
			"args":     []string{"/lib/systemd/systemd"},
			// container= tells systemd it runs in a container: units
			// conditioned on real hardware do not start.
			"env":             []string{"container=runc", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			"cwd":             "/",
			"noNewPrivileges": false,
			"capabilities":    map[string]any{"bounding": caps, "effective": caps, "permitted": caps},
		},
		"mounts": mounts,
		"linux": map[string]any{
			// No network namespace: the host's, where the machine's
			// loopback addresses are.
			"namespaces":  []map[string]string{{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}},
			"cgroupsPath": m.CgroupPath,
			"resources":   map[string]any{"devices": []map[string]any{{"allow": true, "access": "rwm"}}},
			"maskedPaths": []string{"/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
				"/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware"},
			// The kernel's settings are the host's: read-only.
			"readonlyPaths": []string{"/proc/asound", "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
	}
	return json.MarshalIndent(spec, "", "  ")
}

// hostCapabilities names the capabilities in this process's bounding set
// (the machine gets them all; asking for one the host lacks fails).
func hostCapabilities() ([]string, error) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil, err
	}
	var bnd uint64
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			if bnd, err = strconv.ParseUint(strings.TrimSpace(v), 16, 64); err != nil {
				return nil, err
			}
		}
	}
	var out []string
	for i, name := range capNames {
		if bnd&(1<<uint(i)) != 0 {
			out = append(out, name)
		}
	}
	return out, nil
}

// capNames by number (linux/capability.h).
var capNames = []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST",
	"CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT",
	"CAP_SYS_PTRACE", "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME",
	"CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP",
	"CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ",
	"CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE"}
