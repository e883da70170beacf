package vsphere

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmware/govmomi/fault"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/view"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/kit"
	mview "github.com/mooring-dev/mooring/cloud/view"
	"github.com/mooring-dev/mooring/cloud/vsphere/agentid"
)

// vmProperties are what a listing reads of each VM.
var vmProperties = []string{
	"name", "parent", "config.uuid", "config.template", "config.createDate",
	"runtime.powerState", "runtime.host", "guest.hostName", "guest.net",
	"summary.config.numCpu", "summary.config.memorySizeMB", "summary.config.guestId",
}

// infraTypes are the inventory objects whose tags can give a VM its zone
// and region (its host and the host's ancestors, the VM's folders), read
// for their parent only. A container view matches types exactly on some
// servers (the simulator), so the cluster type is named besides its
// parent type.
var infraTypes = []string{"Folder", "Datacenter", "ComputeResource", "ClusterComputeResource", "HostSystem"}

// Source lists a cluster's VMs for the shared instance view: the VMs in
// the configured folder (recursively), read in one property collector
// retrieval over a container view, and the tags of the VMs and their
// hosts' and folders' hierarchy in one tag request. A listing makes the
// same few calls however many VMs there are: CreateContainerView (two with
// topology labels), RetrievePropertiesEx (and ContinueRetrievePropertiesEx
// per further page of results), DestroyView (each view), and, with tags
// configured, list-attached-tags-on-objects; plus, once, the folder's
// FindByInventoryPath, and the tags and categories not yet known.
type Source struct {
	cfg  Config
	conn *conn
	tags *tagCache

	internalNets, externalNets []*net.IPNet
	// sources says which address sources the config trusts.
	sources kit.AddressSources

	mu     sync.Mutex
	folder *types.ManagedObjectReference
	// listed holds the providerIDs of the last listing's VMs, for the
	// lookups that try a UUID in both byte orders (Cloud.lookup).
	listed atomic.Pointer[map[string]bool]
}

var _ mview.Source = (*Source)(nil)

// inventory is what one retrieval read: the VMs, and the parents of the
// other objects read (hosts, clusters, folders, datacenters).
type inventory struct {
	vms     []mo.VirtualMachine
	parents map[types.ManagedObjectReference]types.ManagedObjectReference
}

// ListInstances lists the cluster's VMs. A failed call is an error, never a
// shorter list: the view believes what a fresh list lacks is gone.
func (s *Source) ListInstances(ctx context.Context) ([]mview.Instance, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout.Duration)
	defer cancel()
	var out []mview.Instance
	err := s.conn.do(ctx, func(ctx context.Context, cl clients) error {
		inv, err := s.retrieve(ctx, cl, nil)
		if err != nil {
			return err
		}
		ins, err := s.toView(ctx, cl, inv)
		if err != nil {
			return err
		}
		out = out[:0]
		listed := make(map[string]bool, len(ins))
		for _, in := range ins {
			if in.why == "" {
				out = append(out, in.Instance)
				listed[in.ProviderID] = true
			}
		}
		s.listed.Store(&listed)
		return nil
	})
	return out, err
}

// lastListed reports whether the last listing held a VM of providerID (in
// the view's form). Before any listing it holds none.
func (s *Source) lastListed(providerID string) bool {
	m := s.listed.Load()
	return m != nil && (*m)[providerID]
}

// folderRef finds the configured folder (once; again after it was not
// found).
func (s *Source) folderRef(ctx context.Context, cl clients) (types.ManagedObjectReference, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.folder != nil {
		return *s.folder, nil
	}
	ref, err := object.NewSearchIndex(cl.vim).FindByInventoryPath(ctx, s.cfg.Folder)
	if err != nil {
		return types.ManagedObjectReference{}, fmt.Errorf("vsphere: find folder %s: %w", s.cfg.Folder, err)
	}
	if ref == nil {
		return types.ManagedObjectReference{}, fmt.Errorf("vsphere: folder %s does not exist (or the user may not see it)", s.cfg.Folder)
	}
	if r := ref.Reference(); r.Type != "Folder" {
		return types.ManagedObjectReference{}, fmt.Errorf("vsphere: %s is a %s, not a folder", s.cfg.Folder, r.Type)
	}
	r := ref.Reference()
	s.folder = &r
	return r, nil
}

// retrieve reads the VMs (those of the folder, or the one vm) and, when
// they are needed (topology labels, or the one VM's membership), the
// parents of the inventory's hosts, clusters, folders and datacenters, in
// one property collector retrieval.
func (s *Source) retrieve(ctx context.Context, cl clients, vm *types.ManagedObjectReference) (inventory, error) {
	folder, err := s.folderRef(ctx, cl)
	if err != nil {
		return inventory{}, err
	}
	views := view.NewManager(cl.vim)
	var objs []types.ObjectSpec
	overView := func(v *view.ContainerView) types.ObjectSpec {
		return types.ObjectSpec{Obj: v.Reference(), Skip: types.NewBool(true),
			SelectSet: []types.BaseSelectionSpec{&types.TraversalSpec{Type: "ContainerView", Path: "view"}}}
	}
	if vm == nil {
		vms, err := views.CreateContainerView(ctx, folder, []string{"VirtualMachine"}, true)
		if err != nil {
			if fault.Is(err, &types.ManagedObjectNotFound{}) {
				s.mu.Lock()
				s.folder = nil
				s.mu.Unlock()
			}
			return inventory{}, fmt.Errorf("vsphere: view of folder %s: %w", s.cfg.Folder, err)
		}
		defer destroy(vms)
		objs = append(objs, overView(vms))
	} else {
		objs = append(objs, types.ObjectSpec{Obj: *vm})
	}
	if vm != nil || s.cfg.Labels.Zone != "" || s.cfg.Labels.Region != "" {
		infra, err := views.CreateContainerView(ctx, cl.vim.ServiceContent.RootFolder, infraTypes, true)
		if err != nil {
			return inventory{}, fmt.Errorf("vsphere: view of the inventory: %w", err)
		}
		defer destroy(infra)
		objs = append(objs, overView(infra))
	}
	props := []types.PropertySpec{{Type: "VirtualMachine", PathSet: vmProperties}}
	for _, t := range infraTypes {
		props = append(props, types.PropertySpec{Type: t, PathSet: []string{"parent"}})
	}
	content, err := mo.RetrievePropertiesEx(ctx, cl.vim, types.RetrievePropertiesEx{
		This:    cl.vim.ServiceContent.PropertyCollector,
		SpecSet: []types.PropertyFilterSpec{{ObjectSet: objs, PropSet: props}},
	})
	if err != nil {
		return inventory{}, fmt.Errorf("vsphere: retrieve VM properties: %w", err)
	}
	inv := inventory{parents: map[types.ManagedObjectReference]types.ManagedObjectReference{}}
	for _, oc := range content {
		if oc.Obj.Type == "VirtualMachine" {
			var m mo.VirtualMachine
			if err := mo.LoadObjectContent([]types.ObjectContent{oc}, &m); err != nil {
				return inventory{}, fmt.Errorf("vsphere: VM %s: %w", oc.Obj.Value, err)
			}
			inv.vms = append(inv.vms, m)
			if m.Parent != nil {
				inv.parents[oc.Obj] = *m.Parent
			}
			continue
		}
		for _, p := range oc.PropSet {
			if ref, ok := p.Val.(types.ManagedObjectReference); ok && p.Name == "parent" {
				inv.parents[oc.Obj] = ref
			}
		}
	}
	return inv, nil
}

// destroy drops a container view, on its own deadline: the listing's may
// have passed.
func destroy(v *view.ContainerView) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := v.Destroy(ctx); err != nil {
		klog.V(2).InfoS("Could not destroy a vCenter container view (vCenter drops it with the session)", "view", v.Reference().Value, "err", err)
	}
}

// chain is obj and its ancestors, nearest first.
func (inv inventory) chain(obj types.ManagedObjectReference) []types.ManagedObjectReference {
	var out []types.ManagedObjectReference
	seen := map[types.ManagedObjectReference]bool{}
	for ok := true; ok && !seen[obj] && len(out) < 64; obj, ok = inv.parents[obj] {
		seen[obj] = true
		out = append(out, obj)
	}
	return out
}

// candidate is a VM in the view's form, or why it is not the cluster's.
type candidate struct {
	mview.Instance
	why string
}

// toView maps the VMs into the view's form, with their tags read (one
// request) when tags are configured.
func (s *Source) toView(ctx context.Context, cl clients, inv inventory) ([]candidate, error) {
	var (
		cats     map[string]string
		attached map[types.ManagedObjectReference][]tagOf
	)
	if s.cfg.ClusterTagCategory != "" || s.cfg.Labels.Zone != "" || s.cfg.Labels.Region != "" {
		var err error
		cats, err = s.tags.categories(ctx, cl.rest, s.cfg.ClusterTagCategory, s.cfg.Labels.Zone, s.cfg.Labels.Region)
		if err != nil {
			return nil, err
		}
		objs := map[types.ManagedObjectReference]bool{}
		for _, vm := range inv.vms {
			objs[vm.Self] = true
			if s.cfg.Labels.Zone != "" || s.cfg.Labels.Region != "" {
				for _, o := range s.topologyChain(inv, vm) {
					objs[o] = true
				}
			}
		}
		list := make([]types.ManagedObjectReference, 0, len(objs))
		for o := range objs {
			list = append(list, o)
		}
		if len(list) > 0 {
			if attached, err = s.tags.attached(ctx, cl.rest, list); err != nil {
				return nil, err
			}
		}
	}
	out := make([]candidate, 0, len(inv.vms))
	for _, vm := range inv.vms {
		c, ok := s.candidate(inv, vm, cats, attached)
		if ok {
			out = append(out, c)
		}
	}
	return out, nil
}

// topologyChain is where a VM's zone and region tags are looked for,
// nearest first: its host and the host's ancestors (cluster, folders,
// datacenter), then the VM and its folders.
func (s *Source) topologyChain(inv inventory, vm mo.VirtualMachine) []types.ManagedObjectReference {
	var out []types.ManagedObjectReference
	if vm.Runtime.Host != nil {
		out = inv.chain(*vm.Runtime.Host)
	}
	return append(out, inv.chain(vm.Self)...)
}

// candidate maps one VM; false leaves it out altogether (a template, no
// BIOS UUID).
func (s *Source) candidate(inv inventory, vm mo.VirtualMachine, cats map[string]string, attached map[types.ManagedObjectReference][]tagOf) (candidate, bool) {
	if vm.Config == nil {
		klog.V(2).InfoS("Leaving out a VM whose configuration vCenter does not give", "vm", vm.Self.Value, "name", vm.Name)
		return candidate{}, false
	}
	if vm.Config.Template {
		return candidate{}, false
	}
	uuid, err := agentid.ParseUUID(vm.Config.Uuid)
	if err != nil {
		klog.V(2).InfoS("Leaving out a VM without a BIOS UUID", "vm", vm.Self.Value, "name", vm.Name, "err", err)
		return candidate{}, false
	}
	in := mview.Instance{
		ProviderID:   agentid.ProviderID(uuid),
		ID:           uuid,
		Name:         vm.Name,
		NodeName:     agentid.NodeName(vm.Name),
		Cluster:      s.cfg.ClusterID,
		State:        viewState(vm.Runtime.PowerState),
		InstanceType: instanceType(vm),
	}
	in.Addresses, in.Asserted = s.addresses(vm)
	if vm.Config.CreateDate != nil {
		in.Created = *vm.Config.CreateDate
	} else {
		klog.V(2).InfoS("vCenter gives a VM no creation date (config.createDate, vSphere 6.7 and later); a join ticket for it will be refused", "vm", vm.Self.Value, "name", vm.Name)
	}
	c := candidate{Instance: in}
	if s.cfg.ClusterTagCategory != "" {
		member := false
		for _, t := range attached[vm.Self] {
			if t.categoryID == cats[s.cfg.ClusterTagCategory] && t.name == s.cfg.ClusterID {
				member = true
			}
		}
		if !member {
			c.why = fmt.Sprintf("does not carry the tag %s of category %s", s.cfg.ClusterID, s.cfg.ClusterTagCategory)
			klog.V(4).InfoS("Leaving out a VM of the folder without the cluster tag", "vm", vm.Self.Value, "name", vm.Name)
		}
	}
	if s.cfg.Labels.Zone != "" || s.cfg.Labels.Region != "" {
		c.Zone, c.Region = s.topology(inv, vm, cats, attached)
	}
	return c, true
}

// topology is the names of the nearest tags of the zone and region
// categories on the VM's topology chain.
func (s *Source) topology(inv inventory, vm mo.VirtualMachine, cats map[string]string, attached map[types.ManagedObjectReference][]tagOf) (zone, region string) {
	for _, o := range s.topologyChain(inv, vm) {
		for _, t := range attached[o] {
			switch {
			case zone == "" && s.cfg.Labels.Zone != "" && t.categoryID == cats[s.cfg.Labels.Zone]:
				zone = t.name
			case region == "" && s.cfg.Labels.Region != "" && t.categoryID == cats[s.cfg.Labels.Region]:
				region = t.name
			}
		}
	}
	return zone, region
}

// viewState maps a VM's power state: powered on is running; powered off
// and suspended are stopped; anything else is pending.
func viewState(p types.VirtualMachinePowerState) mview.State {
	switch p {
	case types.VirtualMachinePowerStatePoweredOn:
		return mview.StateRunning
	case types.VirtualMachinePowerStatePoweredOff, types.VirtualMachinePowerStateSuspended:
		return mview.StateStopped
	}
	return mview.StatePending
}

// instanceType is the upstream vSphere CCM's instance type:
// vsphere-vm.cpu-<vCPUs>.mem-<GiB>gb.os-<guest OS>, the guest OS being the
// guest id without its Guest and _64 suffixes (ubuntu64Guest: ubuntu64).
func instanceType(vm mo.VirtualMachine) string {
	cfg := vm.Summary.Config
	os := strings.TrimSuffix(strings.TrimSuffix(cfg.GuestId, "Guest"), "_64")
	if os == "" {
		os = "unknown"
	}
	return fmt.Sprintf("vsphere-vm.cpu-%d.mem-%dgb.os-%s", cfg.NumCpu, cfg.MemorySizeMB/1024, os)
}

// addresses are the VM's Node addresses, chosen as the upstream vSphere
// CCM chooses them from what VMware Tools reports: the guest's host name
// as Hostname; among the addresses of the VM's network cards (guest.net
// entries of a virtual device) of the configured family, without
// unspecified, link-local and multicast ones, the InternalIP is the first
// in the internal subnets, else the first on the internal network (by
// name), and the ExternalIP likewise; when neither is configured or found,
// the first address is both. All of them are the guest's to report: the
// second result marks those of sources the config does not trust.
func (s *Source) addresses(vm mo.VirtualMachine) ([]v1.NodeAddress, map[string]string) {
	var out []v1.NodeAddress
	var origins kit.AddressOrigins
	if vm.Guest != nil && vm.Guest.HostName != "" {
		out = append(out, v1.NodeAddress{Type: v1.NodeHostName, Address: vm.Guest.HostName})
		origins.Asserted(vm.Guest.HostName, SourceGuestHostName)
	}
	type cand struct {
		ip      net.IP
		network string
	}
	var cands []cand
	if vm.Guest != nil {
		for _, nic := range vm.Guest.Net {
			if nic.DeviceConfigId == -1 {
				continue // not a virtual network card of the VM
			}
			for _, a := range nic.IpAddress {
				ip := net.ParseIP(a)
				if ip == nil || ip.IsUnspecified() || ip.IsLinkLocalUnicast() || ip.IsMulticast() {
					continue
				}
				if (ip.To4() != nil) != (s.cfg.Nodes.IPFamily == IPv4Family) {
					continue
				}
				cands = append(cands, cand{ip, nic.Network})
			}
		}
	}
	pick := func(nets []*net.IPNet, network string) net.IP {
		for _, n := range nets {
			for _, c := range cands {
				if n.Contains(c.ip) {
					return c.ip
				}
			}
		}
		for _, c := range cands {
			if network != "" && strings.EqualFold(c.network, network) {
				return c.ip
			}
		}
		return nil
	}
	internal := pick(s.internalNets, s.cfg.Nodes.InternalVMNetworkName)
	external := pick(s.externalNets, s.cfg.Nodes.ExternalVMNetworkName)
	if internal == nil && external == nil && len(cands) > 0 {
		internal, external = cands[0].ip, cands[0].ip
	}
	if internal != nil {
		out = append(out, v1.NodeAddress{Type: v1.NodeInternalIP, Address: internal.String()})
		origins.Asserted(internal.String(), SourceGuestNet)
	}
	if external != nil {
		out = append(out, v1.NodeAddress{Type: v1.NodeExternalIP, Address: external.String()})
		origins.Asserted(external.String(), SourceGuestNet)
	}
	return out, s.sources.Untrusted(origins)
}

// errProviderID is wrapped by ParseProviderID's errors.
var errProviderID = errors.New("not a vSphere providerID")

// ParseProviderID reads vsphere://<BIOS UUID> and returns the UUID,
// lower-cased.
func ParseProviderID(providerID string) (string, error) {
	rest, ok := strings.CutPrefix(providerID, agentid.ProviderIDPrefix)
	if !ok {
		return "", fmt.Errorf("%w: %q: want %s<BIOS UUID>", errProviderID, providerID, agentid.ProviderIDPrefix)
	}
	uuid, err := agentid.ParseUUID(rest)
	if err != nil {
		return "", fmt.Errorf("%w: %q: %v", errProviderID, providerID, err)
	}
	return uuid, nil
}
