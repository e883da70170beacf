package agentid

import (
	"regexp"
	"strings"
)

// EvidenceType is the PEM block type of GCE evidence: the instance
// identity token (format=full) whose audience is the CSR key's binding.
const EvidenceType = "GCE IDENTITY TOKEN"

// MaxTokenSize bounds the token.
const MaxTokenSize = 8 << 10

// PolicyInstanceName is the one node name policy: the instance's name.
const PolicyInstanceName = "InstanceName"

// ProviderIDPrefix starts the providerID of a GCE instance's Node,
// gce://<project>/<zone>/<instance-name>, as the upstream GCE CCM writes it.
const ProviderIDPrefix = "gce://"

// ProviderID is the providerID of an instance: gce://<project>/<zone>/<name>.
func ProviderID(project, zone, name string) string {
	return ProviderIDPrefix + project + "/" + zone + "/" + name
}

var (
	// projectIDPattern: 6-30 lower-case letters, digits and hyphens,
	// starting with a letter, not ending with a hyphen. Domain-scoped
	// projects (example.com:proj) are not supported.
	projectIDPattern = regexp.MustCompile(`^[a-z][a-z0-9-]{4,28}[a-z0-9]$`)
	// instanceIDPattern: GCE instance ids are unsigned 64-bit decimals.
	instanceIDPattern = regexp.MustCompile(`^[1-9][0-9]{0,19}$`)
	// instanceNamePattern: GCE resource names (RFC 1035 labels, 1-63).
	instanceNamePattern = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)
	// zonePattern: a region (lower-case words joined by hyphens, the last
	// ending in its number: us-central1, northamerica-northeast1,
	// me-central2) then a hyphen and the zone's suffix, which has no
	// hyphen: a letter (us-central1-a) or, in AI zones, letters and digits
	// ending in the parent zone's letter (us-central1-ai1a). The suffix
	// starts and ends with a letter.
	zonePattern = regexp.MustCompile(`^[a-z]+(-[a-z]+)*[0-9]+-[a-z]([a-z0-9]{0,6}[a-z])?$`)
)

// maxZoneLen bounds a zone name: a GCE resource name, 63 characters at
// most.
const maxZoneLen = 63

// ValidProjectID reports whether s is a project ID mooring accepts: 6-30
// lower-case letters, digits and hyphens, starting with a letter, not
// ending with a hyphen (no domain-scoped projects).
func ValidProjectID(s string) bool { return projectIDPattern.MatchString(s) }

// ValidInstanceID reports whether s is an instance id: an unsigned 64-bit
// decimal.
func ValidInstanceID(s string) bool { return instanceIDPattern.MatchString(s) }

// ValidInstanceName reports whether s is an instance name: a GCE resource
// name (an RFC 1035 label of 1-63 characters).
func ValidInstanceName(s string) bool { return instanceNamePattern.MatchString(s) }

// ValidZone reports whether s is a zone name of a form Google documents:
// REGION-SUFFIX, such as us-central1-a or the AI zone us-central1-ai1a.
func ValidZone(s string) bool { return len(s) <= maxZoneLen && zonePattern.MatchString(s) }

// RegionOf is the region of a valid zone: the zone without its last
// hyphen-separated part (us-central1-ai1a is in us-central1); "" when
// zone is not valid.
func RegionOf(zone string) string {
	if !ValidZone(zone) {
		return ""
	}
	return zone[:strings.LastIndexByte(zone, '-')]
}

// lastSegment is the last path segment of a resource URL (the metadata
// server's instance/zone, projects/<number>/zones/<zone>), or s itself.
func lastSegment(s string) string { return s[strings.LastIndex(s, "/")+1:] }
