package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// notifySocket collects sd_notify messages, as systemd would.
type notifySocket struct {
	path string
	conn *net.UnixConn
	mu   sync.Mutex
	msgs []string
}

func listenNotify(t *testing.T, path string) *notifySocket {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	n := &notifySocket{path: path, conn: conn}
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := conn.Read(buf)
			if err != nil {
				return
			}
			n.mu.Lock()
			n.msgs = append(n.msgs, string(buf[:k]))
			n.mu.Unlock()
		}
	}()
	t.Cleanup(func() { conn.Close() })
	return n
}

func (n *notifySocket) messages() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.msgs...)
}

// TestAgentJoinsNodes: on the test bed without the bootstrappers'
// auto-approval, mooring-agent joins 3 nodes: it attests each machine,
// gets approved credentials, and starts the node's kubelet through a real
// systemd --user; each kubelet registers, the CCM initializes it, its
// serving certificate is approved, and the node turns Ready. No manual
// step.
func TestAgentJoinsNodes(t *testing.T) {
	agentBin := harness.BuildBinary(t, "agent/cmd/mooring-agent")
	ccmBin := harness.BuildBinary(t, "ccm/cmd/mooring-ccm")
	cloudBin := harness.BuildBinary(t, "cloud/local/cmd/mooring-localcloud")
	c := testbed.Start(t, testbed.Options{RBAC: testbed.BootstrapRBAC{WithoutNodeClientApproval: true}})
	lc := harness.StartLocalCloud(t, c, cloudBin)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for _, f := range []string{"deploy/csrapprover/rbac.yaml", "deploy/ccm/csrapprover-rbac.yaml"} {
		if err := c.Apply(ctx, filepath.Join(harness.RepoRoot(), f)); err != nil {
			t.Fatal(err)
		}
	}
	harness.StartCCM(t, c, ccmBin, lc, harness.CCMOptions{Cluster: e2eCluster, Args: []string{"--controllers=*,csr-approver", "--v=2"}})

	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.crt")
	tokenFile := filepath.Join(dir, "bootstrap-token")
	if err := os.WriteFile(caFile, c.CA.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokenFile, []byte(c.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// The machines: instances, each with a prepared (not started) kubelet
	// and the unit that runs it, as a node image would have.
	sd := filepath.Join(dir, "systemd")
	unitDir := filepath.Join(sd, "config", "systemd", "user")
	if err := os.MkdirAll(unitDir, 0o755); err != nil {
		t.Fatal(err)
	}
	type machine struct {
		in      *api.Instance
		node    *testbed.Node
		config  string
		envFile string
	}
	var machines []machine
	for i := range 3 {
		in, err := lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: fmt.Sprintf("node-%d", i+1), Cluster: e2eCluster})
		if err != nil {
			t.Fatal(err)
		}
		n, argv, err := c.PrepareNode(testbed.NodeConfig{Name: in.Name, Address: in.Addresses[0].Address, ExternalCredentials: true})
		if err != nil {
			t.Fatal(err)
		}
		c.AdoptNode(n)
		m := machine{in: in, node: n, config: filepath.Join(dir, in.Name+"-agent.yaml"), envFile: filepath.Join(dir, in.Name+"-kubelet.env")}
		unit := fmt.Sprintf("[Unit]\nDescription=kubelet of test machine %s\n\n[Service]\nEnvironmentFile=%s\nExecStart=%s $KUBELET_MOORING_ARGS\nStandardOutput=append:%s\nStandardError=inherit\n",
			in.Name, m.envFile, strings.Join(argv, " "), filepath.Join(dir, in.Name+"-kubelet.log"))
		if err := os.WriteFile(filepath.Join(unitDir, "kubelet-"+in.Name+".service"), []byte(unit), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg := fmt.Sprintf("apiServer: %s\ncaFile: %s\nbootstrapTokenFile: %s\ncloud: local\nmetadataURL: %s\ncertDir: %s\nkubeconfig: %s\nkubeletEnvFile: %s\nkubeletUnit: kubelet-%s.service\nwaitTimeout: 2m\n",
			c.URL, caFile, tokenFile, in.MetadataURL, n.CertDir, n.Kubeconfig, m.envFile, in.Name)
		if err := os.WriteFile(m.config, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		machines = append(machines, m)
	}
	u, err := testbed.StartUserSystemd(sd, fmt.Sprintf("mooring-e2e-systemd-%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	// Registered after the test bed's teardown, so it runs first: systemd
	// stops the kubelets before the nodes are cleaned up.
	t.Cleanup(func() {
		if err := u.Stop(); err != nil {
			t.Errorf("systemd --user teardown: %v", err)
		}
	})

	start := time.Now()
	type agentRun struct {
		proc   *testbed.Process
		notify *notifySocket
	}
	var runs []agentRun
	for _, m := range machines {
		ns := listenNotify(t, filepath.Join(dir, m.in.Name+"-notify.sock"))
		p, err := c.RunEnv("mooring-agent-"+m.in.Name, append(u.Env(), "NOTIFY_SOCKET="+ns.path),
			agentBin, "--config="+m.config, "--systemd-user", "--v=2")
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, agentRun{proc: p, notify: ns})
	}
	for i, r := range runs {
		code, err := r.proc.Wait(3 * time.Minute)
		if err != nil || code != 0 {
			t.Fatalf("agent of %s: exit %d, %v\n%s", machines[i].in.Name, code, err, r.proc.LogTail(30))
		}
		msgs := r.notify.messages()
		if !contains(msgs, "READY=1") || !containsPrefix(msgs, "STATUS=node "+machines[i].in.Name+" joined") {
			t.Errorf("agent of %s: notifications %q", machines[i].in.Name, msgs)
		}
	}
	t.Logf("3 agents joined their nodes and started the kubelets in %v", time.Since(start).Round(time.Millisecond))

	for _, m := range machines {
		name := m.in.Name
		poll(ctx, t, name+" Ready and initialized", func() (bool, error) {
			n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return err == nil && nodeReady(n) && n.Spec.ProviderID == "local://"+m.in.ID &&
				!hasTaint(n, uninitializedTaint, corev1.TaintEffectNoSchedule), err
		})
		serving := waitForServingCSR(ctx, t, c, name)
		decided, err := harness.WaitForDecision(ctx, c.Client, serving.Name)
		if err != nil {
			t.Fatal(err)
		}
		if cond := harness.Condition(decided, certificatesv1.CertificateApproved); cond == nil || cond.Reason != "MooringApproved" {
			t.Fatalf("%s serving CSR: %+v", name, decided.Status.Conditions)
		}
		env, _ := os.ReadFile(m.envFile)
		if !strings.Contains(string(env), "--provider-id=local://"+m.in.ID) || !strings.Contains(string(env), "--node-ip="+m.in.Addresses[0].Address) {
			t.Errorf("%s kubelet env: %s", name, env)
		}
	}
	t.Logf("3 nodes Ready, initialized, serving certificates approved, %v after the agents started", time.Since(start).Round(time.Millisecond))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func containsPrefix(list []string, prefix string) bool {
	for _, x := range list {
		if strings.HasPrefix(x, prefix) {
			return true
		}
	}
	return false
}
