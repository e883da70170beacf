package bench

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// numberRE finds the numbers of a figure: not the digits of a word such as
// p99 or a name such as node-0001.
// A thousands separator is part of its number (5,000).
var numberRE = regexp.MustCompile(`(^|[^A-Za-z0-9_.,\-])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?`)

// summarize folds the rows of repeated runs (go test -count=N records each
// figure once per run) into one row per benchmark and metric, in the order
// figures first appeared. Where every run's value has the same words
// around its numbers, each number becomes min/median/max of the runs;
// otherwise the values are listed in run order ("run 1: ...; run 2: ...").
// A target counts as met only if every run met it. runs is the most runs
// of any figure.
func summarize(rows []row) (out []row, runs int) {
	type key struct{ bench, metric string }
	var order []key
	byKey := map[key][]row{}
	for _, r := range rows {
		k := key{r.bench, r.metric}
		if _, seen := byKey[k]; !seen {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], r)
	}
	for _, k := range order {
		rs := byKey[k]
		runs = max(runs, len(rs))
		values := make([]string, len(rs))
		missed := 0
		for i, r := range rs {
			values[i] = r.value
			if r.verdict == "MISSED" {
				missed++
			}
		}
		s := row{bench: k.bench, metric: k.metric, value: foldValues(values), target: rs[0].target, verdict: rs[0].verdict}
		if s.target != "" && missed > 0 {
			s.verdict = fmt.Sprintf("MISSED in %d of %d", missed, len(rs))
		}
		if len(rs) > 1 {
			s.metric += fmt.Sprintf(" (min/median/max of %d)", len(rs))
		}
		out = append(out, s)
	}
	return out, runs
}

// foldValues is one value for all runs' values (see summarize).
func foldValues(values []string) string {
	if len(values) == 1 {
		return values[0]
	}
	template := func(v string) string { return numberRE.ReplaceAllString(v, "${1}#") }
	t := template(values[0])
	nums := make([][]string, len(values))
	for i, v := range values {
		if template(v) != t {
			// Not one shape: every run's value, in order (no "|": the
			// value is a cell of a Markdown table).
			out := make([]string, len(values))
			for j, v := range values {
				out[j] = fmt.Sprintf("run %d: %s", j+1, v)
			}
			return strings.Join(out, "; ")
		}
		for _, m := range numberRE.FindAllStringSubmatch(v, -1) {
			nums[i] = append(nums[i], strings.ReplaceAll(m[2], ",", "")+m[3])
		}
	}
	pos := 0
	return numberRE.ReplaceAllStringFunc(values[0], func(match string) string {
		sub := numberRE.FindStringSubmatch(match)
		column := make([]string, len(values))
		for i := range values {
			column[i] = nums[i][pos]
		}
		pos++
		return sub[1] + spread(column)
	})
}

// spread is min/median/max of decimal numbers, printed with the most
// decimals any of them has; equal ones print once.
func spread(column []string) string {
	decimals := 0
	fs := make([]float64, len(column))
	for i, c := range column {
		fs[i], _ = strconv.ParseFloat(c, 64)
		if _, frac, ok := strings.Cut(c, "."); ok {
			decimals = max(decimals, len(frac))
		}
	}
	slices.Sort(fs)
	median := fs[len(fs)/2]
	if len(fs)%2 == 0 {
		median = (fs[len(fs)/2-1] + fs[len(fs)/2]) / 2
	}
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', decimals, 64) }
	if fs[0] == fs[len(fs)-1] {
		return f(fs[0])
	}
	return f(fs[0]) + "/" + f(median) + "/" + f(fs[len(fs)-1])
}

func TestSummarize(t *testing.T) {
	rows := []row{
		{"csr, burst", "per CSR", "p50 359 ms, p99 430 ms", "p99 < 2 s", "met"},
		{"csr, burst", "calls", "1 (ListInstances 1)", "", ""},
		{"csr, burst", "per CSR", "p50 300 ms, p99 2100 ms", "p99 < 2 s", "MISSED"},
		{"csr, burst", "calls", "2 (ListInstances 1, GetInstance 1)", "", ""},
		{"csr, burst", "per CSR", "p50 410.5 ms, p99 500 ms", "p99 < 2 s", "met"},
		{"csr, burst", "calls", "1 (ListInstances 1)", "", ""},
		{"init", "nodes", "node-0001 4.7 s", "", ""},
		{"init", "RSS", "81 MB; 16.2 MB per 1,000 nodes", "", ""},
		{"init", "RSS", "85 MB; 17.0 MB per 1,000 nodes", "", ""},
	}
	got, runs := summarize(rows)
	want := []row{
		{"csr, burst", "per CSR (min/median/max of 3)", "p50 300.0/359.0/410.5 ms, p99 430/500/2100 ms", "p99 < 2 s", "MISSED in 1 of 3"},
		{"csr, burst", "calls (min/median/max of 3)", "run 1: 1 (ListInstances 1); run 2: 2 (ListInstances 1, GetInstance 1); run 3: 1 (ListInstances 1)", "", ""},
		{"init", "nodes", "node-0001 4.7 s", "", ""},
		{"init", "RSS (min/median/max of 2)", "81/83/85 MB; 16.2/16.6/17.0 MB per 1000 nodes", "", ""},
	}
	if runs != 3 || !slices.Equal(got, want) {
		t.Errorf("runs %d\n got %q\nwant %q", runs, got, want)
	}
}
