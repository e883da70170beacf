// Package kittest checks what a backend builds on cloud/kit in the
// backend's own terms: that its cloud config applies kit's checks to its
// own fields, and that its secret is read from the places its config
// names. How kit's checks and readers behave is kit's own tests' business
// (TestCheckEndpointLoopback, TestSecret, TestParseConfigWithViewConfig);
// these checks only ask that a backend wires them.
package kittest

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Fields names a backend's config fields that kit checks.
type Fields struct {
	// Endpoint is the API's URL, checked with kit.CheckEndpoint ("" when
	// the backend has none).
	Endpoint string
	// SecretFile and SecretEnv are where its secret is (kit.Secret).
	SecretFile, SecretEnv string
	// Durations are its own duration fields beyond kit.ViewConfig's three,
	// which every backend has.
	Durations []string
}

// set returns the YAML config cfg with field's line set to value: the
// line replaced where cfg has one, else added.
func set(cfg, field, value string) string {
	line := field + ": " + value + "\n"
	lines := strings.SplitAfter(cfg, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, field+":") {
			lines[i] = line
			return strings.Join(lines, "")
		}
	}
	return cfg + line
}

// without returns cfg without field's line.
func without(cfg, field string) string {
	var out strings.Builder
	for _, l := range strings.SplitAfter(cfg, "\n") {
		if !strings.HasPrefix(l, field+":") {
			out.WriteString(l)
		}
	}
	return out.String()
}

// Config checks that parse (the backend's ParseConfig) takes good, a valid
// config of the backend in YAML with one field a line, and refuses it
// with each of kit's checks broken in the backend's fields, each error
// naming the field: an endpoint over plain http to an address not
// loopback, or with credentials; the secret in both its places, or in a
// variable whose name is none; a negative duration. It refuses too an
// unknown field, and no config at all (a nil reader).
func Config[C any](t testing.TB, parse func(io.Reader) (C, error), good string, f Fields) {
	t.Helper()
	if _, err := parse(strings.NewReader(good)); err != nil {
		t.Fatalf("the good config: %v", err)
	}
	type refusal struct{ cfg, field string }
	var bad []refusal
	if f.Endpoint != "" {
		bad = append(bad, refusal{set(good, f.Endpoint, "http://10.0.0.1/"), f.Endpoint},
			refusal{set(good, f.Endpoint, "https://u:p@api.example.com/"), f.Endpoint})
	}
	if f.SecretFile != "" {
		bad = append(bad, refusal{set(set(good, f.SecretFile, "/etc/secret"), f.SecretEnv, "SECRET"), f.SecretEnv},
			refusal{set(without(good, f.SecretFile), f.SecretEnv, "1BAD"), f.SecretEnv})
	}
	for _, d := range append([]string{"instanceMaxAge", "minRefreshInterval", "requestTimeout"}, f.Durations...) {
		bad = append(bad, refusal{set(good, d, "-1s"), d})
	}
	bad = append(bad, refusal{set(good, "unknownField", "1"), "unknownField"})
	for _, b := range bad {
		_, err := parse(strings.NewReader(b.cfg))
		if err == nil || !strings.Contains(err.Error(), b.field) {
			t.Errorf("%v, want an error naming %s:\n%s", err, b.field, b.cfg)
		}
	}
	if _, err := parse(nil); err == nil {
		t.Error("no config: accepted")
	}
}

// Secret checks that read (the backend reading its secret from a config
// whose secret file is file or, that "", whose variable is env) takes the
// secret from either place, and that an empty one is an error that names
// the variable and what (the backend's name of the secret, such as
// "digitalocean API token").
func Secret(t testing.TB, what string, read func(file, env string) (string, error)) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte("  from-the-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := read(file, ""); err != nil || got != "from-the-file" {
		t.Errorf("from its file: %q %v", got, err)
	}
	t.Setenv("MOORING_KITTEST_SECRET", "from-the-variable")
	if got, err := read("", "MOORING_KITTEST_SECRET"); err != nil || got != "from-the-variable" {
		t.Errorf("from its variable: %q %v", got, err)
	}
	t.Setenv("MOORING_KITTEST_EMPTY", "")
	if _, err := read("", "MOORING_KITTEST_EMPTY"); err == nil || !strings.Contains(err.Error(), "MOORING_KITTEST_EMPTY") ||
		!strings.Contains(err.Error(), what) {
		t.Errorf("an empty variable: %v, want an error naming it and %q", err, what)
	}
}

// SecretFile writes secret, and a newline, to a file of the test's own
// (mode 0600, as a Secret is mounted) and returns its path: a config's
// tokenFile or secretFile.
func SecretFile(t testing.TB, secret string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
