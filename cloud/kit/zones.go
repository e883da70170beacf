package kit

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/cloud/view"
)

// ViewZones is the Zones of a backend whose instances are in the shared
// view (Base's Zones, with Options.Zones): a Node's zone and region from
// the view, by providerID or by Node name.
type ViewZones struct {
	// Cloud names the backend in errors.
	Cloud string
	View  *view.View
	// MaxAge bounds how old the view may be for an answer.
	MaxAge time.Duration
	// ProviderID is a Node's providerID in the form the view indexes, or
	// an error when it is not this cloud's.
	ProviderID func(providerID string) (string, error)
}

// GetZone would be the zone of the machine the CCM runs on, which an
// out-of-tree provider is not asked for and mooring does not assume is an
// instance of the cloud.
func (z ViewZones) GetZone(context.Context) (cloudprovider.Zone, error) {
	return cloudprovider.Zone{}, fmt.Errorf("%s: GetZone is not supported (mooring-ccm need not run on an instance of the cloud); use GetZoneByProviderID", z.Cloud)
}

// GetZoneByProviderID is the zone and region of a Node's instance.
func (z ViewZones) GetZoneByProviderID(ctx context.Context, providerID string) (cloudprovider.Zone, error) {
	id, err := z.ProviderID(providerID)
	if err != nil {
		return cloudprovider.Zone{}, err
	}
	in, err := z.View.ByProviderID(ctx, id, z.MaxAge)
	if err != nil {
		return cloudprovider.Zone{}, err
	}
	return cloudprovider.Zone{FailureDomain: in.Zone, Region: in.Region}, nil
}

// GetZoneByNodeName is the zone and region of the instance of a Node's
// name.
func (z ViewZones) GetZoneByNodeName(ctx context.Context, nodeName types.NodeName) (cloudprovider.Zone, error) {
	in, err := z.View.ByNodeName(ctx, string(nodeName), z.MaxAge)
	if err != nil {
		return cloudprovider.Zone{}, err
	}
	return cloudprovider.Zone{FailureDomain: in.Zone, Region: in.Region}, nil
}

// InstancesOnly is the part of a cloudprovider.Interface that a backend
// giving the CCM only instances and zones adds to Base: embedded in its
// provider beside Base, it starts nothing and offers no load balancers or
// routes. A backend with load balancers or routes (the local cloud, AWS
// with the upstream provider's) writes these three methods itself.
type InstancesOnly struct{}

// Initialize has nothing to start.
func (InstancesOnly) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {}

// LoadBalancer is not provided (the backend's docs say why).
func (InstancesOnly) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return nil, false }

// Routes are not provided (the backend's docs say why).
func (InstancesOnly) Routes() (cloudprovider.Routes, bool) { return nil, false }
