package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// meter measures what the bed's processes spend during a round: CPU time
// of etcd, kube-apiserver, kube-controller-manager and mooring-ccm, and,
// with MOORING_BENCH_PROFILE=dir, CPU profiles of kube-apiserver and
// mooring-ccm over the round's first profileSeconds (go tool pprof reads
// them).
type meter struct {
	b        *testing.B
	w        *world
	label    string
	pids     map[string]int
	before   map[string]procUsage
	profiles chan string
}

const profileSeconds = 10

func startMeter(ctx context.Context, b *testing.B, w *world, label string) *meter {
	m := &meter{b: b, w: w, label: label, pids: w.c.ComponentPIDs(), before: map[string]procUsage{}}
	m.pids["mooring-ccm"] = w.ccm.PID()
	for name, pid := range m.pids {
		u, err := usage(pid)
		if err != nil {
			b.Fatal(err)
		}
		m.before[name] = u
	}
	if dir := os.Getenv("MOORING_BENCH_PROFILE"); dir != "" {
		m.profiles = make(chan string, 2)
		stem := profileStem(dir, label)
		go func() { m.profiles <- profile(ctx, w, w.c.URL, stem+"-kube-apiserver.pprof") }()
		go func() { m.profiles <- profile(ctx, w, w.ccmURL, stem+"-mooring-ccm.pprof") }()
	}
	return m
}

// ccmGet fetches path from mooring-ccm's secure port with the admin's
// credentials.
func ccmGet(ctx context.Context, w *world, path string, timeout time.Duration) ([]byte, error) {
	cfg := rest.CopyConfig(w.c.AdminConfig)
	cfg.Host = w.ccmURL
	// mooring-ccm serves with a self-signed certificate.
	cfg.TLSClientConfig.CAData, cfg.TLSClientConfig.CAFile, cfg.TLSClientConfig.Insecure = nil, "", true
	cfg.Timeout = timeout
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.ccmURL+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Transport: rt, Timeout: timeout}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %.200s", resp.Status, data)
	}
	return data, err
}

// viewLists is how many Lists of the cloud mooring-ccm's shared view has
// made (mooring_cloud_view_list_calls_total, every result but held-back):
// one List is as many ListInstances calls as it has pages.
func viewLists(ctx context.Context, w *world) (float64, error) {
	data, err := ccmGet(ctx, w, "/metrics", 30*time.Second)
	if err != nil {
		return 0, err
	}
	var n float64
	for _, line := range strings.Split(string(data), "\n") {
		rest, ok := strings.CutPrefix(line, "mooring_cloud_view_list_calls_total{")
		if !ok || strings.Contains(rest, `result="held-back"`) {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(rest[strings.LastIndexByte(rest, ' ')+1:], &v); err != nil {
			return 0, fmt.Errorf("metrics line %q: %w", line, err)
		}
		n += v
	}
	return n, nil
}

// profileAPIServer starts taking kube-apiserver's CPU profile over the
// next profileSeconds when MOORING_BENCH_PROFILE names a directory (a
// round without mooring-ccm: the unthrottled client's); what it did
// arrives on the channel, which is nil without the variable.
func profileAPIServer(ctx context.Context, w *world, label string) <-chan string {
	dir := os.Getenv("MOORING_BENCH_PROFILE")
	if dir == "" {
		return nil
	}
	ch := make(chan string, 1)
	go func() { ch <- profile(ctx, w, w.c.URL, profileStem(dir, label)+"-kube-apiserver.pprof") }()
	return ch
}

// profileStem is where a round's profiles go in dir: its label as a file
// name, to which each component's name is added.
func profileStem(dir, label string) string {
	return filepath.Join(dir, strings.NewReplacer(" ", "-", "/", "-per-", ",", "").Replace(label))
}

// profile saves the CPU profile of the component serving base, asked with
// the admin's credentials, to path; it returns what it did.
func profile(ctx context.Context, w *world, base, path string) string {
	cfg := rest.CopyConfig(w.c.AdminConfig)
	cfg.Host = base
	if base != w.c.URL {
		// mooring-ccm serves with a self-signed certificate.
		cfg.TLSClientConfig.CAData, cfg.TLSClientConfig.CAFile, cfg.TLSClientConfig.Insecure = nil, "", true
	}
	cfg.Timeout = (profileSeconds + 30) * time.Second
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return fmt.Sprintf("%s: %v", path, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, profileSeconds), nil)
	if err != nil {
		return fmt.Sprintf("%s: %v", path, err)
	}
	// A round that starts mooring-ccm starts the meter with it: its port
	// opens a moment later, and it knows the client CA (the admin is
	// anonymous to it, 403) a moment after that.
	var resp *http.Response
	for tries := 0; ; tries++ {
		resp, err = (&http.Client{Transport: rt, Timeout: cfg.Timeout}).Do(req)
		early := errors.Is(err, syscall.ECONNREFUSED) || (err == nil && resp.StatusCode == http.StatusForbidden)
		if !early || tries == 100 {
			break
		}
		if resp != nil {
			resp.Body.Close()
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Sprintf("%s: %v", path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %.200s", resp.Status, data)
	}
	if err == nil {
		err = os.WriteFile(path, data, 0o644)
	}
	if err != nil {
		return fmt.Sprintf("%s: %v", path, err)
	}
	return "profile " + path
}

// stop records the CPU each process spent since start, in all and per item
// of the round (n items: CSRs, nodes), and mooring-ccm's share of it;
// shareTarget holds that share to under 10% (node init's goal).
func (m *meter) stop(bench string, n int, item string, shareTarget bool) {
	var parts []string
	var total, mooring time.Duration
	names := make([]string, 0, len(m.pids))
	for name := range m.pids {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		u, err := usage(m.pids[name])
		if err != nil {
			m.b.Fatal(err)
		}
		d := u.cpu - m.before[name].cpu
		total += d
		if name == "mooring-ccm" {
			mooring = d
		}
		parts = append(parts, fmt.Sprintf("%s %.1f s (%.2f ms per %s)", name, d.Seconds(), float64(d.Microseconds())/1000/float64(n), item))
	}
	share := 0.0
	if total > 0 {
		share = 100 * mooring.Seconds() / total.Seconds()
	}
	record(bench, "CPU of the bed's processes (the simulated kubelets apart)", strings.Join(parts, ", "), "", false)
	target := ""
	if shareTarget {
		target = "< 10%"
	}
	record(bench, "mooring-ccm's share of that CPU", fmt.Sprintf("%.0f%% of %.1f s", share, total.Seconds()), target, share < 10)
	if m.profiles != nil {
		for range 2 {
			m.b.Log(<-m.profiles)
		}
	}
}

// histogram is a Prometheus histogram's sum and count in text exposition,
// over the series whose labels contain match (all of them when match is "").
type histogram struct{ sum, count float64 }

func readHistogram(text, name, match string) histogram {
	var h histogram
	for _, line := range strings.Split(text, "\n") {
		var total *float64
		switch {
		case strings.HasPrefix(line, name+"_sum"):
			total = &h.sum
		case strings.HasPrefix(line, name+"_count"):
			total = &h.count
		default:
			continue
		}
		if match != "" && !strings.Contains(line, match) {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
			*total += v
		}
	}
	return h
}

// since is h less an earlier reading of the same histogram.
func (h histogram) since(before histogram) histogram {
	return histogram{h.sum - before.sum, h.count - before.count}
}

// mean is the mean observation, in seconds, as a duration.
func (h histogram) mean() time.Duration {
	if h.count == 0 {
		return 0
	}
	return time.Duration(h.sum / h.count * float64(time.Second))
}

// recordNodeQueue records where a Node's time went inside mooring-ccm, from
// its /metrics: the mean wait in the cloud-node controller's queue, the
// mean time a worker spent on it, and the mean time from the Node's
// creation (whole seconds: creationTimestamp) until mooring-ccm removed its
// taint.
func recordNodeQueue(ctx context.Context, b *testing.B, w *world, bench string) {
	data, err := ccmGet(ctx, w, "/metrics", 10*time.Second)
	if err != nil {
		b.Logf("mooring-ccm /metrics: %v", err)
		return
	}
	text := string(data)
	queued := readHistogram(text, "workqueue_queue_duration_seconds", `name="Nodes"`)
	work := readHistogram(text, "workqueue_work_duration_seconds", `name="Nodes"`)
	untainted := readHistogram(text, "mooring_node_init_taint_removal_delay_seconds", "")
	record(bench, "inside mooring-ccm, per Node (means)", fmt.Sprintf("%.0f queued: waited %s, worked %s; created to taint removed %s (from whole-second creation times)",
		queued.count, ms(queued.mean()), ms(work.mean()), ms(untainted.mean())), "", false)
}

// apfLevel is what kube-apiserver's /metrics say API Priority and Fairness
// did at priority level mooring (mooring's FlowSchema's): requests' waits
// in its queues and their execution.
type apfLevel struct{ wait, exec histogram }

const mooringLevel = `priority_level="mooring"`

func readAPF(ctx context.Context, w *world) (apfLevel, error) {
	data, err := w.c.Client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return apfLevel{}, fmt.Errorf("kube-apiserver /metrics: %w", err)
	}
	text := string(data)
	return apfLevel{
		wait: readHistogram(text, "apiserver_flowcontrol_request_wait_duration_seconds", mooringLevel),
		exec: readHistogram(text, "apiserver_flowcontrol_request_execution_seconds", mooringLevel),
	}, nil
}

// recordAPF records what APF did with the requests at priority level
// mooring since before (mooring-ccm's own, in a round where nothing else
// runs as its ServiceAccount), as who says; note ends the metric's label.
func recordAPF(ctx context.Context, b *testing.B, w *world, bench, who, note string, before apfLevel) {
	after, err := readAPF(ctx, w)
	if err != nil {
		b.Log(err)
		return
	}
	wait, exec := after.wait.since(before.wait), after.exec.since(before.exec)
	record(bench, who+"'s requests at APF priority level mooring (means)"+note,
		fmt.Sprintf("%.0f requests: waited %s in queue, executed in %s", wait.count, ms(wait.mean()), ms(exec.mean())), "", false)
}

// apfNow reads the APF figures to count a round's from; a failure is
// logged and counts from zero.
func apfNow(ctx context.Context, b *testing.B, w *world) apfLevel {
	a, err := readAPF(ctx, w)
	if err != nil {
		b.Log(err)
	}
	return a
}
