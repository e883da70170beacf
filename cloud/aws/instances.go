package aws

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/view"
)

// errCodeInstanceNotFound is EC2's error code for an instance id it does
// not know (any more).
const errCodeInstanceNotFound = "InvalidInstanceID.NotFound"

// FindInstance finds a Node's instance in the shared view: by the
// instance id of its providerID when it has one, else by the node name
// policy. An outage is an error, never "not found" (kit.InstanceFinder;
// kit.ViewInstances answers InstancesV2 with it: stopping and stopped
// instances are shut down, shutting-down and terminated ones gone).
func (c *Cloud) FindInstance(ctx context.Context, node *v1.Node) (view.Instance, error) {
	if node.Spec.ProviderID == "" {
		return c.view.ByNodeName(ctx, node.Name, c.cfg.InstanceMaxAge.Duration)
	}
	_, id, err := ParseProviderID(node.Spec.ProviderID)
	if err != nil {
		return view.Instance{}, fmt.Errorf("node %s: %w", node.Name, err)
	}
	return c.view.ByID(ctx, id, c.cfg.InstanceMaxAge.Duration)
}

// ConfirmInstance asks EC2 for the instance of a providerID itself, after
// FindInstance missed it in the cluster's list.
func (c *Cloud) ConfirmInstance(ctx context.Context, providerID string) (view.Instance, error) {
	_, id, err := ParseProviderID(providerID)
	if err != nil {
		return view.Instance{}, err
	}
	return c.describeByID(ctx, id)
}

// describeByID asks EC2 for one instance by id. Its not-found answers are
// definitive: a *kit.AbsentError when EC2 does not know the id, a
// *kit.ForeignError when the instance is not tagged as the cluster's;
// except that an id EC2 never showed is retried for NewInstanceWindow
// (*NotYetVisibleError, not a not-found answer).
func (c *Cloud) describeByID(ctx context.Context, id string) (view.Instance, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout.Duration)
	defer cancel()
	out, err := c.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode() == errCodeInstanceNotFound {
		return view.Instance{}, c.absent(id)
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
			c.ids.described(id)
			if in, ok := src.toView(&r.Instances[i]); ok {
				return in, nil
			}
			return view.Instance{}, &kit.ForeignError{ID: id,
				Why: fmt.Sprintf("does not carry tag %s=%s|%s", c.cfg.ClusterTagKey(), ClusterTagOwned, ClusterTagShared)}
		}
	}
	return view.Instance{}, c.absent(id)
}

// absent is EC2's answer that it has no instance id: a *kit.AbsentError,
// unless the instance may be a new one EC2 does not show yet (see
// NewInstanceWindow): then a *NotYetVisibleError, to be retried.
func (c *Cloud) absent(id string) error {
	if until := c.ids.absent(id); !until.IsZero() {
		klog.V(2).InfoS("EC2 does not know an instance never seen before; it may be new, not believing the miss yet", "instance", id, "until", until)
		return &NotYetVisibleError{ID: id, Until: until, Why: "EC2 has never shown it to this process"}
	}
	return &kit.AbsentError{ID: id}
}
