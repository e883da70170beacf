package nodeidtest

import (
	"strings"
	"testing"

	"github.com/mooring-dev/mooring/cloud/kit/kittest"
	"github.com/mooring-dev/mooring/cloud/nodeid"
)

// The checks fail a node identity that takes any config, and Node names
// that keep what no Node can be named.
func TestChecksFailWhatIsWrong(t *testing.T) {
	takesAll := func(nodeid.Config) (int, error) { return 0, nil }
	if !kittest.Fails(t, func(tb testing.TB) { Refuses(tb, takesAll, nil) }) {
		t.Error("Refuses passed an identity that takes any config")
	}
	if !kittest.Fails(t, func(tb testing.TB) { NodeNames(tb, strings.ToLower, nil) }) {
		t.Error("NodeNames passed a NodeName that keeps under_score")
	}
	if !kittest.Fails(t, func(tb testing.TB) { Registered(tb, "no-such-backend") }) {
		t.Error("Registered passed a backend never registered")
	}
}
