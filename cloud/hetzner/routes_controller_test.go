package hetzner

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/cloud-provider/controllers/route"
	"k8s.io/component-base/metrics/prometheus/controllers"
	_ "k8s.io/controller-manager/pkg/features/register" // the route controller asks for its feature gate

	"github.com/mooring-dev/mooring/cloud/hetzner/hetznertest"
)

func podNode(name, podCIDR, ip string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:   v1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: []string{podCIDR}, ProviderID: ""},
		Status: v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: ip}}}}
}

// The library's stock route controller (k8s.io/cloud-provider
// controllers/route, as mooring-ccm runs it with --configure-cloud-routes)
// over the provider and the endpoint, with the cluster CIDR told as
// mooring-ccm tells it: the Nodes' pod CIDRs are routed; a stale route via
// a cluster server is deleted; routes via another server, and outside the
// cluster CIDR, stay; during an outage nothing is deleted, and after it a
// deleted Node's route goes.
func TestStockRouteController(t *testing.T) {
	w, r := routesWorld(t, NetworkRef{ID: hetznertest.DefaultNetworkID},
		hetznertest.Route{Destination: "10.244.9.0/24", Gateway: "127.0.85.1"},     // stale: no Node has it
		hetznertest.Route{Destination: "10.244.200.0/24", Gateway: "127.0.85.200"}, // nat-1's
		hetznertest.Route{Destination: "192.168.7.0/24", Gateway: "127.0.85.1"})    // outside the cluster CIDR
	const clusterCIDR = "10.244.0.0/16"
	if err := w.cloud.SetClusterCIDRs(clusterCIDR); err != nil {
		t.Fatal(err)
	}
	_, cidr, _ := net.ParseCIDR(clusterCIDR)
	kube := fake.NewClientset(podNode("web-1", "10.244.1.0/24", "127.0.85.1"), podNode("web-2", "10.244.2.0/24", "127.0.85.2"))
	inf := informers.NewSharedInformerFactory(kube, 0)
	rc, err := route.New(r, kube, inf.Core().V1().Nodes(), "c1", []*net.IPNet{cidr})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); inf.Shutdown(); <-done })
	inf.Start(ctx.Done())
	go func() {
		defer close(done)
		rc.Run(ctx, 100*time.Millisecond, controllers.NewControllerManagerMetrics("test"))
	}()

	waitRoutes := func(want ...string) {
		t.Helper()
		slices.Sort(want)
		deadline := time.Now().Add(20 * time.Second)
		for {
			got := networkRoutes(t, w)
			if slices.Equal(got, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("network routes %v, want %v", got, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitRoutes("10.244.1.0/24>127.0.85.1", "10.244.2.0/24>127.0.85.2", "10.244.200.0/24>127.0.85.200", "192.168.7.0/24>127.0.85.1")

	// An outage: web-2's Node goes, its route stays while the API is down.
	w.hz.SetDown(true)
	if err := kube.CoreV1().Nodes().Delete(ctx, "web-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	w.hz.SetDown(false)
	if n := w.hz.Calls("route-delete"); n != 1 {
		t.Fatalf("%d delete_route calls by the end of the outage, want 1 (the stale route's)", n)
	}
	waitRoutes("10.244.1.0/24>127.0.85.1", "10.244.200.0/24>127.0.85.200", "192.168.7.0/24>127.0.85.1")
	if n := w.hz.Calls("route-create"); n != 2 {
		t.Fatalf("%d add_route calls, want 2", n)
	}
}
