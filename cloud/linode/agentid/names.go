package agentid

import (
	"strconv"

	"github.com/mooring-dev/mooring/cloud/nodeid"
)

// PolicyLabel is the one node name policy: the Linode's label, as
// Linode's CCM names Nodes.
const PolicyLabel = "Label"

// ProviderIDPrefix starts the providerID of a Linode's Node,
// linode://<linode id>, as Linode's CCM writes it.
const ProviderIDPrefix = "linode://"

// ProviderID is the providerID of a Linode.
func ProviderID(id int) string { return ProviderIDPrefix + strconv.Itoa(id) }

// NodeName is the Node name of a Linode: its label, lower-cased as Node
// names are, or "" when that is not a DNS-1123 subdomain (a label may
// hold underscores, which a Node name may not).
func NodeName(label string) string { return nodeid.NodeName(label) }
