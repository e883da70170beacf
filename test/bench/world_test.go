package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/client"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

const (
	benchCluster       = "bench"
	uninitializedTaint = "node.cloudprovider.kubernetes.io/uninitialized"
)

// world is a control plane, a local cloud holding instances and a running
// mooring-ccm, ready to measure.
type world struct {
	c    *testbed.Cluster
	lc   *harness.LocalCloud
	ccm  *testbed.Process
	fast kubernetes.Interface // the simulated kubelets' client: not the bottleneck
	// ccmURL is mooring-ccm's secure port (/debug/pprof, /metrics).
	ccmURL string
	// instances are the cloud's instances by name, as mooring-ccm started.
	instances map[string]api.Instance
	opts      worldOptions
	binaries  [2]string
}

type worldOptions struct {
	instances int // local-cloud instances node-0000 ... made before the clock runs
	// metadata serves the instances' metadata services; without it they
	// are made with the endpoint disabled (no listener each: simulated
	// kubelets never ask, and 20,000 listeners would not fit the open
	// file limit).
	metadata    bool
	cloudConfig string // provider config lines beyond the endpoint and the rate limit
	ccmArgs     []string
	ccmBin      string   // a mooring-ccm binary to run instead of this tree's
	cloudArgs   []string // flags of mooring-localcloud beyond its address pools
	// deferCCM leaves mooring-ccm to world.startCCM.
	deferCCM bool
	// prepare, when set, runs once the instances are made, before the cloud
	// is rate limited and mooring-ccm starts.
	prepare func(ctx context.Context, lc *harness.LocalCloud) error
}

// binDir holds the binaries; TestMain removes it.
var binDir string

// binaries are built once per benchmark process.
var binaries = sync.OnceValues(func() ([2]string, error) {
	dir, err := os.MkdirTemp("", "mooring-bench-bin-")
	if err != nil {
		return [2]string{}, err
	}
	binDir = dir
	ccm, err := harness.Build("ccm/cmd/mooring-ccm", dir)
	if err != nil {
		return [2]string{}, err
	}
	cloud, err := harness.Build("cloud/local/cmd/mooring-localcloud", dir)
	return [2]string{ccm, cloud}, err
})

// newWorld starts everything; the test bed stops it when b ends. The
// simulated Nodes have no kubelet to heartbeat, so kube-controller-manager's
// node lifecycle controller is off: Nodes stay as the benchmark sets them.
// mooring's approver is the only one of kubelet client CSRs, as deployed:
// kube-controller-manager's approval bindings are left out.
func newWorld(b *testing.B, opts worldOptions) *world {
	b.Helper()
	bins, err := binaries()
	if err != nil {
		b.Fatal(err)
	}
	c := testbed.Start(b, testbed.Options{
		RBAC:        testbed.BootstrapRBAC{MooringApproves: true},
		Controllers: []string{"-node-lifecycle-controller"},
		Profiling:   os.Getenv("MOORING_BENCH_PROFILE") != "",
	})
	// Address pools of their own, large enough for maxNodes instances.
	p := os.Getpid() % 50
	lc := harness.StartLocalCloud(b, c, bins[1], append([]string{
		fmt.Sprintf("--internal-cidr=127.%d.0.0/16", 100+p), fmt.Sprintf("--external-cidr=127.%d.0.0/16", 150+p),
		fmt.Sprintf("--vip-cidr=127.%d.0.0/24", 200+p)}, opts.cloudArgs...)...)
	ctx, cancel := withTimeout(30 * time.Minute)
	defer cancel()

	start := time.Now()
	if err := createInstances(ctx, lc, opts.instances, opts.metadata); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d instances created in %v", opts.instances, time.Since(start).Round(time.Millisecond))
	if opts.prepare != nil {
		if err := opts.prepare(ctx, lc); err != nil {
			b.Fatal(err)
		}
	}
	listed, err := lc.Client.ListAllInstances(ctx, client.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	instances := make(map[string]api.Instance, len(listed))
	for _, in := range listed {
		instances[in.Name] = in
	}
	if err := lc.Client.SetRateLimit(ctx, api.RateLimit{Limit: cloudRateLimit, Burst: cloudRateLimit}); err != nil {
		b.Fatal(err)
	}
	// The approver runs inside mooring-ccm; its RBAC as deploy/base binds
	// it, and its requests go to the APF level every overlay installs.
	// mooring-ccm's own RBAC is applied here as well as when it starts: the
	// bare rounds act as its ServiceAccount before it runs.
	for _, f := range []string{"deploy/ccm/rbac.yaml", "deploy/csrapprover/role/clusterrole.yaml", "deploy/base/ccm-csrapprover-binding.yaml", "deploy/flowcontrol/flowcontrol.yaml"} {
		if err := c.Apply(ctx, filepath.Join(harness.RepoRoot(), f)); err != nil {
			b.Fatal(err)
		}
	}
	fast, err := harness.FastClient(c)
	if err != nil {
		b.Fatal(err)
	}
	w := &world{c: c, lc: lc, fast: fast, instances: instances, opts: opts, binaries: bins}
	if !opts.deferCCM {
		w.startCCM(b)
		if err := waitLeader(ctx, c.Client); err != nil {
			b.Fatalf("mooring-ccm: %v\n%s", err, w.ccm.LogTail(30))
		}
		if err := lc.Client.ResetStats(ctx); err != nil {
			b.Fatal(err)
		}
	}
	return w
}

// ccmSecurePort picks a free port for mooring-ccm's secure port (its
// /metrics, /debug/pprof): its URL, and the flag that names it, to come
// after any other --secure-port (the last of a repeated flag wins).
func ccmSecurePort(b *testing.B) (url, arg string) {
	ports, err := testbed.FreePorts("127.0.0.1", 1)
	if err != nil {
		b.Fatal(err)
	}
	return fmt.Sprintf("https://127.0.0.1:%d", ports[0]), fmt.Sprintf("--secure-port=%d", ports[0])
}

// startCCM starts mooring-ccm (with the approver) and returns at once,
// with the time its process started.
func (w *world) startCCM(b *testing.B) time.Time {
	// The secure port is named again so that profiles can be taken from it.
	url, portArg := ccmSecurePort(b)
	w.ccmURL = url
	args := append([]string{"--controllers=*,csr-approver"}, strings.Fields(os.Getenv("MOORING_BENCH_CCM_ARGS"))...)
	args = append(args, portArg)
	ccmBin := w.binaries[0]
	if w.opts.ccmBin != "" {
		ccmBin = w.opts.ccmBin
	}
	w.ccm = harness.StartCCM(b, w.c, ccmBin, w.lc, harness.CCMOptions{
		Cluster: benchCluster,
		// The provider keeps to the cloud's limit itself.
		CloudConfig: fmt.Sprintf("apiRateLimit: %d\napiRateBurst: %d\n%s", cloudRateLimit, cloudRateLimit, w.opts.cloudConfig),
		Args:        append(args, w.opts.ccmArgs...),
	})
	return time.Now()
}

// leaderAt is when mooring-ccm took its lease (the Lease's acquireTime).
func leaderAt(ctx context.Context, c kubernetes.Interface) (time.Time, error) {
	l, err := c.CoordinationV1().Leases("kube-system").Get(ctx, "cloud-controller-manager", metav1.GetOptions{})
	if err != nil {
		return time.Time{}, err
	}
	if l.Spec.AcquireTime == nil {
		return time.Time{}, fmt.Errorf("lease %s has no acquireTime", l.Name)
	}
	return l.Spec.AcquireTime.Time, nil
}

// createInstances makes n instances named like the Nodes, unlimited and in
// parallel, with their metadata services or without.
func createInstances(ctx context.Context, lc *harness.LocalCloud, n int, metadata bool) error {
	endpoint := api.MetadataDisabled
	if metadata {
		endpoint = api.MetadataEnabled
	}
	return harness.Parallel(ctx, n, 16, func(ctx context.Context, i int) error {
		_, err := lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: nodeName(i), Cluster: benchCluster, MetadataEndpoint: endpoint})
		return err
	})
}

// waitLeader waits for mooring-ccm to hold its lease, then gives its
// informers a moment to sync.
func waitLeader(ctx context.Context, c kubernetes.Interface) error {
	for {
		l, err := c.CoordinationV1().Leases("kube-system").Get(ctx, "cloud-controller-manager", metav1.GetOptions{})
		if err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			time.Sleep(2 * time.Second)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no leader: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func nodeName(i int) string { return fmt.Sprintf("node-%04d", i) }

// stamps are times by name, safe for concurrent use.
type stamps struct {
	mu sync.Mutex
	m  map[string]time.Time
}

func newStamps() *stamps { return &stamps{m: map[string]time.Time{}} }

func (s *stamps) set(name string, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[name] = t
}

// setFirst records t for a name not seen yet and then says how many names
// are recorded; for a name seen before it records nothing and says 0.
func (s *stamps) setFirst(name string, t time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[name]; ok {
		return 0
	}
	s.m[name] = t
	return len(s.m)
}

func (s *stamps) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// latencies are end-start per name present in both, sorted.
func latencies(start, end *stamps) []time.Duration {
	start.mu.Lock()
	defer start.mu.Unlock()
	end.mu.Lock()
	defer end.mu.Unlock()
	var out []time.Duration
	for name, e := range end.m {
		if s, ok := start.m[name]; ok {
			out = append(out, e.Sub(s))
		}
	}
	slices.Sort(out)
	return out
}

func sum(m map[string]int64) int64 {
	var s int64
	for _, v := range m {
		s += v
	}
	return s
}

// apiserverWrites counts kube-apiserver's mutating requests so far, by
// resource, from its apiserver_request_total metric; "nodes 409" counts the
// writes of Nodes refused with 409 Conflict (stale resourceVersions), which
// the total leaves out.
func apiserverWrites(ctx context.Context, c kubernetes.Interface) (map[string]float64, error) {
	data, err := c.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		labels, ok := strings.CutPrefix(line, "apiserver_request_total{")
		if !ok {
			continue
		}
		end := strings.LastIndexByte(labels, '}')
		if end < 0 {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(labels[end+1:]), 64)
		if err != nil {
			continue
		}
		lv := parseLabels(labels[:end])
		switch lv["verb"] {
		case "POST", "PUT", "PATCH", "DELETE", "APPLY":
			if lv["code"] == "409" && lv["resource"] == "nodes" {
				out[nodeConflicts] += v
				continue
			}
			res := lv["resource"]
			if lv["subresource"] != "" {
				res += "/" + lv["subresource"]
			}
			out[res] += v
		}
	}
	return out, sc.Err()
}

// parseLabels reads a Prometheus label set (without braces); label values
// here hold no commas or escaped quotes.
func parseLabels(s string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok {
			out[k] = strings.Trim(v, `"`)
		}
	}
	return out
}

// nodeConflicts is apiserverWrites' key for Node writes refused with 409.
const nodeConflicts = "nodes 409"

// writesSince is after-before, with the resources that changed (conflicts
// left out).
func writesSince(before, after map[string]float64) (float64, string) {
	var total float64
	var parts []string
	keys := make([]string, 0, len(after))
	for k := range after {
		if k != nodeConflicts {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b string) int {
		da, db := after[a]-before[a], after[b]-before[b]
		switch {
		case da > db:
			return -1
		case da < db:
			return 1
		}
		return strings.Compare(a, b)
	})
	for _, k := range keys {
		if d := after[k] - before[k]; d > 0 {
			total += d
			if len(parts) < 4 {
				parts = append(parts, fmt.Sprintf("%s %.0f", k, d))
			}
		}
	}
	return total, strings.Join(parts, ", ")
}

// procUsage is a process's CPU time so far and its resident memory now and
// at its peak, from /proc.
type procUsage struct {
	cpu          time.Duration
	rssMB, hwmMB float64
}

func usage(pid int) (procUsage, error) {
	var u procUsage
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// Fields after the command name, which is in parentheses: utime and
	// stime are the 12th and 13th, in clock ticks (100 per second here).
	rest := string(stat[bytes.LastIndexByte(stat, ')')+2:])
	f := strings.Fields(rest)
	if len(f) < 13 {
		return u, fmt.Errorf("/proc/%d/stat: short", pid)
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	u.cpu = time.Duration(ut+st) * 10 * time.Millisecond
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
		if err != nil {
			continue
		}
		switch k {
		case "VmRSS":
			u.rssMB = kb / 1024
		case "VmHWM":
			u.hwmMB = kb / 1024
		}
	}
	return u, nil
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

func ms(d time.Duration) string {
	if d >= 10*time.Second {
		return seconds(d)
	}
	return fmt.Sprintf("%d ms", d.Milliseconds())
}

// watchNodes follows Nodes until the benchmark ends and stamps the first
// time each of names is initialized (other Nodes are not counted); all is
// closed once every one of names is.
func watchNodes(b *testing.B, w *world, names []string) (done *stamps, all <-chan struct{}) {
	done = newStamps()
	ch := make(chan struct{})
	counted := make(map[string]bool, len(names))
	for _, name := range names {
		counted[name] = true
	}
	observe := func(obj any) {
		node, ok := obj.(*corev1.Node)
		if !ok || !counted[node.Name] || !harness.NodeInitialized(node) {
			return
		}
		if done.setFirst(node.Name, time.Now()) == len(names) {
			close(ch)
		}
	}
	follow(b, w, func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Core().V1().Nodes().Informer()
	}, observe)
	return done, ch
}

// follow calls observe with every object the picked informer sees added or
// updated, from now until the benchmark ends.
func follow(b *testing.B, w *world, pick func(informers.SharedInformerFactory) cache.SharedIndexInformer, observe func(any)) {
	factory := informers.NewSharedInformerFactory(w.fast, 0)
	if _, err := pick(factory).AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, cur any) { observe(cur) },
	}); err != nil {
		b.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	b.Cleanup(func() { stop(); factory.Shutdown() })
	factory.WaitForCacheSync(ctx.Done())
}

// joinNodes registers Nodes node-0000 ... for n instances and waits until
// the CCM has initialized all of them.
func joinNodes(b *testing.B, w *world, n int, timeout time.Duration) time.Duration {
	names := make([]string, n)
	for i := range names {
		names[i] = nodeName(i)
	}
	_, all := watchNodes(b, w, names)
	ctx, cancel := withTimeout(timeout)
	defer cancel()
	start := time.Now()
	if err := harness.RegisterNodes(ctx, w.fast, names, harness.RegisterOptions{}); err != nil {
		b.Fatal(err)
	}
	select {
	case <-all:
	case <-ctx.Done():
		b.Fatalf("nodes not initialized within %v\n%s", timeout, w.ccm.LogTail(20))
	}
	return time.Since(start)
}

// leaseProbe is simulated kubelets' node Lease renewals during a
// measurement: a tenth of the nodes (at least one) renew every 10 s, as
// kubelets do, each as its node, so that API Priority and Fairness treats
// them as it treats real kubelets' renewals. (All N nodes renewing would
// add N/10 writes a second: load the 2-core bed's figures were not taken
// under.)
type leaseProbe struct {
	*harness.LeaseRenewals
	nodes int
}

// startLeaseProbe creates the probe's Leases and starts renewing them; the
// renewals counted start now. The test bed's end stops them if Stop did
// not.
func startLeaseProbe(ctx context.Context, b *testing.B, w *world, names []string) leaseProbe {
	k := max(1, len(names)/10)
	r, err := harness.RenewLeases(ctx, w.c, names[:k], harness.NodeLeaseInterval)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(r.Stop)
	r.Reset()
	return leaseProbe{r, k}
}

// recordLeases records the renewals' times since the probe's last Reset,
// during what (a phrase; "" for the measurement itself); with goal,
// against the target: p99 under 1 s, none failed.
func recordLeases(b *testing.B, bench string, p leaseProbe, during string, goal bool) {
	took, failed, first := p.Took()
	p99 := harness.Percentile(took, 99)
	value := fmt.Sprintf("%d renewals of %d nodes' Leases: p50 %s, p99 %s, max %s; %d failed", len(took), p.nodes,
		ms(harness.Percentile(took, 50)), ms(p99), ms(harness.Percentile(took, 100)), failed)
	if first != nil {
		value += fmt.Sprintf(" (first: %v)", first)
	}
	metric := "node Lease renewals as the nodes, every 10 s (kubelets' default)" + during
	if !goal {
		record(bench, metric, value, "", false)
		return
	}
	b.ReportMetric(p99.Seconds(), "lease-p99-s")
	record(bench, metric, value, "p99 < 1 s, none failed", len(took) > 0 && p99 < time.Second && failed == 0)
}
