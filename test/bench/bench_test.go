// Package bench holds mooring's scale benchmarks on the real test bed: a
// real control plane, the local cloud with its API limited to 10 calls/s,
// and mooring-ccm as processes. Simulated kubelets (Node objects and CSRs
// made the way kubelets make them) stand in for thousands of machines.
// Every benchmark adds rows to one results table, printed at the end and
// written to MOORING_BENCH_OUT (default bin/bench-results.md). Run them with
// `make bench` (1,000 nodes) or `make bench BENCH_NODES=5000`.
package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/test/harness"
)

// cloudRateLimit is the local cloud's API limit during every measurement.
const cloudRateLimit = 10

// maxNodes bounds MOORING_BENCH_NODES: the local cloud's address pools
// of the benchmarks are /16s.
const maxNodes = 50000

// nodeCount is MOORING_BENCH_NODES, default 1000.
func nodeCount(b *testing.B) int {
	n, err := nodesFromEnv()
	if err != nil {
		b.Fatal(err)
	}
	return n
}

func nodesFromEnv() (int, error) {
	if v := os.Getenv("MOORING_BENCH_NODES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxNodes {
			return 0, fmt.Errorf("MOORING_BENCH_NODES=%q: want 1 to %d", v, maxNodes)
		}
		return n, nil
	}
	return 1000, nil
}

// row is one figure of the results table.
type row struct {
	bench, metric, value, target, verdict string
}

var results struct {
	sync.Mutex
	rows []row
}

// record adds a figure; target may be empty. met says whether the target
// was met (ignored without a target).
func record(bench, metric, value, target string, met bool) {
	verdict := ""
	if target != "" {
		verdict = "met"
		if !met {
			verdict = "MISSED"
		}
	}
	results.Lock()
	defer results.Unlock()
	results.rows = append(results.rows, row{bench, metric, value, target, verdict})
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	results.Lock()
	rows := results.rows
	results.Unlock()
	if len(rows) > 0 {
		table := renderTable(rows)
		if summary, runs := summarize(rows); runs > 1 {
			// Repeated runs (go test -count=N): the spread first, then
			// every run's figures in the order they were taken.
			table = renderTable(summary) + fmt.Sprintf("\nEvery run's figures (%d runs):\n\n", runs) + renderTable(rows)
		}
		fmt.Print("\n" + table)
		writeResultFiles(rows)
		out := os.Getenv("MOORING_BENCH_OUT")
		if out == "" {
			out = filepath.Join(harness.RepoRoot(), "bin", "bench-results.md")
		}
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err == nil {
			if err := os.WriteFile(out, []byte(table), 0o644); err == nil {
				fmt.Printf("results written to %s\n", out)
			}
		}
	}
	os.Exit(code)
}

// renderTable is the results as a Markdown table, padded for a terminal,
// under a line saying when and on which cloud they were taken.
func renderTable(rows []row) string {
	return fmt.Sprintf("mooring scale benchmarks, %s, local cloud API limited to %d calls/s\n\n",
		time.Now().UTC().Format(time.RFC3339), cloudRateLimit) + renderRows(rows)
}

// renderRows is the Markdown table alone.
func renderRows(rows []row) string {
	header := row{"benchmark", "metric", "value", "target", "verdict"}
	cells := func(r row) []string { return []string{r.bench, r.metric, r.value, r.target, r.verdict} }
	width := make([]int, 5)
	for _, r := range append([]row{header}, rows...) {
		for i, c := range cells(r) {
			width[i] = max(width[i], len(c))
		}
	}
	line := func(cs []string) string {
		var sb strings.Builder
		for i, c := range cs {
			fmt.Fprintf(&sb, "| %-*s ", width[i], c)
		}
		return sb.String() + "|\n"
	}
	var sb strings.Builder
	sb.WriteString(line(cells(header)))
	dashes := make([]string, 5)
	for i := range dashes {
		dashes[i] = strings.Repeat("-", width[i])
	}
	sb.WriteString(line(dashes))
	for _, r := range rows {
		sb.WriteString(line(cells(r)))
	}
	return sb.String()
}

// withTimeout is a context for one phase of a benchmark.
func withTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
