package e2e

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mooring-dev/mooring/cloud/openstack/openstacktest"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// openstackCCMArgs run mooring-ccm's route controller on OpenStack's face:
// the Nodes' pod ranges in openstackClusterCIDR are the router's extra
// routes (data in openstacktest's Neutron, an address given to nothing).
var openstackCCMArgs = []string{"--configure-cloud-routes=true", "--cluster-cidr=" + openstackClusterCIDR,
	"--route-reconciliation-period=2s"}

const openstackClusterCIDR = "10.244.0.0/16"

// openstackForeignRoute is a route on the cluster's router that is not
// the cluster's (via an address on the subnet that no server has), which
// mooring-ccm leaves alone.
var openstackForeignRoute = openstacktest.Route{Destination: "10.244.99.0/24", NextHop: "127.0.92.250"}

// openstackRoutes gives each Node a pod range and waits for mooring-ccm's
// route controller to make it an extra route of the cluster's Neutron
// router via the Node's fixed address (its InternalIP), with the pod range
// in the allowed address pairs of the server's port, as the OpenStack CCM
// does, and for the Nodes' NetworkUnavailable condition to clear; the
// foreign route, inside the cluster CIDR, stays.
func openstackRoutes(ctx context.Context, t *testing.T, c *testbed.Cluster, osc *harness.OpenStackCloud, names []string) {
	t.Helper()
	start := time.Now()
	want := map[string]string{openstackForeignRoute.Destination: openstackForeignRoute.NextHop}
	wantPairs := map[string]string{} // port's fixed address -> pod CIDR
	for i, name := range names {
		cidr := fmt.Sprintf("10.244.%d.0/24", i+1)
		patch := fmt.Sprintf(`{"spec":{"podCIDR":%q,"podCIDRs":[%q]}}`, cidr, cidr)
		if _, err := c.Client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		srv, ok := osc.Server(name)
		if !ok {
			t.Fatalf("no server %s", name)
		}
		want[cidr] = srv.Addresses[0].Addr
		wantPairs[srv.Addresses[0].Addr] = cidr
	}
	harness.WaitUntil(ctx, t, "an extra route of the router per Node's pod range via its server's fixed address", func() (bool, error) {
		r, ok := osc.Router(osc.RouterID)
		if !ok {
			return false, fmt.Errorf("router %s gone", osc.RouterID)
		}
		got := map[string]string{}
		for _, x := range r.Routes {
			got[x.Destination] = x.NextHop
		}
		return maps.Equal(got, want), nil
	})
	harness.WaitUntil(ctx, t, "each pod range in its server's port's allowed address pairs", func() (bool, error) {
		got := map[string]string{}
		for _, p := range osc.Ports() {
			if len(p.AllowedAddressPairs) == 1 {
				got[p.IPAddress] = p.AllowedAddressPairs[0]
			}
		}
		return maps.Equal(got, wantPairs), nil
	})
	waitNetworkAvailable(ctx, t, c, names)
	t.Logf("%d pod ranges routed on router %s via their servers in %v (add_extraroutes %d, router updates %d, port updates %d); another next hop's route left",
		len(names), osc.RouterID, time.Since(start).Round(time.Millisecond), osc.Calls("router-add-routes"), osc.Calls("router-update"),
		osc.Calls("port-update"))
	if n := osc.Calls("router-remove-routes") + osc.Calls("router-update"); n != 0 {
		t.Errorf("%d removals or whole writes of the router's routes", n)
	}
}
