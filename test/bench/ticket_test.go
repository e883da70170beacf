package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mooring-dev/mooring/agent"
	"github.com/mooring-dev/mooring/csrapprover/spent"
	"github.com/mooring-dev/mooring/internal/evidence"
	"github.com/mooring-dev/mooring/internal/ticket"
	"github.com/mooring-dev/mooring/test/harness"
)

// BenchmarkTicketJoin: N machines of the local cloud join with join
// tickets (docs/tickets.md), each issued for its instance's name before the
// instance was made, as a provisioning tool issues them: each machine files
// its kubelet client CSR with the bootstrap token, its ticket after the CSR,
// built by the agent's own code (agent.JoinRequest). mooring's approver
// inside mooring-ccm verifies each ticket, checks the instance in the
// shared view and records the ticket as spent in its ConfigMaps
// (csrapprover/spent) before it approves. It reports what
// BenchmarkCSRApproval reports, and what the spent-ticket record cost the
// apiserver and etcd: the ConfigMap updates and their bytes, the bytes etcd
// received, etcd's database size before and after, and the record's size
// at the end.
func BenchmarkTicketJoin(b *testing.B) {
	n := nodeCount(b)
	for range b.N {
		runTicketJoin(b, n)
	}
}

// ticketEvidence is a machine's agent with a join ticket: it presents the
// ticket whatever the binding.
type ticketEvidence string

func (t ticketEvidence) Evidence(context.Context, string) (evidence.Block, error) {
	return evidence.Block{Type: ticket.BlockType, Data: []byte(t)}, nil
}

func runTicketJoin(b *testing.B, n int) {
	tickets := harness.NewTicketIssuer(b)
	// Issued before the instances are made (each instance must be created
	// within its ticket's life).
	issued := time.Now()
	w := newWorld(b, worldOptions{instances: n, ccmArgs: tickets.CCMArgs()})
	ctx, cancel := withTimeout(20 * time.Minute)
	defer cancel()
	cs, err := harness.FastBootstrapClient(w.c)
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]roundCSR, n)
	for i := range n {
		name := nodeName(i)
		tok, err := tickets.IssueAt(name, benchCluster, issued, time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		key, err := newKey()
		if err != nil {
			b.Fatal(err)
		}
		csrName, err := agent.CSRName(name, key.Public())
		if err != nil {
			b.Fatal(err)
		}
		reqs[i] = roundCSR{name: csrName, valid: true, post: func(ctx context.Context, creating func()) error {
			return fileTicketJoin(ctx, cs, ticketEvidence(tok), name, csrName, key, creating)
		}}
	}
	d := watchDecisions(b, w)
	const bench = "ticket join, burst"
	before := readRecordCost(ctx, b, w)
	csrRound(ctx, b, w, d, reqs, 0, bench, "with the bootstrap token")
	after := readRecordCost(ctx, b, w)
	after.report(b, bench, before, n)
}

// fileTicketJoin builds a join's request as the agent does and files it.
func fileTicketJoin(ctx context.Context, cs kubernetes.Interface, ev agent.Evidencer, node, want string, key *ecdsa.PrivateKey, creating func()) error {
	name, request, err := agent.JoinRequest(ctx, ev, node, key)
	if err != nil {
		return err
	}
	if name != want {
		return fmt.Errorf("the agent names the CSR %s, want %s", name, want)
	}
	creating()
	return harness.FileJoin(ctx, cs, name, request)
}

// recordCost is what the spent-ticket record has cost so far: from
// kube-apiserver's metrics, ConfigMap updates and the bytes of their
// requests; from etcd's, the bytes it received from kube-apiserver and its
// database's size (allocated and in use; kube-apiserver compacts every 5
// minutes and nothing defragments, so the file keeps every revision written
// since); and the shards as they are.
type recordCost struct {
	updates, updateBytes       float64
	etcdReceived               float64
	etcdDBSize, etcdDBSizeUsed float64
	entries, shardBytes        int
}

func readRecordCost(ctx context.Context, b *testing.B, w *world) recordCost {
	var rc recordCost
	data, err := w.c.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		b.Fatal(err)
	}
	scanMetrics(data, func(name string, labels map[string]string, v float64) {
		if labels["resource"] != "configmaps" || labels["verb"] != "update" {
			return
		}
		switch name {
		case "apiserver_request_body_size_bytes_sum":
			rc.updateBytes += v
		case "apiserver_request_body_size_bytes_count":
			rc.updates += v
		}
	})
	data, err = etcdMetrics(ctx, w)
	if err != nil {
		b.Fatal(err)
	}
	scanMetrics(data, func(name string, labels map[string]string, v float64) {
		switch name {
		case "etcd_network_client_grpc_received_bytes_total":
			rc.etcdReceived += v
		case "etcd_mvcc_db_total_size_in_bytes":
			rc.etcdDBSize = v
		case "etcd_mvcc_db_total_size_in_use_in_bytes":
			rc.etcdDBSizeUsed = v
		}
	})
	for _, name := range spent.ShardNames() {
		cm, err := w.c.Client.CoreV1().ConfigMaps("kube-system").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			b.Fatalf("spent-ticket ConfigMap %s: %v", name, err)
		}
		rc.entries += len(cm.Data)
		rc.shardBytes += cm.Size()
	}
	return rc
}

// report records the cost of n joins, rc less before.
func (rc recordCost) report(b *testing.B, bench string, before recordCost, n int) {
	updates := rc.updates - before.updates
	updateBytes := rc.updateBytes - before.updateBytes
	received := rc.etcdReceived - before.etcdReceived
	perUpdate := 0.0
	if updates > 0 {
		perUpdate = updateBytes / updates
	}
	b.ReportMetric(updateBytes/float64(n), "record-bytes/join")
	b.ReportMetric(received/float64(n), "etcd-received-bytes/join")
	record(bench, "spent-ticket record: ConfigMap updates (bytes of their requests)",
		fmt.Sprintf("%.0f (%s, %s per update, %s per join)", updates, mib(updateBytes), kib(perUpdate), kib(updateBytes/float64(n))), "", false)
	record(bench, "etcd: bytes received from kube-apiserver during the round (every write, the CSRs' too)",
		fmt.Sprintf("%s, %s per join", mib(received), kib(received/float64(n))), "", false)
	record(bench, "etcd database size before -> after (in use)",
		fmt.Sprintf("%s -> %s (%s -> %s)", mib(before.etcdDBSize), mib(rc.etcdDBSize), mib(before.etcdDBSizeUsed), mib(rc.etcdDBSizeUsed)), "", false)
	perEntry := 0
	if e := rc.entries - before.entries; e > 0 {
		perEntry = (rc.shardBytes - before.shardBytes) / e
	}
	record(bench, "spent-ticket ConfigMaps at the end: tickets, encoded size (per ticket)",
		fmt.Sprintf("%d, %s (%d bytes)", rc.entries, kib(float64(rc.shardBytes)), perEntry), "", false)
}

func kib(v float64) string { return fmt.Sprintf("%.1f KiB", v/1024) }
func mib(v float64) string { return fmt.Sprintf("%.2f MiB", v/(1<<20)) }

// etcdMetrics is etcd's /metrics, from the client URL the test bed started
// it with (its command line).
func etcdMetrics(ctx context.Context, w *world) ([]byte, error) {
	pid, ok := w.c.ComponentPIDs()["etcd"]
	if !ok {
		return nil, fmt.Errorf("no etcd in the test bed")
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil, err
	}
	url := ""
	for _, arg := range strings.Split(string(cmdline), "\x00") {
		if v, ok := strings.CutPrefix(arg, "--listen-client-urls="); ok {
			url = strings.Split(v, ",")[0]
		}
	}
	if url == "" {
		return nil, fmt.Errorf("etcd (pid %d) has no --listen-client-urls", pid)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("etcd /metrics: %s", resp.Status)
	}
	return io.ReadAll(resp.Body)
}

// scanMetrics calls f with each sample of a Prometheus text exposition.
func scanMetrics(data []byte, f func(name string, labels map[string]string, v float64)) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels := line, map[string]string{}
		if i := strings.IndexByte(line, '{'); i >= 0 {
			end := strings.LastIndexByte(line, '}')
			if end < i {
				continue
			}
			name, labels = line[:i], parseLabels(line[i+1:end])
			line = name + line[end+1:]
		}
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		v, err := strconv.ParseFloat(fields[1], 64)
		if err != nil {
			continue
		}
		f(fields[0], labels, v)
	}
}
