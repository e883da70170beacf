package provider

import (
	"context"

	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/cloud/view"
)

// FindInstance finds a Node's instance: by providerID when the Node has
// one, else by the node name policy. An outage is an error, never "not
// found" (cloud.InstanceFinder; cloud.ViewInstances answers InstancesV2 with it).
func (c *Cloud) FindInstance(ctx context.Context, node *v1.Node) (view.Instance, error) {
	if node.Spec.ProviderID == "" {
		return c.lookup.byNodeName(ctx, node.Name)
	}
	if _, err := InstanceID(node.Spec.ProviderID); err != nil {
		return view.Instance{}, err
	}
	return c.lookup.byProviderID(ctx, node.Spec.ProviderID)
}

// ConfirmInstance asks the cloud for the instance of a providerID itself
// (GetInstance), after FindInstance missed it.
func (c *Cloud) ConfirmInstance(ctx context.Context, providerID string) (view.Instance, error) {
	id, err := InstanceID(providerID)
	if err != nil {
		return view.Instance{}, err
	}
	return instanceByID(ctx, c.client, c.cfg.Cluster, c.cfg.NodeNamePolicy, id)
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
