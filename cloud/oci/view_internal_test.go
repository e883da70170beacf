package oci

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

// TestIPv6AddressTypes: a VNIC's IPv6 address is an InternalIP when it is
// a unique local address (fc00::/7) and an ExternalIP otherwise, as OCI's
// cloud-controller-manager types them (extractNodeAddresses, ip.IsPrivate).
func TestIPv6AddressTypes(t *testing.T) {
	for a, want := range map[string]v1.NodeAddressType{
		"fd00:c1::a":         v1.NodeInternalIP,
		"fc00::1":            v1.NodeInternalIP,
		"2603:c020:4:1a::12": v1.NodeExternalIP,
		"::1":                v1.NodeExternalIP,
	} {
		if got := ipv6Type(a); got != want {
			t.Errorf("%s: %s, want %s", a, got, want)
		}
	}
}
