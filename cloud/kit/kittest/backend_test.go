package kittest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/mooring-dev/mooring/cloud/view"
)

// The backends' shared checks pass a backend that does right and fail
// one that does not.
func TestBackendChecks(t *testing.T) {
	parse := parser(true, true, true)
	good := "clusterID: c1\ntokenFile: /t\n"
	if Fails(t, func(t testing.TB) { Parses(t, parse, func(c testConfig) bool { return c.ClusterID == "c1" }, good) }) {
		t.Error("Parses failed a config that parses to what it asks")
	}
	if !Fails(t, func(t testing.TB) { Parses(t, parse, func(c testConfig) bool { return c.ClusterID == "c2" }, good) }) {
		t.Error("Parses passed a config that parses to something else")
	}
	if !Fails(t, func(t testing.TB) { Parses(t, parse, func(testConfig) bool { return true }, good+"nope: 1\n") }) {
		t.Error("Parses passed a config that is refused")
	}
	if Fails(t, func(t testing.TB) { Refuses(t, parse, good+"nope: 1\n", good+"requestTimeout: -1s\n") }) {
		t.Error("Refuses failed configs that are refused")
	}
	if !Fails(t, func(t testing.TB) { Refuses(t, parse, good+"nope: 1\n", good) }) {
		t.Error("Refuses passed a config that is taken")
	}

	named := func(env string) error { return errors.New("no secret in " + env) }
	if Fails(t, func(t testing.TB) { NeedsSecret(t, named) }) {
		t.Error("NeedsSecret failed an error naming the variable")
	}
	for _, bad := range []func(string) error{func(string) error { return nil }, func(string) error { return errors.New("no secret") }} {
		if !Fails(t, func(t testing.TB) { NeedsSecret(t, bad) }) {
			t.Error("NeedsSecret passed no error, or one that does not name the variable")
		}
	}

	exact := func(tags []string) bool { return slices.Contains(tags, "k8s:c1") }
	if Fails(t, func(t testing.TB) { ClusterTag(t, "k8s:c1", exact) }) {
		t.Error("ClusterTag failed an exact check")
	}
	for what, bad := range map[string]func([]string) bool{
		"folds case": func(tags []string) bool {
			return slices.ContainsFunc(tags, func(s string) bool { return strings.EqualFold(s, "k8s:c1") })
		},
		"prefix": func(tags []string) bool {
			return slices.ContainsFunc(tags, func(s string) bool { return strings.HasPrefix(s, "k8s:c") })
		},
		"trims": func(tags []string) bool {
			return slices.ContainsFunc(tags, func(s string) bool { return strings.TrimSpace(s) == "k8s:c1" })
		},
		"takes all":  func([]string) bool { return true },
		"first only": func(tags []string) bool { return len(tags) > 0 && tags[0] == "k8s:c1" },
		"contains it": func(tags []string) bool {
			return slices.ContainsFunc(tags, func(s string) bool { return strings.Contains(s, "k8s:c1") })
		},
	} {
		if !Fails(t, func(t testing.TB) { ClusterTag(t, "k8s:c1", bad) }) {
			t.Errorf("ClusterTag passed a check that %s", what)
		}
	}

	pages := func(n int) func(int) (int, int, error) {
		return func(size int) (int, int, error) {
			if size == 0 {
				size = 100
			}
			return n, (n + size - 1) / size, nil
		}
	}
	if Fails(t, func(t testing.TB) { PageCalls(t, 7, map[int]int{0: 1, 2: 4}, pages(7)) }) {
		t.Error("PageCalls failed a list in the pages asked")
	}
	if !Fails(t, func(t testing.TB) { PageCalls(t, 7, map[int]int{0: 1, 3: 4}, pages(7)) }) {
		t.Error("PageCalls passed a list in other pages")
	}
	if !Fails(t, func(t testing.TB) { PageCalls(t, 8, map[int]int{0: 1}, pages(7)) }) {
		t.Error("PageCalls passed a list short of an instance")
	}
	if !Fails(t, func(t testing.TB) {
		PageCalls(t, 7, map[int]int{0: 1}, func(int) (int, int, error) { return 7, 1, errors.New("down") })
	}) {
		t.Error("PageCalls passed a list that failed")
	}
}

// GivesUpOnChurn passes a list that lists again while its pages change,
// up to its attempts, and fails one that gives up sooner or not at all.
func TestGivesUpOnChurn(t *testing.T) {
	var hook func(int)
	before := func(f func(int)) { hook = f }
	added := 0
	lister := func(attempts int, failing bool) func(context.Context) ([]view.Instance, error) {
		return func(context.Context) ([]view.Instance, error) {
			for range attempts {
				was := added
				for page := 1; page <= 3; page++ {
					if hook != nil {
						hook(page)
					}
				}
				if added == was {
					return []view.Instance{}, nil
				}
			}
			if !failing {
				return []view.Instance{}, nil
			}
			return nil, errors.New("the list changed at every attempt")
		}
	}
	add := func(int) { added++ }
	if Fails(t, func(t testing.TB) { GivesUpOnChurn(t, lister(3, true), before, add, 3) }) {
		t.Error("failed a list that gives up after its three attempts")
	}
	if hook != nil {
		t.Error("the hook is left set")
	}
	if !Fails(t, func(t testing.TB) { GivesUpOnChurn(t, lister(2, true), before, add, 3) }) {
		t.Error("passed a list that gives up after two attempts of three")
	}
	if !Fails(t, func(t testing.TB) { GivesUpOnChurn(t, lister(3, false), before, add, 3) }) {
		t.Error("passed a list that answers a changed list")
	}
}
