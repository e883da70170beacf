package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/mooring-dev/mooring/internal/clientlimit"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// leNamespace is where TestLeaderElectionKeepsItsLevelOutsideKubeSystem
// installs mooring: not kube-system, whose ServiceAccounts the built-in
// FlowSchema system-leader-election matches already.
const leNamespace = "mooring-system"

// apfClassification is what the apiserver said of one response: the names
// of the FlowSchema and priority level its APF headers carry the UIDs of.
type apfClassification struct {
	method, path      string
	flowSchema, level string
	code              int
	took              time.Duration
}

// apfRecorder is a RoundTripper that keeps the classification of every
// response to a request that match picks.
type apfRecorder struct {
	next  http.RoundTripper
	match func(*http.Request) bool
	names map[string]string // UID -> name of FlowSchemas and priority levels

	mu   sync.Mutex
	seen []apfClassification
}

func (r *apfRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := r.next.RoundTrip(req)
	if err != nil || !r.match(req) {
		return resp, err
	}
	c := apfClassification{method: req.Method, path: req.URL.Path, code: resp.StatusCode, took: time.Since(start),
		flowSchema: r.name(resp.Header.Get(clientlimit.FlowSchemaHeader)),
		level:      r.name(resp.Header.Get(clientlimit.PriorityLevelHeader))}
	r.mu.Lock()
	r.seen = append(r.seen, c)
	r.mu.Unlock()
	return resp, err
}

func (r *apfRecorder) name(uid string) string {
	if uid == "" {
		return "(none)"
	}
	if n, ok := r.names[uid]; ok {
		return n
	}
	return "uid " + uid
}

func (r *apfRecorder) recorded() []apfClassification {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen)
}

// TestLeaderElectionKeepsItsLevelOutsideKubeSystem: mooring installed by
// its chart in a namespace other than kube-system, on an apiserver with API
// Priority and Fairness and few seats (a slow one), while a burst of node
// writes as mooring's ServiceAccount fills mooring's priority level and
// waits in its queues: leader election as mooring's ServiceAccounts (that
// of mooring-ccm and that of mooring-csr-approver, each on its own Lease in
// the release's namespace, with client-go's elector and mooring-ccm's
// default durations) is classified by FlowSchema mooring-leader-election
// at the built-in priority level leader-election, every request of it, and
// no leader loses its Lease. Without that FlowSchema the built-in
// system-leader-election (kube-system's ServiceAccounts only) does not
// match them and FlowSchema mooring puts them behind the burst.
func TestLeaderElectionKeepsItsLevelOutsideKubeSystem(t *testing.T) {
	// 45 seats in all: mooring's level has about 5 of its own (30 of 275
	// shares) and what it borrows, leader-election 2, which it lends to
	// nobody.
	c := testbed.Start(t, testbed.Options{APIServerArgs: []string{"--max-requests-inflight=30", "--max-mutating-requests-inflight=15"}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: leNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The chart in both modes, in leNamespace: the ServiceAccounts, their
	// RBAC (the Leases' Roles) and the flow control objects. The second
	// mode adds mooring-csr-approver's ServiceAccount and Role; objects the
	// first made are left as they are.
	helm := installHelm(t)
	chart := filepath.Join(harness.RepoRoot(), harness.ChartDir)
	install := map[string]bool{"ServiceAccount": true, "ClusterRole": true, "ClusterRoleBinding": true, "Role": true, "RoleBinding": true,
		"FlowSchema": true, "PriorityLevelConfiguration": true}
	for _, mode := range []string{"ccm", "approver-only"} {
		rendered := helmTemplate(t, helm, "template", "mooring", chart, "--namespace", leNamespace, "--set", "mode="+mode,
			"--set", "cloud.provider=local", "--set", "cloud.config=endpoint: http://127.0.0.1:1", "--set", "cloud.files.token=unused")
		if err := c.ApplyYAML(ctx, "chart, mode "+mode, rendered, func(kind string) bool { return install[kind] }); err != nil {
			t.Fatal(err)
		}
	}
	names := waitFlowSchemasDigested(ctx, t, c)

	// The burst: mooring-ccm's ServiceAccount patching Nodes, as node init
	// does in a boot wave, from more workers than mooring's level has
	// seats, with no client-side limit (as mooring runs under APF).
	nodes := make([]string, 64)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("wave-%02d", i)
	}
	fast, err := harness.FastClient(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := harness.RegisterNodes(ctx, fast, nodes, harness.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	asServiceAccount := func(name string, rec *apfRecorder) kubernetes.Interface {
		cfg := rest.CopyConfig(c.AdminConfig)
		cfg.QPS, cfg.Burst = -1, 0
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + leNamespace + ":" + name,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + leNamespace, "system:authenticated"}}
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { rec.next = rt; return rec })
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return client
	}
	burstRec := &apfRecorder{names: names, match: func(*http.Request) bool { return true }}
	burst := asServiceAccount("cloud-controller-manager", burstRec)
	bctx, stopBurst := context.WithCancel(ctx)
	defer stopBurst()
	var inFlight, done, failed atomic.Int64
	var workers sync.WaitGroup
	for w := range 128 {
		workers.Go(func() {
			for i := 0; bctx.Err() == nil; i++ {
				patch := fmt.Sprintf(`{"metadata":{"annotations":{"test.mooring.dev/wave":"%d-%d"}}}`, w, i)
				inFlight.Add(1)
				_, err := burst.CoreV1().Nodes().Patch(bctx, nodes[(w+i)%len(nodes)], types.MergePatchType, []byte(patch), metav1.PatchOptions{})
				inFlight.Add(-1)
				switch {
				case err == nil:
					done.Add(1)
				case bctx.Err() == nil:
					failed.Add(1)
				}
			}
		})
	}
	defer workers.Wait()
	// The burst waits in mooring's queues before any Lease request is made.
	deadline := time.Now().Add(time.Minute)
	for {
		q, err := apfGauge(ctx, c, "apiserver_flowcontrol_current_inqueue_requests", "mooring")
		if err != nil {
			t.Fatal(err)
		}
		if q > 0 {
			t.Logf("%.0f of the burst's requests wait in priority level mooring's queues", q)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a minute of the burst (%d requests done) none waits at priority level mooring", done.Load())
		}
		time.Sleep(100 * time.Millisecond)
	}
	doneBefore := done.Load()

	// Leader election as each ServiceAccount, on its own Lease, with
	// mooring-ccm's defaults (the library's: 15 s, 10 s, 2 s).
	type elector struct {
		serviceAccount, lease string
		rec                   *apfRecorder
		leading               chan struct{}
		lost                  atomic.Bool
	}
	electors := []*elector{
		{serviceAccount: "cloud-controller-manager", lease: "cloud-controller-manager"},
		{serviceAccount: "mooring-csr-approver", lease: "mooring-csr-approver"},
	}
	lctx, stopElection := context.WithCancel(ctx)
	var stopping atomic.Bool
	var running sync.WaitGroup
	for _, e := range electors {
		e.leading = make(chan struct{})
		e.rec = &apfRecorder{names: names, match: func(r *http.Request) bool {
			return strings.HasPrefix(r.URL.Path, "/apis/coordination.k8s.io/")
		}}
		client := asServiceAccount(e.serviceAccount, e.rec)
		lock, err := resourcelock.New(resourcelock.LeasesResourceLock, leNamespace, e.lease, client.CoreV1(), client.CoordinationV1(),
			resourcelock.ResourceLockConfig{Identity: "e2e-" + e.serviceAccount})
		if err != nil {
			t.Fatal(err)
		}
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
			Name: e.lease,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) { close(e.leading) },
				OnStoppedLeading: func() { e.lost.Store(!stopping.Load()) },
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		running.Go(func() { le.Run(lctx) })
	}
	for _, e := range electors {
		select {
		case <-e.leading:
		case <-time.After(time.Minute):
			t.Errorf("%s did not take Lease %s/%s in a minute", e.serviceAccount, leNamespace, e.lease)
		}
	}
	// Renewals every 2 s for 10 s, the burst still queued at mooring's
	// level.
	var maxQueued float64
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if q, err := apfGauge(ctx, c, "apiserver_flowcontrol_current_inqueue_requests", "mooring"); err == nil {
			maxQueued = max(maxQueued, q)
		}
	}
	stillInFlight, doneDuring := inFlight.Load(), done.Load()-doneBefore
	stopping.Store(true)
	stopElection()
	running.Wait()
	stopBurst()
	workers.Wait()

	// The burst was mooring's, at its level, and in flight throughout.
	levels := map[string]int{}
	for _, r := range burstRec.recorded() {
		levels[r.flowSchema+" at "+r.level]++
	}
	t.Logf("the burst: %d requests done (%d while the leaders renewed), %d failed, classified %v; at most %.0f waiting at level mooring meanwhile",
		done.Load(), doneDuring, failed.Load(), levels, maxQueued)
	if len(levels) != 1 || levels["mooring at mooring"] == 0 {
		t.Errorf("the burst was classified %v, want all of it FlowSchema mooring at level mooring", levels)
	}
	if maxQueued == 0 || stillInFlight == 0 || doneDuring == 0 {
		t.Errorf("the burst was not in flight while the leaders renewed: at most %.0f waiting, %d in flight at the end, %d done meanwhile",
			maxQueued, stillInFlight, doneDuring)
	}

	// Every Lease request: mooring-leader-election at leader-election.
	for _, e := range electors {
		reqs := e.rec.recorded()
		updates := 0
		var took []time.Duration
		for _, r := range reqs {
			if r.method == http.MethodPut {
				updates++
			}
			took = append(took, r.took)
			if r.flowSchema != "mooring-leader-election" || r.level != "leader-election" {
				t.Errorf("%s: %s %s (%d, %v): FlowSchema %s, priority level %s; want FlowSchema mooring-leader-election, level leader-election",
					e.serviceAccount, r.method, r.path, r.code, r.took.Round(time.Millisecond), r.flowSchema, r.level)
			}
		}
		slices.Sort(took)
		t.Logf("%s: %d Lease requests (%d renewals), p50 %v, max %v", e.serviceAccount, len(reqs), updates,
			harness.Percentile(took, 50).Round(time.Millisecond), harness.Percentile(took, 100).Round(time.Millisecond))
		if updates < 3 {
			t.Errorf("%s renewed Lease %s %d times in 10 s, want at least 3 (every 2 s)", e.serviceAccount, e.lease, updates)
		}
		if e.lost.Load() {
			t.Errorf("%s lost Lease %s during the burst", e.serviceAccount, e.lease)
		}
	}
}

// waitFlowSchemasDigested waits until the apiserver's APF configuration
// controller has taken in every FlowSchema of mooring (it sets the
// condition Dangling on each it read) and returns the names of all
// FlowSchemas and priority levels by UID.
func waitFlowSchemasDigested(ctx context.Context, t *testing.T, c *testbed.Cluster) map[string]string {
	t.Helper()
	for {
		list, err := c.Client.FlowcontrolV1().FlowSchemas().List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/part-of=mooring"})
		if err != nil {
			t.Fatal(err)
		}
		digested := len(list.Items) > 0
		for _, fs := range list.Items {
			i := slices.IndexFunc(fs.Status.Conditions, func(c flowcontrolv1.FlowSchemaCondition) bool {
				return c.Type == flowcontrolv1.FlowSchemaConditionDangling
			})
			if i < 0 {
				digested = false
			} else if fs.Status.Conditions[i].Status != flowcontrolv1.ConditionFalse {
				t.Fatalf("FlowSchema %s is dangling: %s", fs.Name, fs.Status.Conditions[i].Message)
			}
		}
		if digested {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("mooring's FlowSchemas not taken in by the apiserver: %v", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	names := map[string]string{}
	fss, err := c.Client.FlowcontrolV1().FlowSchemas().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, fs := range fss.Items {
		names[string(fs.UID)] = fs.Name
	}
	pls, err := c.Client.FlowcontrolV1().PriorityLevelConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, pl := range pls.Items {
		names[string(pl.UID)] = pl.Name
	}
	return names
}

// apfGauge sums one of the apiserver's APF metrics over the series of a
// priority level.
func apfGauge(ctx context.Context, c *testbed.Cluster, metric, level string) (float64, error) {
	data, err := c.Client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, err
	}
	var total float64
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, metric+"{") || !strings.Contains(line, `priority_level="`+level+`"`) {
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
