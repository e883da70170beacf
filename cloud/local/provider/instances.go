package provider

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/view"
)

// instance finds a Node's instance: by providerID when the Node has one,
// else by the node name policy. An outage is an error, never "not found".
func (c *Cloud) instance(ctx context.Context, node *v1.Node) (view.Instance, error) {
	if node.Spec.ProviderID == "" {
		return c.lookup.byNodeName(ctx, node.Name)
	}
	if _, err := InstanceID(node.Spec.ProviderID); err != nil {
		return view.Instance{}, err
	}
	return c.lookup.byProviderID(ctx, node.Spec.ProviderID)
}

// InstanceExists is false only when the cloud says the instance is gone:
// terminated, or absent from a direct lookup by id (after a miss in this
// cluster's list, in view mode). Errors, and Nodes that cannot be tied to an
// id, are never "gone", so an outage or a misconfigured cluster tag cannot
// delete Nodes.
func (c *Cloud) InstanceExists(ctx context.Context, node *v1.Node) (bool, error) {
	in, err := c.instance(ctx, node)
	if node.Spec.ProviderID != "" && errors.Is(err, view.ErrNotFound) && !definitive(err) {
		// Not in this cluster's list: ask for the id itself before believing it.
		id, _ := InstanceID(node.Spec.ProviderID)
		if in, err = instanceByID(ctx, c.client, c.cfg.Cluster, c.cfg.NodeNamePolicy, id); err == nil {
			c.view.Invalidate() // the list lagged behind the cloud
		}
	}
	var (
		absent  *absentError
		foreign *foreignError
	)
	switch {
	case err == nil:
		return in.State != view.StateTerminated, nil
	case !errors.Is(err, view.ErrNotFound):
		return false, err
	case node.Spec.ProviderID == "":
		return false, fmt.Errorf("node %s has no providerID and no instance matches its name; not treating it as gone: %w", node.Name, err)
	case errors.As(err, &foreign):
		klog.InfoS("Node's instance belongs to another cluster; leaving the Node alone", "node", klog.KObj(node), "instance", foreign.id, "instanceCluster", foreign.cluster)
		return true, nil
	case errors.As(err, &absent):
		klog.V(2).InfoS("Instance not found in the cloud", "node", klog.KObj(node), "instance", absent.id)
		return false, nil
	}
	// Not reached: every not-found answer for a providerID is definitive here.
	return false, fmt.Errorf("node %s: not treating it as gone: %w", node.Name, err)
}

// InstanceShutdown is true while the instance is stopped.
func (c *Cloud) InstanceShutdown(ctx context.Context, node *v1.Node) (bool, error) {
	in, err := c.instance(ctx, node)
	if err != nil {
		return false, err
	}
	return in.State == view.StateStopped, nil
}

// InstanceMetadata is the cloud's record of the Node's instance.
func (c *Cloud) InstanceMetadata(ctx context.Context, node *v1.Node) (*cloudprovider.InstanceMetadata, error) {
	in, err := c.instance(ctx, node)
	if errors.Is(err, view.ErrNotFound) {
		// The node controller treats this error as "not (yet) in the cloud".
		return nil, cloudprovider.InstanceNotFound
	}
	if err != nil {
		return nil, err
	}
	if in.State == view.StateTerminated {
		return nil, cloudprovider.InstanceNotFound
	}
	return Metadata(in), nil
}

// Metadata is the InstanceMetadata of an instance.
func Metadata(in view.Instance) *cloudprovider.InstanceMetadata {
	md := &cloudprovider.InstanceMetadata{
		ProviderID:    in.ProviderID,
		InstanceType:  in.InstanceType,
		NodeAddresses: in.Addresses,
		Zone:          in.Zone,
		Region:        in.Region,
	}
	if in.Cluster != "" {
		md.AdditionalLabels = map[string]string{ClusterLabel: in.Cluster}
	}
	return md
}
