package testbed

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// UserSystemd is a real `systemd --user` for tests, run the safe way
// (../shared/notes/testbed.md): in a private mount namespace whose /run is a
// tmpfs holding systemd/system, in a cgroup of its own, with a private
// runtime and config dir. Clients reach it over the session bus at
// RuntimeDir/bus (see Env).
type UserSystemd struct {
	Dir string
	// RuntimeDir is its XDG_RUNTIME_DIR; UnitDir takes unit files.
	RuntimeDir, UnitDir string

	proc    *process
	cgroups []string
}

// StartUserSystemd starts one under dir (which the caller removes) and
// waits for its bus.
func StartUserSystemd(dir, name string) (u *UserSystemd, err error) {
	u = &UserSystemd{Dir: dir, RuntimeDir: filepath.Join(dir, "run"), UnitDir: filepath.Join(dir, "config", "systemd", "user")}
	defer func() {
		if err != nil {
			err = errors.Join(err, u.Stop())
			u = nil
		}
	}()
	if err := os.MkdirAll(u.RuntimeDir, 0o700); err != nil {
		return u, err
	}
	if err := os.MkdirAll(filepath.Join(u.UnitDir, "default.target.wants"), 0o755); err != nil {
		return u, err
	}
	// No tmpfiles runs (they would clean directories that are not theirs);
	// a session bus the clients can reach.
	for _, masked := range []string{"systemd-tmpfiles-setup.service", "systemd-tmpfiles-clean.timer", "systemd-tmpfiles-clean.service"} {
		if err := os.Symlink("/dev/null", filepath.Join(u.UnitDir, masked)); err != nil {
			return u, err
		}
	}
	if err := os.Symlink("/usr/lib/systemd/user/dbus.socket", filepath.Join(u.UnitDir, "default.target.wants", "dbus.socket")); err != nil {
		return u, err
	}
	if u.cgroups, err = createCgroup(name); err != nil {
		return u, err
	}
	var join strings.Builder
	for _, cg := range u.cgroups {
		fmt.Fprintf(&join, "echo $$ > %s/cgroup.procs\n", strconv.Quote(cg))
	}
	script := filepath.Join(dir, "start-systemd.sh")
	content := "#!/bin/sh\nset -e\n" +
		"# Private mount namespace: this tmpfs hides the host's /run from systemd only.\n" +
		"mount -t tmpfs -o mode=755 tmpfs /run\nmkdir -p /run/systemd/system\n" +
		join.String() +
		"export XDG_RUNTIME_DIR=" + strconv.Quote(u.RuntimeDir) + " XDG_CONFIG_HOME=" + strconv.Quote(filepath.Join(dir, "config")) + "\n" +
		"exec systemd --user\n"
	if err := os.WriteFile(script, []byte(content), 0o755); err != nil {
		return u, err
	}
	if u.proc, err = startProcess("systemd-user", filepath.Join(dir, "systemd.log"), "unshare", "--mount", "--propagation", "private", "--", script); err != nil {
		return u, err
	}
	bus := filepath.Join(u.RuntimeDir, "bus")
	err = waitFor(30*time.Second, 50*time.Millisecond, "systemd --user bus", func() (bool, error) {
		if done, _ := u.proc.exited(); done {
			return false, errExited
		}
		_, err := os.Stat(bus)
		return err == nil, nil
	})
	if err != nil {
		return u, u.proc.failure(err)
	}
	return u, nil
}

// Env is what a client needs to reach this systemd.
func (u *UserSystemd) Env() []string {
	return []string{"XDG_RUNTIME_DIR=" + u.RuntimeDir, "DBUS_SESSION_BUS_ADDRESS=unix:path=" + filepath.Join(u.RuntimeDir, "bus")}
}

// Stop ends systemd (which stops its units), then kills anything still in
// its cgroup and removes the cgroup.
func (u *UserSystemd) Stop() error {
	var errs []error
	if u.proc != nil {
		errs = append(errs, stopAll([]*process{u.proc}, map[string]time.Duration{"systemd-user": 30 * time.Second}))
	}
	// Units run in their own sessions, out of systemd's process group.
	for range 50 {
		pids := cgroupPIDs(u.cgroups)
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	errs = append(errs, removeCgroups(u.cgroups))
	return errors.Join(errs...)
}

// cgroupPIDs lists the processes in the cgroups and below.
func cgroupPIDs(dirs []string) []int {
	seen := map[int]bool{}
	var out []int
	for _, d := range dirs {
		_ = filepath.WalkDir(d, func(path string, e os.DirEntry, err error) error {
			if err != nil || e.IsDir() || e.Name() != "cgroup.procs" {
				return nil
			}
			data, _ := os.ReadFile(path)
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
					seen[pid] = true
					out = append(out, pid)
				}
			}
			return nil
		})
	}
	return out
}
