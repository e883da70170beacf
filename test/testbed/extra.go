package testbed

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/mooring-dev/mooring/internal/pki"
)

// Process is a program a test runs beside the control plane (the local
// cloud, mooring-ccm, ...). The control plane stops it, by PID and process
// group, before its own components.
type Process struct{ p *process }

// Run starts bin with args, logging to LogDir()/name.log. While a process
// of that name runs, another one is named name-2 (then name-3, ...), so
// that replicas log to files of their own; a process started again after
// its predecessor exited appends to the same file.
func (cp *ControlPlane) Run(name, bin string, args ...string) (*Process, error) {
	return cp.RunEnv(name, nil, bin, args...)
}

// RunEnv is Run with extra environment variables.
func (cp *ControlPlane) RunEnv(name string, env []string, bin string, args ...string) (*Process, error) {
	name = cp.freeName(name)
	p, err := startProcessEnv(name, filepath.Join(cp.cfg.Dir, "logs", name+".log"), env, bin, args...)
	if err != nil {
		return nil, err
	}
	cp.procs = append(cp.procs, p)
	return &Process{p: p}, nil
}

// Wait waits for the process to end and returns its exit code.
func (p *Process) Wait(timeout time.Duration) (int, error) {
	select {
	case <-p.p.done:
		return p.p.cmd.ProcessState.ExitCode(), nil
	case <-time.After(timeout):
		return -1, fmt.Errorf("%s still running after %v", p.p.name, timeout)
	}
}

// PID of the process.
func (p *Process) PID() int { return p.p.pid() }

// LogPath is the process's log file.
func (p *Process) LogPath() string { return p.p.logPath }

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) { return p.p.exited() }

// LogTail is the end of the process's log.
func (p *Process) LogTail(lines int) string { return p.p.logTail(lines) }

// Stop sends SIGTERM to the process group, then SIGKILL after grace.
func (p *Process) Stop(grace time.Duration) error { return p.p.stop(grace) }

// WriteKubeconfig writes a kubeconfig whose client certificate, signed by
// the cluster CA, names user and groups; RBAC then applies as to that user
// (for example "system:serviceaccount:kube-system:NAME").
func (cp *ControlPlane) WriteKubeconfig(name, user string, groups ...string) (string, error) {
	kp, err := cp.CA.Issue(pki.Request{CommonName: user, Organizations: groups, Profile: pki.ProfileClient})
	if err != nil {
		return "", err
	}
	path := filepath.Join(cp.cfg.Dir, name+".kubeconfig")
	if err := writeKubeconfig(path, cp.URL, cp.CA.CertPEM, user, credentials{certPEM: kp.CertPEM, keyPEM: kp.KeyPEM}); err != nil {
		return "", err
	}
	return path, nil
}

// AddNodeAt starts one more kubelet at a given address, such as a cloud
// instance's InternalIP.
func (c *Cluster) AddNodeAt(ctx context.Context, name, address string) (*Node, error) {
	if err := checkLoopback(address); err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	n, err := c.StartNode(ctx, NodeConfig{Name: name, Address: address, BootstrapToken: c.Token})
	if err != nil {
		return nil, err
	}
	c.Nodes = append(c.Nodes, n)
	return n, nil
}

// AddNodeConfig starts one more kubelet as nc says (BootstrapToken
// defaults to the cluster's unless client credentials are given); the
// cluster stops it with the rest.
func (c *Cluster) AddNodeConfig(ctx context.Context, nc NodeConfig) (*Node, error) {
	if nc.BootstrapToken == "" && nc.ClientCertPEM == nil {
		nc.BootstrapToken = c.Token
	}
	n, err := c.StartNode(ctx, nc)
	if err != nil {
		return nil, err
	}
	c.Nodes = append(c.Nodes, n)
	return n, nil
}

// AdoptNode makes the cluster stop a node made with PrepareNode.
func (c *Cluster) AdoptNode(n *Node) { c.Nodes = append(c.Nodes, n) }

// Binaries are the Kubernetes programs this control plane runs, and its
// kubelets.
func (cp *ControlPlane) Binaries() Binaries { return cp.cfg.Binaries }

// freeName is name, or name-N for the smallest N from 2 that no running
// process of the control plane has.
func (cp *ControlPlane) freeName(name string) string {
	running := map[string]bool{}
	for _, p := range cp.procs {
		if done, _ := p.exited(); !done {
			running[p.name] = true
		}
	}
	candidate := name
	for n := 2; running[candidate]; n++ {
		candidate = fmt.Sprintf("%s-%d", name, n)
	}
	return candidate
}

// ComponentPIDs gives the PIDs of the control plane's processes (etcd,
// kube-apiserver, kube-controller-manager) by name, for measuring them.
func (cp *ControlPlane) ComponentPIDs() map[string]int {
	cp.restartMu.Lock()
	defer cp.restartMu.Unlock()
	pids := make(map[string]int, len(cp.procs))
	for _, p := range cp.procs {
		pids[p.name] = p.pid()
	}
	return pids
}

// Logf reports progress as the control plane's Config.Logf does (the test's
// log).
func (cp *ControlPlane) Logf(format string, args ...any) { cp.cfg.Logf(format, args...) }
