package bench

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/test/harness"
)

// agentMachines is how many real machines BenchmarkAgentJoin joins.
const agentMachines = 5

// BenchmarkAgentJoin: real machines (mooring-agent and a kubelet under
// systemd, the shipped units) join through mooring-ccm's approver on the
// local cloud. It reports the agent's peak memory (its own getrusage, logged
// as it ends) and the time from the approval of its CSR (seen by a watch)
// to the kubelet's start (the agent's log, once systemd's start job is
// done), min/median/max over the machines.
func BenchmarkAgentJoin(b *testing.B) {
	const bench = "agent join"
	agentBin, err := harness.Build("agent/cmd/mooring-agent", b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		w := newWorld(b, worldOptions{})
		d := watchDecisions(b, w)
		ctx, cancel := withTimeout(5 * time.Minute)
		// kube-controller-manager starts its signers a second or two after
		// it is ready: a join before that would time its start-up.
		harness.WaitSigning(ctx, b, w.c)
		names := make([]string, agentMachines)
		for i := range names {
			names[i] = fmt.Sprintf("agent-%d", i+1)
		}
		fleet := harness.StartFleet(ctx, b, w.c, w.lc, harness.FleetOptions{Names: names, Cluster: benchCluster, AgentBin: agentBin})
		var rss []float64
		var toKubelet []time.Duration
		for _, m := range fleet.Machines {
			if code, err := m.Agent.Wait(4 * time.Minute); err != nil || code != 0 {
				b.Fatalf("agent of %s: exit %d, %v\n%s", m.Name, code, err, m.Agent.LogTail(30))
			}
			started, peak, err := agentLog(m.Agent.LogFile, m.Name)
			if err != nil {
				b.Fatalf("%s: %v\n%s", m.Name, err, m.Agent.LogTail(30))
			}
			approved, ok := d.approvedWithPrefix("mooring-" + m.Name + "-")
			if !ok {
				b.Fatalf("%s: no approval of its client CSR seen", m.Name)
			}
			rss = append(rss, float64(peak)/1024)
			toKubelet = append(toKubelet, started.Sub(approved))
		}
		cancel()
		slices.Sort(rss)
		slices.Sort(toKubelet)
		worstRSS, worstTime := rss[len(rss)-1], toKubelet[len(toKubelet)-1]
		// One number per figure and run, so that repeated runs fold into
		// min/median/max.
		record(bench, fmt.Sprintf("mooring-agent peak RSS, largest of %d machines", len(rss)), fmt.Sprintf("%.1f MiB", worstRSS), "< 30 MiB", worstRSS < 30)
		record(bench, fmt.Sprintf("mooring-agent peak RSS, median of %d machines", len(rss)), fmt.Sprintf("%.1f MiB", rss[len(rss)/2]), "", false)
		record(bench, fmt.Sprintf("client CSR approved to kubelet started, slowest of %d machines", len(rss)), ms(worstTime), "< 1 s", worstTime < time.Second)
		record(bench, fmt.Sprintf("client CSR approved to kubelet started, median of %d machines", len(rss)), ms(toKubelet[len(toKubelet)/2]), "", false)
	}
}

var (
	klogTime = regexp.MustCompile(`^[IWEF](\d{4} \d{2}:\d{2}:\d{2}\.\d{6})`)
	peakRSS  = regexp.MustCompile(`"Agent run ended".* peakRSSKiB=(\d+)`)
)

// agentLog reads when the agent had started node's kubelet and its peak
// RSS in KiB from its log (klog's text format; the year is this one's).
func agentLog(path, node string) (kubeletStarted time.Time, peakKiB int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return time.Time{}, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, `status="node `+node+` joined;`) {
			m := klogTime.FindStringSubmatch(line)
			if m == nil {
				return time.Time{}, 0, fmt.Errorf("no klog time in %q", line)
			}
			t, err := time.ParseInLocation("0102 15:04:05.000000", m[1], time.Local)
			if err != nil {
				return time.Time{}, 0, err
			}
			kubeletStarted = t.AddDate(time.Now().Year(), 0, 0)
		}
		if m := peakRSS.FindStringSubmatch(line); m != nil {
			peakKiB, _ = strconv.ParseInt(m[1], 10, 64)
		}
	}
	switch {
	case sc.Err() != nil:
		return time.Time{}, 0, sc.Err()
	case kubeletStarted.IsZero():
		return time.Time{}, 0, fmt.Errorf("no 'joined' status in %s", path)
	case peakKiB == 0:
		return time.Time{}, 0, fmt.Errorf("no peak RSS in %s", path)
	}
	return kubeletStarted, peakKiB, nil
}
