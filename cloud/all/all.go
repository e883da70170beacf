// Package all imports every cloud backend mooring ships, for their
// registration: the one package the binaries import for backends.
package all

import (
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
	// The local cloud.
	_ "github.com/mooring-dev/mooring/cloud/local"
)
