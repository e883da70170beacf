package hetzner

import (
	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/nodeid"
)

func init() {
	cloud.Register(cloud.Backend{Name: ProviderName, Provider: Factory})
	nodeid.Register(ProviderName, func(cfg nodeid.Config) (nodeid.Identity, error) { return NewNodeIdentity(cfg) })
}
