package agentid

import (
	"fmt"
	"strings"

	"github.com/mooring-dev/mooring/cloud/nodeid"
)

// PolicyVMName is the one node name policy: the VM's name.
const PolicyVMName = "VMName"

// ProviderIDPrefix starts the providerID of a VM's Node,
// vsphere://<BIOS UUID>, as the vSphere cloud provider writes it.
const ProviderIDPrefix = "vsphere://"

// ProviderID is the providerID of a VM of BIOS UUID uuid (config.uuid):
// vsphere://<uuid>, the UUID lower-cased, as the vSphere cloud provider
// compares it.
func ProviderID(uuid string) string { return ProviderIDPrefix + strings.ToLower(uuid) }

// NodeName is the Node name of a VM under the VMName policy: its name,
// lower-cased, when that is a DNS-1123 subdomain; else "" (the VM cannot
// join).
func NodeName(vmName string) string { return nodeid.NodeName(vmName) }

// ParseUUID checks a UUID in its 36-character text form
// (8-4-4-4-12 hex digits) and returns it lower-cased.
func ParseUUID(s string) (string, error) {
	if len(s) != 36 {
		return "", fmt.Errorf("%.80q is not a UUID (want 8-4-4-4-12 hex digits)", s)
	}
	for i, r := range s {
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if r != '-' {
				return "", fmt.Errorf("%q is not a UUID (want 8-4-4-4-12 hex digits)", s)
			}
		case '0' <= r && r <= '9', 'a' <= r && r <= 'f', 'A' <= r && r <= 'F':
		default:
			return "", fmt.Errorf("%q is not a UUID (want 8-4-4-4-12 hex digits)", s)
		}
	}
	return strings.ToLower(s), nil
}

// SwapUUID reverses the byte order of a UUID's first three fields
// (4, 2 and 2 bytes): the difference between an SMBIOS UUID read as
// big-endian and the same UUID read with the little-endian fields SMBIOS
// 2.6 specifies. u must be a UUID ParseUUID accepts.
func SwapUUID(u string) string {
	b := []byte(u)
	swap := func(from, to int) { // hex pairs in [from, to)
		for i, j := from, to-2; i < j; i, j = i+2, j-2 {
			b[i], b[j] = b[j], b[i]
			b[i+1], b[j+1] = b[j+1], b[i+1]
		}
	}
	swap(0, 8)
	swap(9, 13)
	swap(14, 18)
	return string(b)
}
