package e2e

import (
	"context"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/client"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

const e2eCluster = "e2e"

// TestCCM runs mooring-ccm against the local cloud on the real test bed:
// node init, routes, a LoadBalancer Service that carries traffic, drift
// repair, deletion, and a node lifecycle that survives a cloud outage.
func TestCCM(t *testing.T) {
	ccmBin := harness.BuildBinary(t, "ccm/cmd/mooring-ccm")
	cloudBin := harness.BuildBinary(t, "cloud/local/cmd/mooring-localcloud")
	c := testbed.Start(t, testbed.Options{ClusterCIDR: "10.244.0.0/16", NodeMonitorGracePeriod: 20 * time.Second})
	lc := harness.StartLocalCloud(t, c, cloudBin)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	instances := createInstances(ctx, t, lc, 3)
	harness.StartCCM(t, c, ccmBin, lc, harness.CCMOptions{
		Cluster:     e2eCluster,
		CloudConfig: "instanceMaxAge: 2s\nminRefreshInterval: 500ms\n",
		Args: []string{"--configure-cloud-routes=true", "--allocate-node-cidrs=true", "--cluster-cidr=10.244.0.0/16",
			"--load-balancer-drift-period=2s", "--node-monitor-period=2s", "--route-reconciliation-period=2s", "--v=2"},
	})
	start := time.Now()
	for _, in := range instances {
		if _, err := c.AddNodeAt(ctx, in.Name, in.Addresses[0].Address); err != nil {
			t.Fatal(err)
		}
	}

	// Node init: taint gone, providerID, labels, cloud addresses.
	for _, in := range instances {
		var node *corev1.Node
		harness.WaitUntil(ctx, t, "node "+in.Name+" initialized", func() (bool, error) {
			n, err := c.Client.CoreV1().Nodes().Get(ctx, in.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			node = n
			// The taint and labels go in one update, the addresses in a
			// status update of their own.
			return err == nil && !hasTaint(n, uninitializedTaint, corev1.TaintEffectNoSchedule) && n.Spec.ProviderID != "" &&
				len(n.Status.Addresses) == len(in.Addresses), err
		})
		if node.Spec.ProviderID != "local://"+in.ID {
			t.Errorf("node %s: providerID %q", in.Name, node.Spec.ProviderID)
		}
		for k, want := range map[string]string{
			corev1.LabelTopologyZone: in.Zone, corev1.LabelTopologyRegion: in.Region,
			corev1.LabelInstanceTypeStable: in.InstanceType, "mooring.dev/cluster": e2eCluster,
		} {
			if node.Labels[k] != want {
				t.Errorf("node %s: label %s=%q, want %q", in.Name, k, node.Labels[k], want)
			}
		}
		if len(node.Status.Addresses) == 0 || node.Status.Addresses[0].Address != in.Addresses[0].Address {
			t.Errorf("node %s: addresses %v", in.Name, node.Status.Addresses)
		}
	}
	t.Logf("3 nodes initialized %v after the kubelets started", time.Since(start).Round(time.Millisecond))

	// With addresses set, each kubelet asks for its serving certificate.
	for _, in := range instances {
		var dns, ips []string
		for _, a := range in.Addresses {
			switch a.Type {
			case api.InternalIP, api.ExternalIP:
				ips = append(ips, a.Address)
			default:
				dns = append(dns, a.Address)
			}
		}
		checkServingCSRSANs(t, waitForServingCSR(ctx, t, c, in.Name), in.Name, dns, ips)
	}

	// Routes: one per node's pod CIDR, in the cloud's route table.
	harness.WaitUntil(ctx, t, "3 routes in the cloud", func() (bool, error) {
		routes, err := lc.Client.ListAllRoutes(ctx, client.ListOptions{Cluster: e2eCluster})
		return err == nil && len(routes) == 3, err
	})

	testLoadBalancer(ctx, t, c, lc)
	testLifecycle(ctx, t, c, lc, instances[2])

	st, err := lc.Client.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cloud API calls: %v", st.Calls)
}

// createInstances makes n instances of the e2e cluster in the local
// cloud, node-1 ... node-n.
func createInstances(ctx context.Context, t *testing.T, lc *harness.LocalCloud, n int) []*api.Instance {
	t.Helper()
	var instances []*api.Instance
	for i := range n {
		in, err := lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: fmt.Sprintf("node-%d", i+1), Cluster: e2eCluster})
		if err != nil {
			t.Fatal(err)
		}
		instances = append(instances, in)
	}
	return instances
}

func testLoadBalancer(ctx context.Context, t *testing.T, c *testbed.Cluster, lc *harness.LocalCloud) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{
			Type:  corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
	svc, err := c.Client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The "pod": a server on node-1's address at the node port, where
	// kube-proxy would forward; the other nodes fail the health check.
	node1 := c.Nodes[0].Address
	ln, err := net.Listen("tcp", net.JoinHostPort(node1, fmt.Sprint(svc.Spec.Ports[0].NodePort)))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	harness.ServeLine(ln, "served by "+node1)
	var vip string
	harness.WaitUntil(ctx, t, "the Service's ingress IP", func() (bool, error) {
		s, err := c.Client.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil || len(s.Status.LoadBalancer.Ingress) == 0 {
			return false, err
		}
		vip = s.Status.LoadBalancer.Ingress[0].IP
		return slices.Contains(s.Finalizers, "service.kubernetes.io/load-balancer-cleanup"), nil
	})
	through := func() string { return harness.FirstLine(net.JoinHostPort(vip, "80")) }
	harness.WaitUntil(ctx, t, "traffic through the VIP", func() (bool, error) { return through() == "served by "+node1, nil })
	t.Logf("load balancer %s carries traffic to %s:%d", vip, node1, svc.Spec.Ports[0].NodePort)

	// Deleted out of band: the drift sweep brings it back.
	lbs, err := lc.Client.ListAllLoadBalancers(ctx, client.ListOptions{Cluster: e2eCluster})
	if err != nil || len(lbs) != 1 {
		t.Fatalf("load balancers: %d, %v", len(lbs), err)
	}
	if err := lc.Client.DeleteLoadBalancer(ctx, lbs[0].Name); err != nil {
		t.Fatal(err)
	}
	harness.WaitUntil(ctx, t, "the load balancer to come back", func() (bool, error) {
		_, err := lc.Client.GetLoadBalancer(ctx, lbs[0].Name)
		if client.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	harness.WaitUntil(ctx, t, "traffic through the recreated load balancer", func() (bool, error) {
		s, err := c.Client.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil || len(s.Status.LoadBalancer.Ingress) == 0 {
			return false, err
		}
		vip = s.Status.LoadBalancer.Ingress[0].IP
		return through() == "served by "+node1, nil
	})

	// Deleting the Service deletes the load balancer, then the finalizer.
	if err := c.Client.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.WaitUntil(ctx, t, "the Service and its load balancer to go", func() (bool, error) {
		_, err := c.Client.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, nil
		}
		lbs, err := lc.Client.ListAllLoadBalancers(ctx, client.ListOptions{Cluster: e2eCluster})
		return err == nil && len(lbs) == 0, err
	})
}

func testLifecycle(ctx context.Context, t *testing.T, c *testbed.Cluster, lc *harness.LocalCloud, in *api.Instance) {
	node := c.Nodes[2]
	if node.Name != in.Name {
		t.Fatalf("node %s is not instance %s", node.Name, in.Name)
	}
	// The machine goes silent during a cloud outage: the Node turns
	// NotReady, and the CCM, unable to ask the cloud, must not delete it.
	if err := lc.Client.SetFaults(ctx, api.Faults{ErrorRate: 1}); err != nil {
		t.Fatal(err)
	}
	if err := node.Stop(); err != nil {
		t.Fatal(err)
	}
	harness.WaitUntil(ctx, t, node.Name+" NotReady", func() (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		return err == nil && !harness.NodeReady(n), err
	})
	time.Sleep(8 * time.Second) // several lifecycle rounds, all failing
	if _, err := c.Client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("during the outage the Node went: %v", err)
	}
	if err := lc.Client.ClearFaults(ctx); err != nil {
		t.Fatal(err)
	}

	// Stopped instance: shutdown taint.
	if _, err := lc.Client.StopInstance(ctx, in.ID); err != nil {
		t.Fatal(err)
	}
	harness.WaitUntil(ctx, t, node.Name+" shutdown taint", func() (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		return err == nil && hasTaint(n, "node.cloudprovider.kubernetes.io/shutdown", corev1.TaintEffectNoSchedule), err
	})

	// Terminated instance: the Node is deleted.
	if _, err := lc.Client.TerminateInstance(ctx, in.ID); err != nil {
		t.Fatal(err)
	}
	harness.WaitUntil(ctx, t, node.Name+" deleted", func() (bool, error) {
		_, err := c.Client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}
