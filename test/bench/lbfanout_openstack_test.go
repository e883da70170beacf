package bench

import (
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud/openstack"
	"github.com/mooring-dev/mooring/cloud/openstack/openstacktest"
	"github.com/mooring-dev/mooring/test/harness"
)

// BenchmarkLBFanoutOpenStack is the LB fan-out on OpenStack's face:
// openstacktest (Octavia: a load balancer made in one request, PENDING_*
// for openstackBenchBuild after each change and immutable meanwhile, its
// members replaced with one batch update per pool; floating IPs from
// Neutron) holding a server per node, mooring-ccm with
// --cloud-provider=openstack, its controller and the library's in the
// same run. The pools have no health monitor (enable-health-monitor
// false): 10 x 10 data plane checks of node ports nothing serves would
// only load the machine. 10 Services and 10 nodes unless
// MOORING_BENCH_LB says. See runLBFanoutFace.
func BenchmarkLBFanoutOpenStack(b *testing.B) {
	benchLBFanoutFace(b, "OpenStack face", "lb-fanout-openstack", 10, func(b *testing.B, services int) lbFace {
		osc := harness.StartOpenStackCloud(b, nil, openstacktest.Options{LB: openstacktest.LBOptions{PendingFor: openstackBenchBuild}})
		osc.LBConfig = true
		methods := []string{"auth", "list", "get", "lb-list", "lb-get", "listener-list", "pool-list", "member-list", "monitor-get",
			"fip-list", "lb-create", "lb-update", "listener-create", "listener-update", "listener-delete", "pool-create",
			"pool-update", "pool-delete", "member-batch", "monitor-create", "monitor-update", "monitor-delete", "fip-create",
			"fip-update", "fip-delete", "lb-delete"}
		return lbFace{
			name: "OpenStack face", provider: osc,
			add:       func(name string) { osc.AddNode(benchCluster, name) },
			calls:     func() map[string]int64 { return countCalls(osc.Calls, methods) },
			lbMethods: methods[3:], update: "member-batch",
			targets: func() []int {
				var t []int
				for _, l := range osc.LoadBalancers() {
					n := 0
					if len(l.Pools) > 0 {
						n = len(l.Pools[0].Members)
					}
					t = append(t, n)
				}
				return t
			},
			annotations: map[string]string{openstack.AnnotationEnableMonitor: "false"},
		}
	})
}

// openstackBenchBuild is how long openstacktest's Octavia takes over each
// change here (a real one: seconds for a member update, a minute or more
// to build an amphora).
const openstackBenchBuild = time.Second
