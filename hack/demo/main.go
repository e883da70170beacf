// Command demo is `make demo`: mooring end to end on this machine. It
// starts a control plane, the local cloud and mooring-ccm with the CSR
// approver, creates instances and runs mooring-agent on each (kubelets
// started through systemd --user), shows each node's way to Ready, sends a
// request through a LoadBalancer Service, shows a stolen bootstrap token
// being refused, and tears everything down on Ctrl-C (or at the end with
// --non-interactive).
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/mooring-dev/mooring/cloud/local/client"
	"github.com/mooring-dev/mooring/internal/csrreason"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

const cluster = "demo"

func main() {
	home, _ := os.UserHomeDir()
	stateHome := os.Getenv("XDG_STATE_HOME")
	if stateHome == "" {
		stateHome = filepath.Join(home, ".local", "state")
	}
	stateDir := flag.String("state-dir", filepath.Join(stateHome, "mooring", "demo"), "where the demo keeps its state and logs (wiped at start)")
	nodes := flag.Int("nodes", 3, "machines to join")
	nonInteractive := flag.Bool("non-interactive", false, "tear down at the end instead of waiting for Ctrl-C")
	skipDeps := flag.Bool("skip-deps", false, "do not run hack/install-deps.sh and hack/build-k8s.sh")
	booted := flag.Int("boot", 0, "machines to boot for real besides the others: runc containers with systemd as PID 1, in which cloud-init runs `mooring-agent user-data` (make demo BOOT=N)")
	flag.Parse()
	err := run(*stateDir, *nodes, *booted, *nonInteractive, *skipDeps)
	switch {
	case err == nil:
	case errors.Is(err, context.Canceled) && !errors.Is(err, errTeardown):
		// Ctrl-C before the end: everything was stopped, as at the end.
		fmt.Fprintln(os.Stderr, "\ninterrupted")
		os.Exit(130)
	default:
		fmt.Fprintf(os.Stderr, "\ndemo failed: %v\n", err)
		os.Exit(1)
	}
}

// errTeardown marks an error of stopping what the demo started.
var errTeardown = errors.New("stopping the demo")

func step(format string, args ...any) { fmt.Printf("\n==> "+format+"\n", args...) }

func run(stateDir string, n, booted int, nonInteractive, skipDeps bool) (err error) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if !skipDeps {
		step("Installing what the demo needs (etcd, systemd; Kubernetes v1.36.3 built once from the Go module proxy: 10 to 24 minutes on 2 cores the first time)")
		for _, script := range []string{"hack/install-deps.sh", "hack/build-k8s.sh"} {
			if err := runWithProgress(ctx, script); err != nil {
				return err
			}
		}
	}
	if err := os.RemoveAll(stateDir); err != nil {
		return err
	}
	bin := filepath.Join(stateDir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	step("Building mooring")
	bins := map[string]string{}
	for _, pkg := range []string{"cloud/local/cmd/mooring-localcloud", "ccm/cmd/mooring-ccm", "agent/cmd/mooring-agent"} {
		if bins[filepath.Base(pkg)], err = harness.Build(pkg, bin); err != nil {
			return err
		}
	}

	step("Starting a control plane (etcd, kube-apiserver, kube-controller-manager) on 127.0.0.1")
	cp, err := testbed.StartControlPlane(ctx, testbed.Config{Dir: filepath.Join(stateDir, "cluster"), Logf: func(f string, a ...any) { fmt.Printf("    "+f+"\n", a...) }})
	if err != nil {
		return err
	}
	c := &testbed.Cluster{ControlPlane: cp}
	var fleet *harness.Fleet
	var bootFleet *harness.BootFleet
	var stopResponder func()
	defer func() {
		step("Stopping everything")
		if stopResponder != nil {
			stopResponder()
		}
		if e := harness.StopBed(c, fleet, bootFleet); e != nil {
			err = errors.Join(err, fmt.Errorf("%w: %w", errTeardown, e))
		} else {
			fmt.Println("    all processes stopped; `make demo` starts afresh")
		}
	}()
	if err := cp.ApplyBootstrapRBAC(ctx, testbed.BootstrapRBAC{MooringApproves: true}); err != nil {
		return err
	}
	fmt.Println("    bootstrap tokens may create CSRs; nothing approves them automatically: mooring's approver decides")
	if c.Token, err = cp.CreateBootstrapToken(ctx, time.Hour); err != nil {
		return err
	}

	step("Starting the local cloud and mooring-ccm with the CSR approver")
	lc, err := harness.RunLocalCloud(cp, bins["mooring-localcloud"], filepath.Join(stateDir, "cloud"))
	if err != nil {
		return err
	}
	// The RBAC of deploy/overlays/local, rendered as `kubectl kustomize` does.
	if err := harness.ApplyRBAC(ctx, cp, "overlays/local"); err != nil {
		return err
	}
	if _, err := harness.RunCCM(cp, bins["mooring-ccm"], lc, filepath.Join(stateDir, "ccm"),
		harness.CCMOptions{Cluster: cluster, Args: []string{"--controllers=*,csr-approver", "--load-balancer-drift-period=10s"}}); err != nil {
		return err
	}
	fmt.Printf("    local cloud API %s, mooring-ccm as ServiceAccount kube-system/cloud-controller-manager\n", lc.URL)

	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("node-%d", i+1))
	}
	step("Creating %d instances; each runs mooring-agent, which starts its kubelet through systemd", n)
	start := time.Now()
	if fleet, err = harness.RunFleet(ctx, c, lc, harness.FleetOptions{Names: names, Cluster: cluster, AgentBin: bins["mooring-agent"],
		// A machine follows its instance: stopped or terminated with the
		// CLI, its kubelet stops.
		PowerLogf: func(f string, a ...any) { fmt.Printf("    "+f+"\n", a...) }}); err != nil {
		return err
	}
	if err := watchNodes(ctx, c, fleet, start); err != nil {
		return err
	}
	var vip string
	if vip, stopResponder, err = loadBalancer(ctx, c, lc, fleet); err != nil {
		return err
	}
	if err := stolenToken(ctx, c); err != nil {
		return err
	}

	if booted > 0 {
		var names []string
		for i := range booted {
			names = append(names, fmt.Sprintf("boot-%d", i+1))
		}
		step("Booting %d machine(s) for real: runc containers with systemd as PID 1, where cloud-init runs the user-data of `mooring-agent user-data`", booted)
		bootFleet, err = harness.RunBootFleet(ctx, c, harness.BootOptions{Names: names, Cluster: cluster, AgentBin: bins["mooring-agent"], Local: lc})
		if err != nil {
			return err
		}
		for _, m := range bootFleet.Machines {
			d, err := m.WaitReady(ctx, c, 3*time.Minute)
			if err != nil {
				return fmt.Errorf("%w; what the machine says:\n%s", err, m.Diagnose(context.Background()))
			}
			fmt.Printf("    %s: Node %s Ready %v after its container started (its journal: runc --root %s exec %s journalctl -u mooring-agent)\n",
				m.Name, m.NodeName, d.Round(10*time.Millisecond), m.StateDir(), m.Name)
		}
	}

	step("Done")
	health, err := backendHealth(ctx, lc, fleet)
	if err != nil {
		return err
	}
	fmt.Printf("    service:    http://%s/ answers while the demo runs; its load balancer has %s\n", net.JoinHostPort(vip, "80"), health)
	fmt.Printf("    cloud CLI:  MOORING_LOCALCLOUD_URL=%s MOORING_LOCALCLOUD_TOKEN=$(cat %s) %s instances list\n",
		lc.URL, lc.TokenFile, bins["mooring-localcloud"])
	fmt.Println("                (instances stop|start|terminate ID: a stopped or terminated instance's kubelet stops, as a powered-off machine's)")
	fmt.Printf("    logs:       %s (control plane, cloud, ccm) and %s/<node>/{agent,kubelet}.log (the machines, removed at the end)\n", cp.LogDir(), filepath.Join(fleet.Dir, "machines"))
	fmt.Printf("    kubeconfig: %s\n", cp.AdminKubeconfig)
	fmt.Printf("    try:        kubectl --kubeconfig %s get nodes,csr\n", cp.AdminKubeconfig)
	if nonInteractive {
		return nil
	}
	fmt.Println("    Ctrl-C stops everything.")
	<-ctx.Done()
	return nil
}

// runWithProgress runs a hack/ script, saying every 30 s that it still runs
// (the first Kubernetes build is one long go build).
func runWithProgress(ctx context.Context, script string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(harness.RepoRoot(), script))
	cmd.Dir, cmd.Stdout, cmd.Stderr = harness.RepoRoot(), os.Stderr, os.Stderr
	start := time.Now()
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(30 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Printf("    %s still running (%v so far)\n", script, time.Since(start).Round(time.Second))
			}
		}
	}()
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w", script, err)
	}
	return nil
}

// row is one node's way to Ready.
type row struct {
	instance, evidence, client, registered, initialized, serving, ready string
}

func watchNodes(ctx context.Context, c *testbed.Cluster, fleet *harness.Fleet, start time.Time) error {
	fmt.Printf("\n    %-7s %-20s %-9s %-27s %-10s %-11s %-27s %s\n", "NODE", "INSTANCE", "EVIDENCE", "CLIENT CERT", "REGISTERED", "INITIALIZED", "SERVING CERT", "READY")
	last := map[string]row{}
	deadline := time.Now().Add(4 * time.Minute)
	for {
		done := 0
		for _, m := range fleet.Machines {
			r := status(ctx, c, m)
			if r != last[m.Instance.Name] {
				last[m.Instance.Name] = r
				fmt.Printf("    %-7s %-20s %-9s %-27s %-10s %-11s %-27s %s\n", m.Instance.Name, r.instance, r.evidence, r.client, r.registered, r.initialized, r.serving, r.ready)
			}
			if r.ready == "Ready" && strings.HasPrefix(r.serving, "approved") {
				done++
			}
			if done, err := m.Agent.Exited(); done && err != nil {
				return fmt.Errorf("the agent of %s failed (%v):\n%s", m.Instance.Name, err, m.Agent.LogTail(15))
			}
		}
		if done == len(fleet.Machines) {
			fmt.Printf("\n    %d nodes Ready, serving certificates approved, %v after their agents started; no certificate was approved by hand\n", done, time.Since(start).Round(100*time.Millisecond))
			return nil
		}
		if time.Now().After(deadline) {
			var late []string
			for _, m := range fleet.Machines {
				if r := last[m.Instance.Name]; r.ready != "Ready" || !strings.HasPrefix(r.serving, "approved") {
					late = append(late, m.Diagnose(ctx))
				}
			}
			return fmt.Errorf("not every node reached Ready with its serving certificate in 4 minutes; what the machines that did not say:\n%s", strings.Join(late, "\n"))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// approver names who approved a CSR, from its approval's reason: mooring
// approves with csrreason.Approved, kube-controller-manager with
// AutoApproved, anyone else with their own reason (or none).
func approver(approved *certificatesv1.CertificateSigningRequestCondition) string {
	switch approved.Reason {
	case csrreason.Approved:
		return "mooring"
	case "":
		return "someone else (no reason)"
	}
	return fmt.Sprintf("someone else (%s)", approved.Reason)
}

func status(ctx context.Context, c *testbed.Cluster, m *harness.Machine) row {
	r := row{instance: m.Instance.ID, evidence: "-", client: "-", registered: "-", initialized: "-", serving: "-", ready: "-"}
	name := m.Instance.Name
	csrs, err := c.Client.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, csr := range csrs.Items {
			approved := harness.Condition(&csr, certificatesv1.CertificateApproved)
			switch {
			case csr.Spec.SignerName == certificatesv1.KubeAPIServerClientKubeletSignerName && strings.HasPrefix(csr.Name, "mooring-"+name+"-"):
				r.client = "pending"
				if approved != nil {
					if approved.Reason == csrreason.Approved {
						r.evidence = "verified"
					}
					r.client = fmt.Sprintf("approved by %s %s", approver(approved), since(csr.CreationTimestamp, approved.LastUpdateTime))
				}
			case csr.Spec.SignerName == certificatesv1.KubeletServingSignerName && csr.Spec.Username == "system:node:"+name:
				r.serving = "pending"
				if approved != nil {
					r.serving = fmt.Sprintf("approved by %s %s", approver(approved), since(csr.CreationTimestamp, approved.LastUpdateTime))
				}
			}
		}
	}
	node, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return r
	}
	r.registered = "yes"
	r.initialized = "no"
	tainted := false
	for _, t := range node.Spec.Taints {
		tainted = tainted || t.Key == "node.cloudprovider.kubernetes.io/uninitialized"
	}
	if node.Spec.ProviderID != "" && !tainted {
		r.initialized = "yes"
	}
	r.ready = "NotReady"
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
			r.ready = "Ready"
		}
	}
	return r
}

// since is the decision latency, to the second the API records.
func since(created, decided metav1.Time) string {
	d := decided.Sub(created.Time)
	if d < time.Second {
		return "(<1s)"
	}
	return "(" + d.Round(time.Second).String() + ")"
}

// loadBalancer creates the Service and a server for it on node-1, and
// shows a request through the load balancer. The server keeps answering
// until stop, at teardown.
func loadBalancer(ctx context.Context, c *testbed.Cluster, lc *harness.LocalCloud, fleet *harness.Fleet) (vip string, stop func(), err error) {
	step("Creating a LoadBalancer Service")
	svc, err := c.Client.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "hello"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", nil, err
	}
	// No kube-proxy runs here: the demo stands in for it on node-1,
	// answering on the node port at the node's address.
	node := fleet.Machines[0]
	addr := net.JoinHostPort(node.Instance.Addresses[0].Address, fmt.Sprint(svc.Spec.Ports[0].NodePort))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	stop = func() { ln.Close() }
	defer func() {
		if err != nil {
			stop()
			stop = nil
		}
	}()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = bufio.NewReader(conn).ReadString('\n')
			fmt.Fprintf(conn, "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nhello from %s\n", node.Instance.Name)
			conn.Close()
		}
	}()
	deadline := time.Now().Add(time.Minute)
	for vip == "" {
		s, err := c.Client.CoreV1().Services("default").Get(ctx, "hello", metav1.GetOptions{})
		if err == nil && len(s.Status.LoadBalancer.Ingress) > 0 {
			vip = s.Status.LoadBalancer.Ingress[0].IP
			break
		}
		if time.Now().After(deadline) {
			return "", stop, errors.New("the Service got no ingress IP in a minute")
		}
		time.Sleep(200 * time.Millisecond)
	}
	fmt.Printf("    ingress IP %s (a local-cloud load balancer; backends: the Ready nodes at node port %d, health-checked)\n", vip, svc.Spec.Ports[0].NodePort)
	for time.Now().Before(deadline) {
		if answer, err := get(net.JoinHostPort(vip, "80")); err == nil {
			fmt.Printf("    GET http://%s/ -> %s\n", net.JoinHostPort(vip, "80"), answer)
			health, err := backendHealth(ctx, lc, fleet)
			if err != nil {
				return vip, stop, err
			}
			fmt.Printf("    the load balancer has %s; only node-1 serves the node port\n", health)
			return vip, stop, nil
		}
		time.Sleep(300 * time.Millisecond)
	}
	return vip, stop, errors.New("no answer through the load balancer")
}

// backendHealth says how many backends of the Service's load balancer pass
// their health checks, as the local cloud reports them, and whose they are.
func backendHealth(ctx context.Context, lc *harness.LocalCloud, fleet *harness.Fleet) (string, error) {
	lbs, err := lc.Client.ListAllLoadBalancers(ctx, client.ListOptions{Cluster: cluster})
	if err != nil {
		return "", err
	}
	names := map[string]string{}
	for _, m := range fleet.Machines {
		for _, a := range m.Instance.Addresses {
			names[a.Address] = m.Instance.Name
		}
	}
	for _, lb := range lbs {
		// The tags mooring-ccm puts on a Service's load balancer.
		if lb.Tags["kubernetes.io/service-namespace"] != "default" || lb.Tags["kubernetes.io/service-name"] != "hello" {
			continue
		}
		total := 0
		var healthy []string
		for _, l := range lb.Listeners {
			for _, b := range l.Backends {
				total++
				if b.Healthy != nil && *b.Healthy {
					name := names[b.Address]
					if name == "" {
						name = b.Address
					}
					healthy = append(healthy, name)
				}
			}
		}
		who := strings.Join(healthy, ", ")
		if who == "" {
			who = "none"
		}
		return fmt.Sprintf("%d of %d backends healthy (%s)", len(healthy), total, who), nil
	}
	return "", errors.New("the local cloud has no load balancer for Service default/hello")
}

func get(addr string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(conn, "GET / HTTP/1.0\r\n\r\n")
	var last string
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		if t := strings.TrimSpace(sc.Text()); t != "" {
			last = t
		}
	}
	if !strings.HasPrefix(last, "hello") {
		return "", errors.New("no answer")
	}
	return last, nil
}

func stolenToken(ctx context.Context, c *testbed.Cluster) error {
	step("A stolen bootstrap token, without the machine's evidence, asks to join as node-1")
	join, err := harness.Join(ctx, c, "node-1", "")
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	csr, err := harness.WaitForDecision(wctx, c.Client, join.Name)
	if err != nil {
		return err
	}
	d := harness.Condition(csr, certificatesv1.CertificateDenied)
	if d == nil {
		return fmt.Errorf("CSR %s was not denied", join.Name)
	}
	fmt.Printf("    CSR %s denied: %s: %s\n", join.Name, d.Reason, d.Message)
	return nil
}
