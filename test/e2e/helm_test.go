package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// TestHelmInstallRunsMooringAsPods installs the packaged chart with the
// local cloud's values on two control-plane nodes that run real pods, and
// follows the release through its life: two replicas of mooring-ccm on the
// two nodes (the shipped anti-affinity and PodDisruptionBudget), one
// leader, the uninitialized taint tolerated (the pods initialize their own
// nodes); the pods run as shipped (uid 65532, read-only root, seccomp,
// no capabilities) and go Ready; /metrics is scraped through the metrics
// Service; machines join through the pods and become Ready; helm upgrade
// to the images of a later version while joins and serving CSRs keep
// coming (none lost, none decided twice, no Node uninitialized); helm
// rollback; kill -9 of the leader's pod hands the lease over; helm
// uninstall leaves none of the chart's objects.
func TestHelmInstallRunsMooringAsPods(t *testing.T) {
	first := harness.SharedImages(t, imagesTag, imagesVersion)
	later := harness.SharedImages(t, laterImagesTag, laterImageVersion, "mooring-ccm")
	chart := harness.MustPackageChart(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	c, lc, cps := podBed(t, ctx, 2, first.CCMTar, later.CCMTar)
	logs := harness.FollowPodLogs(c.Client, "kube-system", ccmApp)
	t.Cleanup(func() { logs.Stop(); logTailsIfFailed(t, logs) })

	// The control-plane Nodes wait for a cloud controller: the pods must
	// tolerate that.
	for _, n := range cps {
		node, err := c.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !hasTaint(node, uninitializedTaint, corev1.TaintEffectNoSchedule) {
			t.Fatalf("node %s: taints %v, want %s before mooring runs", n.Name, node.Spec.Taints, uninitializedTaint)
		}
	}

	// Install, as docs/install.md says, from the packaged chart.
	values := chartValues(t, c, lc, first, "")
	start := time.Now()
	if _, err := harness.Helm(ctx, c.ControlPlane, "install", "mooring", chart, "--namespace", "kube-system",
		"--values", values, "--wait", "--timeout", "3m"); err != nil {
		t.Fatal(err)
	}
	pods := waitPodsReady(t, ctx, c, ccmApp, first.CCM(), 2)
	t.Logf("helm install: 2 mooring-ccm pods Ready in %v", time.Since(start).Round(100*time.Millisecond))
	checkPodsAsShipped(t, cps, pods)
	pdb, err := c.Client.PolicyV1().PodDisruptionBudgets("kube-system").Get(ctx, "mooring-ccm", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	harness.WaitUntil(ctx, t, "the PodDisruptionBudget allows one disruption", func() (bool, error) {
		pdb, err = c.Client.PolicyV1().PodDisruptionBudgets("kube-system").Get(ctx, "mooring-ccm", metav1.GetOptions{})
		return err == nil && pdb.Status.ExpectedPods == 2 && pdb.Status.CurrentHealthy == 2 && pdb.Status.DisruptionsAllowed == 1, err
	})

	// The pods initialize their own nodes, on which they tolerated the
	// uninitialized taint; one leads.
	waitNodesReady(t, ctx, c, "cp-1", "cp-2")
	harness.WaitUntil(ctx, t, "one leader", func() (bool, error) {
		leader, n := leaderContainer(logs, "cloud-controller-manager")
		return leader != "" && n == 1, nil
	})
	if h, err := leaseHolder(ctx, c, "cloud-controller-manager"); err != nil || h == "" {
		t.Fatalf("lease cloud-controller-manager: holder %q, %v", h, err)
	}
	scrapeMetrics(t, ctx, c, "mooring-ccm-metrics", "mooring_build_info")

	// Machines join through the installed pods.
	for _, name := range []string{"worker-1", "worker-2"} {
		if _, err := harness.JoinMachine(ctx, c, lc, e2eCluster, name); err != nil {
			t.Fatal(err)
		}
	}
	waitNodesReady(t, ctx, c, "worker-1", "worker-2")

	// helm upgrade to a later version while joins and serving CSRs keep
	// coming.
	load := startLoad(t, ctx, c, lc)
	start = time.Now()
	if _, err := harness.Helm(ctx, c.ControlPlane, "upgrade", "mooring", chart, "--namespace", "kube-system",
		"--values", chartValues(t, c, lc, later, ""), "--wait", "--timeout", "3m"); err != nil {
		t.Fatal(err)
	}
	waitPodsReady(t, ctx, c, ccmApp, later.CCM(), 2)
	t.Logf("helm upgrade to %s: both pods replaced and Ready in %v", later.CCM(), time.Since(start).Round(100*time.Millisecond))
	time.Sleep(3 * time.Second)
	load.check(t, ctx, logs)
	checkStillInitialized(t, ctx, c)

	// helm rollback to the first revision.
	start = time.Now()
	if _, err := harness.Helm(ctx, c.ControlPlane, "rollback", "mooring", "1", "--namespace", "kube-system", "--wait", "--timeout", "3m"); err != nil {
		t.Fatal(err)
	}
	pods = waitPodsReady(t, ctx, c, ccmApp, first.CCM(), 2)
	t.Logf("helm rollback: pods back on %s in %v", first.CCM(), time.Since(start).Round(100*time.Millisecond))
	checkPodsAsShipped(t, cps, pods)

	// kill -9 of the leader's pod: the other takes the lease within its
	// duration (15 s) and a retry period, as the chaos suite measured for
	// processes.
	gap := killLeaderPod(t, ctx, c, cps, logs, ccmApp, "cloud-controller-manager")
	t.Logf("time without a leader after kill -9 of the leader's pod: %.1f s (lease duration 15 s)", gap.Seconds())
	if gap > 25*time.Second {
		t.Errorf("the lease passed on after %v, want within the lease duration (15 s) and renewal slack", gap)
	}
	if _, err := harness.JoinMachine(ctx, c, lc, e2eCluster, "worker-3"); err != nil {
		t.Fatal(err)
	}
	waitNodesReady(t, ctx, c, "worker-3")

	// helm uninstall leaves none of the chart's objects.
	manifest, err := harness.Helm(ctx, c.ControlPlane, "get", "manifest", "mooring", "--namespace", "kube-system")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := harness.Helm(ctx, c.ControlPlane, "uninstall", "mooring", "--namespace", "kube-system", "--wait", "--timeout", "2m"); err != nil {
		t.Fatal(err)
	}
	checkGone(t, ctx, c, chartObjects(t, manifest))
	harness.WaitUntil(ctx, t, "the pods gone", func() (bool, error) {
		list, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: ccmApp})
		return err == nil && len(list.Items) == 0, err
	})
}

// checkStillInitialized: no Node lost its providerID or got the
// uninitialized taint back.
func checkStillInitialized(t *testing.T, ctx context.Context, c *testbed.Cluster) {
	t.Helper()
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if !harness.NodeInitialized(&n) {
			t.Errorf("node %s is not initialized any more: providerID %q, taints %v", n.Name, n.Spec.ProviderID, n.Spec.Taints)
		}
	}
}

// load files joins (client CSRs with the instance's identity, from new
// instances) and serving CSRs (of the simulated Nodes it registered first)
// until check, which stops it and checks that each was decided, approved,
// once.
type load struct {
	client kubernetes.Interface
	stop   chan struct{}
	done   chan struct{}

	mu   sync.Mutex
	csrs []string
	err  error
}

func startLoad(t *testing.T, ctx context.Context, c *testbed.Cluster, lc *harness.LocalCloud) *load {
	t.Helper()
	admin, err := harness.FastClient(c)
	if err != nil {
		t.Fatal(err)
	}
	// Simulated kubelets' Nodes for the serving CSRs, initialized by the
	// pods first.
	var sims []string
	for i := 1; i <= 4; i++ {
		in, err := lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: fmt.Sprintf("sim-%d", i), Cluster: e2eCluster})
		if err != nil {
			t.Fatal(err)
		}
		sims = append(sims, in.Name)
	}
	if err := harness.RegisterNodes(ctx, admin, sims, harness.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.WaitUntil(ctx, t, "the simulated Nodes initialized", func() (bool, error) {
		for _, name := range sims {
			n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil || !harness.NodeInitialized(n) {
				return false, err
			}
		}
		return true, nil
	})
	l := &load{client: c.Client, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for i := 0; ; i++ {
			select {
			case <-l.stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
			var name string
			var err error
			if i%2 == 0 {
				// A join: a new instance's client CSR with its identity.
				var in *api.Instance
				in, err = lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: fmt.Sprintf("load-%d", i), Cluster: e2eCluster})
				if err == nil {
					var j *harness.JoinRequest
					if j, err = harness.Join(ctx, c, in.Name, in.MetadataURL); err == nil {
						name = j.Name
					}
				}
			} else {
				var n *corev1.Node
				if n, err = c.Client.CoreV1().Nodes().Get(ctx, sims[i%len(sims)], metav1.GetOptions{}); err == nil {
					var r harness.ServingCSR
					if r, err = harness.MakeServingCSR(n, n, 0); err == nil {
						r.CSR.Name = fmt.Sprintf("serving-load-%d", i)
						name = r.CSR.Name
						err = r.Post(ctx, admin)
					}
				}
			}
			l.mu.Lock()
			if err != nil && l.err == nil {
				l.err = err
			}
			if name != "" {
				l.csrs = append(l.csrs, name)
			}
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *load) check(t *testing.T, ctx context.Context, logs *harness.PodLogs) {
	t.Helper()
	close(l.stop)
	<-l.done
	if l.err != nil {
		t.Fatalf("load: %v", l.err)
	}
	joins, serving := 0, 0
	harness.WaitUntil(ctx, t, fmt.Sprintf("all %d CSRs filed during the upgrade decided", len(l.csrs)), func() (bool, error) {
		joins, serving = 0, 0
		for _, name := range l.csrs {
			csr, err := l.client.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if len(csr.Status.Conditions) == 0 || len(csr.Status.Certificate) == 0 {
				return false, fmt.Errorf("%s not decided and issued", name)
			}
			if csr.Spec.SignerName == certificatesv1.KubeletServingSignerName {
				serving++
			} else {
				joins++
			}
		}
		return true, nil
	})
	lines := decisionLines(logs)
	unlogged := 0
	for _, name := range l.csrs {
		csr, err := l.client.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cond := harness.Condition(csr, certificatesv1.CertificateApproved); cond == nil || cond.Reason != "MooringApproved" || len(csr.Status.Conditions) != 1 {
			t.Errorf("CSR %s: conditions %+v, want one, approved by mooring", name, csr.Status.Conditions)
		}
		switch n := lines[name]; {
		case n > 1:
			t.Errorf("CSR %s decided %d times in the pods' logs, want once", name, n)
		case n == 0:
			unlogged++
		}
	}
	t.Logf("during the upgrade: %d joins and %d serving CSRs filed, each approved once (%d decided by a replica stopped before its log line was read)",
		joins, serving, unlogged)
}
