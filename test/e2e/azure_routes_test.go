package e2e

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mooring-dev/mooring/cloud/azure/azuretest"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// Azure's face runs mooring-ccm's route controller over a kubenet route
// table of azuretest's (data: the routes' addresses are given to nothing).
const (
	azureRouteTable   = "kubenet-routes"
	azureClusterCIDR  = "10.244.0.0/16"
	azureRouteRefresh = "2s"
)

// azureForeignRoute is a route of the table that is not the cluster's (a
// virtual appliance at an address no VM has), inside the cluster CIDR:
// mooring-ccm leaves it alone.
var azureForeignRoute = azuretest.Route{Name: "appliance", AddressPrefix: "10.244.99.0/24", NextHopType: "VirtualAppliance",
	NextHopIPAddress: "127.0.81.250"}

// azureJoinOptions are mooring-ccm's flags and cloud config lines on
// Azure's face: the route controller, over the route table.
func azureJoinOptions() joinOptions {
	return joinOptions{
		CCMArgs: []string{"--configure-cloud-routes=true", "--cluster-cidr=" + azureClusterCIDR,
			"--route-reconciliation-period=" + azureRouteRefresh},
		CCMConfig: "routeTableName: " + azureRouteTable + "\n",
	}
}

// startAzureCloud starts Azure's endpoint with the route table (its
// foreign route in it) that azureJoinOptions name.
func startAzureCloud(t testing.TB) *harness.AzureCloud {
	az := harness.StartAzureCloud(t)
	az.RouteTables()
	az.PutRouteTable("", azureRouteTable, azureForeignRoute)
	return az
}

// azureRoutes gives each Node a pod range and waits for mooring-ccm's
// route controller to route it in the table via the Node's VM's private
// IP (next hop type VirtualAppliance, the route named as
// cloud-provider-azure names it), and for the Nodes' NetworkUnavailable
// condition to clear; the foreign route, inside the cluster CIDR, stays.
func azureRoutes(ctx context.Context, t *testing.T, c *testbed.Cluster, az *harness.AzureCloud, names []string) {
	t.Helper()
	start := time.Now()
	table := az.ResourceID("", azuretest.RouteTableType, azureRouteTable)
	key := func(r azuretest.Route) string { return r.Name + " " + r.NextHopType + " " + r.NextHopIPAddress }
	want := map[string]string{azureForeignRoute.AddressPrefix: key(azureForeignRoute)}
	for i, name := range names {
		cidr := fmt.Sprintf("10.244.%d.0/24", i+1)
		patch := fmt.Sprintf(`{"spec":{"podCIDR":%q,"podCIDRs":[%q]}}`, cidr, cidr)
		if _, err := c.Client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		node, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ip := ""
		for _, a := range node.Status.Addresses {
			if a.Type == corev1.NodeInternalIP && ip == "" {
				ip = a.Address
			}
		}
		want[cidr] = key(azuretest.Route{Name: fmt.Sprintf("%s____10244%d024", name, i+1), NextHopType: "VirtualAppliance", NextHopIPAddress: ip})
	}
	harness.WaitUntil(ctx, t, "a route of the table per Node's pod range via its VM's private IP", func() (bool, error) {
		rs, ok := az.TableRoutes(table)
		if !ok {
			return false, fmt.Errorf("route table %s gone", table)
		}
		got := map[string]string{}
		for _, r := range rs {
			got[r.AddressPrefix] = key(r)
		}
		return maps.Equal(got, want), nil
	})
	waitNetworkAvailable(ctx, t, c, names)
	t.Logf("%d pod ranges routed in route table %s via their VMs in %v (table reads %d, writes %d); the appliance's route left",
		len(names), azureRouteTable, time.Since(start).Round(time.Millisecond), az.Calls("GetRouteTable"), az.Calls("PutRouteTable"))
	if n := az.Calls("PutRouteTable"); n > len(names) {
		t.Errorf("%d writes of the route table for %d routes", n, len(names))
	}
}
