package bench

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/test/harness"
)

// fullScale is the node count from which a benchmark that keeps its
// results (keepResults) writes them to a result file of its own, as
// docs/scale.md cites them: docs/scale-results/<date>-<nodes>-<stem>.md.
// MOORING_BENCH_RESULTS_DIR names another directory, and then files are
// written at any node count.
const fullScale = 5000

var kept struct {
	sync.Mutex
	benches map[string]keptBench // by benchmark name prefix
}

// keptBench is where a kept benchmark's rows go.
type keptBench struct {
	stem string
	// nodes, when not 0, is the node count of a benchmark sized by env
	// (its own variable, set so) rather than MOORING_BENCH_NODES: its
	// file is written only where MOORING_BENCH_RESULTS_DIR names a
	// directory.
	nodes int
	env   string
}

// keepResults makes the rows of benchmarks whose names start with prefix
// go to a result file named with stem (see fullScale) as well as to the
// table of every benchmark.
func keepResults(prefix, stem string) { keepResultsSized(prefix, stem, 0, "") }

// keepResultsSized is keepResults for a benchmark of nodes nodes, sized
// by env (an assignment, as its command line shows it) instead of
// MOORING_BENCH_NODES.
func keepResultsSized(prefix, stem string, nodes int, env string) {
	kept.Lock()
	defer kept.Unlock()
	if kept.benches == nil {
		kept.benches = map[string]keptBench{}
	}
	kept.benches[prefix] = keptBench{stem: stem, nodes: nodes, env: env}
}

// writeResultFiles writes each kept benchmark's rows to its result file,
// if this run writes them; it says on stdout what it wrote or why not.
func writeResultFiles(rows []row) {
	dir := os.Getenv("MOORING_BENCH_RESULTS_DIR")
	benchNodes, err := nodesFromEnv()
	if err != nil {
		return
	}
	kept.Lock()
	benches := kept.benches
	kept.Unlock()
	for _, prefix := range slices.Sorted(maps.Keys(benches)) {
		k, n := benches[prefix], benchNodes
		if k.nodes > 0 {
			n = k.nodes
		}
		if dir == "" && (k.nodes > 0 || n < fullScale) {
			continue
		}
		to := dir
		if to == "" {
			to = filepath.Join(harness.RepoRoot(), "docs", "scale-results")
		}
		var mine []row
		for _, r := range rows {
			if strings.HasPrefix(r.bench, prefix) {
				mine = append(mine, r)
			}
		}
		if len(mine) == 0 {
			continue
		}
		path, err := writeResultFile(to, n, k, prefix, mine, time.Now().UTC())
		if err != nil {
			fmt.Printf("result file of %q not written: %v\n", prefix, err)
			continue
		}
		fmt.Printf("results of %q written to %s\n", prefix, path)
	}
}

// writeResultFile writes rows as dir/<date>-<n>-nodes-...md (a new name
// if that is taken: -2, -3, ...) and returns its path.
func writeResultFile(dir string, n int, k keptBench, title string, rows []row, now time.Time) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	body := resultFileText(n, k, title, rows, now)
	base := fmt.Sprintf("%s-%d-%s", now.Format("2006-01-02"), n, k.stem)
	for i := 1; i < 100; i++ {
		name := base + ".md"
		if i > 1 {
			name = fmt.Sprintf("%s-%d.md", base, i)
		}
		path := filepath.Join(dir, name)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		_, err = f.WriteString(body)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return path, err
	}
	return "", fmt.Errorf("%s: 99 files of that name already", filepath.Join(dir, base))
}

// resultFileText is a result file: what was run, then the spread of
// repeated runs, then every run's figures.
func resultFileText(n int, k keptBench, title string, rows []row, now time.Time) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "# %s, %d nodes\n\n", title, n)
	bench, count := "?", "?"
	if f := flag.Lookup("test.bench"); f != nil {
		bench = f.Value.String()
	}
	if f := flag.Lookup("test.count"); f != nil {
		count = f.Value.String()
	}
	size := fmt.Sprintf(" BENCH_NODES=%d", n)
	if k.nodes > 0 {
		size = ""
	}
	fmt.Fprintf(&sb, "`%smake bench BENCH='%s'%s BENCH_RUNS=%s`, %s, commit %s; load average at the end %s.\n\n",
		envPrefix(k.env), bench, size, count, now.Format(time.RFC3339), commit(), loadAverage())
	summary, runs := summarize(rows)
	if runs > 1 {
		sb.WriteString(renderRows(summary))
		fmt.Fprintf(&sb, "\nEvery run's figures (%d runs):\n\n", runs)
	}
	sb.WriteString(renderRows(rows))
	return sb.String()
}

// envPrefix is env and a space, or "".
func envPrefix(env string) string {
	if env == "" {
		return ""
	}
	return env + " "
}

// commit is the checkout's commit, marked when the tree has changes.
func commit() string {
	out, err := exec.Command("git", "-C", harness.RepoRoot(), "describe", "--always", "--dirty").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// A kept benchmark's rows go to a file of their own, named by date, node
// count and stem, never over an earlier one; repeated runs are
// summarized first.
func TestResultFile(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)
	rows := []row{
		{"node init, AWS face, x: mooring", "all initialized after", "20.0 s", "< 60 s", "met"},
		{"node init, AWS face, x: mooring", "all initialized after", "22.0 s", "< 60 s", "met"},
	}
	var paths []string
	for range 2 {
		p, err := writeResultFile(dir, 5000, keptBench{stem: "nodes-aws"}, "node init, AWS face", rows, now)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, filepath.Base(p))
	}
	if !slices.Equal(paths, []string{"2026-11-26-5000-nodes-aws.md", "2026-11-26-5000-nodes-aws-2.md"}) {
		t.Fatalf("files %v", paths)
	}
	data, err := os.ReadFile(filepath.Join(dir, paths[0]))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	for _, want := range []string{"# node init, AWS face, 5000 nodes\n", "BENCH_NODES=5000", "(min/median/max of 2) | 20.0/21.0/22.0 s",
		"Every run's figures (2 runs)"} {
		if !strings.Contains(text, want) {
			t.Errorf("result file lacks %q:\n%s", want, text)
		}
	}

	// A benchmark sized by a variable of its own names it, not
	// BENCH_NODES.
	p, err := writeResultFile(dir, 10, keptBench{stem: "lb-fanout-linode", nodes: 10, env: "MOORING_BENCH_LB=10x10"}, "LB fan-out, Linode face", rows, now)
	if err != nil {
		t.Fatal(err)
	}
	data, err = os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if text := string(data); filepath.Base(p) != "2026-11-26-10-lb-fanout-linode.md" || !strings.Contains(text, "`MOORING_BENCH_LB=10x10 make bench BENCH=") ||
		strings.Contains(text, "BENCH_NODES") {
		t.Errorf("%s:\n%s", filepath.Base(p), text)
	}
}
