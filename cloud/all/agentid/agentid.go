// Package agentid imports the node part (cloud/<name>/agentid) of every
// cloud backend mooring ships, for their registration with cloud/nodeid:
// the one package mooring-agent imports for backends. It links no CCM
// provider, approver verifier or cloud API SDK; cloud/all imports it too.
//
// Names is the list of those backends. Go registers a package only where it
// is imported, so the imports below and cloud/all's are two import lists;
// tests check both against Names, and Names against the directories under
// cloud/: a backend missing from either list, or a half registered under
// another name, fails them.
package agentid

import (
	// AWS.
	_ "github.com/mooring-dev/mooring/cloud/aws/agentid"
	// Azure.
	_ "github.com/mooring-dev/mooring/cloud/azure/agentid"
	// DigitalOcean.
	_ "github.com/mooring-dev/mooring/cloud/digitalocean/agentid"
	// Google Compute Engine.
	_ "github.com/mooring-dev/mooring/cloud/gce/agentid"
	// Hetzner Cloud.
	_ "github.com/mooring-dev/mooring/cloud/hetzner/agentid"
	// Linode (Akamai Cloud).
	_ "github.com/mooring-dev/mooring/cloud/linode/agentid"
	// The local cloud.
	_ "github.com/mooring-dev/mooring/cloud/local/agentid"
	// VMware vSphere.
	_ "github.com/mooring-dev/mooring/cloud/vsphere/agentid"
	// Oracle Cloud Infrastructure.
	_ "github.com/mooring-dev/mooring/cloud/oci/agentid"
	// OpenStack.
	_ "github.com/mooring-dev/mooring/cloud/openstack/agentid"
)

// Names lists the backends mooring ships, sorted: the names each registers
// its CCM provider (cloud.Register) and its node identity (nodeid.Register)
// under. Add a backend here, to the imports above and to cloud/all's.
func Names() []string {
	return []string{"aws", "azure", "digitalocean", "gce", "hetzner", "linode", "local", "oci", "openstack", "vsphere"}
}
