package bench

import (
	"context"
	"testing"

	"github.com/mooring-dev/mooring/cloud/gce/gcetest"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// BenchmarkLBFanoutGCE is the LB fan-out on GCE's face: gcetest (the
// Compute API's network load balancers, every write an operation that ends
// after 50 ms) holding an instance per node, mooring-ccm with
// --cloud-provider=gce and loadBalancers: upstream, the upstream GCE
// provider's external load balancers (a static address, firewall rules, the
// node health check, a target pool, a forwarding rule), its operations read
// every 100 ms (upstream.operationPollInterval; the upstream's own second
// would make the run one of waits). Nodes joining are one addInstance of
// the target pool per load balancer and sync. The upstream's load balancers
// are no cloud.LoadBalancerInventory, so mooring-ccm runs the library's
// service controller under either --load-balancer-controller: the two runs
// are the same controller, which the table shows. 10 Services and 10 nodes
// unless MOORING_BENCH_LB says. See runLBFanoutFace.
func BenchmarkLBFanoutGCE(b *testing.B) {
	benchLBFanoutFace(b, "GCE face", "lb-fanout-gce", 10, func(b *testing.B, _ int) lbFace {
		g := harness.StartGCECloud(b)
		methods := []string{"aggregatedList", "get", "instances.list",
			"addresses.insert", "addresses.get", "addresses.list", "addresses.delete",
			"firewalls.get", "firewalls.insert", "firewalls.update",
			"httpHealthChecks.get", "httpHealthChecks.insert", "httpHealthChecks.update",
			"targetPools.get", "targetPools.insert", "targetPools.addInstance", "targetPools.removeInstance",
			"forwardingRules.get", "forwardingRules.insert", "forwardingRules.delete", "operations.get"}
		return lbFace{
			name: "GCE face", provider: upstreamGCE{g},
			add:       func(name string) { g.AddNode(benchCluster, name) },
			calls:     func() map[string]int64 { return countCalls(g.Calls, methods) },
			lbMethods: methods[3:], update: "targetPools.addInstance",
			targets: func() []int {
				pools := map[string]int{}
				for _, tp := range g.TargetPools(gcetest.DefaultProject, "us-central1") {
					pools[tp.SelfLink] = len(tp.Instances)
				}
				var t []int
				for _, fr := range g.ForwardingRules(gcetest.DefaultProject, "us-central1") {
					t = append(t, pools[fr.Target])
				}
				return t
			},
		}
	})
}

// upstreamGCE is gcetest as mooring-ccm with loadBalancers: upstream is set
// up for it.
type upstreamGCE struct{ *harness.GCECloud }

// CCMSetup makes the upstream's RBAC and cluster id ConfigMap.
func (u upstreamGCE) CCMSetup(ctx context.Context, c *testbed.ControlPlane, _ string) error {
	return harness.SetupGCEUpstream(ctx, c)
}

func (u upstreamGCE) WriteProviderConfig(dir, cluster, extra string) (string, error) {
	return u.GCECloud.WriteProviderConfig(dir, cluster, "loadBalancers: upstream\nupstream:\n  zone: "+gcetest.DefaultZone+
		"\n  nodeTags: [bench-node]\n  operationPollInterval: 100ms\n"+extra)
}
