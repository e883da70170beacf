// Package all imports every cloud backend mooring ships, for their
// registration: the one package mooring-ccm and mooring-csr-approver import
// for backends. mooring-agent imports only their node parts, cloud/all/agentid.
package all

import (
	// Every backend's node identity (each backend imports its own too).
	_ "github.com/mooring-dev/mooring/cloud/all/agentid"

	// AWS.
	_ "github.com/mooring-dev/mooring/cloud/aws"
	// Azure.
	_ "github.com/mooring-dev/mooring/cloud/azure"
	// DigitalOcean.
	_ "github.com/mooring-dev/mooring/cloud/digitalocean"
	// Google Compute Engine.
	_ "github.com/mooring-dev/mooring/cloud/gce"
	// Hetzner Cloud.
	_ "github.com/mooring-dev/mooring/cloud/hetzner"
	// Linode (Akamai Cloud).
	_ "github.com/mooring-dev/mooring/cloud/linode"
	// The local cloud.
	_ "github.com/mooring-dev/mooring/cloud/local"
	// VMware vSphere.
	_ "github.com/mooring-dev/mooring/cloud/vsphere"
	// Oracle Cloud Infrastructure.
	_ "github.com/mooring-dev/mooring/cloud/oci"
	// OpenStack.
	_ "github.com/mooring-dev/mooring/cloud/openstack"
)
