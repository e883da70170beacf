package agentid

import (
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/mooring-dev/mooring/cloud/nodeid"
)

// PolicyServerName is the one node name policy: the server's name.
const PolicyServerName = "ServerName"

// ProviderIDPrefix starts the providerID of an OpenStack server's Node, as
// the OpenStack cloud-controller-manager writes it: openstack:///<server
// id>, or openstack://<region>/<server id> in its regional form.
const ProviderIDPrefix = "openstack://"

// ProviderID is the providerID of a server: openstack:///<id> when region
// is "", else the regional form openstack://<region>/<id>.
func ProviderID(region, id string) string {
	return ProviderIDPrefix + region + "/" + id
}

// errProviderID is wrapped by ParseProviderID's errors.
var errProviderID = fmt.Errorf("not an OpenStack providerID")

// ParseProviderID reads openstack:///<id> and openstack://<region>/<id>:
// the server id a UUID in its canonical lower-case form, the region ""
// or a name without "/". It returns the region ("" for the short form)
// and the id.
func ParseProviderID(providerID string) (region, id string, err error) {
	rest, ok := strings.CutPrefix(providerID, ProviderIDPrefix)
	if !ok {
		return "", "", fmt.Errorf("%w: %q: want %s/<server id> or %s<region>/<server id>", errProviderID, providerID, ProviderIDPrefix, ProviderIDPrefix)
	}
	region, id, ok = strings.Cut(rest, "/")
	if !ok || strings.ContainsAny(region, " \t") {
		return "", "", fmt.Errorf("%w: %q: want %s/<server id> or %s<region>/<server id>", errProviderID, providerID, ProviderIDPrefix, ProviderIDPrefix)
	}
	if !IsServerID(id) {
		return "", "", fmt.Errorf("%w: %q: the server id must be a lower-case UUID", errProviderID, providerID)
	}
	return region, id, nil
}

// IsServerID reports whether id is a Nova server id: a UUID in canonical
// lower-case form (8-4-4-4-12 hex digits).
func IsServerID(id string) bool {
	u, err := uuid.Parse(id)
	return err == nil && u.String() == id
}

// NodeName is the Node name of a server under the ServerName policy: its
// name, lower-cased, when that is a DNS-1123 subdomain; else "" (the
// server cannot join).
func NodeName(serverName string) string { return nodeid.NodeName(serverName) }
