package digitalocean

import "github.com/mooring-dev/mooring/cloud"

func init() {
	cloud.Register(cloud.Backend{
		Name:     ProviderName,
		Provider: Factory,
		NodeIdentity: func(cfg cloud.NodeConfig) (cloud.NodeIdentity, error) {
			id, err := NewNodeIdentity(cfg)
			if err != nil {
				return nil, err // not a typed nil in the interface
			}
			return id, nil
		},
	})
}
