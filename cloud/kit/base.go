package kit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/view"
)

// Provider is what a backend's Cloud is: a cloudprovider.Interface, the
// approver's cloud.Attester, and the InstanceFinder its Base asks (Base
// gives all but ConfirmInstance). Factory takes only a Provider, so a
// backend's Cloud that lacks a part of it does not compile.
type Provider interface {
	cloudprovider.Interface
	cloud.Attester
	InstanceFinder
}

// Factory is a backend's cloud.Backend Provider: it parses the
// cloud-config with parse and builds the provider with build.
func Factory[C any, P Provider](parse func(io.Reader) (C, error), build func(C) (P, error)) func(io.Reader) (cloudprovider.Interface, error) {
	return func(r io.Reader) (cloudprovider.Interface, error) {
		cfg, err := parse(r)
		if err != nil {
			return nil, err
		}
		p, err := build(cfg)
		if err != nil {
			return nil, err // not p: a typed nil is not a nil interface
		}
		return p, nil
	}
}

// Options describe a backend's provider to Base.
type Options struct {
	// Name is the backend's name (ProviderName, and errors).
	Name string
	// View is the shared view of the cluster's instances.
	View *view.View
	// MaxAge bounds how old the view may be for an answer (the config's
	// instanceMaxAge).
	MaxAge time.Duration
	// ClusterTag is what names the cluster's instances to the approver
	// (cloud.Attester).
	ClusterTag string
	// Finder finds a Node's instance and asks the cloud about one: the
	// provider itself, whose ConfirmInstance is its own and whose
	// FindInstance is Base's unless it writes one.
	Finder InstanceFinder
	// ProviderID checks that a Node's providerID is this cloud's and gives
	// it in the form the view indexes it by (most clouds: as it is). Base's
	// FindInstance and Zones use it; required unless the provider writes
	// its own FindInstance and Zones is false.
	ProviderID func(providerID string) (string, error)
	// Metadata turns an instance into the Node's metadata; nil is Metadata.
	Metadata func(view.Instance) *cloudprovider.InstanceMetadata
	// Zones makes Zones implemented over the view (ViewZones); false: not
	// implemented (InstanceMetadata carries zones).
	Zones bool
	// Verifiers are the approver's evidence verifiers; none for a cloud
	// that signs no instance identity (its machines join with tickets).
	Verifiers []cloud.EvidenceVerifier
}

// Base is what every provider over the shared view has in common, to embed
// in the backend's Cloud: InstancesV2 (ViewInstances), Zones (or
// not), ProviderName, no legacy Instances and no Clusters, a required
// cluster id, and the approver's Attester (InstanceView, ClusterTag,
// EvidenceVerifiers). The backend adds its config, its SDK client,
// ConfirmInstance, and Initialize, LoadBalancer and Routes (InstancesOnly
// when it has none). A method the backend writes itself wins over Base's.
type Base struct {
	ViewInstances // InstancesV2, over Finder

	name       string
	view       *view.View
	maxAge     time.Duration
	clusterTag string
	providerID func(string) (string, error)
	zones      *ViewZones
	verifiers  []cloud.EvidenceVerifier
}

// NewBase builds a Base. It panics on options that are a programming
// error (no name, view or finder; zones without ProviderID).
func NewBase(o Options) Base {
	if o.Name == "" || o.View == nil || o.Finder == nil {
		panic("kit: a provider needs a name, a view and a finder")
	}
	if o.Metadata == nil {
		o.Metadata = Metadata
	}
	b := Base{
		ViewInstances: ViewInstances{Finder: o.Finder, View: o.View, Metadata: o.Metadata},
		name:          o.Name, view: o.View, maxAge: o.MaxAge, clusterTag: o.ClusterTag,
		providerID: o.ProviderID, verifiers: o.Verifiers,
	}
	if o.Zones {
		if o.ProviderID == nil {
			panic("kit: Zones over the view need ProviderID")
		}
		b.zones = &ViewZones{Cloud: o.Name, View: o.View, MaxAge: o.MaxAge, ProviderID: o.ProviderID}
	}
	return b
}

// Metadata is an instance as a Node's metadata: providerID, instance type,
// addresses, zone and region (the node controller turns the last three
// into Kubernetes' standard labels).
func Metadata(in view.Instance) *cloudprovider.InstanceMetadata {
	return &cloudprovider.InstanceMetadata{
		ProviderID:    in.ProviderID,
		InstanceType:  in.InstanceType,
		NodeAddresses: in.Addresses,
		Zone:          in.Zone,
		Region:        in.Region,
	}
}

// FindInstance finds a Node's instance in the shared view: by its
// providerID (checked with Options.ProviderID: one not of this cloud is an
// error, never a miss) when it has one, else by its name under the node
// name policy. An outage is an error, never "not found".
func (b *Base) FindInstance(ctx context.Context, node *v1.Node) (view.Instance, error) {
	if node.Spec.ProviderID == "" {
		return b.view.ByNodeName(ctx, node.Name, b.maxAge)
	}
	if b.providerID == nil {
		return view.Instance{}, errors.New("kit: the provider gave no ProviderID check")
	}
	id, err := b.providerID(node.Spec.ProviderID)
	if err != nil {
		return view.Instance{}, fmt.Errorf("node %s: %w", node.Name, err)
	}
	return b.view.ByProviderID(ctx, id, b.maxAge)
}

// InstancesV2 is implemented over the view.
func (b *Base) InstancesV2() (cloudprovider.InstancesV2, bool) { return b.ViewInstances, true }

// Zones is implemented over the view with Options.Zones; otherwise not: the
// cloud node controller reads a Node's zone and region from
// InstanceMetadata and asks Zones only without InstancesV2.
func (b *Base) Zones() (cloudprovider.Zones, bool) {
	if b.zones == nil {
		return nil, false
	}
	return b.zones, true
}

// Instances (the legacy interface) is not implemented: InstancesV2 is.
func (b *Base) Instances() (cloudprovider.Instances, bool) { return nil, false }

// Clusters is not implemented.
func (b *Base) Clusters() (cloudprovider.Clusters, bool) { return nil, false }

// ProviderName is the backend's name.
func (b *Base) ProviderName() string { return b.name }

// HasClusterID is true: the cluster id is required.
func (b *Base) HasClusterID() bool { return true }

// InstanceView is the shared view of the cluster's instances.
func (b *Base) InstanceView() *view.View { return b.view }

// ClusterTag names the cluster's instances (cloud.Attester).
func (b *Base) ClusterTag() string { return b.clusterTag }

// EvidenceVerifiers are the approver's verifiers of the cloud's evidence;
// none when the cloud signs no instance identity (its machines join with
// join tickets, whose verifier the approver adds itself).
func (b *Base) EvidenceVerifiers() []cloud.EvidenceVerifier { return b.verifiers }
