package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/mooring-dev/mooring/ccm/initretry"
	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// Bounds of TestNodeInitPromptAfterCloudOutage.
const (
	// outageInitBound: every Node registered during the outage is
	// initialized within this long of the cloud's recovery.
	outageInitBound = 30 * time.Second
	// outageBackoffWanted: the outage lasts until the cloud-node controller's pending
	// retry of every Node is at least this far away, so that only a
	// re-queue can meet outageInitBound.
	outageBackoffWanted = 35 * time.Second
)

// TestNodeInitPromptAfterCloudOutage registers 3 kubelets while the cloud's
// API fails every call, keeps the outage until the cloud-node
// controller has failed each Node so often that its next retry is more than
// 35 s away (read from the CCM's log: the k-th failure of a Node waits
// 5 ms * 2^(k-1)), clears the fault, and wants every Node initialized within
// 30 s: the node-init-retry controller re-queues them when the view sees the
// cloud answer again.
//
// MOORING_E2E_WITHOUT_INIT_RETRY=1 runs mooring-ccm with
// --controllers=*,-node-init-retry, the behaviour before that controller:
// the test then fails, and reports how long the Nodes waited.
func TestNodeInitPromptAfterCloudOutage(t *testing.T) {
	withoutRetry := os.Getenv("MOORING_E2E_WITHOUT_INIT_RETRY") == "1"
	ccmBin := harness.BuildBinary(t, "ccm/cmd/mooring-ccm")
	cloudBin := harness.BuildBinary(t, "cloud/local/cmd/mooring-localcloud")
	c := testbed.Start(t, testbed.Options{})
	lc := harness.StartLocalCloud(t, c, cloudBin)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	args := []string{"--v=2"}
	if withoutRetry {
		args = append(args, "--controllers=*,-"+initretry.Name)
		t.Logf("MOORING_E2E_WITHOUT_INIT_RETRY=1: %s disabled", initretry.Name)
	}
	ccm := harness.StartCCM(t, c, ccmBin, lc, harness.CCMOptions{Cluster: e2eCluster, Args: args})
	harness.WaitUntil(ctx, t, "mooring-ccm to lead and start the cloud-node controller", func() (bool, error) {
		data, err := os.ReadFile(ccm.LogPath())
		return err == nil && strings.Contains(string(data), `Started "cloud-node-controller"`), err
	})
	// mooring-ccm lists the cloud when it starts. The instances are made
	// after that List, as a boot wave's are: the view has not seen them,
	// so initializing their Nodes needs the cloud.
	harness.WaitUntil(ctx, t, "mooring-ccm's first List of the cloud", func() (bool, error) {
		st, err := lc.Client.Stats(ctx)
		return err == nil && st.Calls["ListInstances"] > 0, err
	})
	time.Sleep(500 * time.Millisecond) // its answer on the way back
	instances := createInstances(ctx, t, lc, 3)

	// The outage: every API call fails with 503.
	if err := lc.Client.SetFaults(ctx, api.Faults{ErrorRate: 1}); err != nil {
		t.Fatal(err)
	}
	outageStart := time.Now()
	for _, in := range instances {
		if _, err := c.AddNodeAt(ctx, in.Name, in.Addresses[0].Address); err != nil {
			t.Fatal(err)
		}
	}
	for _, in := range instances {
		harness.WaitUntil(ctx, t, "node "+in.Name+" registered", func() (bool, error) {
			n, err := c.Client.CoreV1().Nodes().Get(ctx, in.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return err == nil && hasTaint(n, uninitializedTaint, corev1.TaintEffectNoSchedule), err
		})
	}

	// Keep the cloud down until each Node's next retry by the cloud-node controller is
	// at least outageBackoffWanted away.
	var failures map[string]syncFailures
	outageDeadline := time.Now().Add(150 * time.Second)
	for {
		var err error
		if failures, err = nodeSyncFailures(ccm.LogPath()); err != nil {
			t.Fatal(err)
		}
		ready := true
		now := time.Now()
		for _, in := range instances {
			f := failures[in.Name]
			if f.count == 0 || f.nextRetry().Sub(now) < outageBackoffWanted {
				ready = false
			}
		}
		if ready {
			break
		}
		if now.After(outageDeadline) {
			t.Fatalf("after %v of outage the cloud-node controller's retries are not %v away: %v", time.Since(outageStart).Round(time.Second), outageBackoffWanted, failures)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := lc.Client.ClearFaults(ctx); err != nil {
		t.Fatal(err)
	}
	recovered := time.Now()
	st, err := lc.Client.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cloud outage of %v: %d API calls failed by the fault", recovered.Sub(outageStart).Round(100*time.Millisecond), st.Faulted)
	latestRetry := recovered
	for _, in := range instances {
		f := failures[in.Name]
		t.Logf("  %s: %d failed syncs in the CCM log, the last at -%v; the controller's next retry %v after the recovery",
			in.Name, f.count, recovered.Sub(f.last).Round(100*time.Millisecond), f.nextRetry().Sub(recovered).Round(100*time.Millisecond))
		if f.nextRetry().After(latestRetry) {
			latestRetry = f.nextRetry()
		}
	}

	// Every Node initialized within outageInitBound of the recovery; past
	// it (a failure), keep watching until the controller's own retries, to
	// report how long the Nodes waited.
	initialized := map[string]time.Duration{}
	watchUntil := recovered.Add(outageInitBound)
	for len(initialized) < len(instances) {
		for _, in := range instances {
			if _, ok := initialized[in.Name]; ok {
				continue
			}
			n, err := c.Client.CoreV1().Nodes().Get(ctx, in.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if n.Spec.ProviderID != "" && !hasTaint(n, uninitializedTaint, corev1.TaintEffectNoSchedule) {
				initialized[in.Name] = time.Since(recovered)
				if n.Spec.ProviderID != "local://"+in.ID {
					t.Errorf("node %s: providerID %q, want local://%s", in.Name, n.Spec.ProviderID, in.ID)
				}
				if !withoutRetry && n.Annotations[initretry.AnnotationRecoveredAt] == "" {
					t.Errorf("node %s initialized without %s", in.Name, initretry.AnnotationRecoveredAt)
				}
			}
		}
		if time.Now().After(watchUntil) {
			if watchUntil.Equal(recovered.Add(outageInitBound)) {
				watchUntil = latestRetry.Add(15 * time.Second)
				t.Logf("not every node initialized %v after the recovery (%d of %d); watching until the controller's own retries", outageInitBound, len(initialized), len(instances))
				continue
			}
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	slowest := time.Duration(0)
	for _, in := range instances {
		d, ok := initialized[in.Name]
		if !ok {
			d = time.Duration(math.MaxInt64)
			t.Logf("  %s: still uninitialized %v after the recovery", in.Name, time.Since(recovered).Round(100*time.Millisecond))
		} else {
			t.Logf("  %s: initialized %v after the recovery", in.Name, d.Round(100*time.Millisecond))
		}
		slowest = max(slowest, d)
	}
	if slowest > outageInitBound {
		if slowest == time.Duration(math.MaxInt64) {
			t.Fatalf("not every node initialized after the recovery, want all within %v", outageInitBound)
		}
		t.Fatalf("the last node was initialized %v after the recovery, want within %v", slowest.Round(100*time.Millisecond), outageInitBound)
	}
	t.Logf("%d nodes registered during a %v cloud outage, all initialized within %v of the recovery (bound %v)",
		len(instances), recovered.Sub(outageStart).Round(time.Second), slowest.Round(100*time.Millisecond), outageInitBound)

	if data, err := os.ReadFile(ccm.LogPath()); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, "re-queued the Nodes waiting for initialization") {
				t.Logf("  mooring-ccm: %s", line)
			}
		}
	}

	// The CCM's /metrics: the re-queue counter, and mooring's controllers
	// recorded as running, as the library's are.
	metrics := scrapeCCM(ctx, t, c, ccm)
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, "mooring_ccm_") || strings.HasPrefix(line, "mooring_cloud_view_list_calls_total") {
			t.Logf("  %s", line)
		}
	}
	for _, want := range []string{
		`mooring_ccm_init_requeued_total 3`,
		`mooring_cloud_view_recoveries_total 1`,
		`running_managed_controllers{manager="cloud-controller-manager",name="node-init-retry"} 1`,
		`running_managed_controllers{manager="cloud-controller-manager",name="service"} 1`,
		`running_managed_controllers{manager="cloud-controller-manager",name="cloud-node"} 1`,
		// The test bed's apiserver runs API Priority and Fairness: no
		// client-side limit (internal/clientlimit).
		`mooring_apiserver_client_qps_limit -1`,
	} {
		if !slices.Contains(strings.Split(metrics, "\n"), want) {
			t.Errorf("mooring-ccm /metrics has no line %q", want)
		}
	}
}

// scrapeCCM reads mooring-ccm's /metrics on its secure port (found on its
// command line) as the cluster admin, whom its delegated authorization
// lets in.
func scrapeCCM(ctx context.Context, t *testing.T, c *testbed.Cluster, ccm *testbed.Process) string {
	t.Helper()
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", ccm.PID()))
	if err != nil {
		t.Fatal(err)
	}
	var port string
	for _, arg := range strings.Split(string(cmdline), "\x00") {
		if p, ok := strings.CutPrefix(arg, "--secure-port="); ok {
			port = p
		}
	}
	if port == "" {
		t.Fatalf("mooring-ccm has no --secure-port: %q", cmdline)
	}
	tlsConfig, err := rest.TLSConfigFor(c.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	// The CCM serves on loopback with a self-signed certificate.
	tlsConfig.RootCAs, tlsConfig.InsecureSkipVerify = nil, true
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}, Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+net.JoinHostPort("127.0.0.1", port)+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("mooring-ccm /metrics: %s, %v\n%s", resp.Status, err, body)
	}
	return string(body)
}

// syncFailures are a Node's failed syncs by the cloud-node
// controller, read from its log.
type syncFailures struct {
	count int
	last  time.Time
}

// nextRetry is when the cloud-node controller tries the Node again: its rate limiter (the library's, which ccm/nodeinit keeps)
// waits 5 ms * 2^(k-1) after the k-th failure in a row, at most 1000 s.
func (f syncFailures) nextRetry() time.Time {
	if f.count == 0 {
		return f.last
	}
	wait := 5 * time.Millisecond
	for i := 1; i < f.count && wait < 1000*time.Second; i++ {
		wait *= 2
	}
	return f.last.Add(min(wait, 1000*time.Second))
}

func (f syncFailures) String() string {
	return fmt.Sprintf("%d failures, next retry in %v", f.count, time.Until(f.nextRetry()).Round(100*time.Millisecond))
}

// nodeSyncFailures counts the lines of the cloud-node controller that
// report a failed sync of a Node in a klog log (one per failed sync), with the time
// of the last one.
func nodeSyncFailures(logPath string) (map[string]syncFailures, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]syncFailures{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		// The Info line the controller writes with each requeue: mooring's
		// (ccm/nodeinit) or, with --node-init-controller=library, the
		// library's, whose error also goes to an "Unhandled Error" line, not
		// counted.
		if !strings.HasPrefix(line, "I") {
			continue
		}
		var name string
		if _, rest, ok := strings.Cut(line, `] "Could not initialize node; retrying with backoff" node="`); ok {
			name, _, _ = strings.Cut(rest, `"`)
		} else if _, rest, ok := strings.Cut(line, "] error syncing '"); ok {
			name, _, _ = strings.Cut(rest, "'")
		}
		if name == "" {
			continue
		}
		at, err := klogTime(line)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", logPath, line, err)
		}
		s := out[name]
		s.count++
		s.last = at
		out[name] = s
	}
	return out, sc.Err()
}

// klogTime reads the time of a klog text line: "I0504 03:02:01.123456 ...",
// local time, this year.
func klogTime(line string) (time.Time, error) {
	if len(line) < 21 {
		return time.Time{}, fmt.Errorf("not a klog line")
	}
	t, err := time.ParseInLocation("0102 15:04:05.000000", line[1:21], time.Local)
	if err != nil {
		return time.Time{}, err
	}
	now := time.Now()
	t = t.AddDate(now.Year(), 0, 0)
	if t.After(now.Add(24 * time.Hour)) { // a line of last year's last day
		t = t.AddDate(-1, 0, 0)
	}
	return t, nil
}
