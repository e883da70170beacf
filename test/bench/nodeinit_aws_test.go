package bench

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud/aws/awstest"
	"github.com/mooring-dev/mooring/test/harness"
)

// BenchmarkNodeInitAWS is node init on AWS's face, side by side in one
// run: mooring-ccm (--cloud-provider=aws), and upstream AWS's provider
// (k8s.io/cloud-provider-aws v1.36, its InstancesV2) under the library's
// cloud-node controller, as upstream's aws-cloud-controller-manager runs
// it (test/bench/upstreamccm), at --concurrent-node-syncs 1 (the library's
// default), 10 and 50. Each on a fresh bed and a fresh awstest (the real
// SDK, SigV4 checked on every call) holding N EC2 instances, whose N
// Nodes register under the instances' private DNS names without
// providerIDs, as kubelets on EC2 register; first with EC2's request
// throttling on (awstest.DefaultBuckets: the documented bucket of 100
// tokens refilled by 20 a second for each Describe action, an empty one
// answering RequestLimitExceeded), then with it off.
//
// It reports, per run: the time until all are initialized, per-node
// registration-to-initialized p50/p99, EC2 calls by action from the CCM's
// start (throttled ones included), how DescribeInstances named instances
// (by id, as upstream's batcher sends them, up to 500 ids; by private DNS
// name, one per node without a providerID; lists and their pages, as
// mooring's view makes them), throttled calls, Node 409s and the CCM's
// CPU; and, for each upstream run, its time and EC2 calls over the same
// run's mooring figures. go test -count=K runs every configuration K times
// (each configuration's runs in a row, mooring's first): the k-th upstream
// run is compared with the k-th mooring run of the same throttling.
//
// The upstream CCM runs as mooring-ccm does (the cloud-controller-manager
// ServiceAccount of deploy/ccm/rbac.yaml) with --kube-api-qps=5000 and
// --kube-api-burst=10000, so that its client's limit is not what is
// measured, and --configure-cloud-routes=false, as upstream's manifests
// run it. A run of it that does not finish within 5 min + 600 ms per
// node is reported with the nodes it initialized.
func BenchmarkNodeInitAWS(b *testing.B) {
	n := nodeCount(b)
	keepResults(awsBench, "nodes-aws")
	for _, throttled := range []bool{true, false} {
		limits := "EC2 throttling"
		sub := "ec2-throttling"
		if !throttled {
			limits, sub = "no throttling", "no-throttling"
		}
		// One level of sub-benchmarks (names with a slash): go test
		// -count repeats the leaves of a single level only.
		var mooring []awsRun
		b.Run(sub+"/mooring", func(b *testing.B) {
			for range b.N {
				r := runNodeInitAWS(b, n, throttled, 0)
				r.record(fmt.Sprintf("%s, %s: mooring", awsBench, limits), nil)
				mooring = append(mooring, r)
			}
		})
		for _, syncs := range upstreamSyncs {
			runs := 0
			b.Run(fmt.Sprintf("%s/upstream-syncs-%d", sub, syncs), func(b *testing.B) {
				for range b.N {
					r := runNodeInitAWS(b, n, throttled, syncs)
					var same *awsRun
					if runs < len(mooring) {
						same = &mooring[runs]
					}
					r.record(fmt.Sprintf("%s, %s: upstream, --concurrent-node-syncs=%d", awsBench, limits, syncs), same)
					runs++
				}
			})
		}
	}
}

const awsBench = "node init, AWS face"

// upstreamSyncs are the --concurrent-node-syncs the upstream CCM runs
// with: the library's default, and two of the settings users choose.
var upstreamSyncs = []int{1, 10, 50}

// ec2Actions are the EC2 actions the CCMs call during node init.
var ec2Actions = []string{awstest.ActionDescribeInstances, awstest.ActionDescribeAvailabilityZones, awstest.ActionDescribeInstanceTopology}

// awsRun is one node-init run on AWS's face.
type awsRun struct {
	faceRun
	upstream  bool
	ec2       int64 // EC2 calls from the CCM's start, throttled ones included
	throttled map[string]int64
	describes awstest.DescribeStats
}

// upstreamBinary builds test/bench/upstreamccm once, next to the others.
var upstreamBinary = sync.OnceValues(func() (string, error) {
	if _, err := binaries(); err != nil {
		return "", err
	}
	return harness.Build("test/bench/upstreamccm", binDir)
})

// runNodeInitAWS measures one run: mooring-ccm when syncs is 0, else the
// upstream CCM with that many node syncs.
func runNodeInitAWS(b *testing.B, n int, throttled bool, syncs int) awsRun {
	bins, err := binaries()
	if err != nil {
		b.Fatal(err)
	}
	var aws *harness.AWSCloud
	fr := runFace(b, n, func(b *testing.B) face {
		aws = harness.StartAWSCloud(b)
		names := make([]string, n)
		for i := range names {
			names[i] = aws.AddNode(benchCluster, nodeName(i)).PrivateDNSName
		}
		f := face{
			provider: aws, bin: bins[0], name: "mooring-ccm",
			args:  strings.Fields(os.Getenv("MOORING_BENCH_CCM_ARGS")),
			nodes: names,
			calls: func() map[string]int64 {
				m := map[string]int64{}
				for _, a := range ec2Actions {
					if c := aws.Calls(a); c > 0 {
						m[a] = int64(c)
					}
				}
				return m
			},
			timeout: 5*time.Minute + time.Duration(n)*20*time.Millisecond,
			strict:  true,
		}
		if syncs > 0 {
			bin, err := upstreamBinary()
			if err != nil {
				b.Fatal(err)
			}
			f.provider, f.bin, f.name = aws.Upstream(), bin, "upstream-aws-ccm"
			// No routes, as upstream's own manifests run it.
			f.args = []string{fmt.Sprintf("--concurrent-node-syncs=%d", syncs), "--kube-api-qps=5000", "--kube-api-burst=10000",
				"--configure-cloud-routes=false", "--v=2"}
			f.timeout, f.strict = 5*time.Minute+time.Duration(n)*600*time.Millisecond, false
		}
		// EC2's buckets start full when the CCM starts.
		if throttled {
			aws.Throttle(nil)
		}
		aws.ResetDescribes()
		return f
	})
	r := awsRun{faceRun: fr, upstream: syncs > 0, ec2: sum(fr.calls), throttled: map[string]int64{}, describes: aws.Describes()}
	for _, a := range ec2Actions {
		if t := aws.Throttled(a); t > 0 {
			r.throttled[a] = int64(t)
		}
	}
	b.ReportMetric(r.total.Seconds(), "init-s")
	b.ReportMetric(float64(r.ec2), "ec2-calls")
	b.ReportMetric(float64(sum(r.throttled)), "throttled")
	b.Logf("%d of %d nodes initialized in %v with %d EC2 calls (%d throttled)", r.done, n, r.total, r.ec2, sum(r.throttled))
	return r
}

// record adds the run's figures under bench; an upstream run is compared
// with mooring's run of the same round (nil: none was run).
func (r awsRun) record(bench string, mooring *awsRun) {
	ccm := "mooring-ccm"
	if r.upstream {
		ccm = "upstream CCM"
	}
	r.faceRun.record(bench, ccm, !r.upstream)
	calls := fmt.Sprintf("%d (%s)", r.ec2, harness.CallsString(r.calls))
	d := r.describes
	kinds := fmt.Sprintf("by instance id %d (%d ids, up to %d in one call), by private DNS name %d, lists and pages %d",
		d.ByID, d.IDs, d.MaxIDs, d.ByAddress, d.Listed)
	throttled := fmt.Sprint(sum(r.throttled))
	if len(r.throttled) > 0 {
		throttled += " (" + harness.CallsString(r.throttled) + ")"
	}
	if !r.upstream {
		record(bench, "EC2 calls from the CCM's start until all initialized", calls, "< 50 at 5,000 nodes", r.ec2 < 50)
		record(bench, "DescribeInstances answered, by how they name instances", kinds, "", false)
		record(bench, "EC2 calls throttled (RequestLimitExceeded)", throttled, "0", len(r.throttled) == 0)
		return
	}
	record(bench, "EC2 calls from the CCM's start until all initialized", calls, "", false)
	record(bench, "DescribeInstances answered, by how they name instances", kinds, "", false)
	record(bench, "EC2 calls throttled (RequestLimitExceeded)", throttled, "", false)
	if mooring == nil {
		return
	}
	// mooring must be faster and make a tenth of the calls or fewer.
	faster := mooring.done == mooring.n && (r.done < r.n || r.total > mooring.total)
	ratio := fmt.Sprintf("%.1fx", r.total.Seconds()/mooring.total.Seconds())
	if r.done < r.n {
		ratio = "more than " + ratio + " (not all initialized)"
	}
	record(bench, "time to initialize all, this / mooring's (the same round)", ratio, "> 1x (mooring faster)", faster)
	callRatio := "all (mooring made none)"
	if mooring.ec2 > 0 {
		callRatio = fmt.Sprintf("%.1fx", float64(r.ec2)/float64(mooring.ec2))
	}
	record(bench, "EC2 calls, this / mooring's (the same round)", callRatio, ">= 10x", r.ec2 >= 10*mooring.ec2)
}
