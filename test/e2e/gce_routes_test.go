package e2e

import (
	"context"
	"fmt"
	"maps"
	"path"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	compute "google.golang.org/api/compute/v1"

	"github.com/mooring-dev/mooring/cloud/gce/gcetest"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// gceRouteCCMArgs run mooring-ccm's route controller on GCE: the Nodes' pod
// ranges in gceClusterCIDR become global routes of the project's network
// via their instances, made by the upstream GCE provider (loadBalancers:
// upstream) in gcetest (data there, an address given to nothing).
var gceRouteCCMArgs = []string{"--configure-cloud-routes=true", "--cluster-cidr=" + gceClusterCIDR,
	"--route-reconciliation-period=1s"}

const gceClusterCIDR = "10.244.0.0/16"

// gceUpstreamConfig are mooring-ccm's cloud config lines that hand its
// load balancers and routes to the upstream GCE provider (docs/gce.md).
const gceUpstreamConfig = "loadBalancers: upstream\nupstream:\n  zone: " + gcetest.DefaultZone + "\n  nodeTags: [mooring-node]\n"

// gceForeignRoute is a route in the cluster CIDR that is not the cluster's
// (an administrator's, to the internet gateway): mooring-ccm leaves it.
var gceForeignRoute = compute.Route{Name: "admin-10-244-99-0-24", Network: "global/networks/default", DestRange: "10.244.99.0/24",
	NextHopGateway: "global/gateways/" + gcetest.DefaultGateway, Description: "an administrator's"}

// gceRoutes gives each Node a pod range and waits for mooring-ccm's route
// controller, through the upstream GCE provider, to make it a route of the
// default network via the Node's instance (<cluster>-<Node UID>, priority
// 1000, description k8s-node-route, each insert's operation waited for),
// and for the Nodes' NetworkUnavailable condition to clear; the foreign
// route stays.
func gceRoutes(ctx context.Context, t *testing.T, c *testbed.Cluster, gce *harness.GCECloud, names []string) {
	t.Helper()
	start := time.Now()
	if _, err := gce.PutRoute("", gceForeignRoute); err != nil {
		t.Fatal(err)
	}
	type hop struct{ name, via string }
	want := map[string]hop{gceForeignRoute.DestRange: {gceForeignRoute.Name, gcetest.DefaultGateway}}
	for i, name := range names {
		cidr := fmt.Sprintf("10.244.%d.0/24", i+1)
		patch := fmt.Sprintf(`{"spec":{"podCIDR":%q,"podCIDRs":[%q]}}`, cidr, cidr)
		node, err := c.Client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want[cidr] = hop{e2eCluster + "-" + string(node.UID), name} // mooring-ccm's --cluster-name
	}
	harness.WaitUntil(ctx, t, "a route of the network per Node's pod range via its instance", func() (bool, error) {
		got := map[string]hop{}
		for _, r := range gce.Routes(gcetest.DefaultProject) {
			via := path.Base(r.NextHopInstance)
			if r.NextHopGateway != "" {
				via = path.Base(r.NextHopGateway)
			}
			got[r.DestRange] = hop{r.Name, via}
			if r.NextHopInstance != "" && (r.Priority != 1000 || r.Description != "k8s-node-route" || len(r.Warnings) != 0) {
				return false, fmt.Errorf("route %s: priority %d, description %q, warnings %v", r.Name, r.Priority, r.Description, r.Warnings)
			}
		}
		return maps.Equal(got, want), nil
	})
	waitNetworkAvailable(ctx, t, c, names)
	t.Logf("%d pod ranges routed via their instances in %v (routes.insert %d, routes.list %d, operations.wait %d); an administrator's route left",
		len(names), time.Since(start).Round(time.Millisecond), gce.Calls("routes.insert"), gce.Calls("routes.list"), gce.Calls("operations.wait"))
	if n := gce.Calls("routes.delete"); n != 0 {
		t.Errorf("%d route deletions", n)
	}
}
