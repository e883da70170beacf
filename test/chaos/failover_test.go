package chaos

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// TestLeaderFailover (scenario 1): two replicas of mooring-csr-approver and
// two of mooring-ccm, with leader election, on one bed. Two bursts, each of
// serving CSRs (1% invalid; at least one), attested joins and registering
// Nodes: the first without a failure, the second with both leaders (the
// approvers' and the CCMs') killed (kill -9) together just after the burst
// began. Invariants: every CSR decided exactly once (one condition; at most
// one "CSR decided" line in all the replicas' logs, and exactly one without
// the failure), none wrongly; every Node initialized; the second
// replicas took over. Figures: time without a leader, time until all was
// decided, with and without the failure.
func TestLeaderFailover(t *testing.T) {
	o := report(t, "1. leader failover under load")
	ctx, cancel := context.WithTimeout(context.Background(), span(10*time.Minute, 40*time.Minute))
	defer cancel()
	var (
		serving  = size(40, 1000)
		joins    = size(5, 100)
		register = size(20, 500)
	)
	c := testbed.Start(t, testbed.Options{
		RBAC:        testbed.BootstrapRBAC{MooringApproves: true},
		Controllers: []string{"-node-lifecycle-controller"},
	})
	lc := startLocalCloud(t, c)
	w := &world{c: c, lc: lc}
	var err error
	if w.fast, err = harness.FastClient(c); err != nil {
		t.Fatal(err)
	}
	// The CSRs' Nodes: initialized before the bursts, half for each.
	pre := w.createInstances(t, ctx, "pre", 2*serving)
	preNames := instanceNames(pre)
	var ccms []*testbed.Process
	for range 2 {
		ccms = append(ccms, harness.StartCCM(t, c, bin(t, "mooring-ccm"), lc, harness.CCMOptions{Cluster: chaosCluster, Args: []string{"--v=2"}}))
	}
	var approvers []*harness.Approver
	for range 2 {
		approvers = append(approvers, harness.StartApprover(t, c, bin(t, "mooring-csr-approver"), lc, chaosCluster))
	}
	if err := harness.RegisterNodes(ctx, w.fast, preNames, harness.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.WaitUntil(ctx, t, "the CSRs' Nodes initialized", func() (bool, error) {
		n, err := w.initializedCount(ctx, preNames)
		return n == len(preNames), err
	})

	burst := func(label string, nodes []string, fail bool) {
		t.Helper()
		reqs := outageServingCSRs(t, ctx, w, nodes, label)
		fresh := w.createInstances(t, ctx, "node-"+label, register)
		joiners := w.createInstances(t, ctx, "join-"+label, joins)
		start := time.Now()
		done := make(chan error, 1)
		go func() {
			err := harness.Parallel(ctx, len(reqs), 32, func(ctx context.Context, i int) error { return reqs[i].Post(ctx, w.fast) })
			if err == nil {
				err = harness.RegisterNodes(ctx, w.fast, instanceNames(fresh), harness.RegisterOptions{})
			}
			done <- err
		}()
		var joinCSRs []string
		for _, in := range joiners {
			j, err := harness.Join(ctx, c, in.Name, in.MetadataURL)
			if err != nil {
				t.Fatal(err)
			}
			joinCSRs = append(joinCSRs, j.Name)
		}
		if fail {
			leases := []failoverLease{
				{"mooring-csr-approver", []*testbed.Process{approvers[0].Process, approvers[1].Process}},
				{"cloud-controller-manager", ccms},
			}
			for i, gap := range failoverKillLeaders(t, ctx, w.fast, leases) {
				o.figure(t, "time without a leader, "+leases[i].name, "%.1f s (lease duration 15 s)", gap.Seconds())
			}
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		want := append(servingNames(reqs), joinCSRs...)
		harness.WaitUntil(ctx, t, label+": every CSR decided and every Node initialized", func() (bool, error) {
			if ok, err := w.allDecided(ctx, want); !ok || err != nil {
				return false, err
			}
			n, err := w.initializedCount(ctx, instanceNames(fresh))
			return n == len(fresh), err
		})
		o.figure(t, "all decided and initialized, "+label, "%.1f s (%d serving CSRs, %d joins, %d Nodes)",
			time.Since(start).Seconds(), len(reqs), len(joinCSRs), len(fresh))
		d, err := w.csrDecisions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		logged := failoverDecisionLines(t, approvers)
		for _, r := range reqs {
			if got := d[r.CSR.Name]; got.approved != r.Valid || got.conditions != 1 {
				t.Errorf("%s: serving CSR %s (valid %v %s): %+v", label, r.CSR.Name, r.Valid, r.Flaw, got)
			}
		}
		for _, name := range joinCSRs {
			if got := d[name]; !got.approved || got.conditions != 1 {
				t.Errorf("%s: join %s: %+v", label, name, got)
			}
		}
		// A decision is logged after its write returns: a leader killed
		// while its write was in flight leaves a decision the apiserver
		// committed and nobody logged. Its one condition shows it was made
		// once; two lines would show it made twice.
		unlogged := 0
		for _, name := range want {
			switch n := logged[name]; {
			case n > 1:
				t.Errorf("%s: CSR %s decided %d times in the replicas' logs, want once", label, name, n)
			case n == 0 && !fail:
				t.Errorf("%s: CSR %s decided but logged by no replica", label, name)
			case n == 0:
				unlogged++
			}
		}
		if fail {
			o.figure(t, "decisions committed by the killed leader without its log line", "%d of %d", unlogged, len(want))
		}
	}
	burst("steady", preNames[:serving], false)
	burst("failover", preNames[serving:], true)
	o.check("every CSR decided exactly once (one condition; never two decisions logged across replicas), none wrongly, both bursts")
	o.check("every Node initialized after the CCM leader was killed")
}

// failoverLease is a lease and the replicas that contend for it.
type failoverLease struct {
	name  string
	procs []*testbed.Process
}

// failoverKillLeaders kills (kill -9), for each lease, whichever of its
// procs holds it, all at once, and returns how long each lease then had no
// live holder: until another identity held it. The leases are of
// different components, whose failovers do not wait on each other: they
// run side by side, not one lease duration after another.
func failoverKillLeaders(t *testing.T, ctx context.Context, cs kubernetes.Interface, leases []failoverLease) []time.Duration {
	t.Helper()
	leaders := make([]*testbed.Process, len(leases))
	held := make([]string, len(leases))
	for i, lease := range leases {
		harness.WaitUntil(ctx, t, "a leader of "+lease.name, func() (bool, error) {
			for _, p := range lease.procs {
				data, err := os.ReadFile(p.LogPath())
				if err == nil && strings.Contains(string(data), `"Successfully acquired lease" lock="kube-system/`+lease.name+`"`) {
					leaders[i] = p
					return true, nil
				}
			}
			return false, nil
		})
		l, err := cs.CoordinationV1().Leases("kube-system").Get(ctx, lease.name, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			t.Fatalf("lease %s: %v", lease.name, err)
		}
		held[i] = *l.Spec.HolderIdentity
	}
	killed := time.Now()
	for _, p := range leaders {
		if err := syscall.Kill(p.PID(), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	gaps := make([]time.Duration, len(leases))
	harness.WaitUntil(ctx, t, "another holder of every lease", func() (bool, error) {
		all := true
		for i, lease := range leases {
			if gaps[i] > 0 {
				continue
			}
			l, err := cs.CoordinationV1().Leases("kube-system").Get(ctx, lease.name, metav1.GetOptions{})
			if err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != held[i] {
				gaps[i] = time.Since(killed)
			} else {
				all = false
			}
		}
		return all, nil
	})
	return gaps
}

// failoverDecisionLines counts the "CSR decided" lines of each CSR in the
// approvers' logs (a killed replica's log stays on disk).
func failoverDecisionLines(t *testing.T, approvers []*harness.Approver) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, a := range approvers {
		data, err := os.ReadFile(a.LogPath())
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if !strings.Contains(line, `"CSR decided"`) {
				continue
			}
			if _, rest, ok := strings.Cut(line, ` csr="`); ok {
				name, _, _ := strings.Cut(rest, `"`)
				out[name]++
			}
		}
	}
	return out
}
