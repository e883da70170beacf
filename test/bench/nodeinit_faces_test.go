package bench

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud/azure/azuretest"
	"github.com/mooring-dev/mooring/cloud/gce/gcetest"
	"github.com/mooring-dev/mooring/test/harness"
)

const (
	gceBench   = "node init, GCE face"
	azureBench = "node init, Azure face"
	// azurePageSize is azuretest's page for the benchmark. ARM does not
	// document the page size of its lists; the pages counted scale with it.
	azurePageSize = 1000
)

// BenchmarkNodeInitGCE is node init on GCE's face: N instances in gcetest
// (the Compute API: instances.aggregatedList filtered by the cluster
// label, up to 500 instances a page, GCE's largest; instances.get),
// mooring-ccm with --cloud-provider=gce, and N Nodes registered under the
// instances' names without providerIDs, as kubelets on GCE register. It
// reports the time until all are initialized, per-node p50/p99, and the
// Compute API calls from mooring-ccm's start: lists, their pages, gets.
// Each run (go test -count) starts a fresh bed.
func BenchmarkNodeInitGCE(b *testing.B) {
	n := nodeCount(b)
	keepResults(gceBench, "nodes-gce")
	bins, err := binaries()
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		r := runFace(b, n, func(b *testing.B) face {
			g := harness.StartGCECloud(b)
			names := make([]string, n)
			for i := range names {
				names[i] = g.AddNode(benchCluster, nodeName(i)).Name
			}
			return face{
				provider: g, bin: bins[0], name: "mooring-ccm", nodes: names,
				args: strings.Fields(os.Getenv("MOORING_BENCH_CCM_ARGS")),
				calls: func() map[string]int64 {
					return map[string]int64{"aggregatedList": int64(g.Calls("aggregatedList")), "get": int64(g.Calls("get")),
						gcetest.NextPage: int64(g.Calls(gcetest.NextPage))}
				},
				timeout: 5*time.Minute + time.Duration(n)*20*time.Millisecond, strict: true,
			}
		})
		r.record(gceBench, "mooring-ccm", true)
		pages := r.calls["aggregatedList"]
		next := r.calls[gcetest.NextPage]
		delete(r.calls, gcetest.NextPage)
		calls := sum(r.calls)
		record(gceBench, "Compute API calls from mooring-ccm's start until all initialized", fmt.Sprintf("%d (%s)", calls, harness.CallsString(r.calls)),
			"< 50 at 5,000 nodes", calls < 50)
		record(gceBench, "instances.aggregatedList: lists, and pages of up to 500", fmt.Sprintf("%d lists, %d pages", pages-next, pages), "", false)
		b.ReportMetric(r.total.Seconds(), "init-s")
		b.ReportMetric(float64(calls), "api-calls")
		b.Logf("GCE face: %d nodes initialized in %v with %d Compute API calls", n, r.total, calls)
	}
}

// BenchmarkNodeInitAzure is node init on Azure's face: N VMs in azuretest
// (ARM's lists of VMs, NICs and public IPs with nextLink pages of
// azurePageSize), mooring-ccm with --cloud-provider=azure, and N Nodes
// registered under the VMs' names without providerIDs. It reports what
// BenchmarkNodeInitGCE reports, in ARM calls, lists and pages.
func BenchmarkNodeInitAzure(b *testing.B) {
	n := nodeCount(b)
	keepResults(azureBench, "nodes-azure")
	bins, err := binaries()
	if err != nil {
		b.Fatal(err)
	}
	armOps := []string{"ListVMs", "ListAllVMs", "ListVMStatuses", "GetVM", "ListScaleSets", "GetScaleSet", "ListScaleSetVMs",
		"GetScaleSetVM", "ListNICs", "ListPublicIPs", azuretest.NextPage}
	for range b.N {
		r := runFace(b, n, func(b *testing.B) face {
			a := harness.StartAzureCloudWith(b, azuretest.Options{PageSize: azurePageSize})
			names := make([]string, n)
			for i := range names {
				names[i] = a.AddVM(benchCluster, nodeName(i)).Name
			}
			return face{
				provider: a, bin: bins[0], name: "mooring-ccm", nodes: names,
				args: strings.Fields(os.Getenv("MOORING_BENCH_CCM_ARGS")),
				calls: func() map[string]int64 {
					m := map[string]int64{}
					for _, op := range armOps {
						m[op] = int64(a.Calls(op))
					}
					return m
				},
				timeout: 5*time.Minute + time.Duration(n)*20*time.Millisecond, strict: true,
			}
		})
		r.record(azureBench, "mooring-ccm", true)
		next := r.calls[azuretest.NextPage]
		delete(r.calls, azuretest.NextPage)
		var pages int64
		for op, c := range r.calls {
			if strings.HasPrefix(op, "List") {
				pages += c
			}
		}
		calls := sum(r.calls)
		record(azureBench, "ARM calls from mooring-ccm's start until all initialized", fmt.Sprintf("%d (%s)", calls, harness.CallsString(r.calls)),
			"< 50 at 5,000 nodes", calls < 50)
		record(azureBench, fmt.Sprintf("ARM lists, and their pages of up to %d", azurePageSize), fmt.Sprintf("%d lists, %d pages", pages-next, pages), "", false)
		b.ReportMetric(r.total.Seconds(), "init-s")
		b.ReportMetric(float64(calls), "api-calls")
		b.Logf("Azure face: %d nodes initialized in %v with %d ARM calls", n, r.total, calls)
	}
}
