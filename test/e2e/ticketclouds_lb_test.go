package e2e

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// lbFace is a cloud's load balancers as the test reads and makes them at
// its endpoint, besides mooring-ccm.
type lbFace struct {
	// list is every load balancer the endpoint holds.
	list func() []conformance.LB
	// legacy (nil: the step is skipped, on a cloud whose load balancers
	// are its own CCM's code, found by the Service's UID, so that nothing
	// can be made for a Service before it exists) makes the load
	// balancer the cloud's own CCM made for a
	// Service before the cluster switched to mooring (port to nodePort on
	// nodes), and returns it with the annotations that Service carries
	// (the id or name by which the cloud's CCM finds it).
	legacy func(t *testing.T, name string, port, nodePort int32, nodes []*corev1.Node) (conformance.LB, map[string]string)
	// serviceAnnotations are the Service's from the start (a quicker
	// health check, where the cloud's default takes long).
	serviceAnnotations map[string]string
	// annotations are a change of the cloud's annotations, and applied
	// reports whether the endpoint's load balancer of id shows it.
	annotations map[string]string
	applied     func(t *testing.T, id string) bool
	// updates counts the endpoint's calls that changed load balancers;
	// perBatch is how many one sync of a load balancer makes when two of
	// its targets go or come (0: one; more on a cloud that changes
	// targets with a call each).
	updates  func() int
	perBatch int
}

// testCloudLB runs a Service load balancer on the cloud through
// mooring-ccm: made, traffic through it to a node's node port (where a
// stand-in for kube-proxy answers), a port and the cloud's annotations
// changed, nodes leaving and coming back in one batch, a load balancer of
// the cloud's own CCM adopted with its address, and every one deleted
// with its Service, nothing left in the cloud.
func testCloudLB(ctx context.Context, t *testing.T, c *testbed.Cluster, names []string, f *lbFace) {
	start := time.Now()
	svcs := c.Client.CoreV1().Services("default")
	nodes := make([]*corev1.Node, len(names))
	for i, n := range names {
		node, err := c.Client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = node
	}
	svc, err := svcs.Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: f.serviceAnnotations},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubeProxyHealthz(t, nodes)
	standIn(t, nodes, svc.Spec.Ports[0].NodePort)
	ip := waitIngress(ctx, t, c, "web")
	waitTraffic(ctx, t, ip, 80, names)
	lb := onlyLB(t, f)
	t.Logf("load balancer %s (%s) at %s carries traffic to the nodes, %v after the Service", lb.Name, lb.ID, ip, time.Since(start).Round(time.Millisecond))

	// A second port and the cloud's annotations, in one change.
	svc, err = svcs.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "alt", Port: 8080, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP})
	if svc.Annotations == nil {
		svc.Annotations = map[string]string{}
	}
	maps.Copy(svc.Annotations, f.annotations)
	if svc, err = svcs.Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	standIn(t, nodes, svc.Spec.Ports[1].NodePort)
	harness.WaitUntil(ctx, t, "the second port and the annotations on the load balancer", func() (bool, error) {
		l := onlyLB(t, f)
		return slices.Contains(l.Ports, 8080) && f.applied(t, l.ID), nil
	})
	waitTraffic(ctx, t, ip, 8080, names)
	if l := onlyLB(t, f); l.ID != lb.ID || l.IP != lb.IP {
		t.Fatalf("the load balancer changed from %+v to %+v; want it updated in place", lb, l)
	}

	// Two nodes leave the load balancers at once (excluded by label), then
	// come back: one update each way.
	batch := func(exclude bool, want int) {
		t.Helper()
		before := f.updates()
		for _, n := range names[1:] {
			patch := `{"metadata":{"labels":{"node.kubernetes.io/exclude-from-external-load-balancers":"true"}}}`
			if !exclude {
				patch = `{"metadata":{"labels":{"node.kubernetes.io/exclude-from-external-load-balancers":null}}}`
			}
			if _, err := c.Client.CoreV1().Nodes().Patch(ctx, n, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		harness.WaitUntil(ctx, t, fmt.Sprintf("%d targets", want), func() (bool, error) { return onlyLB(t, f).Targets == want, nil })
		time.Sleep(lbNodeBatch) // a second sync would come within a batch
		t.Logf("2 nodes %s: %d update calls", map[bool]string{true: "left", false: "came back"}[exclude], f.updates()-before)
		if got, most := f.updates()-before, max(f.perBatch, 1); got > most {
			t.Errorf("two nodes changing at once cost %d update calls, want at most %d (one sync)", got, most)
		}
	}
	batch(true, 1)
	waitTraffic(ctx, t, ip, 80, names[:1])
	batch(false, len(names))

	services := []string{"web"}
	if f.legacy != nil {
		services = append(services, "legacy")
		// A load balancer the cloud's CCM made, for a Service that carries
		// what that CCM wrote on it: adopted, its address kept.
		legacy, annotations := f.legacy(t, "legacy", 80, 31999, nodes)
		for k, v := range f.serviceAnnotations {
			annotations[k] = v
		}
		if _, err := svcs.Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "legacy", Annotations: annotations},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, NodePort: 31999, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		standIn(t, nodes, 31999)
		if got := waitIngress(ctx, t, c, "legacy"); got != legacy.IP {
			t.Fatalf("the adopted load balancer's Service shows %s, want its address %s", got, legacy.IP)
		}
		waitTraffic(ctx, t, legacy.IP, 80, names)
		if n := len(f.list()); n != 2 {
			t.Fatalf("%d load balancers after adoption, want 2 (none made anew)", n)
		}
		t.Logf("load balancer %s (%s) made by the cloud's CCM adopted at %s", legacy.Name, legacy.ID, legacy.IP)
	}

	for _, name := range services {
		if err := svcs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	harness.WaitUntil(ctx, t, "the Services and their load balancers to go", func() (bool, error) {
		for _, name := range services {
			if _, err := svcs.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, err
			}
		}
		return len(f.list()) == 0, nil
	})
	t.Logf("load balancers: made, changed, batched, adopted and deleted in %v", time.Since(start).Round(time.Millisecond))
}

// lbNodeBatch is mooring-ccm's --load-balancer-node-batch in these tests.
const lbNodeBatch = time.Second

// standIn stands in for kube-proxy (which does not run here): on each
// node's addresses at nodePort, a server that answers the node's name.
func standIn(t *testing.T, nodes []*corev1.Node, nodePort int32) {
	t.Helper()
	for _, n := range nodes {
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
				continue
			}
			ln, err := net.Listen("tcp", net.JoinHostPort(a.Address, strconv.Itoa(int(nodePort))))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			harness.ServeLine(ln, n.Name)
		}
	}
}

// kubeProxyHealthz stands in for kube-proxy's health server (port 10256,
// GET /healthz answers 200 on a node that forwards), which some clouds'
// load balancers check for Services of externalTrafficPolicy Cluster.
func kubeProxyHealthz(t *testing.T, nodes []*corev1.Node) {
	t.Helper()
	for _, n := range nodes {
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
				continue
			}
			ln, err := net.Listen("tcp", net.JoinHostPort(a.Address, "10256"))
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/healthz" {
					http.NotFound(w, r)
					return
				}
				fmt.Fprintln(w, "{}")
			})}
			go func() { _ = srv.Serve(ln) }()
			t.Cleanup(func() { srv.Close() })
		}
	}
}

func waitIngress(ctx context.Context, t *testing.T, c *testbed.Cluster, name string) string {
	t.Helper()
	var ip string
	harness.WaitUntil(ctx, t, name+"'s ingress IP", func() (bool, error) {
		s, err := c.Client.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(s.Status.LoadBalancer.Ingress) == 0 {
			return false, err
		}
		ip = s.Status.LoadBalancer.Ingress[0].IP
		return ip != "", nil
	})
	return ip
}

// waitTraffic waits for a connection through ip:port to reach one of
// nodes.
func waitTraffic(ctx context.Context, t *testing.T, ip string, port int, nodes []string) {
	t.Helper()
	addr := net.JoinHostPort(ip, strconv.Itoa(port))
	harness.WaitUntil(ctx, t, "traffic through "+addr, func() (bool, error) {
		return slices.Contains(nodes, harness.FirstLine(addr)), nil
	})
}

func onlyLB(t *testing.T, f *lbFace) conformance.LB {
	t.Helper()
	all := f.list()
	if len(all) != 1 {
		t.Fatalf("load balancers at the endpoint: %+v, want one", all)
	}
	return all[0]
}
