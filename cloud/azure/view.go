package azure

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"golang.org/x/sync/errgroup"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/azure/agentid"
	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/view"
)

// Clients are the ARM clients the backend calls, all of one subscription.
type Clients struct {
	VMs         *armcompute.VirtualMachinesClient
	ScaleSets   *armcompute.VirtualMachineScaleSetsClient
	ScaleSetVMs *armcompute.VirtualMachineScaleSetVMsClient
	NICs        *armnetwork.InterfacesClient
	PublicIPs   *armnetwork.PublicIPAddressesClient
}

// NewClients makes the ARM clients of a subscription with a credential
// and the SDK's client options (its cloud configuration points them at an
// ARM endpoint).
func NewClients(subscription string, cred azcore.TokenCredential, opts *arm.ClientOptions) (*Clients, error) {
	var c Clients
	var err error
	if c.VMs, err = armcompute.NewVirtualMachinesClient(subscription, cred, opts); err != nil {
		return nil, err
	}
	if c.ScaleSets, err = armcompute.NewVirtualMachineScaleSetsClient(subscription, cred, opts); err != nil {
		return nil, err
	}
	if c.ScaleSetVMs, err = armcompute.NewVirtualMachineScaleSetVMsClient(subscription, cred, opts); err != nil {
		return nil, err
	}
	if c.NICs, err = armnetwork.NewInterfacesClient(subscription, cred, opts); err != nil {
		return nil, err
	}
	if c.PublicIPs, err = armnetwork.NewPublicIPAddressesClient(subscription, cred, opts); err != nil {
		return nil, err
	}
	return &c, nil
}

// Source lists a cluster's VMs for the shared instance view: the resource
// group's VMs and scale sets that carry the cluster tag, each a paginated
// list, with the power states (one subscription-wide statusOnly list for
// VMs, the scale-set VM lists' instance views), NICs and public addresses.
type Source struct {
	Clients       *Clients
	Subscription  string
	ResourceGroup string
	ClusterID     string
	// RequestTimeout bounds each page's call; 0 leaves it to the context.
	RequestTimeout time.Duration
}

var _ view.Source = Source{}

// each follows every page of a pager, calling f on each page.
func each[T any](ctx context.Context, timeout time.Duration, what string, more func() bool, next func(context.Context) (T, error), f func(T)) error {
	for n := 1; more(); n++ {
		pctx, cancel := ctx, context.CancelFunc(func() {})
		if timeout > 0 {
			pctx, cancel = context.WithTimeout(ctx, timeout)
		}
		page, err := next(pctx)
		cancel()
		if err != nil {
			return fmt.Errorf("azure %s (page %d): %w", what, n, err)
		}
		f(page)
	}
	return nil
}

// whole reads a paged list of resources whole (newPager starts it again).
// A nextLink is no snapshot: a resource deleted while the pages are read
// can shift one that was there throughout onto a page already read (the
// view would take it as gone), and one made can shift another onto the
// next page (listed twice, which the view takes for two VMs of one
// providerID). ARM's lists keep an order that a resource's life does not
// change, so a miss needs the deletion of a resource listed before it: a
// list of more than one page is taken only when the next reading holds
// the same resources (the deleted one is gone from it) and neither lists
// one twice; else it is read again, up to kit.ListAttempts readings
// (kit.ReadWhole with the resource id as key). A list of one page is one
// answer, taken at once.
func whole[T, P any](ctx context.Context, timeout time.Duration, what string, newPager func() (func() bool, func(context.Context) (P, error)),
	items func(P) []*T, id func(*T) *string) ([]*T, error) {
	key := func(it *T) string { return strings.ToLower(str(id(it))) }
	return kit.ReadWhole("azure "+what, kit.ListAttempts, func() ([]*T, int, error) {
		var got []*T
		seen := map[string]bool{}
		pages, dup := 0, ""
		more, next := newPager()
		if err := each(ctx, timeout, what, more, next, func(p P) {
			pages++
			for _, it := range items(p) {
				if it == nil {
					continue
				}
				if k := key(it); k != "" && seen[k] {
					dup = k
				} else {
					seen[k] = true
				}
				got = append(got, it)
			}
		}); err != nil {
			return nil, pages, err
		}
		if dup != "" {
			return nil, pages, fmt.Errorf("%w: %s listed twice", kit.ErrListChanged, dup)
		}
		return got, pages, nil
	}, key)
}

// network is what the NIC and public IP lists say about addresses.
type network struct {
	// nics by the id (lower case) of the VM they are attached to.
	nics map[string][]*armnetwork.Interface
	// publicIPs by public IP resource id (lower case).
	publicIPs map[string]string
}

// listNetwork lists the NICs and the public addresses of the resource
// group (scaleSet "") or of one scale set into nw, the two lists side by
// side in g (each fills its own map).
func (s Source) listNetwork(ctx context.Context, g *errgroup.Group, scaleSet string, nw *network) {
	addNIC := func(list []*armnetwork.Interface) {
		for _, nic := range list {
			if nic == nil || nic.Properties == nil || nic.Properties.VirtualMachine == nil || nic.Properties.VirtualMachine.ID == nil {
				continue
			}
			k := strings.ToLower(*nic.Properties.VirtualMachine.ID)
			nw.nics[k] = append(nw.nics[k], nic)
		}
	}
	addIPs := func(list []*armnetwork.PublicIPAddress) {
		for _, p := range list {
			if p != nil && p.ID != nil && p.Properties != nil && p.Properties.IPAddress != nil {
				nw.publicIPs[strings.ToLower(*p.ID)] = *p.Properties.IPAddress
			}
		}
	}
	if scaleSet == "" {
		g.Go(func() error {
			nics := s.Clients.NICs.NewListPager(s.ResourceGroup, nil)
			return each(ctx, s.RequestTimeout, "network interfaces of "+s.ResourceGroup, nics.More, nics.NextPage,
				func(p armnetwork.InterfacesClientListResponse) { addNIC(p.Value) })
		})
		g.Go(func() error {
			ips := s.Clients.PublicIPs.NewListPager(s.ResourceGroup, nil)
			return each(ctx, s.RequestTimeout, "public IP addresses of "+s.ResourceGroup, ips.More, ips.NextPage,
				func(p armnetwork.PublicIPAddressesClientListResponse) { addIPs(p.Value) })
		})
		return
	}
	g.Go(func() error {
		nics := s.Clients.NICs.NewListVirtualMachineScaleSetNetworkInterfacesPager(s.ResourceGroup, scaleSet, nil)
		return each(ctx, s.RequestTimeout, "network interfaces of scale set "+scaleSet, nics.More, nics.NextPage,
			func(p armnetwork.InterfacesClientListVirtualMachineScaleSetNetworkInterfacesResponse) {
				addNIC(p.Value)
			})
	})
	g.Go(func() error {
		ips := s.Clients.PublicIPs.NewListVirtualMachineScaleSetPublicIPAddressesPager(s.ResourceGroup, scaleSet, nil)
		return each(ctx, s.RequestTimeout, "public IP addresses of scale set "+scaleSet, ips.More, ips.NextPage,
			func(p armnetwork.PublicIPAddressesClientListVirtualMachineScaleSetPublicIPAddressesResponse) {
				addIPs(p.Value)
			})
	})
}

func newNetwork() *network {
	return &network{nics: map[string][]*armnetwork.Interface{}, publicIPs: map[string]string{}}
}

// ListInstances lists the cluster's VMs and scale-set VMs: the two side by
// side. Each lists its VMs first and what they refer to (power states,
// NICs, public addresses) after them, those lists side by side: a VM's NIC
// and public address exist before the VM does, so a VM in the first list
// is in the later ones too. The lists are ARM calls of their own, and a
// fleet's List takes as long as its longest chain of pages, not all of
// its pages in turn.
func (s Source) ListInstances(ctx context.Context) ([]view.Instance, error) {
	g, gctx := errgroup.WithContext(ctx)
	var vms, members []view.Instance
	g.Go(func() (err error) {
		vms, err = s.listVMs(gctx)
		return err
	})
	g.Go(func() (err error) {
		members, err = s.listScaleSets(gctx)
		return err
	})
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return append(vms, members...), nil
}

// listVMs lists the resource group's VMs that carry the cluster tag.
func (s Source) listVMs(ctx context.Context) ([]view.Instance, error) {
	all, err := whole(ctx, s.RequestTimeout, "virtual machines of "+s.ResourceGroup,
		func() (func() bool, func(context.Context) (armcompute.VirtualMachinesClientListResponse, error)) {
			p := s.Clients.VMs.NewListPager(s.ResourceGroup, nil)
			return p.More, p.NextPage
		},
		func(p armcompute.VirtualMachinesClientListResponse) []*armcompute.VirtualMachine { return p.Value },
		func(vm *armcompute.VirtualMachine) *string { return vm.ID })
	if err != nil {
		return nil, err
	}
	var vms []*armcompute.VirtualMachine
	for _, vm := range all {
		if s.tagged(vm.Tags) {
			vms = append(vms, vm)
		}
	}
	if len(vms) == 0 {
		return nil, nil
	}
	power := map[string]view.State{}
	nw := newNetwork()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		st := s.Clients.VMs.NewListAllPager(&armcompute.VirtualMachinesClientListAllOptions{StatusOnly: to.Ptr("true")})
		return each(gctx, s.RequestTimeout, "virtual machine statuses", st.More, st.NextPage,
			func(p armcompute.VirtualMachinesClientListAllResponse) {
				for _, vm := range p.Value {
					if vm != nil && vm.ID != nil && vm.Properties != nil {
						power[strings.ToLower(*vm.ID)] = powerState(vmStatuses(vm.Properties.InstanceView))
					}
				}
			})
	})
	s.listNetwork(gctx, g, "", nw)
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var out []view.Instance
	for _, vm := range vms {
		if in, ok := s.vmToView(vm, power, nw); ok {
			out = append(out, in)
		}
	}
	return out, nil
}

// listScaleSets lists the VMs of the resource group's scale sets that
// carry the cluster tag, one scale set after another.
func (s Source) listScaleSets(ctx context.Context) ([]view.Instance, error) {
	all, err := whole(ctx, s.RequestTimeout, "scale sets of "+s.ResourceGroup,
		func() (func() bool, func(context.Context) (armcompute.VirtualMachineScaleSetsClientListResponse, error)) {
			p := s.Clients.ScaleSets.NewListPager(s.ResourceGroup, nil)
			return p.More, p.NextPage
		},
		func(p armcompute.VirtualMachineScaleSetsClientListResponse) []*armcompute.VirtualMachineScaleSet {
			return p.Value
		},
		func(set *armcompute.VirtualMachineScaleSet) *string { return set.ID })
	if err != nil {
		return nil, err
	}
	var sets []*armcompute.VirtualMachineScaleSet
	for _, set := range all {
		if set.Name != nil && s.tagged(set.Tags) {
			sets = append(sets, set)
		}
	}
	var out []view.Instance
	nw := newNetwork()
	for _, set := range sets {
		members, err := whole(ctx, s.RequestTimeout, "VMs of scale set "+*set.Name,
			func() (func() bool, func(context.Context) (armcompute.VirtualMachineScaleSetVMsClientListResponse, error)) {
				p := s.Clients.ScaleSetVMs.NewListPager(s.ResourceGroup, *set.Name, &armcompute.VirtualMachineScaleSetVMsClientListOptions{Expand: to.Ptr("instanceView")})
				return p.More, p.NextPage
			},
			func(p armcompute.VirtualMachineScaleSetVMsClientListResponse) []*armcompute.VirtualMachineScaleSetVM {
				return p.Value
			},
			func(m *armcompute.VirtualMachineScaleSetVM) *string { return m.ID })
		if err != nil {
			return nil, err
		}
		if len(members) == 0 {
			continue
		}
		g, gctx := errgroup.WithContext(ctx)
		s.listNetwork(gctx, g, *set.Name, nw)
		if err := g.Wait(); err != nil {
			return nil, err
		}
		for _, m := range members {
			if in, ok := s.scaleSetVMToView(set, m, nw); ok {
				out = append(out, in)
			}
		}
	}
	return out, nil
}

// tagged: the cluster tag is owned or shared.
func (s Source) tagged(tags map[string]*string) bool {
	v := tags[ClusterTagPrefix+s.ClusterID]
	return v != nil && (*v == ClusterTagOwned || *v == ClusterTagShared)
}

func (s Source) vmToView(vm *armcompute.VirtualMachine, power map[string]view.State, nw *network) (view.Instance, bool) {
	if vm.ID == nil || vm.Properties == nil || vm.Properties.VMID == nil {
		return view.Instance{}, false
	}
	r, err := agentid.ParseResourceID(*vm.ID)
	if err != nil || r.ScaleSet != "" {
		klog.V(2).InfoS("Leaving out a VM whose id is not a VM's", "id", *vm.ID, "err", err)
		return view.Instance{}, false
	}
	state, ok := power[strings.ToLower(*vm.ID)]
	if !ok {
		state = view.StatePending // no status: neither running nor gone
	}
	if p := vm.Properties.ProvisioningState; p != nil && strings.EqualFold(*p, "Deleting") {
		state = view.StateTerminated
	}
	in := view.Instance{
		ProviderID: r.ProviderID(),
		ID:         strings.ToLower(*vm.Properties.VMID),
		Name:       r.Name,
		NodeName:   agentid.NodeName(r, ""),
		Region:     str(vm.Location),
		Cluster:    s.ClusterID,
		State:      state,
		Created:    created(*vm.ID, vm.Properties.TimeCreated),
	}
	if vm.Properties.HardwareProfile != nil && vm.Properties.HardwareProfile.VMSize != nil {
		in.InstanceType = string(*vm.Properties.HardwareProfile.VMSize)
	}
	in.Zone = zoneOf(in.Region, vm.Zones)
	in.Addresses = addresses(nw, *vm.ID, primaryNIC(vm.Properties.NetworkProfile), in.NodeName)
	in.VTPM = hasVTPM(vm.Properties.SecurityProfile)
	return in, true
}

// hasVTPM: the Compute API's securityProfile says the VM has an enabled
// vTPM: securityType TrustedLaunch or ConfidentialVM, and
// uefiSettings.vTpmEnabled true (docs/azure.md, TPM).
func hasVTPM(p *armcompute.SecurityProfile) bool {
	if p == nil || p.SecurityType == nil || p.UefiSettings == nil {
		return false
	}
	switch *p.SecurityType {
	case armcompute.SecurityTypesTrustedLaunch, armcompute.SecurityTypesConfidentialVM:
		return boolean(p.UefiSettings.VTpmEnabled)
	}
	return false
}

func (s Source) scaleSetVMToView(set *armcompute.VirtualMachineScaleSet, m *armcompute.VirtualMachineScaleSetVM, nw *network) (view.Instance, bool) {
	if m == nil || m.ID == nil || m.Properties == nil || m.Properties.VMID == nil {
		return view.Instance{}, false
	}
	r, err := agentid.ParseResourceID(*m.ID)
	if err != nil || r.ScaleSet == "" {
		klog.V(2).InfoS("Leaving out a scale-set VM whose id is not one", "id", *m.ID, "err", err)
		return view.Instance{}, false
	}
	var computer string
	if m.Properties.OSProfile != nil {
		computer = str(m.Properties.OSProfile.ComputerName)
	}
	state := powerState(scaleSetVMStatuses(m.Properties.InstanceView))
	if p := m.Properties.ProvisioningState; p != nil && strings.EqualFold(*p, "Deleting") {
		state = view.StateTerminated
	}
	in := view.Instance{
		ProviderID: r.ProviderID(),
		ID:         strings.ToLower(*m.Properties.VMID),
		Name:       str(m.Name),
		NodeName:   agentid.NodeName(r, computer),
		Region:     str(m.Location),
		Cluster:    s.ClusterID,
		State:      state,
		Created:    created(*m.ID, m.Properties.TimeCreated),
	}
	if m.SKU != nil && m.SKU.Name != nil {
		in.InstanceType = *m.SKU.Name
	} else if set.SKU != nil && set.SKU.Name != nil {
		in.InstanceType = *set.SKU.Name
	}
	in.Zone = zoneOf(in.Region, m.Zones)
	in.Addresses = addresses(nw, *m.ID, primaryNIC(m.Properties.NetworkProfile), in.NodeName)
	sp := m.Properties.SecurityProfile
	if sp == nil && set.Properties != nil && set.Properties.VirtualMachineProfile != nil {
		sp = set.Properties.VirtualMachineProfile.SecurityProfile // the set's model
	}
	in.VTPM = hasVTPM(sp)
	return in, true
}

// created is a VM's properties.timeCreated, "the time at which the Virtual
// Machine resource was created" (ARM's compute API, from api-version
// 2021-11-01; the SDK's clients ask for a later one). The SDK has parsed
// it: RFC 3339, and leniently a time without an offset (as UTC) or with a
// space for the T; a value it cannot parse fails the whole page. A VM or
// scale-set VM without it gets the zero time, which a join ticket refuses.
func created(id string, t *time.Time) time.Time {
	if t == nil {
		klog.V(2).InfoS("ARM gives no timeCreated for a VM; its creation time is unknown (a join ticket cannot name it)", "id", id)
		return time.Time{}
	}
	return *t
}

// zoneOf is the zone label the Azure CCM writes: <location>-<zone>, or "0"
// (a fault domain) when the VM has no zone; mooring writes "" there.
func zoneOf(location string, zones []*string) string {
	if len(zones) == 0 || zones[0] == nil || *zones[0] == "" {
		return ""
	}
	return strings.ToLower(location) + "-" + *zones[0]
}

// powerState reads the PowerState/<state> status of an instance view:
// running; starting is pending; stopping, stopped, deallocating and
// deallocated count as stopped. No status, or one Azure may add later, is
// pending: neither running (no join) nor gone.
func powerState(statuses []*armcompute.InstanceViewStatus) view.State {
	for _, st := range statuses {
		if st == nil || st.Code == nil {
			continue
		}
		code, ok := strings.CutPrefix(*st.Code, "PowerState/")
		if !ok {
			continue
		}
		switch strings.ToLower(code) {
		case "running":
			return view.StateRunning
		case "stopping", "stopped", "deallocating", "deallocated":
			return view.StateStopped
		}
		return view.StatePending
	}
	return view.StatePending
}

func vmStatuses(iv *armcompute.VirtualMachineInstanceView) []*armcompute.InstanceViewStatus {
	if iv == nil {
		return nil
	}
	return iv.Statuses
}

func scaleSetVMStatuses(iv *armcompute.VirtualMachineScaleSetVMInstanceView) []*armcompute.InstanceViewStatus {
	if iv == nil {
		return nil
	}
	return iv.Statuses
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func boolean(p *bool) bool { return p != nil && *p }

func primaryNIC(p *armcompute.NetworkProfile) string {
	if p == nil {
		return ""
	}
	for _, ref := range p.NetworkInterfaces {
		if ref != nil && ref.ID != nil && (len(p.NetworkInterfaces) == 1 || (ref.Properties != nil && boolean(ref.Properties.Primary))) {
			return strings.ToLower(*ref.ID)
		}
	}
	return ""
}

// addresses lists a VM's addresses: the private IPs of its primary NIC
// (its primary IP configuration first), then of its other NICs, as
// InternalIP; their public IPs as ExternalIP; the node name as Hostname.
// Unparsable addresses are left out.
func addresses(nw *network, vmID, primary, hostname string) []v1.NodeAddress {
	nics := append([]*armnetwork.Interface(nil), nw.nics[strings.ToLower(vmID)]...)
	sort.SliceStable(nics, func(i, j int) bool {
		return nics[i].ID != nil && strings.EqualFold(*nics[i].ID, primary) && !(nics[j].ID != nil && strings.EqualFold(*nics[j].ID, primary))
	})
	var internal, external []v1.NodeAddress
	add := func(list *[]v1.NodeAddress, t v1.NodeAddressType, s string) {
		ip := net.ParseIP(s)
		if ip == nil {
			return
		}
		for _, a := range *list {
			if a.Address == ip.String() {
				return
			}
		}
		*list = append(*list, v1.NodeAddress{Type: t, Address: ip.String()})
	}
	for _, nic := range nics {
		configs := append([]*armnetwork.InterfaceIPConfiguration(nil), nic.Properties.IPConfigurations...)
		sort.SliceStable(configs, func(i, j int) bool {
			pi := configs[i] != nil && configs[i].Properties != nil && boolean(configs[i].Properties.Primary)
			pj := configs[j] != nil && configs[j].Properties != nil && boolean(configs[j].Properties.Primary)
			return pi && !pj
		})
		for _, c := range configs {
			if c == nil || c.Properties == nil {
				continue
			}
			add(&internal, v1.NodeInternalIP, str(c.Properties.PrivateIPAddress))
			if c.Properties.PublicIPAddress != nil && c.Properties.PublicIPAddress.ID != nil {
				add(&external, v1.NodeExternalIP, nw.publicIPs[strings.ToLower(*c.Properties.PublicIPAddress.ID)])
			}
		}
	}
	out := append(internal, external...)
	if hostname != "" {
		out = append(out, v1.NodeAddress{Type: v1.NodeHostName, Address: hostname})
	}
	return out
}
