package bench

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// BenchmarkNodeInitAWS is BenchmarkNodeInit's mooring run on AWS's face: N
// EC2 instances in the AWS-compatible endpoint (cloud/aws/awstest, real
// SDK, SigV4 checked on every call), mooring-ccm with --cloud-provider=aws,
// and N Nodes registered under the instances' private DNS names, as
// kubelets on EC2 register, without providerIDs. It reports what node
// initialization costs in DescribeInstances calls. The endpoint has no rate
// limit: the figure is the calls the CCM makes, not a throttled time.
// Each run (go test -count) starts a fresh bed.
func BenchmarkNodeInitAWS(b *testing.B) {
	const bench = "node init, AWS face"
	n := nodeCount(b)
	for range b.N {
		total, describe := runNodeInitAWS(b, n)
		record(bench, "all initialized after", seconds(total), "< 60 s at 5,000 nodes", total < time.Minute)
		record(bench, "DescribeInstances calls during init (pages of up to 1,000)", fmt.Sprint(describe), "< 50 at 5,000 nodes", describe < 50)
	}
}

// runNodeInitAWS measures one run: the time until every Node is
// initialized, and the DescribeInstances calls it took.
func runNodeInitAWS(b *testing.B, n int) (time.Duration, int) {
	const bench = "node init, AWS face"
	bins, err := binaries()
	if err != nil {
		b.Fatal(err)
	}
	c := testbed.Start(b, testbed.Options{Controllers: []string{"-node-lifecycle-controller"}})
	aws := harness.StartAWSCloud(b)
	names := make([]string, n)
	for i := range names {
		names[i] = aws.AddNode(benchCluster, nodeName(i)).PrivateDNSName
	}
	timeout := 5*time.Minute + time.Duration(n)*20*time.Millisecond
	ctx, cancel := withTimeout(timeout)
	defer cancel()
	ccm := harness.StartCCM(b, c, bins[0], aws, harness.CCMOptions{
		Cluster: benchCluster, Args: strings.Fields(os.Getenv("MOORING_BENCH_CCM_ARGS")),
	})
	if err := waitLeader(ctx, c.Client); err != nil {
		b.Fatalf("mooring-ccm: %v\n%s", err, ccm.LogTail(30))
	}
	client, err := harness.FastClient(c)
	if err != nil {
		b.Fatal(err)
	}
	w := &world{c: c, ccm: ccm, fast: client}

	created := newStamps()
	done, all := watchNodes(b, w, n)
	describeBefore := aws.Calls("DescribeInstances")
	start := time.Now()
	if err := harness.RegisterNodes(ctx, w.fast, names, harness.RegisterOptions{Created: created.set}); err != nil {
		b.Fatal(err)
	}
	registered := time.Since(start)
	select {
	case <-all:
	case <-ctx.Done():
		b.Fatalf("%d of %d nodes initialized within %v\n%s", done.len(), n, timeout, ccm.LogTail(20))
	}
	total := time.Since(start)
	describe := aws.Calls("DescribeInstances") - describeBefore
	lat := latencies(created, done)

	b.ReportMetric(total.Seconds(), "init-s")
	b.ReportMetric(float64(describe), "describe-calls")
	record(bench, fmt.Sprintf("%d nodes registered under private DNS names (simulated kubelets)", n), seconds(registered), "", false)
	record(bench, "per node, registration to initialized", fmt.Sprintf("p50 %s, p99 %s", ms(percentile(lat, 50)), ms(percentile(lat, 99))), "", false)
	b.Logf("AWS face: %d nodes initialized in %v with %d DescribeInstances calls", n, total, describe)
	return total, describe
}
