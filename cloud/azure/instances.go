package azure

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"
	"golang.org/x/sync/errgroup"

	"github.com/mooring-dev/mooring/cloud/azure/agentid"
	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/view"
)

// ConfirmInstance asks ARM for the VM of a providerID itself, after
// FindInstance missed it in the cluster's list: absent (HTTP 404), foreign
// (another subscription or resource group, or without the cluster tag),
// or the VM with its power state.
func (c *Cloud) ConfirmInstance(ctx context.Context, providerID string) (view.Instance, error) {
	r, err := agentid.ParseProviderID(providerID)
	if err != nil {
		return view.Instance{}, err
	}
	if r.Subscription != strings.ToLower(c.cfg.SubscriptionID) || r.ResourceGroup != strings.ToLower(c.cfg.ResourceGroup) {
		return view.Instance{}, &kit.ForeignError{ID: r.ID(), Why: fmt.Sprintf("is not in subscription %s, resource group %s", c.cfg.SubscriptionID, c.cfg.ResourceGroup)}
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout.Duration)
	defer cancel()
	src := c.source()
	// The VM's addresses are its network interfaces' (and their public
	// IPs'): read them as the list does, so a confirmed instance carries
	// them too. Without them, a Node initialized from this answer (its VM
	// newer than the view's last list) would get its Hostname alone.
	nw := newNetwork()
	g, gctx := errgroup.WithContext(ctx)
	src.listNetwork(gctx, g, r.ScaleSet, nw)
	if err := g.Wait(); err != nil {
		return view.Instance{}, err
	}
	if r.ScaleSet == "" {
		resp, err := c.clients.VMs.Get(ctx, c.cfg.ResourceGroup, r.Name, &armcompute.VirtualMachinesClientGetOptions{Expand: to.Ptr(armcompute.InstanceViewTypesInstanceView)})
		if err != nil {
			return view.Instance{}, c.armError(r, err)
		}
		if !src.tagged(resp.Tags) {
			return view.Instance{}, c.untagged(r)
		}
		vm := resp.VirtualMachine
		power := map[string]view.State{}
		if vm.ID != nil && vm.Properties != nil {
			power[strings.ToLower(*vm.ID)] = powerState(vmStatuses(vm.Properties.InstanceView))
		}
		if in, ok := src.vmToView(&vm, power, nw); ok {
			return in, nil
		}
		return view.Instance{}, fmt.Errorf("azure: ARM's answer for %s is not a VM's", r.ID())
	}
	set, err := c.clients.ScaleSets.Get(ctx, c.cfg.ResourceGroup, r.ScaleSet, nil)
	if err != nil {
		return view.Instance{}, c.armError(r, err)
	}
	if !src.tagged(set.Tags) {
		return view.Instance{}, c.untagged(r)
	}
	m, err := c.clients.ScaleSetVMs.Get(ctx, c.cfg.ResourceGroup, r.ScaleSet, r.InstanceID, &armcompute.VirtualMachineScaleSetVMsClientGetOptions{Expand: to.Ptr(armcompute.InstanceViewTypesInstanceView)})
	if err != nil {
		return view.Instance{}, c.armError(r, err)
	}
	if in, ok := src.scaleSetVMToView(&set.VirtualMachineScaleSet, &m.VirtualMachineScaleSetVM, nw); ok {
		return in, nil
	}
	return view.Instance{}, fmt.Errorf("azure: ARM's answer for %s is not a scale-set VM's", r.ID())
}

func (c *Cloud) untagged(r agentid.Resource) error {
	return &kit.ForeignError{ID: r.ID(), Why: fmt.Sprintf("does not carry tag %s=%s|%s", c.cfg.ClusterTagKey(), ClusterTagOwned, ClusterTagShared)}
}

// armError: HTTP 404 is ARM's answer that the VM (or its scale set) does
// not exist; anything else is an error.
func (c *Cloud) armError(r agentid.Resource, err error) error {
	var re *azcore.ResponseError
	if errors.As(err, &re) && re.StatusCode == http.StatusNotFound {
		return &kit.AbsentError{ID: r.ID()}
	}
	return fmt.Errorf("azure: get %s: %w", r.ID(), err)
}
