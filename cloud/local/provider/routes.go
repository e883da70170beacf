package provider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/client"
	"github.com/mooring-dev/mooring/cloud/view"
)

// ListRoutes lists the cluster's routes, each with the Node its instance
// is, or as a blackhole when the cloud no longer has its instance. An
// instance missing from the view's last list is looked up patiently (one
// list shared by every miss, begun after the question): a miss is a
// blackhole only when a list newer than the question says so, and never an
// error that fails the whole list while a List for misses is not due.
func (c *Cloud) ListRoutes(ctx context.Context, clusterName string) ([]*cloudprovider.Route, error) {
	routes, err := c.client.ListAllRoutes(ctx, client.ListOptions{Cluster: c.cfg.Cluster, PageSize: 1000})
	if err != nil {
		return nil, err
	}
	out := make([]*cloudprovider.Route, 0, len(routes))
	for _, r := range routes {
		cr := &cloudprovider.Route{Name: r.Name, DestinationCIDR: r.DestinationCIDR}
		in, err := c.view.Patient().ByID(ctx, r.InstanceID, c.cfg.InstanceMaxAge.Duration)
		switch {
		case err == nil && in.State != view.StateTerminated:
			cr.TargetNode = types.NodeName(in.NodeName)
		case err == nil || errors.Is(err, view.ErrNotFound):
			// The route controller deletes routes whose node is gone.
			cr.Blackhole = true
		default:
			return nil, err
		}
		out = append(out, cr)
	}
	return out, nil
}

// CreateRoute sends route.DestinationCIDR to the instance of route.TargetNode.
func (c *Cloud) CreateRoute(ctx context.Context, clusterName, nameHint string, route *cloudprovider.Route) error {
	in, err := c.view.ByNodeName(ctx, string(route.TargetNode), c.cfg.InstanceMaxAge.Duration)
	if err != nil {
		return fmt.Errorf("route to node %s: %w", route.TargetNode, err)
	}
	if in.State == view.StateTerminated {
		return fmt.Errorf("route to node %s: instance %s is terminated", route.TargetNode, in.ID)
	}
	_, err = c.client.CreateRoute(ctx, api.Route{
		Name: routeName(c.cfg.Cluster, route.DestinationCIDR), Cluster: c.cfg.Cluster,
		DestinationCIDR: route.DestinationCIDR, InstanceID: in.ID,
	})
	if client.IsCode(err, api.CodeConflict) {
		// Made by an earlier attempt whose answer was lost.
		existing, gerr := c.client.GetRoute(ctx, routeName(c.cfg.Cluster, route.DestinationCIDR))
		if gerr == nil && existing.InstanceID == in.ID && existing.DestinationCIDR == route.DestinationCIDR {
			return nil
		}
	}
	return err
}

// DeleteRoute removes a route ListRoutes gave, while the cloud's route of
// its name is still the one listed: to route.TargetNode's instance, or to an
// instance that is gone. A route made since for the destination (its name
// is the destination's) to another live instance stays: the route
// controller deletes a moved pod range's old route, listed as a blackhole,
// in the same pass as it creates the new one. A route already gone is not an
// error.
func (c *Cloud) DeleteRoute(ctx context.Context, clusterName string, route *cloudprovider.Route) error {
	name := route.Name
	if name == "" {
		name = routeName(c.cfg.Cluster, route.DestinationCIDR)
	}
	held, err := c.client.GetRoute(ctx, name)
	if client.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	in, err := c.view.Patient().ByID(ctx, held.InstanceID, c.cfg.InstanceMaxAge.Duration)
	switch {
	case err != nil && !errors.Is(err, view.ErrNotFound):
		return fmt.Errorf("route %s: its instance %s: %w", name, held.InstanceID, err)
	case err == nil && in.State != view.StateTerminated && types.NodeName(in.NodeName) != route.TargetNode:
		klog.InfoS("Leaving a route made since for another Node", "route", name, "destination", held.DestinationCIDR,
			"instance", held.InstanceID, "node", in.NodeName, "listedNode", route.TargetNode, "listedBlackhole", route.Blackhole)
		return nil
	}
	err = c.client.DeleteRoute(ctx, name)
	if client.IsNotFound(err) {
		return nil
	}
	return err
}

// routeName is stable per cluster and destination, so a retried create
// finds its earlier attempt.
func routeName(cluster, cidr string) string {
	sum := sha256.Sum256([]byte(cluster + "/" + cidr))
	return "r-" + hex.EncodeToString(sum[:10])
}
