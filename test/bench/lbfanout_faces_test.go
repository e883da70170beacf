package bench

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/mooring-dev/mooring/cloud/digitalocean/digitaloceantest"
	"github.com/mooring-dev/mooring/cloud/linode/linodetest"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// lbSizes is MOORING_BENCH_LB, "<services>x<nodes>": the Services of an
// LB fan-out and the nodes that join; unset, the benchmark's own (def
// of each). The faces' test addresses bound the nodes.
func lbSizes(b *testing.B, def int) (services, nodes int) {
	v := os.Getenv("MOORING_BENCH_LB")
	if v == "" {
		return def, def
	}
	s, n, ok := strings.Cut(v, "x")
	services, err1 := strconv.Atoi(s)
	nodes, err2 := strconv.Atoi(n)
	if !ok || err1 != nil || err2 != nil || services < 1 || services > 200 || nodes < 1 || nodes > 200 {
		b.Fatalf("MOORING_BENCH_LB=%q: want <services>x<nodes>, each 1 to 200 (e.g. 10x10)", v)
	}
	return services, nodes
}

// lbFace is one cloud's test endpoint as the LB fan-out runs on it.
type lbFace struct {
	// name is the face in the results' rows ("DigitalOcean face").
	name     string
	provider harness.Provider
	// add makes a running instance of the cluster for the Node of name.
	add func(name string)
	// calls are the endpoint's calls so far by method: lbMethods are its
	// load balancer API's, update the one that changes a load balancer.
	calls     func() map[string]int64
	lbMethods []string
	update    string
	// targets are the targets of each load balancer the endpoint holds,
	// read from the endpoint itself (no API call).
	targets func() []int
	// annotations go on every Service.
	annotations map[string]string
}

// lbFaceRun is what one run measured.
type lbFaceRun struct {
	services, nodes  int
	created, behind  time.Duration
	createCalls      map[string]int64
	joinCalls        map[string]int64
	updates, lbCalls int64
}

// BenchmarkLBFanoutDigitalOcean is the LB fan-out on DigitalOcean's face:
// digitaloceantest (its load balancer API: new, then active with an IP,
// 5,000 requests an hour) holding a droplet per node, mooring-ccm with
// --cloud-provider=digitalocean and, in the same run, its batched service
// controller (servicelb) and the library's stock one
// (--load-balancer-controller=library); 100 Services and 100 nodes unless
// MOORING_BENCH_LB says. See runLBFanoutFace.
func BenchmarkLBFanoutDigitalOcean(b *testing.B) {
	benchLBFanoutFace(b, "DigitalOcean face", "lb-fanout-digitalocean", 100, func(b *testing.B, services int) lbFace {
		do := harness.StartDigitalOceanCloudWith(b, nil, digitaloceantest.Options{
			// An account whose limit was raised for the Services.
			LBLimit: services,
			// DigitalOcean builds a load balancer for a minute or more;
			// here a few seconds, so that both controllers meet the new
			// state without the creation dominating the run.
			LBBuildTime: 3 * time.Second,
			// The load balancers' health checks (DigitalOcean's CCM's
			// default: every 3 s) run every 3 minutes here: 100 x 100
			// of them every 3 s would load this 2-core machine more
			// than the controllers under test.
			HealthCheckSecond: time.Minute,
		})
		methods := []string{digitaloceantest.MethodList, digitaloceantest.MethodGet, digitaloceantest.MethodMetadata,
			digitaloceantest.MethodLBList, digitaloceantest.MethodLBGet, digitaloceantest.MethodLBCreate,
			digitaloceantest.MethodLBUpdate, digitaloceantest.MethodLBDelete}
		return lbFace{
			name: "DigitalOcean face", provider: do,
			add:       func(name string) { do.AddDroplet(name, []string{do.ClusterTag(benchCluster)}, nil) },
			calls:     func() map[string]int64 { return countCalls(do.Calls, methods) },
			lbMethods: methods[3:], update: digitaloceantest.MethodLBUpdate,
			targets: func() []int {
				var t []int
				for _, l := range do.LoadBalancers() {
					t = append(t, len(l.DropletIDs))
				}
				return t
			},
		}
	})
}

// BenchmarkLBFanoutLinode is the LB fan-out on Linode's face: linodetest
// (NodeBalancers, their configs and nodes; 100 collection GETs a minute
// and 800 other requests, as Linode limits them) holding a Linode per
// node, mooring-ccm with --cloud-provider=linode, its controller and the
// library's in the same run. The NodeBalancers check no node (the API's
// default). It runs 10 Services and 10 nodes unless MOORING_BENCH_LB
// says: the provider's List reads the configs and nodes of every
// NodeBalancer of the cluster, and each new Service's load balancer is
// looked for with a List, so building n of them costs about n x n
// collection GETs, of which linodetest allows 100 a minute. See
// runLBFanoutFace.
func BenchmarkLBFanoutLinode(b *testing.B) {
	benchLBFanoutFace(b, "Linode face", "lb-fanout-linode", 10, func(b *testing.B, _ int) lbFace {
		ln := harness.StartLinodeCloud(b, nil)
		methods := []string{linodetest.MethodList, linodetest.MethodGet, linodetest.MethodToken, linodetest.MethodInstance,
			linodetest.MethodNetwork, linodetest.MethodLBList, linodetest.MethodLBGet, linodetest.MethodLBCreate,
			linodetest.MethodLBUpdate, linodetest.MethodLBDelete}
		return lbFace{
			name: "Linode face", provider: ln,
			add: func(name string) { ln.AddLinode(name, []string{ln.ClusterTag(benchCluster)}, nil) },
			calls: func() map[string]int64 {
				m := countCalls(ln.Calls, methods)
				if n := ln.Calls(linodetest.MethodThrottled); n > 0 {
					m["refused 429"] = int64(n)
				}
				return m
			},
			lbMethods: methods[5:], update: linodetest.MethodLBUpdate,
			targets: func() []int {
				var t []int
				for _, nb := range ln.NodeBalancers() {
					least := -1
					for _, cf := range nb.Configs {
						if least < 0 || len(cf.Nodes) < least {
							least = len(cf.Nodes)
						}
					}
					t = append(t, max(least, 0))
				}
				return t
			},
		}
	})
}

// BenchmarkLBFanoutHetzner is the LB fan-out on Hetzner's face:
// hetznertest (load balancers whose targets are added and removed one
// server per action, each action read until it succeeds; 3,600 requests
// an hour) holding a server per node in the cluster's network,
// mooring-ccm with --cloud-provider=hetzner, its controller and the
// library's in the same run. Every target is a call, so a join costs a
// call per node and load balancer with either controller: 100 x 100 is
// past the hour's budget, so it runs 10 Services and 10 nodes unless
// MOORING_BENCH_LB says. See runLBFanoutFace.
func BenchmarkLBFanoutHetzner(b *testing.B) {
	benchLBFanoutFace(b, "Hetzner face", "lb-fanout-hetzner", 10, func(b *testing.B, _ int) lbFace {
		h := harness.StartHetznerCloud(b, nil)
		methods := []string{"list", "get", "metadata", "network-list", "route-list",
			"lb-list", "lb-get", "lb-create", "lb-update", "lb-delete", "action-get"}
		return lbFace{
			name: "Hetzner face", provider: h,
			add:       func(name string) { h.AddNode(benchCluster, name) },
			calls:     func() map[string]int64 { return countCalls(h.Calls, methods) },
			lbMethods: methods[5:], update: "lb-update",
			targets: func() []int {
				var t []int
				for _, l := range h.LoadBalancers() {
					t = append(t, len(l.Targets))
				}
				return t
			},
		}
	})
}

// countCalls is calls of each method, those above 0.
func countCalls(calls func(string) int, methods []string) map[string]int64 {
	m := map[string]int64{}
	for _, op := range methods {
		if n := calls(op); n > 0 {
			m[op] = int64(n)
		}
	}
	return m
}

// benchLBFanoutFace runs the LB fan-out on a face with mooring's service
// controller, then the library's, each on a fresh bed and endpoint, and
// records the library's figures over mooring's of the same run; size
// Services and nodes unless MOORING_BENCH_LB says.
func benchLBFanoutFace(b *testing.B, name, stem string, size int, build func(b *testing.B, services int) lbFace) {
	services, nodes := lbSizes(b, size)
	bench := "LB fan-out, " + name
	keepResultsSized(bench, stem, nodes, fmt.Sprintf("MOORING_BENCH_LB=%dx%d", services, nodes))
	var m lbFaceRun
	b.Run("mooring", func(b *testing.B) {
		for range b.N {
			m = runLBFanoutFace(b, "mooring", services, nodes, build)
			m.record(bench + ", mooring")
		}
	})
	b.Run("library", func(b *testing.B) {
		for range b.N {
			l := runLBFanoutFace(b, "library", services, nodes, build)
			l.record(bench + ", library")
			if m.updates > 0 && m.lbCalls > 0 && m.behind > 0 {
				record(bench+", library", "library / mooring (same run): load balancer updates; LB API calls; time until all behind",
					fmt.Sprintf("%.1fx; %.1fx; %.2fx", float64(l.updates)/float64(m.updates), float64(l.lbCalls)/float64(m.lbCalls),
						l.behind.Seconds()/m.behind.Seconds()), "", false)
			}
		}
	})
}

// runLBFanoutFace is one run: a bed, the face's endpoint holding an
// instance for each node, mooring-ccm on the face with the named service
// controller. One node joins first (the load balancers are made in their
// nodes' region: DigitalOcean's and Linode's have no other), then the
// Services are made and their load balancers built, then nodes more join
// at once, registered as kubelets register (mooring-ccm initializes
// them). It measures until every node is behind every load balancer (as
// the endpoint holds them), then until the update calls have stopped for
// 15 s (three node batches), and counts the calls of both phases.
func runLBFanoutFace(b *testing.B, controller string, services, nodes int, build func(b *testing.B, services int) lbFace) lbFaceRun {
	bins, err := binaries()
	if err != nil {
		b.Fatal(err)
	}
	c := testbed.Start(b, testbed.Options{Controllers: []string{"-node-lifecycle-controller"}})
	f := build(b, services)
	names := make([]string, nodes+1)
	for i := range names {
		names[i] = nodeName(i)
		f.add(names[i])
	}
	ccm := harness.StartCCM(b, c, bins[0], f.provider, harness.CCMOptions{Cluster: benchCluster,
		Args: append(strings.Fields(os.Getenv("MOORING_BENCH_CCM_ARGS")), "--load-balancer-controller="+controller)})
	ctx, cancel := withTimeout(30 * time.Minute)
	defer cancel()
	if err := waitLeader(ctx, c.Client); err != nil {
		b.Fatalf("mooring-ccm: %v\n%s", err, ccm.LogTail(30))
	}
	fast, err := harness.FastClient(c)
	if err != nil {
		b.Fatal(err)
	}
	if err := harness.RegisterNodes(ctx, fast, names[:1], harness.RegisterOptions{}); err != nil {
		b.Fatal(err)
	}
	if err := waitFor(ctx, func() (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, names[0], metav1.GetOptions{})
		return err == nil && n.Spec.ProviderID != "" && !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
			return t.Key == uninitializedTaint
		}), nil
	}); err != nil {
		b.Fatalf("the first node not initialized: %v\n%s", err, ccm.LogTail(20))
	}

	r := lbFaceRun{services: services, nodes: nodes}
	before := f.calls()
	start := time.Now()
	for i := range services {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("lb-%03d", i), Annotations: f.annotations},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
				Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}},
		}
		if _, err := fast.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	if err := waitFor(ctx, func() (bool, error) {
		list, err := c.Client.CoreV1().Services("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		ready := 0
		for _, s := range list.Items {
			if len(s.Status.LoadBalancer.Ingress) > 0 {
				ready++
			}
		}
		return ready == services, nil
	}); err != nil {
		b.Fatalf("load balancers: %v\n%s", err, ccm.LogTail(20))
	}
	r.created = time.Since(start)
	mid := f.calls()
	r.createCalls = since(before, mid)

	start = time.Now()
	regErr := make(chan error, 1)
	go func() { regErr <- harness.RegisterNodes(ctx, fast, names[1:], harness.RegisterOptions{}) }()
	all := func() bool {
		t := f.targets()
		return len(t) == services && !slices.ContainsFunc(t, func(n int) bool { return n != nodes+1 })
	}
	for !all() {
		select {
		case <-ctx.Done():
			b.Fatalf("not every node behind every load balancer: %v (targets %v)\n%s", ctx.Err(), f.targets(), ccm.LogTail(20))
		case <-time.After(100 * time.Millisecond):
		}
	}
	r.behind = time.Since(start)
	if err := <-regErr; err != nil {
		b.Fatal(err)
	}
	// Then until the updates have stopped: any after this point were
	// still the joins' (a controller that updates again, or late).
	quiet := 15 * time.Second
	last, lastChange := int64(-1), time.Now()
	if err := waitFor(ctx, func() (bool, error) {
		if n := f.calls()[f.update]; n != last {
			last, lastChange = n, time.Now()
		}
		return time.Since(lastChange) > quiet, nil
	}); err != nil {
		b.Fatal(err)
	}
	r.joinCalls = since(mid, f.calls())
	r.updates = r.joinCalls[f.update]
	for _, op := range f.lbMethods {
		r.lbCalls += r.joinCalls[op]
	}
	if !all() {
		b.Errorf("after the updates stopped, not every node is behind every load balancer: targets %v", f.targets())
	}
	b.ReportMetric(float64(r.updates), "lb-updates")
	b.ReportMetric(r.behind.Seconds(), "behind-s")
	b.Logf("%s, %s: %d nodes behind %d load balancers in %v with %d update calls, %d LB API calls",
		f.name, controller, nodes, services, r.behind.Round(time.Millisecond), r.updates, r.lbCalls)
	return r
}

// since is after's counts less before's, those above 0.
func since(before, after map[string]int64) map[string]int64 {
	m := map[string]int64{}
	for op, v := range after {
		if d := v - before[op]; d > 0 {
			m[op] = d
		}
	}
	return m
}

// record adds the run's figures to the table under bench.
func (r lbFaceRun) record(bench string) {
	record(bench, fmt.Sprintf("%d load balancers built (Services made, one node, until every Service has its address)", r.services),
		fmt.Sprintf("%s, %d API calls (%s)", seconds(r.created), sum(r.createCalls), harness.CallsString(r.createCalls)), "", false)
	record(bench, fmt.Sprintf("%d nodes join: load balancer update calls", r.nodes),
		fmt.Sprintf("%d (%.1f per load balancer)", r.updates, float64(r.updates)/float64(r.services)), "", false)
	record(bench, "LB API calls while the nodes joined", fmt.Sprintf("%d", r.lbCalls), "", false)
	record(bench, "every node behind every load balancer after", seconds(r.behind), "", false)
	record(bench, "all API calls while the nodes joined (node init's too)",
		fmt.Sprintf("%d (%s)", sum(r.joinCalls), harness.CallsString(r.joinCalls)), "", false)
	record(bench, "load average at the end (1, 5, 15 min; 2 cores)", loadAverage(), "", false)
}
