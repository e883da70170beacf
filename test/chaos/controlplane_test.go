package chaos

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// TestControlPlaneRestarts (scenario 4): real machines (mooring-agent and
// kubelet under systemd) join while kube-apiserver dies (kill -9) as the
// first CSRs of the wave arrive, and then etcd dies too; both come back
// with the same command line, nobody touches mooring. A supervisor
// restarts any control plane process that exits meanwhile, as the kubelet
// restarts static pods (kube-controller-manager exits when it cannot renew
// its lease in time). Invariants: every
// agent finishes (exit 0), every Node is Ready and initialized with its
// serving certificate approved; one client CSR per machine (no duplicate
// from a retry), no CSR left undecided or denied; mooring-ccm (with its
// approver) keeps running.
func TestControlPlaneRestarts(t *testing.T) {
	o := report(t, "4. control plane restarts during a join wave")
	ctx, cancel := context.WithTimeout(context.Background(), span(8*time.Minute, 20*time.Minute))
	defer cancel()
	n := size(3, 8)
	w := newWorld(t, ctx)
	names := make([]string, n)
	for i := range names {
		names[i] = "node-" + string(rune('a'+i))
	}
	// The scenario is about a running mooring-ccm: under load it can still
	// be starting (reading the apiserver's request-header CA) when the
	// first CSR comes and kube-apiserver is killed, and a program that
	// cannot start exits. It leads once it has started.
	harness.WaitUntil(ctx, t, "mooring-ccm holds its lease", func() (bool, error) {
		l, err := w.c.Client.CoordinationV1().Leases("kube-system").Get(ctx, "cloud-controller-manager", metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", nil
	})
	superCtx, stopSupervisor := context.WithCancel(ctx)
	supervised := w.c.Supervise(superCtx, time.Second)
	start := time.Now()
	fleet := harness.StartFleet(ctx, t, w.c, w.lc, harness.FleetOptions{Names: names, Cluster: chaosCluster, AgentBin: bin(t, "mooring-agent")})

	harness.WaitUntil(ctx, t, "the first CSR of the wave", func() (bool, error) {
		l, err := w.c.Client.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) > 0, nil
	})
	down, err := w.c.RestartComponent(ctx, "kube-apiserver", true)
	if err != nil {
		t.Fatal(err)
	}
	o.figure(t, "kube-apiserver down (kill -9 to ready)", "%.1f s", down.Seconds())
	time.Sleep(2 * time.Second)
	if down, err = w.c.RestartComponent(ctx, "etcd", true); err != nil {
		t.Fatal(err)
	}
	o.figure(t, "etcd down (kill -9 to healthy)", "%.1f s", down.Seconds())

	for _, m := range fleet.Machines {
		if code, err := m.Agent.Wait(span(4*time.Minute, 10*time.Minute)); err != nil || code != 0 {
			t.Fatalf("agent of %s: exit %d, %v\n%s", m.Name, code, err, m.Agent.LogTail(30))
		}
	}
	o.check("every agent finished on its own (exit 0)")
	w.waitReadyServing(t, ctx, names)
	o.figure(t, "wave joined, Ready, initialized and serving", "%.1f s from the agents' start (%d machines)", time.Since(start).Seconds(), n)

	l, err := w.c.Client.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	client := 0
	for _, csr := range l.Items {
		approved := harness.Condition(&csr, certificatesv1.CertificateApproved) != nil
		denied := harness.Condition(&csr, certificatesv1.CertificateDenied) != nil
		if !approved || denied || len(csr.Status.Conditions) != 1 {
			t.Errorf("CSR %s (%s, by %s): %+v, want approved once", csr.Name, csr.Spec.SignerName, csr.Spec.Username, csr.Status.Conditions)
		}
		if csr.Spec.SignerName == certificatesv1.KubeAPIServerClientKubeletSignerName {
			client++
		}
	}
	if client != n {
		t.Errorf("%d client CSRs for %d machines, want one each", client, n)
	}
	o.check("one client CSR per machine (%d), every CSR approved once, none undecided or denied (%d CSRs)", client, len(l.Items))
	if done, err := w.ccm.Exited(); done {
		t.Errorf("mooring-ccm exited: %v; its last lines (pid %d):\n%s", err, w.ccm.PID(), lastLinesOf(w.ccm, 40))
	}
	o.check("mooring-ccm and its approver recovered with no manual step")
	stopSupervisor()
	o.figure(t, "control plane processes the supervisor restarted", "%v", <-supervised)
}

// lastLinesOf is the end of what process p wrote to its log, which a
// process restarted in its place (by the supervisor) writes on after: klog
// names the pid on each line.
func lastLinesOf(p *testbed.Process, n int) string {
	data, err := os.ReadFile(p.LogPath())
	if err != nil {
		return err.Error()
	}
	pid := fmt.Sprintf(" %d ", p.PID())
	var mine []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, pid) {
			mine = append(mine, l)
		}
	}
	if len(mine) > n {
		mine = mine[len(mine)-n:]
	}
	return strings.Join(mine, "\n")
}
