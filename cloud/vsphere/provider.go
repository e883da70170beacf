package vsphere

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/vmware/govmomi/object"
	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

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
	v := view.New(c.source, cfg.ViewOptions())
	// The cluster id names the cluster: view.Instance.Cluster holds it and
	// join tickets name it as their audience. A providerID is found by its
	// UUID in lower case (viewKey), in either byte order (lookup, which
	// FindInstance, Zones and ConfirmInstance use).
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

// FindInstance finds a Node's VM in the shared view: by its providerID,
// whose UUID may be in either byte order (lookup), when it has one; else by
// its name under the node name policy.
func (c *Cloud) FindInstance(ctx context.Context, node *v1.Node) (view.Instance, error) {
	if node.Spec.ProviderID == "" {
		return c.Base.FindInstance(ctx, node)
	}
	in, err := c.lookup(ctx, node.Spec.ProviderID)
	if errors.Is(err, errProviderID) {
		return in, fmt.Errorf("node %s: %w", node.Name, err)
	}
	return in, err
}

// lookup finds the VM of a providerID in the shared view, its UUID taken in
// either byte order: a Node's providerID may hold the UUID as its guest's
// SMBIOS showed it, with the first three fields swapped (the agent's
// fallback on a kernel that prints it otherwise than the SMBIOS version
// says; a providerID set by other software from product_uuid). The upstream
// CCM tries both orders too. A VM is answered only when exactly one VM of
// the cluster lists under the two forms: when one VM has the UUID and
// another the swapped UUID, which of them the Node is cannot be told, and
// the answer is a view.AmbiguousError (nothing is decided, as for clones
// that share a UUID). Which forms the last listing held decides which is
// looked up first, so that a lookup makes no listing that a lookup of the
// form the VM lists under would not make.
func (c *Cloud) lookup(ctx context.Context, providerID string) (view.Instance, error) {
	uuid, err := ParseProviderID(providerID)
	if err != nil {
		return view.Instance{}, err
	}
	v, maxAge := c.InstanceView(), c.cfg.InstanceMaxAge.Duration
	asked, swapped := agentid.ProviderID(uuid), agentid.ProviderID(agentid.SwapUUID(uuid))
	if swapped == asked {
		return v.ByProviderID(ctx, asked, maxAge)
	}
	first, second := asked, swapped
	if c.source.lastListed(swapped) && !c.source.lastListed(asked) {
		first, second = swapped, asked
	}
	in, err := v.ByProviderID(ctx, first, maxAge)
	if err != nil && !errors.Is(err, view.ErrNotFound) {
		return in, err // not yet known, ambiguous, or vCenter failing: decide nothing
	}
	found := err == nil
	// The lookup may have listed again: the last listing says whether the
	// other form names a VM too.
	if !c.source.lastListed(second) {
		switch {
		case found:
			if first == swapped {
				klog.V(2).InfoS("Found a providerID's VM by its BIOS UUID in the other byte order", "providerID", providerID, "vm", in.Name, "biosUUID", in.ID)
			}
			return in, nil
		case first == asked:
			return in, err
		}
		return v.ByProviderID(ctx, asked, maxAge)
	}
	other, oerr := v.ByProviderID(ctx, second, maxAge)
	switch {
	case oerr == nil && found:
		return view.Instance{}, eitherOrder(asked, in, other)
	case oerr == nil:
		if second == swapped {
			klog.V(2).InfoS("Found a providerID's VM by its BIOS UUID in the other byte order", "providerID", providerID, "vm", other.Name, "biosUUID", other.ID)
		}
		return other, nil
	case errors.Is(oerr, view.ErrNotFound) && found:
		return in, nil
	case errors.Is(oerr, view.ErrNotFound) && first == asked:
		return view.Instance{}, err
	}
	return view.Instance{}, oerr
}

// eitherOrder is the answer for a providerID whose UUID names one VM and
// its swapped form another: ambiguous.
func eitherOrder(providerID string, a, b view.Instance) error {
	return fmt.Errorf("vsphere: %s names VM %s in one byte order of its BIOS UUID and VM %s in the other: %w",
		providerID, a.Name, b.Name, &view.AmbiguousError{ProviderID: providerID, Instances: []view.Instance{a, b}})
}

// Zones is implemented over the view: the zone and region of a Node's VM,
// its providerID found in either byte order as FindInstance finds it.
func (c *Cloud) Zones() (cloudprovider.Zones, bool) {
	return zones{ViewZones: kit.ViewZones{Cloud: ProviderName, View: c.InstanceView(), MaxAge: c.cfg.InstanceMaxAge.Duration, ProviderID: viewKey}, c: c}, true
}

type zones struct {
	kit.ViewZones
	c *Cloud
}

// GetZoneByProviderID is the zone and region of a Node's VM (lookup).
func (z zones) GetZoneByProviderID(ctx context.Context, providerID string) (cloudprovider.Zone, error) {
	in, err := z.c.lookup(ctx, providerID)
	if err != nil {
		return cloudprovider.Zone{}, err
	}
	return cloudprovider.Zone{FailureDomain: in.Zone, Region: in.Region}, nil
}

// errAbsent is confirmOne's answer that vCenter has no VM of a UUID.
var errAbsent = errors.New("no VM of that BIOS UUID")

// ConfirmInstance asks vCenter for the VM of a providerID itself
// (SearchIndex.FindByUuid), after FindInstance missed it in the cluster's
// list, for its UUID in both byte orders as lookup takes it: the one VM of
// the cluster found, an ambiguous error when both forms name a VM of the
// cluster, a *kit.ForeignError when a VM found is not in the cluster's
// folder or lacks the cluster tag and none is the cluster's, and a
// *kit.AbsentError when vCenter has a VM of neither form.
func (c *Cloud) ConfirmInstance(ctx context.Context, providerID string) (view.Instance, error) {
	uuid, err := ParseProviderID(providerID)
	if err != nil {
		return view.Instance{}, err
	}
	forms := []string{uuid}
	if sw := agentid.SwapUUID(uuid); sw != uuid {
		forms = append(forms, sw)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout.Duration)
	defer cancel()
	var (
		found   []view.Instance
		foreign error
	)
	err = c.source.conn.do(ctx, func(ctx context.Context, cl clients) error {
		found, foreign = nil, nil
		for _, u := range forms {
			in, err := c.confirmOne(ctx, cl, providerID, u, u != uuid)
			var f *kit.ForeignError
			switch {
			case err == nil:
				found = append(found, in)
			case errors.As(err, &f):
				if foreign == nil {
					foreign = err
				}
			case !errors.Is(err, errAbsent):
				return err
			}
		}
		return nil
	})
	switch {
	case err != nil:
		return view.Instance{}, err
	case len(found) == 2:
		return view.Instance{}, eitherOrder(agentid.ProviderID(uuid), found[0], found[1])
	case len(found) == 1:
		return found[0], nil
	case foreign != nil:
		return view.Instance{}, foreign
	}
	return view.Instance{}, &kit.AbsentError{ID: providerID}
}

// confirmOne asks vCenter for the VM of one BIOS UUID (swapped: the
// providerID's in the other byte order): the cluster's VM, a
// *kit.ForeignError, or errAbsent.
func (c *Cloud) confirmOne(ctx context.Context, cl clients, providerID, uuid string, swapped bool) (view.Instance, error) {
	ref, err := object.NewSearchIndex(cl.vim).FindByUuid(ctx, nil, uuid, true, new(bool))
	if err != nil {
		return view.Instance{}, fmt.Errorf("vsphere: find VM by BIOS UUID %s: %w", uuid, err)
	}
	if ref == nil {
		return view.Instance{}, errAbsent
	}
	as := ""
	if swapped {
		as = fmt.Sprintf("(its BIOS UUID in the other byte order, %s) ", uuid)
	}
	r := ref.Reference()
	inv, err := c.source.retrieve(ctx, cl, &r)
	if err != nil {
		return view.Instance{}, err
	}
	folder, err := c.source.folderRef(ctx, cl)
	if err != nil {
		return view.Instance{}, err
	}
	inFolder := false
	for _, o := range inv.chain(r)[1:] {
		inFolder = inFolder || o == folder
	}
	if !inFolder {
		return view.Instance{}, &kit.ForeignError{ID: providerID, Why: as + "is not in folder " + c.cfg.Folder}
	}
	cands, err := c.source.toView(ctx, cl, inv)
	if err != nil {
		return view.Instance{}, err
	}
	for _, cd := range cands {
		if cd.ID != uuid {
			continue
		}
		if cd.why != "" {
			return view.Instance{}, &kit.ForeignError{ID: providerID, Why: as + cd.why}
		}
		return cd.Instance, nil
	}
	return view.Instance{}, &kit.ForeignError{ID: providerID, Why: as + "is a template or has no BIOS UUID"}
}
