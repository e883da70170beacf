package azure

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"k8s.io/klog/v2"
)

// The backend pool's members: NIC IP configurations, which join a pool by
// naming it (loadBalancerBackendAddressPools), one NIC write each, under
// the NIC's etag.

// nicIndexTTL is how long a list of the NICs answers which NIC IP
// configuration is a node's before it is listed again (at once for a VM
// it does not hold).
const nicIndexTTL = 10 * time.Second

// nicIndex is what one list of the resource group's NICs says.
type nicIndex struct {
	at   time.Time
	byVM map[string]string                // lower VM id -> lower id of its primary NIC's primary IP configuration
	nics map[string]*armnetwork.Interface // lower NIC id -> NIC
}

// nics is the NIC index, listed again when older than nicIndexTTL or
// without one of vms.
func (l *lbCloud) nics(ctx context.Context, vms []string) (*nicIndex, error) {
	l.mu.Lock()
	idx := l.nicIndex
	l.mu.Unlock()
	if idx != nil && time.Since(idx.at) < nicIndexTTL && !slices.ContainsFunc(vms, func(vm string) bool { _, ok := idx.byVM[vm]; return !ok }) {
		return idx, nil
	}
	return l.listNICs(ctx)
}

func (l *lbCloud) listNICs(ctx context.Context) (*nicIndex, error) {
	idx := &nicIndex{at: time.Now(), byVM: map[string]string{}, nics: map[string]*armnetwork.Interface{}}
	pager := l.nicsAPI.NewListPager(l.c.cfg.ResourceGroup, nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("network interfaces of %s: %w", l.c.cfg.ResourceGroup, err)
		}
		for _, nic := range page.Value {
			if nic == nil || nic.ID == nil || nic.Properties == nil {
				continue
			}
			idx.nics[strings.ToLower(*nic.ID)] = nic
			if nic.Properties.VirtualMachine == nil || nic.Properties.VirtualMachine.ID == nil {
				continue
			}
			vm := strings.ToLower(*nic.Properties.VirtualMachine.ID)
			primary := nic.Properties.Primary == nil || *nic.Properties.Primary
			if _, seen := idx.byVM[vm]; seen && !primary {
				continue
			}
			for i, ipc := range nic.Properties.IPConfigurations {
				if ipc == nil || ipc.ID == nil {
					continue
				}
				if (ipc.Properties != nil && ipc.Properties.Primary != nil && *ipc.Properties.Primary) || i == 0 {
					idx.byVM[vm] = strings.ToLower(*ipc.ID)
				}
			}
		}
	}
	l.mu.Lock()
	l.nicIndex = idx
	l.mu.Unlock()
	return idx, nil
}

// writeMembers makes exactly members (lower NIC IP configuration ids)
// name pool: a NIC write for each one that joins or leaves.
func (l *lbCloud) writeMembers(ctx context.Context, pool string, members []string) error {
	idx, err := l.listNICs(ctx)
	if err != nil {
		return err
	}
	for _, key := range sortedNICs(idx.nics) {
		nic := idx.nics[key]
		for try := 0; ; try++ {
			changed := false
			for _, ipc := range nic.Properties.IPConfigurations {
				if ipc == nil || ipc.ID == nil {
					continue
				}
				if ipc.Properties == nil {
					ipc.Properties = &armnetwork.InterfaceIPConfigurationPropertiesFormat{}
				}
				want := slices.Contains(members, strings.ToLower(*ipc.ID))
				pools := ipc.Properties.LoadBalancerBackendAddressPools
				has := slices.ContainsFunc(pools, func(p *armnetwork.BackendAddressPool) bool { return p != nil && strings.EqualFold(deref(p.ID), pool) })
				switch {
				case want && !has:
					ipc.Properties.LoadBalancerBackendAddressPools = append(pools, &armnetwork.BackendAddressPool{ID: to.Ptr(pool)})
					changed = true
				case !want && has:
					ipc.Properties.LoadBalancerBackendAddressPools = slices.DeleteFunc(pools, func(p *armnetwork.BackendAddressPool) bool {
						return p == nil || strings.EqualFold(deref(p.ID), pool)
					})
					changed = true
				}
			}
			if !changed {
				break
			}
			etag := nic.Etag
			nic.Etag = nil
			_, err := l.nicsAPI.BeginCreateOrUpdate(ifMatch(ctx, etag), groupOf(*nic.ID), *nic.Name, *nic, nil)
			if isStale(err) && try < lbWrites {
				fresh, gerr := l.nicsAPI.Get(ctx, groupOf(*nic.ID), *nic.Name, nil)
				if gerr != nil {
					return fmt.Errorf("network interface %s: %w", *nic.Name, gerr)
				}
				nic = &fresh.Interface
				continue
			}
			if isBusy(err) {
				return pending(*nic.Name, "Updating")
			}
			if err != nil {
				return fmt.Errorf("network interface %s: backend pools: %w", *nic.Name, err)
			}
			klog.FromContext(ctx).V(2).Info("Changed a network interface's backend pools", "networkInterface", *nic.Name, "pool", pool)
			break
		}
	}
	l.mu.Lock()
	l.nicIndex = nil
	l.mu.Unlock()
	return nil
}

func sortedNICs(m map[string]*armnetwork.Interface) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
