package nodeidtest

import (
	"runtime"
	"strings"
	"testing"

	"github.com/mooring-dev/mooring/cloud/nodeid"
)

// recorder is a test whose failures are recorded, not reported.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Error(...any)          { r.failed = true }
func (r *recorder) Errorf(string, ...any) { r.failed = true }
func (r *recorder) Fatal(...any)          { r.failed = true; runtime.Goexit() }
func (r *recorder) Fatalf(string, ...any) { r.failed = true; runtime.Goexit() }

func fails(t *testing.T, check func(testing.TB)) bool {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); check(r) }()
	<-done
	return r.failed
}

// The checks fail a node identity that takes any config, and Node names
// that keep what no Node can be named.
func TestChecksFailWhatIsWrong(t *testing.T) {
	takesAll := func(nodeid.Config) (int, error) { return 0, nil }
	if !fails(t, func(tb testing.TB) { Refuses(tb, takesAll, nil) }) {
		t.Error("Refuses passed an identity that takes any config")
	}
	if !fails(t, func(tb testing.TB) { NodeNames(tb, strings.ToLower, nil) }) {
		t.Error("NodeNames passed a NodeName that keeps under_score")
	}
	if !fails(t, func(tb testing.TB) { Registered(tb, "no-such-backend") }) {
		t.Error("Registered passed a backend never registered")
	}
}
