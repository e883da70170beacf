package kit

import (
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestParseClusterCIDRs(t *testing.T) {
	got, err := ParseClusterCIDRs(" 10.244.1.7/16, ,fd00:10::1/64,")
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10::/64")}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v (masked, blanks skipped)", got, want)
	}
	if got, err := ParseClusterCIDRs(""); err != nil || got != nil {
		t.Errorf(`"": %v, %v; want none`, got, err)
	}
	if _, err := ParseClusterCIDRs("10.244.0.0/16,10.300.0.0/16"); err == nil || !strings.Contains(err.Error(), `cluster CIDR "10.300.0.0/16"`) {
		t.Errorf("a bad item: %v; want an error naming it", err)
	}
}

func TestRouteScopeInCluster(t *testing.T) {
	var s RouteScope
	dest := netip.MustParsePrefix("192.168.5.0/24")
	if !s.InCluster(dest) {
		t.Error("no cluster CIDRs: every destination is in")
	}
	cidrs, err := ParseClusterCIDRs("10.244.0.0/16,fd00:10::/56")
	if err != nil {
		t.Fatal(err)
	}
	s.SetClusterCIDRs(cidrs)
	for in, want := range map[string]bool{
		"10.244.3.0/24":  true,
		"10.244.0.0/16":  true,
		"10.0.0.0/8":     false, // wider than the cluster's
		"10.245.0.0/24":  false,
		"192.168.5.0/24": false,
		"fd00:10::/64":   true,
		"fd00:11::/64":   false,
	} {
		if got := s.InCluster(netip.MustParsePrefix(in)); got != want {
			t.Errorf("InCluster(%s) = %v, want %v", in, got, want)
		}
	}
	s.SetClusterCIDRs(nil)
	if !s.InCluster(dest) {
		t.Error("cluster CIDRs cleared: every destination is in again")
	}
}

func TestRouteScopeKnown(t *testing.T) {
	var s RouteScope
	if _, ok := s.WasKnown("10.0.0.2"); ok {
		t.Fatal("the zero value knows a hop")
	}
	var wg sync.WaitGroup
	for i, hop := range []string{"10.0.0.2", "10.0.0.3"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Remember(map[string]string{hop: "node-" + string(rune('a'+i))})
		}()
	}
	wg.Wait()
	s.Remember(map[string]string{"10.0.0.2": "node-c"}) // the address went to another server since
	for hop, want := range map[string]string{"10.0.0.2": "node-c", "10.0.0.3": "node-b"} {
		if got, ok := s.WasKnown(hop); !ok || got != want {
			t.Errorf("WasKnown(%s) = %q, %v; want %q", hop, got, ok, want)
		}
	}
	if _, ok := s.WasKnown("10.0.0.9"); ok {
		t.Error("a hop never remembered is known")
	}
}

func TestRouteScopeDests(t *testing.T) {
	var s RouteScope
	s.SetClusterCIDRs([]netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")})
	if got, err := s.CreateDest("10.244.1.7/24", "n1"); err != nil || got != netip.MustParsePrefix("10.244.1.0/24") {
		t.Errorf("CreateDest inside: %v, %v; want 10.244.1.0/24", got, err)
	}
	if got, err := s.DeleteDest("10.244.2.0/24", "r2"); err != nil || got != netip.MustParsePrefix("10.244.2.0/24") {
		t.Errorf("DeleteDest inside: %v, %v; want 10.244.2.0/24", got, err)
	}
	for name, c := range map[string]struct {
		err  func() error
		want string
	}{
		"create outside": {func() error { _, err := s.CreateDest("10.9.0.0/24", "n1"); return err },
			"route 10.9.0.0/24 for Node n1: outside the cluster CIDRs; not created"},
		"create malformed": {func() error { _, err := s.CreateDest("10.244.1.0", "n1"); return err },
			`route for Node n1: destination "10.244.1.0": `},
		"delete outside": {func() error { _, err := s.DeleteDest("10.9.0.7/24", "r1"); return err },
			"route r1: destination 10.9.0.0/24 outside the cluster CIDRs; not deleted"},
		"delete malformed": {func() error { _, err := s.DeleteDest("x", "r1"); return err },
			`route r1: destination "x": `},
	} {
		err := c.err()
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error starting %q", name, err, c.want)
		}
	}
}
