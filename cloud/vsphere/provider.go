package vsphere

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/vmware/govmomi/object"
	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/view"
	"github.com/mooring-dev/mooring/cloud/vsphere/agentid"
)

// ProviderName is the backend's name, for --cloud-provider and the node
// agent's cloud setting.
const ProviderName = agentid.Name

// Factory builds the provider from its cloud-config; backend.go registers
// it with mooring's backends.
func Factory(r io.Reader) (cloudprovider.Interface, error) {
	cfg, err := ParseConfig(r)
	if err != nil {
		return nil, err
	}
	return New(cfg)
}

// Cloud is vSphere as Kubernetes and mooring see it: InstancesV2 and Zones
// over the shared view of the cluster's VMs, and the approver's Attester.
// vSphere signs no VM identity, so it has no evidence verifier: its VMs
// join with join tickets, whose verifier the approver adds itself
// (--ticket-keys-file). It has no load balancers, no routes and no
// clusters.
type Cloud struct {
	cloud.ViewInstances // InstancesV2, over FindInstance and ConfirmInstance
	cloud.ViewZones
	cloud.InstancesOnly // no load balancers, routes or clusters (docs/vsphere.md)

	cfg    Config
	source *Source
	view   *view.View
}

var (
	_ cloudprovider.Interface   = (*Cloud)(nil)
	_ cloudprovider.InstancesV2 = (*Cloud)(nil)
	_ cloudprovider.Zones       = (*Cloud)(nil)
	_ cloud.Attester            = (*Cloud)(nil)
	_ cloud.InstanceFinder      = (*Cloud)(nil)
)

// Option changes how New connects.
type Option func(*conn)

// WithTransport wraps the HTTP transport of both vCenter sessions (SOAP
// and REST); tests count calls with it.
func WithTransport(wrap func(http.RoundTripper) http.RoundTripper) Option {
	return func(c *conn) { c.wrap = wrap }
}

// New builds the provider. It checks that the password and the CA file can
// be read, and makes no call: it logs in to vCenter on first use.
func New(cfg Config, opts ...Option) (*Cloud, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if _, err := cfg.Password(); err != nil {
		return nil, err
	}
	if _, err := cfg.roots(); err != nil {
		return nil, err
	}
	internal, _ := parseCIDRs(cfg.Nodes.InternalNetworkSubnetCIDR)
	external, _ := parseCIDRs(cfg.Nodes.ExternalNetworkSubnetCIDR)
	cn := &conn{cfg: cfg}
	for _, o := range opts {
		o(cn)
	}
	klog.InfoS("vSphere provider configured", "server", cfg.serverURL().Host, "user", cfg.Username, "folder", cfg.Folder,
		"clusterID", cfg.ClusterID, "clusterTagCategory", cfg.ClusterTagCategory, "zoneCategory", cfg.Labels.Zone, "regionCategory", cfg.Labels.Region)
	c := &Cloud{cfg: cfg, source: &Source{cfg: cfg, conn: cn, tags: newTagCache(cfg.TagCacheTTL.Duration),
		internalNets: internal, externalNets: external}}
	c.view = view.New(c.source, view.Options{
		MinRefreshInterval: cfg.MinRefreshInterval.Duration, MaxFailureBackoff: cfg.MaxFailureBackoff.Duration,
	})
	c.ViewInstances = cloud.ViewInstances{Finder: c, View: c.view, Metadata: metadata}
	c.ViewZones = cloud.ViewZones{Cloud: ProviderName, View: c.view, MaxAge: cfg.InstanceMaxAge.Duration,
		ProviderID: viewKey}
	return c, nil
}

// viewKey is a providerID in the form the view indexes: the UUID
// lower-cased.
func viewKey(providerID string) (string, error) {
	uuid, err := ParseProviderID(providerID)
	if err != nil {
		return "", err
	}
	return agentid.ProviderID(uuid), nil
}

// EvidenceVerifiers is empty: vSphere signs no VM identity. The approver
// accepts join tickets when it is given their keys.
func (c *Cloud) EvidenceVerifiers() []cloud.EvidenceVerifier { return nil }

// InstanceView is the shared view of the cluster's VMs.
func (c *Cloud) InstanceView() *view.View { return c.view }

// ClusterTag is the cluster id, which view.Instance.Cluster holds and join
// tickets name as their audience.
func (c *Cloud) ClusterTag() string { return c.cfg.ClusterID }

// Config is the provider's effective configuration.
func (c *Cloud) Config() Config { return c.cfg }

// InstancesV2 is implemented.
func (c *Cloud) InstancesV2() (cloudprovider.InstancesV2, bool) { return c, true }

// Zones is implemented over the view.
func (c *Cloud) Zones() (cloudprovider.Zones, bool) { return c, true }

// ProviderName is "vsphere".
func (c *Cloud) ProviderName() string { return ProviderName }

// FindInstance finds a Node's VM in the shared view: by its providerID when
// it has one (its UUID compared in lower case), else by its name (the VM's
// name, lower-cased). An outage is an error, never "not found".
func (c *Cloud) FindInstance(ctx context.Context, node *v1.Node) (view.Instance, error) {
	if node.Spec.ProviderID != "" {
		key, err := viewKey(node.Spec.ProviderID)
		if err != nil {
			return view.Instance{}, fmt.Errorf("node %s: %w", node.Name, err)
		}
		return c.view.ByProviderID(ctx, key, c.cfg.InstanceMaxAge.Duration)
	}
	return c.view.ByNodeName(ctx, node.Name, c.cfg.InstanceMaxAge.Duration)
}

// ConfirmInstance asks vCenter for the VM of a providerID itself
// (SearchIndex.FindByUuid), after FindInstance missed it in the cluster's
// list: a *cloud.AbsentError when vCenter has no VM of that BIOS UUID, a
// *cloud.ForeignError when the VM is not in the cluster's folder or lacks
// the cluster tag.
func (c *Cloud) ConfirmInstance(ctx context.Context, providerID string) (view.Instance, error) {
	uuid, err := ParseProviderID(providerID)
	if err != nil {
		return view.Instance{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout.Duration)
	defer cancel()
	var out view.Instance
	err = c.source.conn.do(ctx, func(ctx context.Context, cl clients) error {
		ref, err := object.NewSearchIndex(cl.vim).FindByUuid(ctx, nil, uuid, true, new(bool))
		if err != nil {
			return fmt.Errorf("vsphere: find VM by BIOS UUID %s: %w", uuid, err)
		}
		if ref == nil {
			return &cloud.AbsentError{ID: providerID}
		}
		r := ref.Reference()
		inv, err := c.source.retrieve(ctx, cl, &r)
		if err != nil {
			return err
		}
		folder, err := c.source.folderRef(ctx, cl)
		if err != nil {
			return err
		}
		inFolder := false
		for _, o := range inv.chain(r)[1:] {
			inFolder = inFolder || o == folder
		}
		if !inFolder {
			return &cloud.ForeignError{ID: providerID, Why: "is not in folder " + c.cfg.Folder}
		}
		cands, err := c.source.toView(ctx, cl, inv)
		if err != nil {
			return err
		}
		for _, cd := range cands {
			if cd.ID != uuid {
				continue
			}
			if cd.why != "" {
				return &cloud.ForeignError{ID: providerID, Why: cd.why}
			}
			out = cd.Instance
			return nil
		}
		return &cloud.ForeignError{ID: providerID, Why: "is a template or has no BIOS UUID"}
	})
	return out, err
}

// metadata is vCenter's record of a VM as the Node's metadata.
func metadata(in view.Instance) *cloudprovider.InstanceMetadata {
	return &cloudprovider.InstanceMetadata{
		ProviderID:    in.ProviderID,
		InstanceType:  in.InstanceType,
		NodeAddresses: in.Addresses,
		Zone:          in.Zone,
		Region:        in.Region,
	}
}
