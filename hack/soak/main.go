// Command soak is `make soak`: the demo's join, over and over, on fresh
// test beds, to catch what happens once in a hundred joins (issue 42). A
// round starts a control plane, the local cloud and mooring-ccm with the
// CSR approver, creates --machines instances that run mooring-agent and
// their kubelets under systemd --user (the demo's fleet) and --boot
// machines that boot for real (runc, systemd as PID 1, cloud-init), and
// times each machine from its client CSR's approval to its Node's Ready.
// It stops after --joins machines and prints the failure rate and the
// distribution of that time; every slow or failed machine's logs, unit
// states and files are kept under --out.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

const cluster = "soak"

type options struct {
	joins, machines, boot, busy int
	slow, giveUp                time.Duration
	out                         string
	stopOnSlow                  bool
}

func main() {
	var o options
	flag.IntVar(&o.joins, "joins", envInt("SOAK_JOINS", 300), "stop once this many machines have joined or failed (env SOAK_JOINS)")
	flag.IntVar(&o.machines, "machines", 3, "machines per round under systemd --user, as the demo's fleet")
	flag.IntVar(&o.boot, "boot", envInt("SOAK_BOOT", 1), "machines per round that boot for real (runc, systemd as PID 1, cloud-init; env SOAK_BOOT)")
	flag.IntVar(&o.busy, "busy", envInt("SOAK_BUSY", 0), "busy loops (shell processes spinning) beside the rounds (env SOAK_BUSY)")
	flag.DurationVar(&o.slow, "slow", 30*time.Second, "a machine later than this from approval to Ready is slow: its logs are kept")
	flag.DurationVar(&o.giveUp, "give-up", 7*time.Minute, "how long a round waits for its machines to be Ready (longer than the kubelet's 5 minute exit without a certificate, so that a stall of that length is measured)")
	flag.StringVar(&o.out, "out", filepath.Join(harness.RepoRoot(), "bin", "soak"), "where the results and the kept logs go (wiped at start)")
	flag.BoolVar(&o.stopOnSlow, "stop-on-slow", false, "stop after the first round with a slow or failed machine")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "soak: %v\n", err)
		os.Exit(1)
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// result is one machine's join in a round.
type result struct {
	round                         int
	name                          string
	booted                        bool
	approved, registered, ready   time.Time // zero: not seen
	failed                        string    // why it did not join
	anomaly                       string    // a unit restarted or is not running though the Node is Ready
	kept                          string    // where its logs are, when kept
	approvalToReady, startToReady time.Duration
	startedAt                     time.Time
}

func run(o options) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := os.RemoveAll(o.out); err != nil {
		return err
	}
	bin := filepath.Join(o.out, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	bins := map[string]string{}
	for _, pkg := range []string{"cloud/local/cmd/mooring-localcloud", "ccm/cmd/mooring-ccm", "agent/cmd/mooring-agent"} {
		p, err := harness.Build(pkg, bin)
		if err != nil {
			return err
		}
		bins[filepath.Base(pkg)] = p
	}
	stopBusy, err := busyLoops(o.busy)
	if err != nil {
		return err
	}
	defer stopBusy()

	began := time.Now()
	var all []result
	for round := 1; len(all) < o.joins; round++ {
		rs, err := soakRound(ctx, o, round, bins)
		if ctx.Err() != nil {
			// Interrupted: the round's machines did not have their time.
			break
		}
		all = append(all, rs...)
		line := fmt.Sprintf("round %d:", round)
		for _, r := range rs {
			line += " " + r.String()
		}
		fmt.Println(line)
		if err != nil {
			return fmt.Errorf("round %d: %w", round, err)
		}
		if o.stopOnSlow && slices.ContainsFunc(rs, func(r result) bool { return r.failed != "" || r.approvalToReady > o.slow }) {
			break
		}
	}
	report := summary(o, all, time.Since(began))
	fmt.Print("\n" + report)
	return os.WriteFile(filepath.Join(o.out, "results.md"), []byte(report), 0o644)
}

func (r result) String() string {
	switch {
	case r.failed != "":
		return fmt.Sprintf("%s FAILED (%s)", r.name, r.failed)
	case r.anomaly != "":
		return fmt.Sprintf("%s %.1fs (but %s)", r.name, r.approvalToReady.Seconds(), r.anomaly)
	default:
		return fmt.Sprintf("%s %.1fs", r.name, r.approvalToReady.Seconds())
	}
}

// busyLoops starts n shell loops that spin on a core each, stopped by
// the returned function (by PID).
func busyLoops(n int) (func(), error) {
	var cmds []*exec.Cmd
	stop := func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
	for range n {
		c := exec.Command("/bin/sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			stop()
			return nil, err
		}
		cmds = append(cmds, c)
	}
	return stop, nil
}

// observer records when each machine's client CSR is approved and its
// Node registers and turns Ready, as a watch delivers them.
type observer struct {
	mu                          sync.Mutex
	approved, registered, ready map[string]time.Time
}

func (ob *observer) first(m map[string]time.Time, name string) {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if _, ok := m[name]; !ok {
		m[name] = time.Now()
	}
}

func (ob *observer) get(name string) (approved, registered, ready time.Time) {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	return ob.approved[name], ob.registered[name], ob.ready[name]
}

func observe(ctx context.Context, c *testbed.Cluster) *observer {
	ob := &observer{approved: map[string]time.Time{}, registered: map[string]time.Time{}, ready: map[string]time.Time{}}
	f := informers.NewSharedInformerFactory(c.Client, 0)
	onCSR := func(obj any) {
		csr, ok := obj.(*certificatesv1.CertificateSigningRequest)
		if !ok || csr.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName || harness.Condition(csr, certificatesv1.CertificateApproved) == nil {
			return
		}
		// The agent names its CSR mooring-NODE-<key digest>.
		name := strings.TrimPrefix(csr.Name, "mooring-")
		if i := strings.LastIndexByte(name, '-'); i > 0 && name != csr.Name {
			ob.first(ob.approved, name[:i])
		}
	}
	onNode := func(obj any) {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return
		}
		ob.first(ob.registered, n.Name)
		if harness.NodeReady(n) {
			ob.first(ob.ready, n.Name)
		}
	}
	_, _ = f.Certificates().V1().CertificateSigningRequests().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onCSR, UpdateFunc: func(_, obj any) { onCSR(obj) }})
	_, _ = f.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onNode, UpdateFunc: func(_, obj any) { onNode(obj) }})
	f.Start(ctx.Done())
	return ob
}

// soakRound runs one bed: it returns a result per machine, and an error
// when the bed itself could not be made or torn down.
func soakRound(ctx context.Context, o options, round int, bins map[string]string) (rs []result, err error) {
	dir, err := os.MkdirTemp("", "mooring-soak-")
	if err != nil {
		return nil, err
	}
	cp, err := testbed.StartControlPlane(ctx, testbed.Config{Dir: dir, Logf: func(string, ...any) {}})
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	c := &testbed.Cluster{ControlPlane: cp}
	var (
		fleet     *harness.Fleet
		bootFleet *harness.BootFleet
		keepBed   bool
	)
	obsCtx, stopObserving := context.WithCancel(ctx)
	defer func() {
		stopObserving()
		errs := []error{harness.StopBed(c, fleet, bootFleet)}
		if keepBed {
			errs = append(errs, copyDir(cp.LogDir(), filepath.Join(o.out, fmt.Sprintf("round-%03d", round), "control-plane")))
		}
		errs = append(errs, os.RemoveAll(dir))
		err = errors.Join(append([]error{err}, errs...)...)
	}()
	if err := cp.ApplyBootstrapRBAC(ctx, testbed.BootstrapRBAC{MooringApproves: true}); err != nil {
		return nil, err
	}
	if c.Token, err = cp.CreateBootstrapToken(ctx, time.Hour); err != nil {
		return nil, err
	}
	lc, err := harness.RunLocalCloud(cp, bins["mooring-localcloud"], filepath.Join(dir, "cloud"))
	if err != nil {
		return nil, err
	}
	if err := harness.ApplyRBAC(ctx, cp, "overlays/local"); err != nil {
		return nil, err
	}
	if _, err := harness.RunCCM(cp, bins["mooring-ccm"], lc, filepath.Join(dir, "ccm"),
		harness.CCMOptions{Cluster: cluster, Args: []string{"--controllers=*,csr-approver"}}); err != nil {
		return nil, err
	}
	ob := observe(obsCtx, c)
	var names, bootNames []string
	for i := range o.machines {
		names = append(names, fmt.Sprintf("node-%d", i+1))
	}
	for i := range o.boot {
		bootNames = append(bootNames, fmt.Sprintf("boot-%d", i+1))
	}
	start := time.Now()
	if fleet, err = harness.RunFleet(ctx, c, lc, harness.FleetOptions{Names: names, Cluster: cluster, AgentBin: bins["mooring-agent"]}); err != nil {
		return nil, err
	}
	starts := map[string]time.Time{}
	for _, n := range names {
		starts[n] = start
	}
	if len(bootNames) > 0 {
		if bootFleet, err = harness.RunBootFleet(ctx, c, harness.BootOptions{Names: bootNames, Cluster: cluster, AgentBin: bins["mooring-agent"], Local: lc}); err != nil {
			return nil, err
		}
		for _, m := range bootFleet.Machines {
			starts[m.NodeName] = m.StartedAt()
		}
	}
	all := append(slices.Clone(names), bootNames...)
	deadline := time.Now().Add(o.giveUp)
	for {
		done := 0
		for _, n := range all {
			if _, _, ready := ob.get(n); !ready.IsZero() {
				done++
			}
		}
		if done == len(all) || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, n := range all {
		r := result{round: round, name: n, booted: !slices.Contains(names, n), startedAt: starts[n]}
		r.approved, r.registered, r.ready = ob.get(n)
		switch {
		case r.approved.IsZero():
			r.failed = "client CSR not approved"
		case r.registered.IsZero():
			r.failed = fmt.Sprintf("not registered %v after approval", time.Since(r.approved).Round(time.Second))
		case r.ready.IsZero():
			r.failed = fmt.Sprintf("not Ready %v after approval", time.Since(r.approved).Round(time.Second))
		default:
			r.approvalToReady = r.ready.Sub(r.approved)
			r.startToReady = r.ready.Sub(r.startedAt)
		}
		if r.failed == "" {
			r.anomaly = unitAnomaly(ctx, n, fleet, bootFleet)
		}
		if r.failed != "" || r.approvalToReady > o.slow || r.anomaly != "" {
			keepBed = true
			r.kept = filepath.Join(o.out, fmt.Sprintf("round-%03d", round), n)
			// Its own context: an interrupted round keeps its logs too.
			if kerr := keep(context.Background(), r.kept, n, fleet, bootFleet, r); kerr != nil {
				fmt.Fprintf(os.Stderr, "soak: keep the logs of %s: %v\n", n, kerr)
			}
		}
		rs = append(rs, r)
	}
	return rs, ctx.Err()
}

// unitAnomaly is what is wrong with a Ready machine's units: a kubelet or
// agent that systemd restarted, a kubelet not running, an agent that did
// not end with 0. Those are the near misses of a stall.
func unitAnomaly(ctx context.Context, name string, fleet *harness.Fleet, bootFleet *harness.BootFleet) string {
	var bad []string
	if fleet != nil {
		for _, m := range fleet.Machines {
			if m.Name != name {
				continue
			}
			k, kerr := m.KubeletState(ctx)
			a, aerr := m.Agent.State(ctx)
			switch {
			case kerr != nil || aerr != nil:
				bad = append(bad, fmt.Sprintf("units unreadable: %v", errors.Join(kerr, aerr)))
			default:
				if k.ActiveState != "active" || k.SubState != "running" || k.NRestarts > 0 {
					bad = append(bad, "kubelet "+k.String())
				}
				if a.NRestarts > 0 || !a.Exited || a.ExitStatus != 0 {
					bad = append(bad, "agent "+a.String())
				}
			}
		}
	}
	if bootFleet != nil {
		for _, m := range bootFleet.Machines {
			if m.NodeName != name {
				continue
			}
			for _, unit := range []string{"kubelet", "mooring-agent"} {
				out, err := m.Exec(ctx, "systemctl", "show", "-p", "NRestarts", "--value", unit)
				if n := strings.TrimSpace(out); err != nil || n != "0" {
					bad = append(bad, fmt.Sprintf("%s restarted %s times (%v)", unit, n, err))
				}
			}
		}
	}
	return strings.Join(bad, "; ")
}

// keep saves what the harness knows of a slow or failed machine.
func keep(ctx context.Context, dir, name string, fleet *harness.Fleet, bootFleet *harness.BootFleet, r result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	timeline := fmt.Sprintf("started %s\napproved %s\nregistered %s\nready %s\nfailed: %s\nanomaly: %s\n",
		stamp(r.startedAt), stamp(r.approved), stamp(r.registered), stamp(r.ready), r.failed, r.anomaly)
	var diag string
	var errs []error
	if fleet != nil {
		for _, m := range fleet.Machines {
			if m.Name != name {
				continue
			}
			diag = m.Diagnose(ctx)
			for _, f := range []string{"agent.log", "kubelet.log"} {
				errs = append(errs, copyFile(filepath.Join(m.Root, f), filepath.Join(dir, f)))
			}
			errs = append(errs, copyFile(filepath.Join(fleet.Dir, "systemd", "systemd.log"), filepath.Join(dir, "systemd.log")))
		}
	}
	if bootFleet != nil {
		for _, m := range bootFleet.Machines {
			if m.NodeName != name {
				continue
			}
			diag = m.Diagnose(ctx)
			for _, unit := range []string{"mooring-agent", "kubelet", "cloud-final"} {
				out, err := m.Exec(ctx, "journalctl", "--no-pager", "-o", "short-precise", "-u", unit)
				errs = append(errs, err, os.WriteFile(filepath.Join(dir, unit+".journal"), []byte(out), 0o644))
			}
		}
	}
	errs = append(errs, os.WriteFile(filepath.Join(dir, "diagnosis.txt"), []byte(timeline+"\n"+diag), 0o644))
	return errors.Join(errs...)
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Format("15:04:05.000")
}

func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o644)
}

func copyDir(from, to string) error {
	entries, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(to, 0o755); err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if e.Type().IsRegular() {
			errs = append(errs, copyFile(filepath.Join(from, e.Name()), filepath.Join(to, e.Name())))
		}
	}
	return errors.Join(errs...)
}

// summary is the report: the command, the machine, the failure rate and
// the distribution of approval to Ready, all machines and per kind.
func summary(o options, all []result, took time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# mooring soak, %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "- command: `go run ./hack/soak --joins %d --machines %d --boot %d --busy %d` (`make soak SOAK_JOINS=%d SOAK_BOOT=%d SOAK_BUSY=%d`)\n",
		o.joins, o.machines, o.boot, o.busy, o.joins, o.boot, o.busy)
	fmt.Fprintf(&b, "- machine: %d cores, %d busy loops beside it; took %v\n", runtime.NumCPU(), o.busy, took.Round(time.Second))
	failed, slow, anomalies := 0, 0, 0
	for _, r := range all {
		switch {
		case r.failed != "":
			failed++
		case r.approvalToReady > o.slow:
			slow++
		}
		if r.anomaly != "" {
			anomalies++
		}
	}
	fmt.Fprintf(&b, "- joins: %d, failed: %d (%.2f%%), slower than %v from approval to Ready: %d, Ready with a unit restarted or not running: %d\n\n",
		len(all), failed, 100*float64(failed)/float64(max(1, len(all))), o.slow, slow, anomalies)
	b.WriteString("| machines | joined | approval to Ready p50 / p99 / max | start to Ready p50 / p99 / max |\n|---|---|---|---|\n")
	for _, kind := range []struct {
		name string
		keep func(result) bool
	}{
		{"all", func(result) bool { return true }},
		{"fleet (systemd --user)", func(r result) bool { return !r.booted }},
		{"booted (systemd PID 1, cloud-init)", func(r result) bool { return r.booted }},
	} {
		var toReady, fromStart []time.Duration
		for _, r := range all {
			if kind.keep(r) && r.failed == "" {
				toReady = append(toReady, r.approvalToReady)
				fromStart = append(fromStart, r.startToReady)
			}
		}
		if len(toReady) == 0 {
			continue
		}
		slices.Sort(toReady)
		slices.Sort(fromStart)
		fmt.Fprintf(&b, "| %s | %d | %s | %s |\n", kind.name, len(toReady), dist(toReady), dist(fromStart))
	}
	var kept []string
	for _, r := range all {
		if r.kept != "" {
			kept = append(kept, fmt.Sprintf("- round %d %s: %s; logs in %s", r.round, r.name, r, r.kept))
		}
	}
	if len(kept) > 0 {
		b.WriteString("\nSlow or failed machines:\n" + strings.Join(kept, "\n") + "\n")
	}
	return b.String()
}

func dist(sorted []time.Duration) string {
	s := func(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }
	return s(harness.Percentile(sorted, 50)) + " / " + s(harness.Percentile(sorted, 99)) + " / " + s(sorted[len(sorted)-1])
}
