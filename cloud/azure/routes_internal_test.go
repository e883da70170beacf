package azure

import (
	"net/netip"
	"strings"
	"testing"
)

// Route names are cloud-provider-azure's dual-stack form, within Azure's
// 80 characters.
func TestRouteName(t *testing.T) {
	if got := routeName("node-1", netip.MustParsePrefix("10.244.1.0/24")); got != "node-1____102441024" {
		t.Errorf("routeName: %s", got)
	}
	if got := routeName("node-1", netip.MustParsePrefix("fd00:10:244:1::/64")); got != "node-1____fd0010244164" {
		t.Errorf("routeName of an IPv6 range: %s", got)
	}
	long := strings.Repeat("n", 78)
	a, b := routeName(long, netip.MustParsePrefix("10.244.1.0/24")), routeName(long, netip.MustParsePrefix("10.244.2.0/24"))
	if len(a) > maxRouteName || len(b) > maxRouteName || a == b || !strings.HasPrefix(a, long[:40]) {
		t.Errorf("long names: %s (%d), %s (%d)", a, len(a), b, len(b))
	}
	if a != routeName(long, netip.MustParsePrefix("10.244.1.0/24")) {
		t.Error("a long name is not stable")
	}
}
