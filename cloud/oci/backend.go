package oci

import (
	"github.com/mooring-dev/mooring/cloud"

	// The node identity, registered by its package.
	_ "github.com/mooring-dev/mooring/cloud/oci/agentid"
)

func init() {
	cloud.Register(cloud.Backend{Name: ProviderName, Provider: Factory})
}
