package gce

import (
	"context"
	"errors"
	"net/http"

	"google.golang.org/api/googleapi"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"
)

// The cloud routes are the upstream GCE provider's (loadBalancers:
// upstream), global routes of the upstream block's network: CreateRoute
// makes <cluster>-<name hint> (the route controller's hint is the Node's
// UID) to the Node's instance (nextHopInstance, found by instances.get in
// the managed zones), priority 1000, description k8s-node-route, and
// answers a name taken (409) as done; ListRoutes lists the network's
// routes named <cluster>-* with that description, each to the Node named
// as its next hop instance, never as a blackhole; DeleteRoute deletes the
// listed route by name. Each write waits for its operation.
//
// upstreamRoutes adds one guard: a DeleteRoute of a route already gone
// (404) is done, as the route controller expects, where the upstream's
// answers the 404.
type upstreamRoutes struct{ cloudprovider.Routes }

func (u upstreamRoutes) DeleteRoute(ctx context.Context, clusterName string, route *cloudprovider.Route) error {
	err := u.Routes.DeleteRoute(ctx, clusterName, route)
	var gerr *googleapi.Error
	if errors.As(err, &gerr) && gerr.Code == http.StatusNotFound {
		klog.V(2).InfoS("Route already gone", "route", route.Name, "destination", route.DestinationCIDR)
		return nil
	}
	return err
}
