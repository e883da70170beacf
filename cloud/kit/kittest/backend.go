package kittest

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/view"
)

// Parses checks that parse (a backend's ParseConfig) takes each config
// and that ok holds of what it made: a default, or a field the config
// sets.
func Parses[C any](t testing.TB, parse func(io.Reader) (C, error), ok func(C) bool, configs ...string) {
	t.Helper()
	for _, cfg := range configs {
		c, err := parse(strings.NewReader(cfg))
		if err != nil || !ok(c) {
			t.Errorf("%+v %v, of:\n%s", c, err, cfg)
		}
	}
}

// Refuses checks that parse refuses each config: the bounds of the
// backend's own fields.
func Refuses[C any](t testing.TB, parse func(io.Reader) (C, error), configs ...string) {
	t.Helper()
	for _, cfg := range configs {
		if _, err := parse(strings.NewReader(cfg)); err == nil {
			t.Errorf("accepted:\n%s", cfg)
		}
	}
}

// NeedsSecret checks that newWith (a backend's New over a config whose
// secret is in the variable env, and nowhere else) fails when the
// variable is empty, with an error that names it.
func NeedsSecret(t testing.TB, newWith func(env string) error) {
	t.Helper()
	t.Setenv("MOORING_KITTEST_EMPTY", "")
	if err := newWith("MOORING_KITTEST_EMPTY"); err == nil || !strings.Contains(err.Error(), "MOORING_KITTEST_EMPTY") {
		t.Errorf("an empty secret: %v, want an error naming its variable", err)
	}
}

// ClusterTag checks a backend's own check of its cluster's tag on what
// the API returned (the API's filter is not trusted): taken (whether an
// instance with tags is the cluster's, whose tag is tag) takes the tag
// among others, and no instance without it: none, another tag, the tag
// in upper case, with a space, a prefix of it or it with more.
func ClusterTag(t testing.TB, tag string, taken func(tags []string) bool) {
	t.Helper()
	for _, tags := range [][]string{nil, {"a"}, {strings.ToUpper(tag)}, {tag + " "}, {" " + tag}, {tag[:len(tag)-1]}, {tag + "x"}} {
		if taken(tags) {
			t.Errorf("tags %q: taken as the cluster's (%q)", tags, tag)
		}
	}
	if !taken([]string{"a", tag}) {
		t.Errorf("tags %q: left out of the cluster's (%q)", []string{"a", tag}, tag)
	}
}

// PageCalls checks a backend's list in pages: for each page size (0: the
// backend's default) and the list calls it takes, list (over a cloud of
// the cluster's n instances, the backend asking for pages of that size)
// lists the n instances in that many calls.
func PageCalls(t testing.TB, n int, calls map[int]int, list func(size int) (listed, calls int, err error)) {
	t.Helper()
	for size, want := range calls {
		listed, got, err := list(size)
		if err != nil || listed != n {
			t.Errorf("pages of %d: %d instances, %v; want %d", size, listed, err, n)
		}
		if got != want {
			t.Errorf("pages of %d: %d list calls, want %d", size, got, want)
		}
	}
}

// Quick is the ListConfig of a backend's tests: its view lists again for
// a miss at once, and a millisecond after a failed list; requestTimeout,
// when not 0, bounds each call of the API.
func Quick(requestTimeout time.Duration) kit.ListConfig {
	var l kit.ListConfig
	l.MinRefreshInterval.Duration = time.Millisecond
	l.MaxFailureBackoff.Duration = time.Millisecond
	l.RequestTimeout.Duration = requestTimeout
	return l
}

// GivesUpOnChurn checks that list, a backend's list in pages, gives up
// after want attempts (kit.ReadWhole's, with the backend's count) with an
// error that says the list changed, on a cloud where add makes the n-th
// new instance of the cluster (n from 1) between the first and the second
// page of every attempt: before is the endpoint's hook before each page.
func GivesUpOnChurn(t testing.TB, list func(context.Context) ([]view.Instance, error), before func(func(page int)), add func(n int), want int) {
	t.Helper()
	n := 0
	before(func(page int) {
		if page == 2 {
			n++
			add(n)
		}
	})
	defer before(nil)
	GivesUp(t, list, &n, want)
}
