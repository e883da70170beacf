package agentid_test

import (
	"slices"
	"testing"

	"github.com/mooring-dev/mooring/cloud/all/agentid"
	"github.com/mooring-dev/mooring/cloud/nodeid"
)

// TestImportsEveryNodeIdentity: what mooring-agent links (this package
// alone, without the providers that import their own node part) registers
// the node identity of every backend in Names, and of no other.
func TestImportsEveryNodeIdentity(t *testing.T) {
	names := agentid.Names()
	if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) {
		t.Errorf("Names() is not sorted or repeats a name: %v", names)
	}
	if got := nodeid.Backends(); !slices.Equal(got, names) {
		t.Errorf("node identities registered %v; Names() %v: cloud/all/agentid's imports and Names disagree", got, names)
	}
}
