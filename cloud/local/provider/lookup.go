package provider

import (
	"context"
	"errors"
	"fmt"

	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/local/agentid"
	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/client"
	"github.com/mooring-dev/mooring/cloud/view"
)

// instanceLookup finds the instance of a Node for the InstancesV2 methods
// (Config.InstanceLookup picks one). Every implementation answers only with
// this cluster's instances; an instance it cannot find is an error that
// wraps view.ErrNotFound, and a cloud error is never one. A not-found answer
// is definitive (no second look needed) when it is a *kit.AbsentError or
// a *kit.ForeignError.
type instanceLookup interface {
	// byProviderID finds the instance of a valid local cloud providerID.
	byProviderID(ctx context.Context, providerID string) (view.Instance, error)
	// byNodeName finds the instance whose Node is nodeName under the node
	// name policy. Its not-found answers are never definitive.
	byNodeName(ctx context.Context, nodeName string) (view.Instance, error)
}

// viewLookup answers from the shared instance view: one List serves every
// Node. Its misses are not definitive: the list may lag behind the cloud.
type viewLookup struct {
	view *view.View
	cfg  *Config // read at each call: MaxAge may be tuned after New
}

func (l viewLookup) byProviderID(ctx context.Context, providerID string) (view.Instance, error) {
	return l.view.ByProviderID(ctx, providerID, l.cfg.InstanceMaxAge.Duration)
}

func (l viewLookup) byNodeName(ctx context.Context, nodeName string) (view.Instance, error) {
	return l.view.ByNodeName(ctx, nodeName, l.cfg.InstanceMaxAge.Duration)
}

// directLookup makes one cloud call per lookup, the way most providers do:
// GetInstance for a providerID (and for a node name under the InstanceID
// policy), a List filtered by name and cluster otherwise. It is the
// comparison baseline of the shared view.
type directLookup struct {
	client  *client.Client
	cluster string
	policy  agentid.NamePolicy
}

func (l directLookup) byProviderID(ctx context.Context, providerID string) (view.Instance, error) {
	id, err := agentid.InstanceID(providerID)
	if err != nil {
		return view.Instance{}, err
	}
	return instanceByID(ctx, l.client, l.cluster, l.policy, id)
}

func (l directLookup) byNodeName(ctx context.Context, nodeName string) (view.Instance, error) {
	if l.policy == agentid.NameFromInstanceID {
		in, err := instanceByID(ctx, l.client, l.cluster, l.policy, nodeName)
		if errors.Is(err, view.ErrNotFound) {
			// Like a view miss: a name is not an id the Node was tied to.
			return view.Instance{}, fmt.Errorf("%w: nodeName %q", view.ErrNotFound, nodeName)
		}
		return in, err
	}
	items, err := l.client.ListAllInstances(ctx, client.ListOptions{Cluster: l.cluster, Names: []string{nodeName}})
	if err != nil {
		return view.Instance{}, err
	}
	// As in the view, a live instance wins over terminated ones of its name.
	best := -1
	for i := range items {
		if best < 0 || items[best].State == api.StateTerminated {
			best = i
		}
	}
	if best < 0 {
		return view.Instance{}, fmt.Errorf("%w: name %q", view.ErrNotFound, nodeName)
	}
	return ToView(&items[best], l.policy), nil
}

// instanceByID asks the cloud for one instance of the cluster.
func instanceByID(ctx context.Context, c *client.Client, cluster string, policy agentid.NamePolicy, id string) (view.Instance, error) {
	got, err := c.GetInstance(ctx, id)
	switch {
	case client.IsNotFound(err):
		return view.Instance{}, &kit.AbsentError{ID: id}
	case err != nil:
		return view.Instance{}, err
	case got.Cluster != cluster:
		return view.Instance{}, &kit.ForeignError{ID: id, Why: fmt.Sprintf("belongs to cluster %q", got.Cluster)}
	}
	return ToView(got, policy), nil
}
