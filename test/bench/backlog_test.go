package bench

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/mooring-dev/mooring/ccm/nodeinit"
	"github.com/mooring-dev/mooring/cloud/local/provider"
	"github.com/mooring-dev/mooring/test/harness"
)

// The apiserver's own capacity for what mooring writes is measured with an
// unthrottled client (no client-side limit, protobuf) making the same writes
// at the same concurrency as mooring's defaults, in the same run: mooring's
// time over the bare client's is mooring's distance from what the machine
// allows, whatever the machine.
const (
	// nodeInitWorkers is mooring-ccm's --concurrent-node-syncs default
	// (ccm/app.DefaultConcurrentNodeSyncs).
	nodeInitWorkers = 200
	// approverWorkers is the approver's default workers
	// (csrapprover.DefaultWorkers).
	approverWorkers = 64
	// ratioTarget is the goal for mooring's time over the bare client's.
	ratioTarget = 1.25
)

// bareClient is the unthrottled client of the bare rounds, acting as
// mooring-ccm's ServiceAccount: its requests are classified by API Priority
// and Fairness as mooring-ccm's are (priority level mooring, from
// deploy/flowcontrol) and allowed by the same RBAC, so that the two rounds
// differ in the client alone, not in the share of the apiserver each is
// given. (As the admin, system:masters, it would be exempt from APF.)
func bareClient(w *world) (kubernetes.Interface, error) {
	return harness.UnthrottledClientAs(w.c, harness.CCMUser, harness.CCMGroups...)
}

// bareNodeInitWorkers are the bare client's concurrencies for node init's
// writes, each on its own Nodes in the same run: mooring's default, and the
// default before it (in single runs on 2 cores either was the faster). The
// faster is the apiserver's capacity mooring is measured against.
var bareNodeInitWorkers = []int{nodeInitWorkers, 50}

// bareNodeInit has an unthrottled client make on each Node of names the
// two writes mooring-ccm makes to initialize it (ccm/nodeinit.Writes, from
// the metadata mooring's provider gives for instance node-i), workers
// Nodes at a time, and returns the time the writes took. The Nodes must be
// registered and not initialized.
func bareNodeInit(ctx context.Context, w *world, names []string, workers int) (bareRun, error) {
	c, err := bareClient(w)
	if err != nil {
		return bareRun{}, err
	}
	list, err := w.fast.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return bareRun{}, err
	}
	byName := make(map[string]*corev1.Node, len(list.Items))
	for i := range list.Items {
		byName[list.Items[i].Name] = &list.Items[i]
	}
	// The patches are built before the clock runs: building one takes
	// microseconds.
	metas, statuses := make([][]byte, len(names)), make([][]byte, len(names))
	for i, name := range names {
		node, ok := byName[name]
		if !ok {
			return bareRun{}, fmt.Errorf("node %s is not registered", name)
		}
		in, ok := w.instances[nodeName(i)]
		if !ok {
			return bareRun{}, fmt.Errorf("no instance %s", nodeName(i))
		}
		if metas[i], statuses[i], err = nodeinit.Writes(node, provider.Metadata(provider.ToView(&in, ""))); err != nil {
			return bareRun{}, err
		}
		if metas[i] == nil || statuses[i] == nil {
			return bareRun{}, fmt.Errorf("node %s: nothing to write", name)
		}
	}
	return timeBare(w, func() error {
		return harness.Parallel(ctx, len(names), workers, func(ctx context.Context, i int) error {
			if _, err := c.CoreV1().Nodes().Patch(ctx, names[i], types.JSONPatchType, metas[i], metav1.PatchOptions{}); err != nil {
				return err
			}
			_, err := c.CoreV1().Nodes().Patch(ctx, names[i], types.MergePatchType, statuses[i], metav1.PatchOptions{}, "status")
			return err
		})
	})
}

// bareApprovals has an unthrottled client approve the CSRs named, as the
// approver writes a decision (UpdateApproval of the CSR it read, with the
// condition added), approverWorkers at a time, and returns the time the
// writes took.
func bareApprovals(ctx context.Context, w *world, names []string) (bareRun, error) {
	c, err := bareClient(w)
	if err != nil {
		return bareRun{}, err
	}
	list, err := w.fast.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		return bareRun{}, err
	}
	byName := make(map[string]*certificatesv1.CertificateSigningRequest, len(list.Items))
	for i := range list.Items {
		byName[list.Items[i].Name] = &list.Items[i]
	}
	csrs := make([]*certificatesv1.CertificateSigningRequest, len(names))
	for i, name := range names {
		csr, ok := byName[name]
		if !ok {
			return bareRun{}, fmt.Errorf("no CSR %s", name)
		}
		csrs[i] = csr.DeepCopy()
	}
	return timeBare(w, func() error {
		return harness.Parallel(ctx, len(csrs), approverWorkers, func(ctx context.Context, i int) error {
			csr := csrs[i]
			csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
				Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue,
				Reason: "BareClient", Message: "approved by the benchmark's unthrottled client, unchecked",
				LastUpdateTime: metav1.Now(),
			})
			_, err := c.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{})
			return err
		})
	})
}

// apiserverCPU is kube-apiserver's CPU time so far.
func apiserverCPU(w *world) (time.Duration, error) {
	u, err := usage(w.c.ComponentPIDs()["kube-apiserver"])
	return u.cpu, err
}

// bareRun is an unthrottled client's round of writes: how long it took and
// the CPU kube-apiserver spent meanwhile.
type bareRun struct {
	took, apiserverCPU time.Duration
}

// timeBare runs write and measures it.
func timeBare(w *world, write func() error) (bareRun, error) {
	before, err := apiserverCPU(w)
	if err != nil {
		return bareRun{}, err
	}
	start := time.Now()
	if err := write(); err != nil {
		return bareRun{}, err
	}
	r := bareRun{took: time.Since(start)}
	after, err := apiserverCPU(w)
	r.apiserverCPU = after - before
	return r, err
}

// recordBare records the unthrottled client's round.
func recordBare(bench, what string, r bareRun) {
	record(bench, "unthrottled client: "+what, fmt.Sprintf("%s (kube-apiserver CPU %.1f s)", seconds(r.took), r.apiserverCPU.Seconds()), "", false)
}

// recordRatio records mooring's time against the bare client's, from
// mooring-ccm's start and from its taking the lease.
func recordRatio(b *testing.B, bench, what string, mooring, leader, bare time.Duration) {
	ratio := mooring.Seconds() / bare.Seconds()
	b.ReportMetric(ratio, "mooring/bare")
	record(bench, "mooring / unthrottled client, "+what, fmt.Sprintf("%.2f (from the lease: %.2f)", ratio, (mooring-leader).Seconds()/bare.Seconds()),
		fmt.Sprintf("≤ %.2f at 5,000 and 10,000", ratioTarget), ratio <= ratioTarget)
}

// BenchmarkServingBacklog: N Nodes initialized (by the unthrottled client's
// init writes, before mooring-ccm runs) each have a kubelet-serving CSR
// waiting, 1% invalid, when mooring-ccm starts; it measures the time from
// mooring-ccm's start until all are decided. Before that, in the same run,
// the unthrottled client approves N other serving CSRs of the same nodes
// (unchecked): the same number of approval writes. It reports both and
// their ratio.
func BenchmarkServingBacklog(b *testing.B) {
	n := nodeCount(b)
	for range b.N {
		runServingBacklog(b, n)
	}
}

func runServingBacklog(b *testing.B, n int) {
	const bench = "serving CSR backlog"
	w := newWorld(b, worldOptions{instances: n, deferCCM: true})
	ctx, cancel := withTimeout(20*time.Minute + time.Duration(n)*100*time.Millisecond)
	defer cancel()
	names := make([]string, n)
	for i := range names {
		names[i] = nodeName(i)
	}
	if err := harness.RegisterNodes(ctx, w.fast, names, harness.RegisterOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := bareNodeInit(ctx, w, names, nodeInitWorkers); err != nil {
		b.Fatal(err)
	}
	nodes, err := w.fast.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	sets := map[string][]roundCSR{}
	for _, set := range []string{"bare", "backlog"} {
		for i := range nodes.Items {
			r, err := harness.MakeServingCSR(&nodes.Items[i], &nodes.Items[(i+1)%len(nodes.Items)], i)
			if err != nil {
				b.Fatal(err)
			}
			r.CSR.Name = set + "-" + r.CSR.Name
			sets[set] = append(sets[set], roundCSR{name: r.CSR.Name, valid: r.Valid, flaw: r.Flaw, post: func(ctx context.Context, creating func()) error {
				creating()
				return r.Post(ctx, w.fast)
			}})
		}
	}
	backlog(ctx, b, w, sets["bare"], sets["backlog"], bench, fmt.Sprintf("as %d nodes", n))
}

// backlog creates bare (every CSR, valid or not) and has the unthrottled
// client approve them, then creates reqs, starts mooring-ccm and measures
// the time until it has decided every one of reqs. by says who created
// them.
func backlog(ctx context.Context, b *testing.B, w *world, bare, reqs []roundCSR, bench, by string) {
	create := func(reqs []roundCSR) time.Duration {
		start := time.Now()
		if err := harness.Parallel(ctx, len(reqs), 32, func(ctx context.Context, i int) error {
			if err := reqs[i].post(ctx, func() {}); err != nil {
				return fmt.Errorf("CSR %s: %w", reqs[i].name, err)
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	names := func(reqs []roundCSR) []string {
		out := make([]string, len(reqs))
		for i, r := range reqs {
			out[i] = r.name
		}
		return out
	}
	// The benchmark's own watch of CSRs runs through both rounds, so that
	// the bare client's writes meet the same load besides as mooring's do.
	d := watchDecisions(b, w)
	create(bare)
	apf := apfNow(ctx, b, w)
	bareRan, err := bareApprovals(ctx, w, names(bare))
	if err != nil {
		b.Fatal(err)
	}
	recordAPF(ctx, b, w, bench, "the unthrottled client", "", apf)
	// The bare client's CSRs go (as the bare client's Nodes go before
	// node init's round) before mooring's round starts; with them goes
	// kube-controller-manager's signing of them (20 a second at its
	// default client limit: minutes for thousands), which would
	// otherwise go on through mooring's round.
	if err := harness.Parallel(ctx, len(bare), 32, func(ctx context.Context, i int) error {
		return w.fast.CertificatesV1().CertificateSigningRequests().Delete(ctx, bare[i].name, metav1.DeleteOptions{})
	}); err != nil {
		b.Fatal(err)
	}
	createdIn := create(reqs)
	want := names(reqs)
	if err := w.lc.Client.ResetStats(ctx); err != nil {
		b.Fatal(err)
	}
	apf = apfNow(ctx, b, w)
	start := w.startCCM(b)
	m := startMeter(ctx, b, w, bench)
	if err := waitFor(ctx, func() (bool, error) { return d.decided(want) == len(want), nil }); err != nil {
		b.Fatalf("%s: %d of %d CSRs decided\n%s", bench, d.decided(want), len(want), w.ccm.LogTail(20))
	}
	var last time.Time
	d.at.mu.Lock()
	for _, name := range want {
		if t := d.at.m[name]; t.After(last) {
			last = t
		}
	}
	d.at.mu.Unlock()
	total := last.Sub(start)
	recordAPF(ctx, b, w, bench, "mooring-ccm", "", apf)
	leader, err := leaderAt(ctx, w.c.Client)
	if err != nil {
		b.Fatal(err)
	}
	wrong, invalid := 0, 0
	d.mu.Lock()
	for _, r := range reqs {
		v := d.verdicts[r.name]
		if !r.valid {
			invalid++
		}
		if v.approved != r.valid || (!v.approved && r.wantReason != "" && v.reason != r.wantReason) {
			wrong++
			b.Errorf("CSR %s (%s): approved=%v (%s), want %v %s", r.name, r.flaw, v.approved, v.reason, r.valid, r.wantReason)
		}
	}
	d.mu.Unlock()
	stats, err := w.lc.Client.Stats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	calls := map[string]int64{}
	for op, n := range stats.Calls {
		if !strings.HasPrefix(op, "Metadata") {
			calls[op] = n
		}
	}
	b.ReportMetric(total.Seconds(), "all-decided-s")
	b.ReportMetric(bareRan.took.Seconds(), "bare-s")
	record(bench, fmt.Sprintf("%d CSRs waiting (%d invalid), %s, created in", len(reqs), invalid, by), seconds(createdIn), "", false)
	record(bench, "mooring-ccm's start to all decided", fmt.Sprintf("%s (lease taken after %s)", seconds(total), seconds(leader.Sub(start))), "", false)
	recordBare(bench, fmt.Sprintf("%d approvals, %d at a time", len(bare), approverWorkers), bareRan)
	recordRatio(b, bench, "the same number of approvals", total, leader.Sub(start), bareRan.took)
	m.stop(bench, len(reqs), "CSR", false)
	record(bench, "wrong decisions", fmt.Sprint(wrong), "0", wrong == 0)
	record(bench, "cloud API calls", fmt.Sprintf("%d (%s)", sum(calls), harness.CallsString(calls)), "", false)
}
