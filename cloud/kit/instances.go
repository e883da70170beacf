package kit

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/view"
)

// InstanceFinder is a backend's part of ViewInstances: how it finds a Node's
// instance, and how it asks the cloud itself about one.
type InstanceFinder interface {
	// FindInstance finds a Node's instance: by its providerID when it has
	// one (a providerID not of this cloud is an error), else by its name
	// under the node name policy. A not-found answer wraps view.ErrNotFound;
	// an outage is never one.
	FindInstance(ctx context.Context, node *v1.Node) (view.Instance, error)
	// ConfirmInstance asks the cloud for the instance of providerID itself,
	// after FindInstance did not find it. Its not-found answers are
	// definitive: an *AbsentError or a *ForeignError.
	ConfirmInstance(ctx context.Context, providerID string) (view.Instance, error)
}

// ViewInstances is the InstancesV2 of a backend whose lookups go through the
// shared view (Base embeds it): it answers InstanceExists,
// InstanceShutdown and InstanceMetadata with one rule for every cloud: a
// Node's instance is gone only when the cloud itself says so.
type ViewInstances struct {
	Finder InstanceFinder
	// View is invalidated when the cloud's own answer shows it lagged.
	View *view.View
	// Metadata turns an instance into the Node's metadata.
	Metadata func(view.Instance) *cloudprovider.InstanceMetadata
}

// InstanceExists is false only when the cloud says the instance is gone:
// terminated, or absent from the cloud's own answer for the id
// (ConfirmInstance, after a lookup that may lag behind missed it). Errors,
// Nodes that cannot be tied to an id, and instances of another cluster are
// never "gone", so an outage or a misconfigured cluster tag cannot delete
// Nodes.
func (i ViewInstances) InstanceExists(ctx context.Context, node *v1.Node) (bool, error) {
	in, err := i.find(ctx, node)
	if node.Spec.ProviderID != "" && errors.Is(err, view.ErrNotFound) && !DefinitiveNotFound(err) {
		// Not in this cluster's list: ask for the id itself before believing it.
		if in, err = i.Finder.ConfirmInstance(ctx, node.Spec.ProviderID); err == nil {
			i.View.Invalidate() // the list lagged behind the cloud
		}
	}
	var (
		absent  *AbsentError
		foreign *ForeignError
	)
	switch {
	case err == nil:
		return in.State != view.StateTerminated, nil
	case !errors.Is(err, view.ErrNotFound):
		return false, err
	case node.Spec.ProviderID == "":
		return false, fmt.Errorf("node %s has no providerID and no instance matches its name; not treating it as gone: %w", node.Name, err)
	case errors.As(err, &foreign):
		klog.InfoS("Node's instance is not this cluster's; leaving the Node alone", "node", klog.KObj(node), "instance", foreign.ID, "why", foreign.Why)
		return true, nil
	case errors.As(err, &absent):
		klog.V(2).InfoS("Instance not found in the cloud", "node", klog.KObj(node), "instance", absent.ID)
		return false, nil
	}
	// Not reached: every not-found answer of ConfirmInstance is definitive.
	return false, fmt.Errorf("node %s: not treating it as gone: %w", node.Name, err)
}

// find is FindInstance; when the view cannot answer yet (the instance may
// be newer than its last list, view.ErrUnconfirmed), a Node's providerID is
// asked of the cloud itself.
func (i ViewInstances) find(ctx context.Context, node *v1.Node) (view.Instance, error) {
	in, err := i.Finder.FindInstance(ctx, node)
	if node.Spec.ProviderID != "" && errors.Is(err, view.ErrUnconfirmed) {
		if in, err = i.Finder.ConfirmInstance(ctx, node.Spec.ProviderID); err == nil {
			i.View.Invalidate() // the list lagged behind the cloud
		}
	}
	return in, err
}

// InstanceShutdown is true while the instance is stopped.
func (i ViewInstances) InstanceShutdown(ctx context.Context, node *v1.Node) (bool, error) {
	in, err := i.find(ctx, node)
	if err != nil {
		return false, err
	}
	return in.State == view.StateStopped, nil
}

// InstanceMetadata is the cloud's record of the Node's instance.
func (i ViewInstances) InstanceMetadata(ctx context.Context, node *v1.Node) (*cloudprovider.InstanceMetadata, error) {
	in, err := i.find(ctx, node)
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
	return i.Metadata(in), nil
}

// AbsentError is the cloud's own answer that it has no instance of the id.
type AbsentError struct{ ID string }

func (e *AbsentError) Error() string {
	return fmt.Sprintf("%v: the cloud has no instance %q", view.ErrNotFound, e.ID)
}

// Unwrap makes it a view.ErrNotFound.
func (e *AbsentError) Unwrap() error { return view.ErrNotFound }

// ForeignError is the cloud's own answer that the instance exists but is
// not this cluster's; Why says how (whose it is, or which tag it lacks).
type ForeignError struct{ ID, Why string }

func (e *ForeignError) Error() string {
	return fmt.Sprintf("%v: instance %q %s", view.ErrNotFound, e.ID, e.Why)
}

// Unwrap makes it a view.ErrNotFound.
func (e *ForeignError) Unwrap() error { return view.ErrNotFound }

// DefinitiveNotFound reports whether a not-found answer came from the
// cloud's own answer for the id rather than from a list that may lag.
func DefinitiveNotFound(err error) bool {
	var absent *AbsentError
	var foreign *ForeignError
	return errors.As(err, &absent) || errors.As(err, &foreign)
}
