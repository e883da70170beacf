package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

const chaosCluster = "chaos"

// binaries are built once per test process.
var binaries = sync.OnceValues(func() (map[string]string, error) {
	dir, err := tempDir()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, pkg := range []string{"ccm/cmd/mooring-ccm", "cloud/local/cmd/mooring-localcloud", "csrapprover/cmd/mooring-csr-approver", "agent/cmd/mooring-agent"} {
		bin, err := harness.Build(pkg, dir)
		if err != nil {
			return nil, err
		}
		out[filepath.Base(pkg)] = bin
	}
	// Scenario 6 skews agents' clocks, which only a chaosclock build allows.
	skewable, err := harness.BuildTagged("agent/cmd/mooring-agent", dir, "chaosclock")
	if err != nil {
		return nil, err
	}
	out[filepath.Base(skewable)] = skewable
	return out, nil
})

func bin(t *testing.T, name string) string {
	t.Helper()
	bins, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	return bins[name]
}

// world is a control plane, the local cloud and mooring-ccm (with its CSR
// approver) on the bed: the scene of a scenario. Its Nodes are simulated
// kubelets (harness.RegisterNodes), so kube-controller-manager's node
// lifecycle controller is off: Nodes keep the Ready condition the scenario
// gives them, and only mooring's cloud node lifecycle controller acts on
// them.
type world struct {
	c    *testbed.Cluster
	lc   *harness.LocalCloud
	ccm  *testbed.Process
	fast kubernetes.Interface
}

func newWorld(t *testing.T, ctx context.Context, ccmArgs ...string) *world {
	t.Helper()
	c := testbed.Start(t, testbed.Options{
		RBAC:        testbed.BootstrapRBAC{MooringApproves: true},
		Controllers: []string{"-node-lifecycle-controller"},
	})
	lc := startLocalCloud(t, c)
	for _, f := range []string{"deploy/csrapprover/role/clusterrole.yaml", "deploy/base/ccm-csrapprover-binding.yaml"} {
		if err := c.Apply(ctx, filepath.Join(harness.RepoRoot(), f)); err != nil {
			t.Fatal(err)
		}
	}
	ccm := harness.StartCCM(t, c, bin(t, "mooring-ccm"), lc, harness.CCMOptions{
		Cluster: chaosCluster, Args: append([]string{"--controllers=*,csr-approver", "--v=2"}, ccmArgs...),
	})
	fast, err := harness.FastClient(c)
	if err != nil {
		t.Fatal(err)
	}
	return &world{c: c, lc: lc, ccm: ccm, fast: fast}
}

// startLocalCloud starts the local cloud with address pools of their own
// that hold the full sizes' thousands of instances (the harness's default
// pools are /24s).
func startLocalCloud(t *testing.T, c *testbed.Cluster) *harness.LocalCloud {
	t.Helper()
	p := os.Getpid() % 15
	return harness.StartLocalCloud(t, c, bin(t, "mooring-localcloud"),
		fmt.Sprintf("--internal-cidr=127.%d.0.0/16", 10+p), fmt.Sprintf("--external-cidr=127.%d.0.0/16", 25+p),
		fmt.Sprintf("--vip-cidr=127.44.%d.0/24", p))
}

// createInstances makes instances named prefix-0000 ... in the cluster.
func (w *world) createInstances(t *testing.T, ctx context.Context, prefix string, n int) []*api.Instance {
	t.Helper()
	out := make([]*api.Instance, n)
	err := harness.Parallel(ctx, n, 16, func(ctx context.Context, i int) error {
		in, err := w.lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: fmt.Sprintf("%s-%04d", prefix, i), Cluster: chaosCluster})
		out[i] = in
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// initializedCount counts the named Nodes the CCM has initialized.
func (w *world) initializedCount(ctx context.Context, names []string) (int, error) {
	nodes, err := w.c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	byName := map[string]*corev1.Node{}
	for i := range nodes.Items {
		byName[nodes.Items[i].Name] = &nodes.Items[i]
	}
	n := 0
	for _, name := range names {
		if node := byName[name]; node != nil && harness.NodeInitialized(node) {
			n++
		}
	}
	return n, nil
}

// missingNodes lists the named Nodes that no longer exist.
func (w *world) missingNodes(ctx context.Context, names []string) ([]string, error) {
	nodes, err := w.c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, n := range nodes.Items {
		have[n.Name] = true
	}
	var missing []string
	for _, name := range names {
		if !have[name] {
			missing = append(missing, name)
		}
	}
	return missing, nil
}

// decision is a CSR's verdict as its conditions say.
type decision struct {
	approved, denied bool
	at               time.Time // when the verdict's condition was last updated
	reason           string
	conditions       int
}

// csrDecisions reads every CSR's verdict, by name.
func (w *world) csrDecisions(ctx context.Context) (map[string]decision, error) {
	list, err := w.c.Client.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]decision{}
	for _, csr := range list.Items {
		d := decision{conditions: len(csr.Status.Conditions)}
		for _, c := range csr.Status.Conditions {
			switch c.Type {
			case certificatesv1.CertificateApproved:
				d.approved, d.at, d.reason = true, c.LastUpdateTime.Time, c.Reason
			case certificatesv1.CertificateDenied:
				d.denied, d.at, d.reason = true, c.LastUpdateTime.Time, c.Reason
			}
		}
		out[csr.Name] = d
	}
	return out, nil
}

// allDecided reports whether every named CSR has a verdict.
func (w *world) allDecided(ctx context.Context, names []string) (bool, error) {
	d, err := w.csrDecisions(ctx)
	if err != nil {
		return false, err
	}
	for _, name := range names {
		if !d[name].approved && !d[name].denied {
			return false, nil
		}
	}
	return true, nil
}

// registerInitialized registers the named Nodes (simulated kubelets, Ready)
// and waits until the CCM has initialized them all.
func (w *world) registerInitialized(t *testing.T, ctx context.Context, names []string) {
	t.Helper()
	if err := harness.RegisterNodes(ctx, w.fast, names, harness.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.WaitUntil(ctx, t, "Nodes initialized", func() (bool, error) {
		n, err := w.initializedCount(ctx, names)
		return n == len(names), err
	})
}

// webService creates default/web, a LoadBalancer Service of port 80 (node
// port chosen by the apiserver).
func (w *world) webService(t *testing.T, ctx context.Context) *corev1.Service {
	t.Helper()
	svc, err := w.c.Client.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{
			Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// waitReadyServing waits until the named Nodes (real kubelets) are Ready
// and initialized and each has an approved serving certificate. The
// apiserver's errors are waited out: a scenario may have just restarted it.
func (w *world) waitReadyServing(t *testing.T, ctx context.Context, names []string) {
	t.Helper()
	harness.WaitUntil(ctx, t, "every Node Ready and initialized, every serving certificate approved", func() (bool, error) {
		nodes, err := w.c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		ready := map[string]bool{}
		for i := range nodes.Items {
			nd := &nodes.Items[i]
			if harness.NodeReady(nd) && harness.NodeInitialized(nd) {
				ready[nd.Name] = true
			}
		}
		l, err := w.c.Client.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		serving := map[string]bool{}
		for _, csr := range l.Items {
			if csr.Spec.SignerName == certificatesv1.KubeletServingSignerName && harness.Condition(&csr, certificatesv1.CertificateApproved) != nil {
				serving[csr.Spec.Username] = true
			}
		}
		for _, name := range names {
			if !ready[name] || !serving["system:node:"+name] {
				return false, nil
			}
		}
		return true, nil
	})
}

// watchNodes calls seen for every Node added or changed, and with gone for
// every Node deleted, as the watch delivers them, until ctx ends; it
// returns once the watch has synced.
func (w *world) watchNodes(t *testing.T, ctx context.Context, seen func(n *corev1.Node, gone bool)) {
	t.Helper()
	f := informers.NewSharedInformerFactory(w.fast, 0)
	inf := f.Core().V1().Nodes().Informer()
	node := func(obj any) *corev1.Node {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		n, _ := obj.(*corev1.Node)
		return n
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { seen(node(obj), false) },
		UpdateFunc: func(_, obj any) { seen(node(obj), false) },
		DeleteFunc: func(obj any) {
			if n := node(obj); n != nil {
				seen(n, true)
			}
		},
	}); err != nil {
		t.Fatal(err)
	}
	f.Start(ctx.Done())
	t.Cleanup(f.Shutdown)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("the Node watch did not sync")
	}
}
