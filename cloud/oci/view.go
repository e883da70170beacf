package oci

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/oracle/oci-go-sdk/v65/common"
	"github.com/oracle/oci-go-sdk/v65/core"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/oci/agentid"
	"github.com/mooring-dev/mooring/cloud/view"
)

// pageSize is the limit of one list call.
const pageSize = 100

// maxPages bounds one listing of a compartment.
const maxPages = 1000

// FaultDomainLabel is the Node label the upstream OCI CCM gives an
// instance's fault domain.
const FaultDomainLabel = "oci.oraclecloud.com/fault-domain"

// Source lists a cluster's OCI instances for the shared instance view: per
// compartment, ListInstances and ListVnicAttachments, every page; the
// addresses of VNICs not seen before with GetVnic (a VNIC's private IP
// does not change in its life; it is remembered while it is attached).
type Source struct {
	Compute *core.ComputeClient
	Network *core.VirtualNetworkClient
	// Compartments are listed in turn.
	Compartments []string
	// ClusterTag (in ClusterTagNamespace when that is set, a defined tag;
	// else freeform) and ClusterID: an instance is the cluster's when the
	// tag has the value ClusterID.
	ClusterTag, ClusterTagNamespace, ClusterID string
	// RequestTimeout bounds each call; 0 leaves it to the context.
	RequestTimeout time.Duration

	vnics *vnicCache
}

var _ view.Source = Source{}

// vnicCache remembers VNICs' addresses by VNIC OCID.
type vnicCache struct {
	mu sync.Mutex
	m  map[string]vnicAddrs
}

type vnicAddrs struct {
	private, public string
	// ipv6 are the VNIC's IPv6 addresses (an IPv6-only VNIC has no
	// private IPv4 address).
	ipv6    []string
	primary bool
}

func newVnicCache() *vnicCache { return &vnicCache{m: map[string]vnicAddrs{}} }

// ListInstances follows every page of every compartment. Terminated
// instances, which OCI lists for a while after, are listed terminated,
// without addresses.
func (s Source) ListInstances(ctx context.Context) ([]view.Instance, error) {
	var out []view.Instance
	attached := map[string]bool{}
	for _, comp := range s.Compartments {
		instances, err := s.listWhole(ctx, comp)
		if err != nil {
			return nil, err
		}
		var mine []core.Instance
		for _, in := range instances {
			if s.isClusters(in) {
				mine = append(mine, in)
			}
		}
		if len(mine) == 0 {
			continue
		}
		atts, err := s.listAttachments(ctx, comp, nil)
		if err != nil {
			return nil, err
		}
		for _, in := range mine {
			vi, ok := s.toView(in)
			if !ok {
				continue
			}
			if vi.State != view.StateTerminated {
				addrs, err := s.addresses(ctx, atts[vi.ID], attached)
				if err != nil {
					return nil, err
				}
				vi.Addresses = addrs
			}
			out = append(out, vi)
		}
	}
	s.vnics.keep(attached)
	return out, nil
}

func (s Source) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.RequestTimeout > 0 {
		return context.WithTimeout(ctx, s.RequestTimeout)
	}
	return context.WithCancel(ctx)
}

// listWhole lists a compartment's instances, whole. A page token is no
// snapshot: an instance deleted while the pages are read can shift one
// that was there throughout onto a page already read, and the view
// believes an instance a fresh list lacks is gone. The pages are asked in
// creation order (TIMECREATED, ascending: OCI sorts within each
// availability domain, so a new instance shifts the later ones down, to
// be listed twice, never missed); a miss needs the deletion of an
// instance listed before it. So a list of more than one page is taken
// only when the next listing holds the same instances (the deleted one
// is gone from it) and neither lists one twice; else listed again, up to
// kit.ListAttempts listings (kit.ReadWhole with the instance OCID as
// key). A list of one page is one answer, taken at once.
func (s Source) listWhole(ctx context.Context, comp string) ([]core.Instance, error) {
	return kit.ReadWhole("compute ListInstances of compartment "+comp, kit.ListAttempts,
		func() ([]core.Instance, int, error) { return s.listInstances(ctx, comp) },
		func(in core.Instance) string { return deref(in.Id) })
}

// listInstances reads every page of a compartment's instances once, in
// creation order; an instance listed twice is kit.ErrListChanged.
func (s Source) listInstances(ctx context.Context, comp string) (out []core.Instance, pages int, err error) {
	var page *string
	seen := map[string]bool{}
	ids := map[string]bool{}
	for n := 1; ; n++ {
		if n > maxPages {
			return nil, n - 1, fmt.Errorf("compute ListInstances of compartment %s: more than %d pages", comp, maxPages)
		}
		cctx, cancel := s.withTimeout(ctx)
		resp, err := s.Compute.ListInstances(cctx, core.ListInstancesRequest{CompartmentId: common.String(comp), Limit: common.Int(pageSize), Page: page,
			SortBy: core.ListInstancesSortByTimecreated, SortOrder: core.ListInstancesSortOrderAsc})
		cancel()
		if err != nil {
			return nil, n, fmt.Errorf("compute ListInstances of compartment %s (page %d): %w", comp, n, err)
		}
		for _, in := range resp.Items {
			id := deref(in.Id)
			if id != "" && ids[id] {
				return nil, n, fmt.Errorf("%w: instance %s listed twice", kit.ErrListChanged, id)
			}
			ids[id] = true
		}
		out = append(out, resp.Items...)
		if resp.OpcNextPage == nil || *resp.OpcNextPage == "" {
			return out, n, nil
		}
		if seen[*resp.OpcNextPage] {
			return nil, n, fmt.Errorf("compute ListInstances of compartment %s: page token repeated", comp)
		}
		seen[*resp.OpcNextPage] = true
		page = resp.OpcNextPage
	}
}

// listAttachments lists a compartment's VNIC attachments (of one instance
// when instance is set) that are attached, by instance OCID.
func (s Source) listAttachments(ctx context.Context, comp string, instance *string) (map[string][]core.VnicAttachment, error) {
	out := map[string][]core.VnicAttachment{}
	var page *string
	seen := map[string]bool{}
	for n := 1; ; n++ {
		if n > maxPages {
			return nil, fmt.Errorf("compute ListVnicAttachments of compartment %s: more than %d pages", comp, maxPages)
		}
		cctx, cancel := s.withTimeout(ctx)
		resp, err := s.Compute.ListVnicAttachments(cctx, core.ListVnicAttachmentsRequest{CompartmentId: common.String(comp),
			InstanceId: instance, Limit: common.Int(pageSize), Page: page})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("compute ListVnicAttachments of compartment %s (page %d): %w", comp, n, err)
		}
		for _, a := range resp.Items {
			if a.InstanceId != nil && a.VnicId != nil && a.LifecycleState == core.VnicAttachmentLifecycleStateAttached {
				out[*a.InstanceId] = append(out[*a.InstanceId], a)
			}
		}
		if resp.OpcNextPage == nil || *resp.OpcNextPage == "" {
			return out, nil
		}
		if seen[*resp.OpcNextPage] {
			return nil, fmt.Errorf("compute ListVnicAttachments of compartment %s: page token repeated", comp)
		}
		seen[*resp.OpcNextPage] = true
		page = resp.OpcNextPage
	}
}

// addresses are an instance's addresses from its attached VNICs: the
// primary VNIC's private then public IP then IPv6 addresses, then the
// others' in attachment order. VNICs are read once and remembered.
func (s Source) addresses(ctx context.Context, atts []core.VnicAttachment, attached map[string]bool) ([]v1.NodeAddress, error) {
	var primary, others []v1.NodeAddress
	for _, a := range atts {
		id := *a.VnicId
		attached[id] = true
		va, ok := s.vnics.get(id)
		if !ok {
			cctx, cancel := s.withTimeout(ctx)
			resp, err := s.Network.GetVnic(cctx, core.GetVnicRequest{VnicId: common.String(id)})
			cancel()
			var se common.ServiceError
			if errors.As(err, &se) && se.GetHTTPStatusCode() == 404 {
				continue // detached since the listing
			}
			if err != nil {
				return nil, fmt.Errorf("network GetVnic %s: %w", id, err)
			}
			va = vnicAddrs{private: deref(resp.PrivateIp), public: deref(resp.PublicIp), ipv6: resp.Ipv6Addresses,
				primary: resp.IsPrimary != nil && *resp.IsPrimary}
			s.vnics.put(id, va)
		}
		var addrs []v1.NodeAddress
		type typed struct {
			t  v1.NodeAddressType
			ip string
		}
		all := []typed{{v1.NodeInternalIP, va.private}, {v1.NodeExternalIP, va.public}}
		for _, a := range va.ipv6 {
			all = append(all, typed{ipv6Type(a), a})
		}
		for _, x := range all {
			if x.ip == "" {
				continue
			}
			ip := net.ParseIP(x.ip)
			if ip == nil {
				klog.V(2).InfoS("Leaving out an unparsable OCI address", "vnic", id, "address", x.ip)
				continue
			}
			addrs = append(addrs, v1.NodeAddress{Type: x.t, Address: ip.String()})
		}
		if va.primary {
			primary = append(primary, addrs...)
		} else {
			others = append(others, addrs...)
		}
	}
	return append(primary, others...), nil
}

// ipv6Type is the Node address type of a VNIC's IPv6 address, as OCI's
// own cloud-controller-manager gives it (extractNodeAddresses in its
// pkg/cloudprovider/providers/oci/instances.go): InternalIP for a unique
// local address (fc00::/7), ExternalIP for any other.
func ipv6Type(a string) v1.NodeAddressType {
	if ip, err := netip.ParseAddr(a); err == nil && ip.IsPrivate() {
		return v1.NodeInternalIP
	}
	return v1.NodeExternalIP
}

func (c *vnicCache) get(id string) (vnicAddrs, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[id]
	return v, ok
}

func (c *vnicCache) put(id string, v vnicAddrs) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[id] = v
}

// keep forgets the VNICs not attached in the last full listing.
func (c *vnicCache) keep(attached map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.m {
		if !attached[id] {
			delete(c.m, id)
		}
	}
}

// isClusters reports whether the instance carries the cluster's tag.
func (s Source) isClusters(in core.Instance) bool {
	if s.ClusterTagNamespace == "" {
		return in.FreeformTags[s.ClusterTag] == s.ClusterID
	}
	v, ok := in.DefinedTags[s.ClusterTagNamespace][s.ClusterTag].(string)
	return ok && v == s.ClusterID
}

// toView converts an OCI instance into the shared view's form (addresses
// apart); false when its id is not an instance OCID.
func (s Source) toView(in core.Instance) (view.Instance, bool) {
	id := deref(in.Id)
	if !agentid.ValidOCID(id, "instance") {
		klog.V(2).InfoS("Leaving out an OCI instance without an instance OCID", "id", id)
		return view.Instance{}, false
	}
	name := deref(in.DisplayName)
	var created time.Time
	if in.TimeCreated != nil {
		created = in.TimeCreated.Time
	}
	vi := view.Instance{
		ProviderID:   agentid.ProviderID(id),
		ID:           id,
		Name:         name,
		NodeName:     agentid.NodeName(name),
		Zone:         FailureDomain(deref(in.AvailabilityDomain)),
		Region:       deref(in.Region),
		InstanceType: deref(in.Shape),
		Cluster:      s.ClusterID,
		State:        viewState(id, in.LifecycleState),
		Created:      created,
	}
	if fd := deref(in.FaultDomain); fd != "" {
		vi.Labels = map[string]string{FaultDomainLabel: fd}
	}
	return vi, true
}

// FailureDomain is the zone of an availability domain as the upstream OCI
// CCM gives it: the name after the tenancy-specific prefix (Uocm:PHX-AD-1
// is PHX-AD-1).
func FailureDomain(ad string) string {
	return ad[strings.LastIndexByte(ad, ':')+1:]
}

// viewState maps OCI's instance lifecycle states onto the view's.
func viewState(id string, st core.InstanceLifecycleStateEnum) view.State {
	switch st {
	case core.InstanceLifecycleStateRunning:
		return view.StateRunning
	case core.InstanceLifecycleStateStopping, core.InstanceLifecycleStateStopped:
		return view.StateStopped
	case core.InstanceLifecycleStateTerminating, core.InstanceLifecycleStateTerminated:
		return view.StateTerminated
	case core.InstanceLifecycleStateProvisioning, core.InstanceLifecycleStateStarting,
		core.InstanceLifecycleStateMoving, core.InstanceLifecycleStateCreatingImage:
		return view.StatePending
	}
	klog.V(2).InfoS("Unknown OCI instance lifecycle state; treating it as pending", "instance", id, "state", st)
	return view.StatePending
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// errProviderID is wrapped by ParseProviderID's errors.
var errProviderID = errors.New("not an OCI providerID")

// ParseProviderID reads oci://<instance OCID>.
func ParseProviderID(providerID string) (string, error) {
	id, ok := strings.CutPrefix(providerID, agentid.ProviderIDPrefix)
	if !ok || !agentid.ValidOCID(id, "instance") {
		return "", fmt.Errorf("%w: %q: want %s<instance OCID>", errProviderID, providerID, agentid.ProviderIDPrefix)
	}
	return id, nil
}
