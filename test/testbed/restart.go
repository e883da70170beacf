package testbed

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
)

// RestartComponent stops one of the control plane's processes ("etcd",
// "kube-apiserver" or "kube-controller-manager") and starts it again with
// the same command line (same ports, same data directory), as a crash
// and its restart by a supervisor would; with kill it dies by SIGKILL,
// else it is stopped gracefully. It returns once the component is healthy
// again, and how long it was down. The new process is stopped with the
// control plane.
func (cp *ControlPlane) RestartComponent(ctx context.Context, name string, kill bool) (time.Duration, error) {
	cp.restartMu.Lock()
	defer cp.restartMu.Unlock()
	i := -1
	for j, p := range cp.procs {
		if p.name == name {
			i = j
		}
	}
	if i < 0 {
		return 0, fmt.Errorf("testbed: no control plane component %q", name)
	}
	old := cp.procs[i]
	start := time.Now()
	if kill {
		_ = syscall.Kill(-old.pid(), syscall.SIGKILL)
		select {
		case <-old.done:
		case <-time.After(30 * time.Second):
			return 0, fmt.Errorf("%s (pid %d) did not exit after SIGKILL", name, old.pid())
		}
	} else {
		grace := defaultGrace
		if name == "kube-apiserver" {
			grace = apiserverGrace
		}
		if err := old.stop(grace); err != nil {
			return 0, err
		}
	}
	p, err := startProcess(name, filepath.Join(cp.cfg.Dir, "logs", name+".log"), old.cmd.Path, old.cmd.Args[1:]...)
	if err != nil {
		return 0, err
	}
	cp.procs[i] = p
	client, url := http.DefaultClient, ""
	switch name {
	case "etcd":
		for _, a := range old.cmd.Args {
			if v, ok := strings.CutPrefix(a, "--listen-client-urls="); ok {
				url = v + "/health"
			}
		}
	case "kube-apiserver":
		if client, err = rest.HTTPClientFor(cp.AdminConfig); err != nil {
			return 0, err
		}
		url = cp.URL + "/readyz"
	}
	if url != "" {
		if err := cp.waitHealthy(ctx, p, client, url); err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

// Supervise restarts, until ctx ends, any control plane component whose
// process has ended, as the kubelet restarts a control plane's static pods
// (kube-controller-manager exits when it loses its lease, which an
// apiserver outage longer than its renew deadline causes). It checks every
// interval and returns how many restarts each component needed, once ctx
// has ended.
func (cp *ControlPlane) Supervise(ctx context.Context, interval time.Duration) <-chan map[string]int {
	out := make(chan map[string]int, 1)
	go func() {
		restarts := map[string]int{}
		defer func() { out <- restarts }()
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(interval):
			}
			cp.restartMu.Lock()
			procs := append([]*process(nil), cp.procs...)
			cp.restartMu.Unlock()
			for _, p := range procs {
				if done, _ := p.exited(); !done {
					continue
				}
				if _, err := cp.RestartComponent(ctx, p.name, false); err == nil {
					restarts[p.name]++
				}
			}
		}
	}()
	return out
}
