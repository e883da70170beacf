package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/client"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// TestMooringRecoversFromACloudRestart: the local cloud dies with kill -9
// and is started again with the same command line; with no manual step,
// mooring-ccm (with its csr-approver controller) reaches it again: a new
// attested join is approved, the new instance's Node is initialized and its
// serving certificate approved, and the Node from before the crash is kept.
func TestMooringRecoversFromACloudRestart(t *testing.T) {
	ccmBin := harness.BuildBinary(t, "ccm/cmd/mooring-ccm")
	cloudBin := harness.BuildBinary(t, "cloud/local/cmd/mooring-localcloud")
	c := testbed.Start(t, testbed.Options{RBAC: testbed.BootstrapRBAC{MooringApproves: true}})
	lc := harness.StartLocalCloud(t, c, cloudBin)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for _, f := range []string{"deploy/csrapprover/role/clusterrole.yaml", "deploy/base/ccm-csrapprover-binding.yaml"} {
		if err := c.Apply(ctx, filepath.Join(harness.RepoRoot(), f)); err != nil {
			t.Fatal(err)
		}
	}
	ccm := harness.StartCCM(t, c, ccmBin, lc, harness.CCMOptions{Cluster: e2eCluster, Args: []string{"--controllers=*,csr-approver", "--v=2"}})

	before := joinAndInitialize(ctx, t, c, lc, "node-1")

	url, pid := lc.URL, lc.Proc.PID()
	start := time.Now()
	if err := lc.Restart(); err != nil {
		t.Fatal(err)
	}
	t.Logf("local cloud killed (kill -9, pid %d) and started again (pid %d) in %v; API at %s (before: %s)",
		pid, lc.Proc.PID(), time.Since(start).Round(time.Millisecond), lc.URL, url)

	start = time.Now()
	after := joinAndInitialize(ctx, t, c, lc, "node-2")
	t.Logf("after the restart, node-2 joined, was initialized and got its serving certificate in %v", time.Since(start).Round(time.Millisecond))

	n, err := c.Client.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
	if err != nil || n.Spec.ProviderID != "local://"+before.ID {
		t.Errorf("node-1 after the restart: %v, %v", n, err)
	}
	if after.ID == before.ID {
		t.Errorf("node-2 has node-1's instance %s", after.ID)
	}
	if done, err := ccm.Exited(); done {
		t.Errorf("mooring-ccm exited: %v", err)
	}
}

// joinAndInitialize creates an instance, joins it as a node (an attested
// client CSR, approved by mooring within a minute), starts its kubelet with
// the credentials, and waits for the CCM to initialize the Node and for
// mooring to approve its serving certificate.
func joinAndInitialize(ctx context.Context, t *testing.T, c *testbed.Cluster, lc *harness.LocalCloud, name string) *api.Instance {
	t.Helper()
	in, err := lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: name, Cluster: e2eCluster})
	if err != nil {
		t.Fatal(err)
	}
	join, err := harness.Join(ctx, c, name, in.MetadataURL)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	csr, err := harness.WaitForDecision(wctx, c.Client, join.Name)
	if err != nil {
		t.Fatalf("the attested join of %s: %v", name, err)
	}
	if cond := harness.Condition(csr, certificatesv1.CertificateApproved); cond == nil || cond.Reason != "MooringApproved" {
		t.Fatalf("the attested join of %s: %+v", name, csr.Status.Conditions)
	}
	if _, err := c.AddNodeConfig(ctx, testbed.NodeConfig{Name: name, Address: in.Addresses[0].Address,
		ClientCertPEM: csr.Status.Certificate, ClientKeyPEM: join.KeyPEM}); err != nil {
		t.Fatal(err)
	}
	harness.WaitUntil(wctx, t, name+" initialized", func() (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(wctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && n.Spec.ProviderID == "local://"+in.ID && !hasTaint(n, uninitializedTaint, corev1.TaintEffectNoSchedule), err
	})
	serving, err := harness.WaitForDecision(wctx, c.Client, waitForServingCSR(wctx, t, c, name).Name)
	if err != nil {
		t.Fatal(err)
	}
	if cond := harness.Condition(serving, certificatesv1.CertificateApproved); cond == nil || cond.Reason != "MooringApproved" {
		t.Fatalf("the serving CSR of %s: %+v", name, serving.Status.Conditions)
	}
	return in
}

// TestInstancePowerReachesTheMachine: stopping or terminating an instance
// with the local cloud's CLI cuts its machine off, as a real cloud powers a
// machine off: the kubelet the agent started under systemd stops, the Node
// turns NotReady, and mooring-ccm's lifecycle controller taints it shutdown
// (stopped) or deletes it (terminated). A stopped instance started again
// boots its machine: the kubelet comes back and the Node is Ready, untainted.
func TestInstancePowerReachesTheMachine(t *testing.T) {
	const grace = 20 * time.Second // kube-controller-manager's --node-monitor-grace-period
	agentBin := harness.BuildBinary(t, "agent/cmd/mooring-agent")
	ccmBin := harness.BuildBinary(t, "ccm/cmd/mooring-ccm")
	cloudBin := harness.BuildBinary(t, "cloud/local/cmd/mooring-localcloud")
	c := testbed.Start(t, testbed.Options{RBAC: testbed.BootstrapRBAC{MooringApproves: true}, NodeMonitorGracePeriod: grace})
	lc := harness.StartLocalCloud(t, c, cloudBin)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, f := range []string{"deploy/csrapprover/role/clusterrole.yaml", "deploy/base/ccm-csrapprover-binding.yaml"} {
		if err := c.Apply(ctx, filepath.Join(harness.RepoRoot(), f)); err != nil {
			t.Fatal(err)
		}
	}
	harness.StartCCM(t, c, ccmBin, lc, harness.CCMOptions{Cluster: e2eCluster,
		Args: []string{"--controllers=*,csr-approver", "--node-monitor-period=2s", "--v=2"}})
	fleet := harness.StartFleet(ctx, t, c, lc, harness.FleetOptions{
		Names: []string{"node-1", "node-2"}, Cluster: e2eCluster, AgentBin: agentBin, PowerLogf: t.Logf,
	})
	stopped, terminated := fleet.Machines[0], fleet.Machines[1]
	for _, m := range fleet.Machines {
		if code, err := m.Agent.Wait(3 * time.Minute); err != nil || code != 0 {
			t.Fatalf("agent of %s: exit %d, %v\n%s", m.Instance.Name, code, err, m.Agent.LogTail(30))
		}
		waitNode(ctx, t, c, m.Instance.Name, "Ready and initialized", func(n *corev1.Node) bool {
			return harness.NodeReady(n) && n.Spec.ProviderID == "local://"+m.Instance.ID && !hasTaint(n, uninitializedTaint, corev1.TaintEffectNoSchedule)
		})
		if !kubeletServes(m) {
			t.Fatalf("the kubelet of %s does not serve", m.Instance.Name)
		}
	}

	cli := func(args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, cloudBin, append(args, "--url", lc.URL, "--token-file", lc.TokenFile)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("mooring-localcloud %v: %v\n%s", args, err, out)
		}
	}
	start := time.Now()
	cli("instances", "stop", stopped.Instance.ID)
	cli("instances", "terminate", terminated.Instance.ID)
	// The fleet reads the instances' states every second.
	for _, m := range []*harness.Machine{stopped, terminated} {
		deadline := time.Now().Add(10 * time.Second)
		for kubeletServes(m) {
			if time.Now().After(deadline) {
				t.Fatalf("the kubelet of %s still serves 10s after its instance was %s with the CLI", m.Instance.Name,
					map[*harness.Machine]string{stopped: "stopped", terminated: "terminated"}[m])
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("%s: kubelet gone %v after the CLI call", m.Instance.Name, time.Since(start).Round(10*time.Millisecond))
		if ev := m.WaitPowerEvents(1, 30*time.Second); len(ev) != 1 || ev[0].On || ev[0].Err != nil {
			t.Errorf("%s: power events %v", m.Instance.Name, ev)
		}
	}
	waitNode(ctx, t, c, stopped.Instance.Name, "NotReady and tainted shutdown", func(n *corev1.Node) bool {
		return !harness.NodeReady(n) && hasTaint(n, shutdownTaint, corev1.TaintEffectNoSchedule)
	})
	t.Logf("%s: NotReady and tainted shutdown %v after its instance was stopped", stopped.Instance.Name, time.Since(start).Round(100*time.Millisecond))
	harness.WaitUntil(ctx, t, terminated.Instance.Name+" deleted", func() (bool, error) {
		_, err := c.Client.CoreV1().Nodes().Get(ctx, terminated.Instance.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	gone := time.Since(start)
	t.Logf("%s: Node deleted by the lifecycle controller %v after its instance was terminated (node monitor grace period %v)",
		terminated.Instance.Name, gone.Round(100*time.Millisecond), grace)
	if bound := grace + 30*time.Second; gone > bound {
		t.Errorf("%s: Node deleted after %v, more than %v", terminated.Instance.Name, gone, bound)
	}

	// Started again, the stopped machine boots.
	start = time.Now()
	cli("instances", "start", stopped.Instance.ID)
	waitNode(ctx, t, c, stopped.Instance.Name, "Ready again without the shutdown taint", func(n *corev1.Node) bool {
		return harness.NodeReady(n) && !hasTaint(n, shutdownTaint, corev1.TaintEffectNoSchedule)
	})
	t.Logf("%s: Ready again, untainted, %v after its instance was started", stopped.Instance.Name, time.Since(start).Round(100*time.Millisecond))
	if ev := stopped.WaitPowerEvents(2, 30*time.Second); len(ev) != 2 || !ev[1].On || ev[1].Err != nil {
		t.Errorf("%s: power events %v", stopped.Instance.Name, ev)
	}
	if ev := terminated.PowerEvents(); len(ev) != 1 {
		t.Errorf("%s: power events %v", terminated.Instance.Name, ev)
	}
}

const shutdownTaint = "node.cloudprovider.kubernetes.io/shutdown"

// waitNode waits until the Node exists and ok(Node).
func waitNode(ctx context.Context, t *testing.T, c *testbed.Cluster, name, what string, ok func(*corev1.Node) bool) {
	t.Helper()
	harness.WaitUntil(ctx, t, name+" "+what, func() (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err // a Node not yet registered included
		}
		if ok(n) {
			return true, nil
		}
		return false, fmt.Errorf("not yet: %s", nodeState(n))
	})
}

// nodeState is what a waiting test reports of a Node it waits on: its
// providerID, taints and Ready condition.
func nodeState(n *corev1.Node) string {
	ready := "no Ready condition"
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = fmt.Sprintf("Ready %s (%s)", c.Status, c.Reason)
		}
	}
	var taints []string
	for _, t := range n.Spec.Taints {
		taints = append(taints, t.Key+":"+string(t.Effect))
	}
	return fmt.Sprintf("providerID %q, taints %v, %s", n.Spec.ProviderID, taints, ready)
}

// waitInitialized waits until the Node is Ready and initialized (the
// uninitialized taint gone) and returns it.
func waitInitialized(ctx context.Context, t *testing.T, c *testbed.Cluster, name string) *corev1.Node {
	t.Helper()
	var node *corev1.Node
	waitNode(ctx, t, c, name, "Ready and initialized", func(n *corev1.Node) bool {
		node = n
		return harness.NodeReady(n) && !hasTaint(n, uninitializedTaint, corev1.TaintEffectNoSchedule)
	})
	return node
}

// kubeletServes reports whether the machine's kubelet accepts connections
// on its HTTPS port.
func kubeletServes(m *harness.Machine) bool {
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(m.Node.Address, strconv.Itoa(m.Node.Port)), time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// TestDemoServesUntilCtrlC runs `make demo`'s program as a user does
// (interactive, stopped with Ctrl-C). After its last line, the load
// balancer of the Service it advertises still answers, beyond the time its
// health checks take to drop a backend that stopped answering, with its
// backend healthy in the local cloud's view; terminating an instance with
// the CLI stops that machine's kubelet; Ctrl-C stops everything.
func TestDemoServesUntilCtrlC(t *testing.T) {
	bin, err := harness.Build("hack/demo", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	stateDir := filepath.Join(t.TempDir(), "demo")
	cmd := exec.Command(bin, "--skip-deps", "--state-dir="+stateDir)
	cmd.Dir = harness.RepoRoot()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	out := &demoOutput{lines: make(chan string, 4096)}
	go out.read(r)
	t.Cleanup(func() {
		// Ctrl-C, as a user stops it; SIGKILL after a bound.
		select {
		case <-exited:
		default:
			_ = syscall.Kill(cmd.Process.Pid, syscall.SIGINT)
			select {
			case <-exited:
			case <-time.After(2 * time.Minute):
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				<-exited
			}
		}
		t.Logf("demo output:\n%s", out.text())
	})

	// Its last line, then it waits for Ctrl-C.
	vip := "" // host:port
	out.waitFor(t, 6*time.Minute, "Ctrl-C stops everything.", func(line string) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "GET http://"); ok && vip == "" {
			vip, _, _ = strings.Cut(rest, "/")
		}
	})
	if vip == "" {
		t.Fatal("the demo showed no request through its load balancer")
	}
	lastLine := time.Now()
	if got := demoGet(vip); got != "hello from node-1" {
		t.Fatalf("after the demo's last line, GET http://%s/: %q, want hello from node-1", vip, got)
	}
	// Two failed checks 2 s apart take a backend out: wait longer.
	time.Sleep(time.Until(lastLine.Add(6 * time.Second)))
	if got := demoGet(vip); got != "hello from node-1" {
		t.Fatalf("6s after the demo's last line, GET http://%s/: %q, want hello from node-1", vip, got)
	}
	text := out.text()
	for _, want := range []string{"the load balancer has 1 of 3 backends healthy (node-1)", "its load balancer has 1 of 3 backends healthy (node-1)"} {
		if !strings.Contains(text, want) {
			t.Errorf("the demo did not show %q", want)
		}
	}

	// The cloud as the demo's user reaches it: the address and token it
	// printed, its CLI.
	var cloudURL string
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "local cloud API "); ok {
			cloudURL, _, _ = strings.Cut(rest, ",")
		}
	}
	tokenFile := filepath.Join(stateDir, "cloud", "token")
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(cloudURL, strings.TrimSpace(string(token)), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lbs, err := cl.ListAllLoadBalancers(ctx, client.ListOptions{})
	if err != nil || len(lbs) != 1 {
		t.Fatalf("load balancers: %v, %v", lbs, err)
	}
	healthy := 0
	for _, l := range lbs[0].Listeners {
		for _, b := range l.Backends {
			if b.Healthy != nil && *b.Healthy {
				healthy++
			}
		}
	}
	if healthy != 1 {
		t.Errorf("6s after the demo's last line the cloud reports %d healthy backends, want 1: %+v", healthy, lbs[0].Listeners)
	}
	ins, err := cl.ListAllInstances(ctx, client.ListOptions{Names: []string{"node-3"}})
	if err != nil || len(ins) != 1 {
		t.Fatalf("instance node-3: %v, %v", ins, err)
	}
	cli := exec.CommandContext(ctx, filepath.Join(stateDir, "bin", "mooring-localcloud"), "instances", "terminate", ins[0].ID,
		"--url", cloudURL, "--token-file", tokenFile)
	if b, err := cli.CombinedOutput(); err != nil {
		t.Fatalf("mooring-localcloud instances terminate: %v\n%s", err, b)
	}
	out.waitFor(t, 15*time.Second, "node-3: instance "+ins[0].ID+" terminated: its kubelet was stopped", nil)

	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if err != nil {
			t.Errorf("the demo after Ctrl-C: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the demo did not stop within 2 minutes of Ctrl-C")
	}
	out.waitFor(t, 5*time.Second, "all processes stopped", nil)
}

// demoOutput collects a program's output and hands out its lines.
type demoOutput struct {
	mu    sync.Mutex
	all   strings.Builder
	lines chan string
}

func (o *demoOutput) read(r io.ReadCloser) {
	defer r.Close()
	defer close(o.lines)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		o.mu.Lock()
		o.all.WriteString(sc.Text() + "\n")
		o.mu.Unlock()
		select {
		case o.lines <- sc.Text():
		default: // nobody waits: the text keeps it
		}
	}
}

func (o *demoOutput) text() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.all.String()
}

// waitFor reads lines (each also to each, when set) until one contains
// want, and fails the test after timeout or at the end of the output.
func (o *demoOutput) waitFor(t *testing.T, timeout time.Duration, want string, each func(string)) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case line, ok := <-o.lines:
			if !ok {
				t.Fatalf("the demo's output ended without %q", want)
			}
			if each != nil {
				each(line)
			}
			if strings.Contains(line, want) {
				return
			}
		case <-deadline:
			t.Fatalf("the demo did not show %q within %v", want, timeout)
		}
	}
}

// demoGet sends GET / to addr (host:port) and returns the last line of the
// answer, or the error.
func demoGet(addr string) string {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err.Error()
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(conn, "GET / HTTP/1.0\r\n\r\n")
	data, err := io.ReadAll(conn)
	if err != nil && len(data) == 0 {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
