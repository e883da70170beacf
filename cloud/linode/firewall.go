package linode

import (
	"context"
	"fmt"
	"slices"

	"github.com/linode/linodego"
	"k8s.io/klog/v2"
)

// firewall makes NodeBalancer id attached to the Cloud Firewall want (0:
// none) alone, from have (the firewalls it is attached to), as Linode's
// CCM does with firewall-id: the new firewall is attached before any other
// is detached, so that the NodeBalancer is never without one while its
// Service names one. Linode attaches one enabled firewall to a
// NodeBalancer: moving it from one enabled firewall to another fails at
// the attach, and nothing is detached (the error says what to do). With no
// firewall-id, the firewalls are detached (as Linode's CCM does: the
// Service asks for none). A firewall is only ever attached or detached,
// never made, changed or deleted: they are the user's.
func (l *nodeBalancers) firewall(ctx context.Context, id int, have []int, want int) error {
	if want != 0 && !slices.Contains(have, want) {
		if err := l.firewallExists(ctx, want); err != nil {
			return err
		}
		_, err := l.c.client.CreateFirewallDevice(ctx, want, linodego.FirewallDeviceCreateOptions{ID: id, Type: linodego.FirewallDeviceNodeBalancer})
		if err != nil {
			hint := ""
			if len(have) > 0 {
				hint = fmt.Sprintf(" (Linode attaches one enabled firewall to a NodeBalancer: disable or detach Cloud Firewall %d first; mooring does not detach it before the new one is attached, which would leave the NodeBalancer unfiltered)", have[0])
			}
			return fmt.Errorf("attaching NodeBalancer %d to Cloud Firewall %d (%s): %w%s", id, want, AnnFirewallID, err, hint)
		}
		klog.FromContext(ctx).Info("Attached a NodeBalancer to a Cloud Firewall", "id", id, "firewall", want)
	}
	for _, old := range have {
		if old == want {
			continue
		}
		devices, err := l.c.client.ListFirewallDevices(ctx, old, nil)
		if linodego.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("the devices of Cloud Firewall %d: %w", old, err)
		}
		for _, d := range devices {
			if d.Entity.Type != linodego.FirewallDeviceNodeBalancer || d.Entity.ID != id {
				continue
			}
			if err := l.c.client.DeleteFirewallDevice(ctx, old, d.ID); err != nil && !linodego.IsNotFound(err) {
				return fmt.Errorf("detaching NodeBalancer %d from Cloud Firewall %d: %w", id, old, err)
			}
			klog.FromContext(ctx).Info("Detached a NodeBalancer from a Cloud Firewall", "id", id, "firewall", old)
		}
	}
	return nil
}

// firewallExists: the Cloud Firewall that firewall-id names (0: none)
// exists, so that a NodeBalancer is not made or changed for one that does
// not.
func (l *nodeBalancers) firewallExists(ctx context.Context, id int) error {
	if id == 0 {
		return nil
	}
	_, err := l.c.client.GetFirewall(ctx, id)
	if linodego.IsNotFound(err) {
		return fmt.Errorf("the Cloud Firewall %d that %s names does not exist", id, AnnFirewallID)
	}
	if err != nil {
		return fmt.Errorf("Cloud Firewall %d (%s): %w", id, AnnFirewallID, err)
	}
	return nil
}
