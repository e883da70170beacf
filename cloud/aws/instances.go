package aws

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go"
	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/view"
)

// errCodeInstanceNotFound is EC2's error code for an instance id it does
// not know (any more).
const errCodeInstanceNotFound = "InvalidInstanceID.NotFound"

// instance finds a Node's instance in the shared view: by the instance id
// of its providerID when it has one, else by the node name policy. An
// outage is an error, never "not found".
func (c *Cloud) instance(ctx context.Context, node *v1.Node) (view.Instance, error) {
	if node.Spec.ProviderID == "" {
		return c.view.ByNodeName(ctx, node.Name, c.cfg.InstanceMaxAge.Duration)
	}
	_, id, err := ParseProviderID(node.Spec.ProviderID)
	if err != nil {
		return view.Instance{}, fmt.Errorf("node %s: %w", node.Name, err)
	}
	return c.view.ByID(ctx, id, c.cfg.InstanceMaxAge.Duration)
}

// InstanceExists is false only when EC2 says the instance is gone:
// terminated (or shutting down), or unknown to a DescribeInstances of its id
// made after a miss in the cluster's list. Errors, and Nodes that cannot be
// tied to an instance id, are never "gone", so an outage or a
// misconfigured cluster tag cannot delete Nodes.
func (c *Cloud) InstanceExists(ctx context.Context, node *v1.Node) (bool, error) {
	in, err := c.instance(ctx, node)
	if node.Spec.ProviderID != "" && errors.Is(err, view.ErrNotFound) {
		// Not in this cluster's list: ask EC2 for the id itself before
		// believing it.
		_, id, _ := ParseProviderID(node.Spec.ProviderID)
		if in, err = c.describeByID(ctx, id); err == nil {
			c.view.Invalidate() // the list lagged behind EC2
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
		klog.InfoS("Node's instance is not tagged as this cluster's; leaving the Node alone", "node", klog.KObj(node), "instance", foreign.id, "clusterTag", c.cfg.ClusterTagKey())
		return true, nil
	case errors.As(err, &absent):
		klog.V(2).InfoS("Instance not found in EC2", "node", klog.KObj(node), "instance", absent.id)
		return false, nil
	}
	// Not reached: every not-found answer of describeByID is definitive.
	return false, fmt.Errorf("node %s: not treating it as gone: %w", node.Name, err)
}

// InstanceShutdown is true while the instance is stopping or stopped.
func (c *Cloud) InstanceShutdown(ctx context.Context, node *v1.Node) (bool, error) {
	in, err := c.instance(ctx, node)
	if err != nil {
		return false, err
	}
	return in.State == view.StateStopped, nil
}

// InstanceMetadata is EC2's record of the Node's instance, from the shared
// view: providerID, instance type, addresses, zone and region (the node
// controller turns the last three into Kubernetes' standard labels).
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
	return &cloudprovider.InstanceMetadata{
		ProviderID:    in.ProviderID,
		InstanceType:  in.InstanceType,
		NodeAddresses: in.Addresses,
		Zone:          in.Zone,
		Region:        in.Region,
	}, nil
}

// describeByID asks EC2 for one instance by id. Its not-found answers are
// definitive: an *absentError when EC2 does not know the id, a
// *foreignError when the instance is not tagged as the cluster's.
func (c *Cloud) describeByID(ctx context.Context, id string) (view.Instance, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout.Duration)
	defer cancel()
	out, err := c.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode() == errCodeInstanceNotFound {
		return view.Instance{}, &absentError{id: id}
	}
	if err != nil {
		return view.Instance{}, fmt.Errorf("ec2 DescribeInstances of %s: %w", id, err)
	}
	src := Source{Region: c.cfg.Region, ClusterID: c.cfg.ClusterID, NamePolicy: c.policy}
	for _, r := range out.Reservations {
		for i := range r.Instances {
			if aws.ToString(r.Instances[i].InstanceId) != id {
				continue
			}
			if in, ok := src.toView(&r.Instances[i]); ok {
				return in, nil
			}
			return view.Instance{}, &foreignError{id: id, tag: c.cfg.ClusterTagKey()}
		}
	}
	return view.Instance{}, &absentError{id: id}
}

// absentError: EC2 does not know the instance id.
type absentError struct{ id string }

func (e *absentError) Error() string {
	return fmt.Sprintf("%v: EC2 has no instance %q", view.ErrNotFound, e.id)
}

func (e *absentError) Unwrap() error { return view.ErrNotFound }

// foreignError: the instance exists but is not tagged as the cluster's.
type foreignError struct{ id, tag string }

func (e *foreignError) Error() string {
	return fmt.Sprintf("%v: instance %q does not carry tag %s=%s|%s", view.ErrNotFound, e.id, e.tag, ClusterTagOwned, ClusterTagShared)
}

func (e *foreignError) Unwrap() error { return view.ErrNotFound }
