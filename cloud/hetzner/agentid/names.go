package agentid

import (
	"strconv"

	"github.com/mooring-dev/mooring/cloud/nodeid"
)

// PolicyServerName is the one node name policy: the server's name.
const PolicyServerName = "ServerName"

// ProviderIDPrefix starts the providerID of a Hetzner Cloud server's Node,
// hcloud://<server id>, as hcloud-cloud-controller-manager writes it.
const ProviderIDPrefix = "hcloud://"

// ProviderID is the providerID of a server: hcloud://<id>.
func ProviderID(id int64) string {
	return ProviderIDPrefix + strconv.FormatInt(id, 10)
}

// NodeName is the Node name of a server under the ServerName policy: its
// name, lower-cased, when that is a DNS-1123 subdomain; else "" (the
// server cannot join).
func NodeName(serverName string) string { return nodeid.NodeName(serverName) }
