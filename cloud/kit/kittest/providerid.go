package kittest

import (
	"strings"
	"testing"
)

// NumericProviderID checks a backend's ParseProviderID, which is
// kit.NumericProviderID with the backend's prefix (the forms that reads
// and refuses: kit's TestNumericProviderID), against its agent's
// ProviderID: the two are inverses, and another cloud's providerID or one
// of the backend's prefix without a valid id is refused.
func NumericProviderID[N ~int | ~int64](t testing.TB, parse func(string) (N, error), format func(N) string) {
	t.Helper()
	const id = 3164444
	pid := format(id)
	prefix, ok := strings.CutSuffix(pid, "3164444")
	if !ok || prefix == "" {
		t.Fatalf("ProviderID(%d) = %q: want <prefix>%d", id, pid, id)
	}
	if got, err := parse(pid); err != nil || got != id {
		t.Errorf("ParseProviderID(%q) = %d %v", pid, got, err)
	}
	for _, bad := range []string{"", prefix, prefix + "0", prefix + "0" + "3164444", "gce://p/z/n", "other://3164444"} {
		if got, err := parse(bad); err == nil {
			t.Errorf("ParseProviderID(%q) = %d", bad, got)
		}
	}
}
