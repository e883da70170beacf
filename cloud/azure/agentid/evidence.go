package agentid

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"regexp"
)

// EvidenceType is the PEM block type of Azure evidence: the DER PKCS#7
// SignedData of an IMDS attested document (/metadata/attested/document)
// asked for with the nonce of the CSR key's binding (Nonce).
const EvidenceType = "AZURE ATTESTED DOCUMENT"

// NonceLength is the length of the nonce derived from a binding: IMDS
// takes at most 32 alphanumerics.
const NonceLength = 32

// Nonce is the attested document's nonce for a binding value
// (internal/evidence.Binding: base64url of a SHA-256): the first 32 hex
// digits of the decoded digest, 128 bits of it. It fails on anything that
// is not a binding.
func Nonce(binding string) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(binding)
	if err != nil || len(raw) != 32 {
		return "", fmt.Errorf("binding %.60q is not the base64url of a SHA-256", binding)
	}
	return hex.EncodeToString(raw)[:NonceLength], nil
}

// uuidRE: vmId and subscriptionId are UUIDs.
var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// ValidUUID reports whether s is a UUID, as VM and subscription ids are
// (either case).
func ValidUUID(s string) bool { return uuidRE.MatchString(s) }
