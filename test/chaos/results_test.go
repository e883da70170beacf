package chaos

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fullSize reports whether MOORING_CHAOS=full asked for the full sizes.
func fullSize() bool { return os.Getenv("MOORING_CHAOS") == "full" }

// size is reduced in a default run and full under MOORING_CHAOS=full.
func size(reduced, full int) int {
	if fullSize() {
		return full
	}
	return reduced
}

// span is size for durations.
func span(reduced, full time.Duration) time.Duration {
	if fullSize() {
		return full
	}
	return reduced
}

// outcome is one scenario's line of the results table.
type outcome struct {
	scenario   string
	invariants []string // each invariant checked, as a short sentence
	figures    []string // "name: value"
	failed     bool
}

var table struct {
	sync.Mutex
	rows []*outcome
}

// report starts the results row of the test's scenario; the row is
// completed with check and figure, and marked failed if the test fails.
func report(t *testing.T, scenario string) *outcome {
	t.Helper()
	o := &outcome{scenario: scenario}
	table.Lock()
	table.rows = append(table.rows, o)
	table.Unlock()
	t.Cleanup(func() {
		table.Lock()
		defer table.Unlock()
		o.failed = t.Failed()
	})
	return o
}

// check records an invariant the scenario asserted (call it once the
// assertion passed).
func (o *outcome) check(format string, args ...any) {
	table.Lock()
	defer table.Unlock()
	o.invariants = append(o.invariants, fmt.Sprintf(format, args...))
}

// figure records a measured figure and logs it.
func (o *outcome) figure(t *testing.T, name, format string, args ...any) {
	t.Helper()
	v := fmt.Sprintf(format, args...)
	t.Logf("figure: %s: %s", name, v)
	table.Lock()
	defer table.Unlock()
	o.figures = append(o.figures, name+": "+v)
}

// writeTable writes the results as a Markdown table.
func writeTable(path string) error {
	table.Lock()
	defer table.Unlock()
	rows := slices.Clone(table.rows)
	slices.SortStableFunc(rows, func(a, b *outcome) int { return strings.Compare(a.scenario, b.scenario) })
	var b strings.Builder
	mode := "reduced sizes (make test)"
	if fullSize() {
		mode = "full sizes (make chaos)"
	}
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "# mooring reliability scenarios\n\n%s, %s, on %s.\n\n", mode, time.Now().UTC().Format(time.RFC3339), host)
	b.WriteString("| scenario | result | invariants checked | figures |\n|---|---|---|---|\n")
	for _, o := range rows {
		result := "pass"
		if o.failed {
			result = "FAIL"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", o.scenario, result,
			strings.Join(o.invariants, "<br>"), strings.Join(o.figures, "<br>"))
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mooring-chaos-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	if path := os.Getenv("MOORING_CHAOS_RESULTS"); path != "" {
		if err := writeTable(path); err != nil {
			fmt.Fprintf(os.Stderr, "chaos: writing %s: %v\n", path, err)
			code = 1
		} else {
			fmt.Printf("chaos: results in %s\n", path)
		}
	}
	os.Exit(code)
}

// binDir holds the binaries the scenarios build; TestMain removes it.
var binDir string

func tempDir() (string, error) {
	if binDir == "" {
		return "", fmt.Errorf("no directory for binaries (TestMain did not run)")
	}
	return binDir, nil
}
