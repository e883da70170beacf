package agentid

import (
	"regexp"

	"github.com/mooring-dev/mooring/cloud/nodeid"
)

// EvidenceType is the PEM block type of OCI evidence: a signature over the
// CSR key's binding by the instance principal's key, with its certificate
// and the intermediate that issued it (Evidence, JSON).
const EvidenceType = "OCI INSTANCE IDENTITY"

// PolicyDisplayName is the one node name policy: the instance's display
// name, lower-cased (the upstream OCI CCM maps Node names to display
// names).
const PolicyDisplayName = "DisplayName"

// ProviderIDPrefix starts the providerID of an OCI instance's Node,
// oci://<instance OCID>, as the upstream OCI CCM writes it.
const ProviderIDPrefix = "oci://"

// ProviderID is the providerID of an instance: oci://<instance OCID>.
func ProviderID(instanceOCID string) string { return ProviderIDPrefix + instanceOCID }

// maxOCIDLen bounds an OCID (OCI documents none; its OCIDs are well under).
const maxOCIDLen = 255

// ocidPattern: Oracle's documented layout,
// ocid1.<RESOURCE TYPE>.<REALM>.[REGION][.FUTURE USE].<UNIQUE ID>; the
// region is empty for tenancies, compartments and other global resources
// (ocid1.tenancy.oc1..aaaa...).
var ocidPattern = regexp.MustCompile(`^ocid1\.([a-z0-9]+)\.[a-z0-9]+\.[a-z0-9-]*(\.[a-z0-9-]+)?\.[a-z0-9]+$`)

// ValidOCID reports whether s is an OCID of the resource type kind
// (instance, tenancy, compartment, vnic, ...).
func ValidOCID(s, kind string) bool {
	if len(s) > maxOCIDLen {
		return false
	}
	m := ocidPattern.FindStringSubmatch(s)
	return m != nil && m[1] == kind
}

// oldTenancyPattern: the form of the OCIDs of tenancies created before
// OCI's current OCID layout, ocidv1:tenancy:<REALM>:<REGION>:<DIGITS>:<UNIQUE
// ID>. Such a tenancy keeps its OCID: instance certificates of 2017 name
// it in opc-tenant (ocidv1:tenancy:oc1:phx:1460406592660:aaaa...;
// oci-go-sdk's commit 3678a0438c, which Oracle's next commit 3e36242ba1
// replaced as "actual OCIDs"), and oci-go-sdk's tests still use the form.
var oldTenancyPattern = regexp.MustCompile(`^ocidv1:tenancy:[a-z0-9]+:[a-z0-9-]+:[0-9]+:[a-z0-9]+$`)

// ValidTenancy reports whether s is a tenancy's OCID, in the current form
// (ocid1.tenancy.oc1..aaaa) or the old one (ocidv1:tenancy:oc1:phx:...).
func ValidTenancy(s string) bool {
	return ValidOCID(s, "tenancy") || (len(s) <= maxOCIDLen && oldTenancyPattern.MatchString(s))
}

// ValidCompartment reports whether s is a compartment's OCID, or the
// tenancy's (the root compartment's OCID is the tenancy's, in either of
// its forms).
func ValidCompartment(s string) bool {
	return ValidOCID(s, "compartment") || ValidTenancy(s)
}

// NodeName is the Node name of an instance of that display name under
// the DisplayName policy: the name lower-cased; "" when that is not a
// Node name (an RFC 1123 subdomain).
func NodeName(displayName string) string { return nodeid.NodeName(displayName) }
