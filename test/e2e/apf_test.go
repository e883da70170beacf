package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// burstNodes is how many Nodes TestNodeLeasesKeepUpDuringInitBurst
// registers; MOORING_E2E_BURST_NODES overrides it.
const burstNodes = 5000

// TestNodeLeasesKeepUpDuringInitBurst: 5,000 Nodes are registered before
// mooring-ccm starts, so that it initializes them as fast as it can, with
// no client-side limit (the apiserver runs API Priority and Fairness, and
// mooring's FlowSchema and PriorityLevelConfiguration from
// deploy/flowcontrol are installed, as every overlay installs them).
// Meanwhile a tenth of the nodes renew their Leases every 10 s as the
// nodes themselves (system:node:NAME, so APF classifies them as it does
// real kubelets). Every renewal must succeed, their p99 must stay under
// 1 s, and mooring must have made its requests at its own priority level.
func TestNodeLeasesKeepUpDuringInitBurst(t *testing.T) {
	n := burstNodes
	if v := os.Getenv("MOORING_E2E_BURST_NODES"); v != "" {
		if _, err := fmt.Sscan(v, &n); err != nil || n < 10 {
			t.Fatalf("MOORING_E2E_BURST_NODES=%q: want a number of at least 10", v)
		}
	}
	ccmBin := harness.BuildBinary(t, "ccm/cmd/mooring-ccm")
	cloudBin := harness.BuildBinary(t, "cloud/local/cmd/mooring-localcloud")
	// The simulated Nodes have no kubelets: the lifecycle controller would
	// only taint them.
	c := testbed.Start(t, testbed.Options{Controllers: []string{"-node-lifecycle-controller"}})
	// Address pools large enough for n instances (the default ones hold
	// 254), apart from the benchmarks'.
	p := os.Getpid() % 20
	lc := harness.StartLocalCloud(t, c, cloudBin, fmt.Sprintf("--internal-cidr=127.%d.0.0/16", 10+p),
		fmt.Sprintf("--external-cidr=127.%d.0.0/16", 70+p))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := c.Apply(ctx, filepath.Join(harness.RepoRoot(), "deploy/flowcontrol/flowcontrol.yaml")); err != nil {
		t.Fatal(err)
	}

	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("burst-%04d", i)
	}
	// No metadata listener each: nothing here asks them.
	if err := harness.Parallel(ctx, n, 16, func(ctx context.Context, i int) error {
		_, err := lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: names[i], Cluster: e2eCluster, MetadataEndpoint: api.MetadataDisabled})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	fast, err := harness.FastClient(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := harness.RegisterNodes(ctx, fast, names, harness.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	leases, err := harness.RenewLeases(ctx, c, names[:n/10], harness.NodeLeaseInterval)
	if err != nil {
		t.Fatal(err)
	}
	defer leases.Stop()

	initialized := make(chan struct{})
	left := map[string]bool{}
	for _, name := range names {
		left[name] = true
	}
	factory := informers.NewSharedInformerFactory(fast, 0)
	observe := func(obj any) {
		node, ok := obj.(*corev1.Node)
		if !ok || !harness.NodeInitialized(node) || !left[node.Name] {
			return
		}
		delete(left, node.Name)
		if len(left) == 0 {
			close(initialized)
		}
	}
	if _, err := factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: observe, UpdateFunc: func(_, cur any) { observe(cur) },
	}); err != nil {
		t.Fatal(err)
	}
	fctx, stopInformers := context.WithCancel(ctx)
	defer func() { stopInformers(); factory.Shutdown() }()
	factory.Start(fctx.Done())
	factory.WaitForCacheSync(fctx.Done())

	leases.Reset()
	start := time.Now()
	ccm := harness.StartCCM(t, c, ccmBin, lc, harness.CCMOptions{Cluster: e2eCluster, Args: []string{"--v=1"}})
	select {
	case <-initialized:
	case <-ctx.Done():
		t.Fatalf("%d of %d Nodes not initialized\n%s", len(left), n, ccm.LogTail(20))
	}
	took := time.Since(start)
	leases.Stop()
	renewals, failed, first := leases.Took()
	p99 := harness.Percentile(renewals, 99)
	t.Logf("%d Nodes initialized %v after mooring-ccm started; %d Lease renewals of %d nodes meanwhile: p50 %v, p99 %v, max %v, %d failed",
		n, took.Round(time.Millisecond), len(renewals), n/10, harness.Percentile(renewals, 50), p99, harness.Percentile(renewals, 100), failed)
	if failed > 0 {
		t.Errorf("%d Lease renewals failed, the first: %v", failed, first)
	}
	if len(renewals) == 0 {
		t.Fatal("no Lease was renewed during the burst")
	}
	if p99 >= time.Second {
		t.Errorf("Lease renewals' p99 %v during the burst, want < 1 s", p99)
	}

	// mooring ran unlimited, at its own priority level.
	metrics := scrapeCCM(ctx, t, c, ccm)
	if !containsLine(metrics, `mooring_apiserver_client_qps_limit -1`) {
		t.Errorf("mooring-ccm ran with a client-side limit during the burst")
	}
	served, err := apfDispatched(ctx, c, "mooring")
	if err != nil {
		t.Fatal(err)
	}
	if served < float64(n) {
		t.Errorf("the apiserver dispatched %.0f requests at priority level mooring, want at least one per Node (%d)", served, n)
	}
	t.Logf("requests dispatched at priority level mooring: %.0f", served)
}

// apfDispatched sums the apiserver's apiserver_flowcontrol_dispatched_requests_total
// at one priority level.
func apfDispatched(ctx context.Context, c *testbed.Cluster, level string) (float64, error) {
	data, err := c.Client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, err
	}
	var total float64
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "apiserver_flowcontrol_dispatched_requests_total{") || !strings.Contains(line, `priority_level="`+level+`"`) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("apiserver /metrics: %q: %w", line, err)
		}
		total += v
	}
	return total, nil
}

func containsLine(text, line string) bool { return slices.Contains(strings.Split(text, "\n"), line) }
