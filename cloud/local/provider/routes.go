package provider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/client"
	"github.com/mooring-dev/mooring/cloud/view"
)

// ListRoutes lists the cluster's routes, each with the Node its instance is.
func (c *Cloud) ListRoutes(ctx context.Context, clusterName string) ([]*cloudprovider.Route, error) {
	routes, err := c.client.ListAllRoutes(ctx, client.ListOptions{Cluster: c.cfg.Cluster, PageSize: 1000})
	if err != nil {
		return nil, err
	}
	out := make([]*cloudprovider.Route, 0, len(routes))
	for _, r := range routes {
		cr := &cloudprovider.Route{Name: r.Name, DestinationCIDR: r.DestinationCIDR}
		in, err := c.view.ByID(ctx, r.InstanceID, c.cfg.InstanceMaxAge.Duration)
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

// DeleteRoute removes a route; one already gone is not an error.
func (c *Cloud) DeleteRoute(ctx context.Context, clusterName string, route *cloudprovider.Route) error {
	err := c.client.DeleteRoute(ctx, route.Name)
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
