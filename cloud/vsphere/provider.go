package vsphere

import (
	"context"
	"fmt"
	"net/http"

	"github.com/vmware/govmomi/object"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/view"
	"github.com/mooring-dev/mooring/cloud/vsphere/agentid"
)

// ProviderName is the backend's name, for --cloud-provider and the node
// agent's cloud setting.
const ProviderName = agentid.Name

// Factory builds the provider from its cloud-config; backend.go registers
// it with mooring's backends.
var Factory = kit.Factory(ParseConfig, func(cfg Config) (*Cloud, error) { return New(cfg) })

// Cloud is vSphere as Kubernetes and mooring see it: InstancesV2 and Zones
// over the shared view of the cluster's VMs, and the approver's Attester.
// vSphere signs no VM identity, so it has no evidence verifier: its VMs
// join with join tickets, whose verifier the approver adds itself
// (--ticket-keys-file). It has no load balancers, no routes and no
// clusters.
type Cloud struct {
	kit.Base          // InstancesV2 and Zones over the view, the Attester
	kit.InstancesOnly // no load balancers, routes or clusters (docs/vsphere.md)

	cfg    Config
	source *Source
}

var (
	_ cloudprovider.Interface = (*Cloud)(nil)
	_ cloud.Attester          = (*Cloud)(nil)
	_ kit.InstanceFinder      = (*Cloud)(nil)
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
	sources, _ := cfg.addressSources()
	internal, _ := parseCIDRs(cfg.Nodes.InternalNetworkSubnetCIDR)
	external, _ := parseCIDRs(cfg.Nodes.ExternalNetworkSubnetCIDR)
	cn := &conn{cfg: cfg}
	for _, o := range opts {
		o(cn)
	}
	klog.InfoS("vSphere provider configured", "server", cfg.serverURL().Host, "user", cfg.Username, "folder", cfg.Folder,
		"clusterID", cfg.ClusterID, "clusterTagCategory", cfg.ClusterTagCategory, "zoneCategory", cfg.Labels.Zone, "regionCategory", cfg.Labels.Region,
		"trustedAddressSources", cfg.TrustedAddressSources)
	c := &Cloud{cfg: cfg, source: &Source{cfg: cfg, conn: cn, tags: newTagCache(cfg.TagCacheTTL.Duration),
		internalNets: internal, externalNets: external, sources: sources}}
	v := view.New(c.source, view.Options{
		MinRefreshInterval: cfg.MinRefreshInterval.Duration, MaxFailureBackoff: cfg.MaxFailureBackoff.Duration,
	})
	// The cluster id names the cluster: view.Instance.Cluster holds it and
	// join tickets name it as their audience. A providerID is found by its
	// UUID in lower case (viewKey).
	c.Base = kit.NewBase(kit.Options{Name: ProviderName, View: v, MaxAge: cfg.InstanceMaxAge.Duration,
		ClusterTag: cfg.ClusterID, Finder: c, Zones: true, ProviderID: viewKey})
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

// Config is the provider's effective configuration.
func (c *Cloud) Config() Config { return c.cfg }

// ConfirmInstance asks vCenter for the VM of a providerID itself
// (SearchIndex.FindByUuid), after FindInstance missed it in the cluster's
// list: a *kit.AbsentError when vCenter has no VM of that BIOS UUID, a
// *kit.ForeignError when the VM is not in the cluster's folder or lacks
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
			return &kit.AbsentError{ID: providerID}
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
			return &kit.ForeignError{ID: providerID, Why: "is not in folder " + c.cfg.Folder}
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
				return &kit.ForeignError{ID: providerID, Why: cd.why}
			}
			out = cd.Instance
			return nil
		}
		return &kit.ForeignError{ID: providerID, Why: "is a template or has no BIOS UUID"}
	})
	return out, err
}
