// Package local registers the local cloud as mooring's backend "local": its
// CCM provider (cloud/local/provider, also the CSR approver's Attester) and
// its node identity (cloud/local/agentid). The local cloud itself, a real
// process on loopback, is cloud/local/cmd/mooring-localcloud.
package local

import (
	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/local/agentid"
	"github.com/mooring-dev/mooring/cloud/local/provider"
	"github.com/mooring-dev/mooring/cloud/nodeid"
)

func init() {
	cloud.Register(cloud.Backend{Name: provider.Name, Provider: provider.Factory})
	nodeid.Register(provider.Name, func(cfg nodeid.Config) (nodeid.Identity, error) { return agentid.New(cfg) })
}
