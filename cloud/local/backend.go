// Package local registers the local cloud as mooring's backend "local": its
// CCM provider (cloud/local/provider, also the CSR approver's Attester)
// here, and its node identity (cloud/local/agentid, which registers itself
// and is all mooring-agent links of it). The local cloud itself, a real
// process on loopback, is cloud/local/cmd/mooring-localcloud.
package local

import (
	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/local/provider"

	// The node identity, registered by its package.
	_ "github.com/mooring-dev/mooring/cloud/local/agentid"
)

func init() {
	cloud.Register(cloud.Backend{Name: provider.Name, Provider: provider.Factory})
}
