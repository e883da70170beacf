package testbed

import (
	"bufio"
	"bytes"
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

// process is a child process the test bed started: it runs in a process group
// of its own (so a stop reaches anything it spawned), dies with the test
// binary (Pdeathsig), and logs to a file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	started time.Time
	done    chan struct{}
	waitErr error
}

func startProcess(name, logPath, bin string, args ...string) (*process, error) {
	return startProcessEnv(name, logPath, nil, bin, args...)
}

// startProcessEnv is startProcess with extra environment variables.
func startProcessEnv(name, logPath string, env []string, bin string, args ...string) (*process, error) {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child holds its own descriptor
	cmd := exec.Command(bin, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, started: time.Now(), done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended, and how.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.waitErr
	default:
		return false, nil
	}
}

// stop sends SIGTERM to the process group, waits up to grace, then sends
// SIGKILL and waits for the process to be reaped.
func (p *process) stop(grace time.Duration) error {
	if done, _ := p.exited(); done {
		return nil
	}
	pgid := p.pid()
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, pgid)
		}
	}
	// Anything the process spawned into its group goes too.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return nil
}

// rssBytes is the resident set size of the process, from /proc.
func (p *process) rssBytes() int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid()))
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// logTail returns the last n lines of the process log, for error messages.
func (p *process) logTail(n int) string {
	tail, _ := FileTail(p.logPath, n)
	return tail
}

// FileTail is the last n lines of a file (a log).
func FileTail(path string, n int) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n"), nil
}

// failure wraps err with the process's state and the tail of its log.
func (p *process) failure(err error) error {
	state := "running"
	if done, werr := p.exited(); done {
		state = fmt.Sprintf("exited (%v)", werr)
	}
	return fmt.Errorf("%s (pid %d, %s, log %s): %w\n--- last log lines ---\n%s",
		p.name, p.pid(), state, p.logPath, err, p.logTail(20))
}

// processGroupsAlive lists the processes on the machine that belong to any of
// the given process groups.
func processGroupsAlive(pgids map[int]string) []string {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return []string{"read /proc: " + err.Error()}
	}
	var alive []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the parenthesised command name: state ppid pgrp ...
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) < 3 || fields[0] == "Z" {
			continue
		}
		pgrp, _ := strconv.Atoi(fields[2])
		if name, ok := pgids[pgrp]; ok {
			alive = append(alive, fmt.Sprintf("pid %d (group of %s)", pid, name))
		}
	}
	return alive
}

// waitFor polls cond every interval until it returns true, returns an error,
// or timeout passes.
func waitFor(timeout, interval time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			if last != nil {
				return fmt.Errorf("timed out after %v waiting for %s: %w", timeout, what, last)
			}
			return fmt.Errorf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(interval)
	}
}

var errExited = errors.New("process exited")
