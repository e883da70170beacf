package linode

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mooring-dev/mooring/cloud/linode/linodetest"
)

// attached are the ids of the NodeBalancers attached to firewall id.
func attached(w *world, id int) []int {
	f, _ := w.ln.Firewall(id)
	var out []int
	for _, d := range f.Devices {
		out = append(out, d.EntityID)
	}
	return out
}

// firewall-id attaches the NodeBalancer to the user's Cloud Firewall when
// it is made (the create's firewall_id: never open); changed, the new one
// is attached before the old one is detached; removed, the firewall is
// detached (as Linode's CCM does), never deleted or changed. Ensured again,
// nothing is written.
func TestLBFirewall(t *testing.T) {
	w, lbs, nodes := lbWorld(t)
	rule := linodetest.FirewallRule{Action: "ACCEPT", Protocol: "TCP", Ports: "80", IPv4: []string{"127.0.0.1/32"}}
	a := w.ln.PutFirewall(linodetest.Firewall{Label: "fw-a", Inbound: []linodetest.FirewallRule{rule}})
	b := w.ln.PutFirewall(linodetest.Firewall{Label: "fw-b", Status: "disabled"})
	svc := lbSvc(map[string]string{AnnFirewallID: strconv.Itoa(a.ID)})
	if _, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, nodes); err != nil {
		t.Fatal(err)
	}
	nb := w.ln.NodeBalancers()[0]
	if got := attached(w, a.ID); !slices.Equal(got, []int{nb.ID}) {
		t.Fatalf("firewall %d's devices: %v, want [%d]", a.ID, got, nb.ID)
	}
	if n := w.ln.Calls(linodetest.MethodFWUpdate); n != 0 {
		t.Errorf("firewall writes at create: %d, want 0 (the create attaches it)", n)
	}
	writes := lbWrites(w)
	if _, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, nodes); err != nil {
		t.Fatal(err)
	}
	if n := lbWrites(w) - writes; n != 0 {
		t.Errorf("ensured again: %d writes, want 0", n)
	}
	// To the disabled firewall b: attached, then a detached.
	svc.Annotations[AnnFirewallID] = strconv.Itoa(b.ID)
	if _, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, nodes); err != nil {
		t.Fatal(err)
	}
	if ga, gb := attached(w, a.ID), attached(w, b.ID); len(ga) != 0 || !slices.Equal(gb, []int{nb.ID}) {
		t.Fatalf("after the change: firewall a %v, b %v", ga, gb)
	}
	delete(svc.Annotations, AnnFirewallID)
	if _, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, nodes); err != nil {
		t.Fatal(err)
	}
	if gb := attached(w, b.ID); len(gb) != 0 {
		t.Fatalf("without firewall-id: firewall b %v", gb)
	}
	if _, ok := w.ln.Firewall(b.ID); !ok {
		t.Error("the firewall was deleted")
	}
	// Deleting the NodeBalancer takes it off its firewall.
	svc.Annotations[AnnFirewallID] = strconv.Itoa(a.ID)
	if _, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, nodes); err != nil {
		t.Fatal(err)
	}
	if err := lbs.EnsureLoadBalancerDeleted(context.Background(), "kubernetes", svc); err != nil {
		t.Fatal(err)
	}
	if ga := attached(w, a.ID); len(ga) != 0 {
		t.Errorf("after delete: firewall a %v", ga)
	}
}

// From one enabled firewall to another: Linode refuses the second while
// the first is attached, and mooring does not detach the first before (the
// NodeBalancer would be open between the calls): an error saying so, the
// old firewall still attached.
func TestLBFirewallSwitchFailsClosed(t *testing.T) {
	w, lbs, nodes := lbWorld(t)
	a := w.ln.PutFirewall(linodetest.Firewall{Label: "fw-a"})
	b := w.ln.PutFirewall(linodetest.Firewall{Label: "fw-b"})
	svc := lbSvc(map[string]string{AnnFirewallID: strconv.Itoa(a.ID)})
	if _, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, nodes); err != nil {
		t.Fatal(err)
	}
	nb := w.ln.NodeBalancers()[0]
	svc.Annotations[AnnFirewallID] = strconv.Itoa(b.ID)
	_, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, nodes)
	if err == nil || !strings.Contains(err.Error(), "disable or detach Cloud Firewall "+strconv.Itoa(a.ID)) {
		t.Fatalf("EnsureLoadBalancer: %v, want an error saying to disable the old firewall", err)
	}
	if ga := attached(w, a.ID); !slices.Equal(ga, []int{nb.ID}) {
		t.Errorf("the old firewall's devices: %v, want [%d]", ga, nb.ID)
	}
}

// A firewall-id of a firewall that does not exist: an error naming it,
// and no NodeBalancer made (nothing written).
func TestLBFirewallMissing(t *testing.T) {
	w, lbs, nodes := lbWorld(t)
	svc := lbSvc(map[string]string{AnnFirewallID: "999999"})
	_, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, nodes)
	if err == nil || !strings.Contains(err.Error(), "999999") || !strings.Contains(err.Error(), AnnFirewallID) {
		t.Fatalf("EnsureLoadBalancer: %v, want an error naming the firewall", err)
	}
	if n := lbWrites(w); n != 0 || len(w.ln.NodeBalancers()) != 0 {
		t.Errorf("writes %d, NodeBalancers %d; want none", n, len(w.ln.NodeBalancers()))
	}
}

// loadBalancerSourceRanges stay refused on Linode (its CCM ignores them,
// which would leave the NodeBalancer open to all): the error points at
// firewall-id.
func TestLBSourceRangesRefused(t *testing.T) {
	w, lbs, nodes := lbWorld(t)
	svc := lbSvc(nil)
	svc.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24"}
	_, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, nodes)
	if err == nil || !strings.Contains(err.Error(), "loadBalancerSourceRanges") || !strings.Contains(err.Error(), AnnFirewallID) {
		t.Fatalf("EnsureLoadBalancer: %v", err)
	}
	if n := lbCalls(w); n != 0 {
		t.Errorf("API calls: %d, want 0", n)
	}
}
