package app

import (
	"testing"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	cloudprovider "k8s.io/cloud-provider"
	cloudcontrollerconfig "k8s.io/cloud-provider/app/config"
)

// cidrCloud is a provider that keeps its routes to the cluster's pod
// ranges (as Hetzner's does).
type cidrCloud struct {
	cloudprovider.Interface
	got *[]string
}

func (c cidrCloud) SetClusterCIDRs(s string) error {
	*c.got = append(*c.got, s)
	return nil
}

// The cloud initializer tells such a provider --cluster-cidr when routes
// are configured, and not otherwise.
func TestInitCloudTellsClusterCIDR(t *testing.T) {
	for _, routes := range []bool{true, false} {
		cfg := &cloudcontrollerconfig.Config{SharedInformers: informers.NewSharedInformerFactory(fake.NewClientset(), 0)}
		cfg.ComponentConfig.KubeCloudShared.ConfigureCloudRoutes = routes
		cfg.ComponentConfig.KubeCloudShared.ClusterCIDR = "10.244.0.0/16"
		var got []string
		initCloud(cfg.Complete(), cidrCloud{got: &got})
		if routes && (len(got) != 1 || got[0] != "10.244.0.0/16") || !routes && len(got) != 0 {
			t.Fatalf("configure routes %v: told %q", routes, got)
		}
	}
}
