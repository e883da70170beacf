package provider

import (
	"context"

	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/local/agentid"
	"github.com/mooring-dev/mooring/cloud/view"
)

// FindInstance finds a Node's instance: by providerID when the Node has
// one, else by the node name policy. An outage is an error, never "not
// found" (kit.InstanceFinder; kit.ViewInstances answers InstancesV2 with it).
func (c *Cloud) FindInstance(ctx context.Context, node *v1.Node) (view.Instance, error) {
	if node.Spec.ProviderID == "" {
		return c.lookup.byNodeName(ctx, node.Name)
	}
	if _, err := agentid.InstanceID(node.Spec.ProviderID); err != nil {
		return view.Instance{}, err
	}
	return c.lookup.byProviderID(ctx, node.Spec.ProviderID)
}

// ConfirmInstance asks the cloud for the instance of a providerID itself
// (GetInstance), after FindInstance missed it.
func (c *Cloud) ConfirmInstance(ctx context.Context, providerID string) (view.Instance, error) {
	id, err := agentid.InstanceID(providerID)
	if err != nil {
		return view.Instance{}, err
	}
	return instanceByID(ctx, c.client, c.cfg.Cluster, c.cfg.NodeNamePolicy, id)
}

// Metadata is the InstanceMetadata of an instance: kit.Metadata and the
// cluster label.
func Metadata(in view.Instance) *cloudprovider.InstanceMetadata {
	md := kit.Metadata(in)
	if in.Cluster != "" {
		md.AdditionalLabels = map[string]string{ClusterLabel: in.Cluster}
	}
	return md
}
