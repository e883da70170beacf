package bench

import (
	"strings"
	"testing"

	"github.com/mooring-dev/mooring/test/harness"
)

// BenchmarkLBFanoutAzure is the LB fan-out on Azure's face: azuretest
// (ARM's long-running writes, etags with If-Match; the cluster's one
// Standard load balancer with a frontend, rules and a probe per Service
// and one backend pool the nodes' NICs join, each NIC naming the pool in
// its IP configuration) holding a VM per node, mooring-ccm with
// --cloud-provider=azure, its controller and the library's in the same
// run. A node joins the pool by a write of its NIC (PutNIC, the update
// counted), once for every load balancer. A Service's targets are the
// members of its rules' pool. 10 Services and 10 nodes unless
// MOORING_BENCH_LB says. See runLBFanoutFace.
func BenchmarkLBFanoutAzure(b *testing.B) {
	benchLBFanoutFace(b, "Azure face", "lb-fanout-azure", 10, func(b *testing.B, _ int) lbFace {
		az := harness.StartAzureCloud(b)
		methods := []string{"ListVMs", "ListVMStatuses", "ListNICs", "ListPublicIPs", "GetVM",
			"GetLoadBalancer", "ListLoadBalancers", "PutLoadBalancer", "DeleteLoadBalancer", "GetPublicIP", "PutPublicIP",
			"DeletePublicIP", "GetNIC", "PutNIC", "GetOperation"}
		return lbFace{
			name: "Azure face", provider: az,
			add:       func(name string) { az.AddVM(benchCluster, name) },
			calls:     func() map[string]int64 { return countCalls(az.Calls, methods) },
			lbMethods: methods[5:], update: "PutNIC",
			targets: func() []int {
				var t []int
				for _, l := range az.LoadBalancers() {
					props, _ := l["properties"].(map[string]any)
					members := map[string]int{}
					for _, p := range objects(props["backendAddressPools"]) {
						pp, _ := p["properties"].(map[string]any)
						members[strings.ToLower(str(p["id"]))] = len(objects(pp["backendIPConfigurations"]))
					}
					for _, f := range objects(props["frontendIPConfigurations"]) {
						n := 0
						for _, r := range objects(props["loadBalancingRules"]) {
							rp, _ := r["properties"].(map[string]any)
							fr, _ := rp["frontendIPConfiguration"].(map[string]any)
							pool, _ := rp["backendAddressPool"].(map[string]any)
							if strings.EqualFold(str(fr["id"]), str(f["id"])) {
								n = members[strings.ToLower(str(pool["id"]))]
							}
						}
						t = append(t, n)
					}
				}
				return t
			},
		}
	})
}

// objects are a JSON array's objects.
func objects(v any) []map[string]any {
	list, _ := v.([]any)
	var out []map[string]any
	for _, it := range list {
		if m, ok := it.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

func str(v any) string { s, _ := v.(string); return s }
