package bench

import (
	"testing"

	"github.com/mooring-dev/mooring/cloud/oci"
	"github.com/mooring-dev/mooring/cloud/oci/ocitest"
	"github.com/mooring-dev/mooring/test/harness"
)

// BenchmarkLBFanoutOCI is the LB fan-out on OCI's face: ocitest (flexible
// Load Balancers made in one request; every change a work request of 20 ms,
// one at a time per load balancer, a write meanwhile 409) holding an
// instance per node, mooring-ccm with --cloud-provider=oci, its controller
// and the library's in the same run. The Services' rule mode is None (no
// security lists: the load balancer API is what is measured). Nodes joining
// are one backend set update per load balancer and sync. 10 Services and 10
// nodes unless MOORING_BENCH_LB says. See runLBFanoutFace.
func BenchmarkLBFanoutOCI(b *testing.B) {
	benchLBFanoutFace(b, "OCI face", "lb-fanout-oci", 10, func(b *testing.B, _ int) lbFace {
		o := harness.StartOCICloud(b)
		o.LBConfig = "loadBalancer:\n  subnet1: ocid1.subnet.oc1.iad.aaaaaaaabenchlbsubnet\n"
		methods := []string{"ListInstances", "ListVnicAttachments", "GetVnic", "GetInstance",
			ocitest.MethodListLB, ocitest.MethodGetLB, ocitest.MethodGetLBWork, ocitest.MethodCreateLB, ocitest.MethodUpdateLB,
			ocitest.MethodUpdateLBSet, ocitest.MethodCreateLBSet, ocitest.MethodDeleteLBSet, ocitest.MethodCreateLBListen,
			ocitest.MethodUpdateLBListen, ocitest.MethodDeleteLBListen, ocitest.MethodDeleteLB, ocitest.MethodListNLB}
		return lbFace{
			name: "OCI face", provider: o,
			add:       func(name string) { o.AddNode(benchCluster, name) },
			calls:     func() map[string]int64 { return countCalls(o.Calls, methods) },
			lbMethods: methods[4:], update: ocitest.MethodUpdateLBSet,
			targets: func() []int {
				var t []int
				for _, l := range o.Balancers() {
					n := -1
					for _, s := range l.BackendSets {
						if n < 0 || len(s.Backends) < n {
							n = len(s.Backends)
						}
					}
					t = append(t, max(n, 0))
				}
				return t
			},
			annotations: map[string]string{oci.AnnotationRuleMode: oci.RuleModeNone},
		}
	})
}
