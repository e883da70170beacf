// Package doctest runs the command examples of mooring's docs, so that they
// cannot drift from what works.
//
// A doc marks each fenced block a test handles with an HTML comment on the
// line before its opening fence (Markdown renderers show no comment):
//
//	<!-- example: write my-mooring/kustomization.yaml -->
//	```yaml
//	...
//	```
//
//	<!-- example: run -->
//	```sh
//	kubectl apply -k my-mooring/
//	```
//
//	<!-- example: skip needs a cloud: ... -->
//	```sh
//	...
//	```
//
// A marker may name a group, example(NAME): a doc's alternatives (Helm or
// kustomize, say) are groups a test runs one after the other (Select).
//
// "write PATH" makes the block a file at PATH (relative to the test's
// directory); "run" makes it a script that bash runs there with -euo
// pipefail; "skip REASON" says why a block is not run (the reason is
// required). Every ```sh block of a doc carries one of them (Parse refuses
// a doc with an unmarked one), so a command example is either run or says
// why not. A test substitutes what only exists on the reader's side (a
// release's URL, a registry) with Replace pairs, each of which must match
// somewhere, so a substitution cannot outlive the text it replaces.
package doctest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Action is what a test does with a block.
type Action string

const (
	// Write makes the block a file.
	Write Action = "write"
	// Run runs the block with bash.
	Run Action = "run"
	// Skip runs nothing; Arg says why.
	Skip Action = "skip"
)

// Example is one marked block of a doc.
type Example struct {
	// Doc is the doc's path, Line the line of the opening fence.
	Doc  string
	Line int
	// Action and Arg: the marker's (write: the file's path; skip: the
	// reason).
	Action Action
	Arg    string
	// Group is the marker's example(GROUP), or empty.
	Group string
	// Lang is the fence's info string ("sh", "yaml").
	Lang string
	// Body is the block's content, each line with its newline.
	Body string
}

func (e Example) String() string { return fmt.Sprintf("%s:%d", e.Doc, e.Line) }

var (
	marker = regexp.MustCompile(`^<!--\s*example(?:\(([A-Za-z0-9_-]+)\))?:\s*(\S+)\s*(.*?)\s*-->\s*$`)
	fence  = regexp.MustCompile("^(```+)\\s*([A-Za-z0-9_-]*)")
)

// Parse reads a doc's marked blocks, in order. It refuses a marker that is
// not followed by a fence, an unknown action, a write without a path or a
// skip without a reason, and a ```sh block without a marker.
func Parse(doc string) ([]Example, error) {
	data, err := os.ReadFile(doc)
	if err != nil {
		return nil, err
	}
	return ParseBytes(doc, data)
}

// ParseBytes is Parse of a doc's content; doc names it in errors.
func ParseBytes(doc string, data []byte) ([]Example, error) {
	var (
		out     []Example
		pending *Example // a marker waiting for its fence
		open    *Example // the block being read
		closing string
		body    strings.Builder
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if open != nil {
			if strings.TrimSpace(line) == closing {
				open.Body = body.String()
				if open.Action != "" {
					out = append(out, *open)
				}
				open = nil
				continue
			}
			body.WriteString(line + "\n")
			continue
		}
		if m := marker.FindStringSubmatch(line); m != nil {
			if pending != nil {
				return nil, fmt.Errorf("%s:%d: example marker without a fenced block after it", doc, pending.Line)
			}
			e := &Example{Doc: doc, Line: n, Group: m[1], Action: Action(m[2]), Arg: m[3]}
			switch {
			case e.Action == Write && e.Arg == "":
				return nil, fmt.Errorf("%s:%d: example: write needs the file's path", doc, n)
			case e.Action == Skip && e.Arg == "":
				return nil, fmt.Errorf("%s:%d: example: skip needs a reason", doc, n)
			case e.Action == Run && e.Arg != "":
				return nil, fmt.Errorf("%s:%d: example: run takes no argument, not %q", doc, n, e.Arg)
			case e.Action != Write && e.Action != Run && e.Action != Skip:
				return nil, fmt.Errorf("%s:%d: example: unknown action %q (write PATH, run, skip REASON)", doc, n, e.Action)
			}
			pending = e
			continue
		}
		if m := fence.FindStringSubmatch(strings.TrimLeft(line, " ")); m != nil {
			e := Example{Doc: doc, Line: n, Lang: m[2]}
			if pending != nil {
				e.Action, e.Arg, e.Group = pending.Action, pending.Arg, pending.Group
				pending = nil
			} else if e.Lang == "sh" {
				return nil, fmt.Errorf("%s:%d: a sh block without an example marker (<!-- example: run --> or <!-- example: skip REASON -->)", doc, n)
			}
			if e.Action == Run && e.Lang != "sh" {
				return nil, fmt.Errorf("%s:%d: example: run of a %q block; only sh runs", doc, n, e.Lang)
			}
			open, closing = &e, m[1]
			body.Reset()
			continue
		}
		if pending != nil && strings.TrimSpace(line) != "" {
			return nil, fmt.Errorf("%s:%d: example marker without a fenced block after it", doc, pending.Line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if open != nil {
		return nil, fmt.Errorf("%s:%d: fenced block not closed", doc, open.Line)
	}
	if pending != nil {
		return nil, fmt.Errorf("%s:%d: example marker without a fenced block after it", doc, pending.Line)
	}
	return out, nil
}

// Select returns the examples of a group, in order.
func Select(examples []Example, group string) []Example {
	var out []Example
	for _, e := range examples {
		if e.Group == group {
			out = append(out, e)
		}
	}
	return out
}

// Groups returns the groups the examples name, in order of first use.
func Groups(examples []Example) []string {
	var out []string
	seen := map[string]bool{}
	for _, e := range examples {
		if !seen[e.Group] {
			seen[e.Group] = true
			out = append(out, e.Group)
		}
	}
	return out
}

// Replacement substitutes Old with New in every example's body (and a
// write's path) before it is used.
type Replacement struct{ Old, New string }

// Runner runs a doc's examples in Dir.
type Runner struct {
	// Dir is where files are written and scripts run.
	Dir string
	// Env is added to the scripts' environment (PATH among them, for the
	// tools the doc names).
	Env []string
	// Replace is applied in order; each Old must occur in some example
	// (CheckReplacements).
	Replace []Replacement
	used    []bool
	// Timeout bounds each script (default 2 minutes).
	Timeout time.Duration
}

// Run writes and runs examples in order, failing t at the first error with
// the example's place and output. Skipped examples are logged. It returns
// each run script's combined output, by example (Example.String).
func (r *Runner) Run(t testing.TB, examples []Example) map[string]string {
	t.Helper()
	if len(r.used) != len(r.Replace) {
		r.used = make([]bool, len(r.Replace))
	}
	subst := func(s string) string {
		for i, p := range r.Replace {
			if strings.Contains(s, p.Old) {
				r.used[i] = true
				s = strings.ReplaceAll(s, p.Old, p.New)
			}
		}
		return s
	}
	outputs := map[string]string{}
	for _, e := range examples {
		switch e.Action {
		case Skip:
			t.Logf("%s: not run: %s", e, e.Arg)
		case Write:
			path := filepath.Join(r.Dir, subst(e.Arg))
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatalf("%s: %v", e, err)
			}
			if err := os.WriteFile(path, []byte(subst(e.Body)), 0o600); err != nil {
				t.Fatalf("%s: %v", e, err)
			}
		case Run:
			script := subst(e.Body)
			timeout := r.Timeout
			if timeout == 0 {
				timeout = 2 * time.Minute
			}
			cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
			cmd.Dir = r.Dir
			cmd.Env = append(os.Environ(), r.Env...)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			// Its own process group, so that a timeout ends what it started.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := cmd.Start(); err != nil {
				t.Fatalf("%s: %v", e, err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			var err error
			select {
			case err = <-done:
			case <-time.After(timeout):
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				<-done
				err = fmt.Errorf("still running after %v: killed", timeout)
			}
			outputs[e.String()] = out.String()
			if err != nil {
				t.Fatalf("%s: %v\nscript (after substitutions):\n%s\noutput:\n%s", e, err, script, out.String())
			}
			t.Logf("%s: ran:\n%s", e, script)
		}
	}
	return outputs
}

// CheckReplacements fails t for each substitution that matched no example
// the Runner ran, after all its runs.
func (r *Runner) CheckReplacements(t testing.TB) {
	t.Helper()
	for i, p := range r.Replace {
		if i >= len(r.used) || !r.used[i] {
			t.Errorf("substitution of %q matched no example: the doc changed, update the test", p.Old)
		}
	}
}
