package agentid

import (
	"strconv"

	"github.com/mooring-dev/mooring/cloud/nodeid"
)

// PolicyDropletName is the one node name policy: the droplet's name.
const PolicyDropletName = "DropletName"

// ProviderIDPrefix starts the providerID of a droplet's Node,
// digitalocean://<droplet id>, as DigitalOcean's CCM writes it.
const ProviderIDPrefix = "digitalocean://"

// ProviderID is the providerID of a droplet.
func ProviderID(id int) string { return ProviderIDPrefix + strconv.Itoa(id) }

// NodeName is the Node name of a droplet: its name, lower-cased as Node
// names are, or "" when that is not a DNS-1123 subdomain.
func NodeName(dropletName string) string { return nodeid.NodeName(dropletName) }
