package testbed

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupMounts lists the mount points of every cgroup (v1) and cgroup2
// hierarchy on the machine.
func cgroupMounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// mountinfo: id parent major:minor root mountpoint options ... - fstype source superoptions
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+1 >= len(fields) || len(fields) < 5 {
			continue
		}
		if t := fields[sep+1]; t == "cgroup" || t == "cgroup2" {
			out = append(out, unescapeMountPath(fields[4]))
		}
	}
	return out, sc.Err()
}

// createCgroup creates /name in every cgroup hierarchy (a kubelet's
// cgroupRoot) and returns the directories it created.
func createCgroup(name string) ([]string, error) {
	mounts, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	var created []string
	for _, m := range mounts {
		dir := filepath.Join(m, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return created, fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		created = append(created, dir)
		// A new cpuset cgroup has no CPUs or memory nodes until given its
		// parent's.
		for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(m, file)); err == nil {
				_ = os.WriteFile(filepath.Join(dir, file), v, 0o644)
			}
		}
	}
	return created, nil
}

// removeCgroups removes each directory and every cgroup below it, deepest
// first. A cgroup that still holds processes cannot be removed: that is
// reported.
func removeCgroups(dirs []string) error {
	var errs []error
	for _, root := range dirs {
		var all []string
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				all = append(all, path)
			}
			return nil
		})
		sort.Slice(all, func(i, j int) bool { return len(all[i]) > len(all[j]) })
		for _, d := range all {
			if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// mountsUnder lists mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountPath(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space...).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%3o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// killCgroupProcs sends SIGKILL to every process in the cgroups at or below
// dirs (cgroups this test created), and waits up to 10 s for them to go.
func killCgroupProcs(dirs []string) error {
	procs := func() map[int]bool {
		pids := map[int]bool{}
		for _, root := range dirs {
			_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
					return nil
				}
				data, _ := os.ReadFile(path)
				for _, f := range strings.Fields(string(data)) {
					if pid, err := strconv.Atoi(f); err == nil {
						pids[pid] = true
					}
				}
				return nil
			})
		}
		return pids
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := procs()
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes left in the node's cgroups: %v", left)
		}
		for pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
