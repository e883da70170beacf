package kit

import (
	"strings"
	"testing"
)

func TestAddressSources(t *testing.T) {
	known := map[string]string{"accessIPv4": "a project member", "metadata.hostname": "a project member"}
	if _, err := NewAddressSources(known, []string{"accessIPv6"}); err == nil || !strings.Contains(err.Error(), "accessIPv4, metadata.hostname") {
		t.Fatalf("an unknown source: %v", err)
	}
	s, err := NewAddressSources(known, []string{"metadata.hostname"})
	if err != nil {
		t.Fatal(err)
	}
	var o AddressOrigins
	o.Assigned("10.0.0.1")
	o.Asserted("10.0.0.1", "accessIPv4") // also the cloud's: assigned
	o.Asserted("192.0.2.7", "accessIPv4")
	o.Asserted("db-1", "metadata.hostname") // trusted
	got := s.Untrusted(o)
	if len(got) != 1 || !strings.Contains(got["192.0.2.7"], "a project member (accessIPv4") {
		t.Fatalf("Untrusted = %v", got)
	}
	if got := s.Untrusted(AddressOrigins{}); got != nil {
		t.Fatalf("no addresses: %v", got)
	}
}
