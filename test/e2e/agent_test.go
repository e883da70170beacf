package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

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
	c := testbed.Start(t, testbed.Options{RBAC: testbed.BootstrapRBAC{MooringApproves: true}})
	lc := harness.StartLocalCloud(t, c, cloudBin)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for _, f := range []string{"deploy/csrapprover/role/clusterrole.yaml", "deploy/base/ccm-csrapprover-binding.yaml"} {
		if err := c.Apply(ctx, filepath.Join(harness.RepoRoot(), f)); err != nil {
			t.Fatal(err)
		}
	}
	harness.StartCCM(t, c, ccmBin, lc, harness.CCMOptions{Cluster: e2eCluster, Args: []string{"--controllers=*,csr-approver", "--v=2"}})

	start := time.Now()
	fleet := harness.StartFleet(ctx, t, c, lc, harness.FleetOptions{
		Names: []string{"node-1", "node-2", "node-3"}, Cluster: e2eCluster, AgentBin: agentBin,
	})
	machines := fleet.Machines
	for _, m := range machines {
		code, err := m.Agent.Wait(3 * time.Minute)
		if err != nil || code != 0 {
			t.Fatalf("agent of %s: exit %d, %v\n%s", m.Instance.Name, code, err, m.Agent.LogTail(30))
		}
		// Type=notify: the unit is active only once the agent sent READY=1.
		if s, err := m.Agent.State(ctx); err != nil || s.ActiveState != "active" || !strings.HasPrefix(s.StatusText, "node "+m.Instance.Name+" joined") {
			t.Errorf("agent of %s: unit %s (%v)", m.Instance.Name, s, err)
		}
	}
	t.Logf("3 agents joined their nodes and started the kubelets in %v", time.Since(start).Round(time.Millisecond))

	for _, m := range machines {
		name := m.Instance.Name
		waitNode(ctx, t, c, name, "Ready and initialized", func(n *corev1.Node) bool {
			return harness.NodeReady(n) && n.Spec.ProviderID == "local://"+m.Instance.ID && !hasTaint(n, uninitializedTaint, corev1.TaintEffectNoSchedule)
		})
		servingApprovedByMooring(ctx, t, c, name)
		env, _ := os.ReadFile(m.EnvFile)
		if !strings.Contains(string(env), "--provider-id=local://"+m.Instance.ID) || !strings.Contains(string(env), "--node-ip="+m.Instance.Addresses[0].Address) {
			t.Errorf("%s kubelet env: %s", name, env)
		}
	}
	t.Logf("3 nodes Ready, initialized, serving certificates approved, %v after the agents started", time.Since(start).Round(time.Millisecond))

	// Each kubelet has its machine's own device plugin directory (issue
	// 42: kubelets sharing the host's raced for its socket, and the loser
	// exited before registering), and still runs.
	for _, m := range machines {
		if st, err := os.Stat(filepath.Join(m.DevicePluginDir(), "kubelet.sock")); err != nil || st.Mode()&os.ModeSocket == 0 {
			t.Errorf("%s: no device plugin socket in the machine's own %s (%v): its kubelet used another machine's", m.Name, m.DevicePluginDir(), err)
		}
		if k, err := m.KubeletState(ctx); err != nil || k.ActiveState != "active" || k.NRestarts != 0 {
			t.Errorf("%s: kubelet unit %s (%v)", m.Name, k, err)
		}
	}
}
