package vsphere

import (
	"context"
	"errors"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooring-dev/mooring/cloud/view"
	"github.com/mooring-dev/mooring/cloud/vsphere/agentid"
	"github.com/mooring-dev/mooring/cloud/vsphere/vspheretest"
	"github.com/mooring-dev/mooring/csrapprover"
	"github.com/mooring-dev/mooring/csrapprover/approvertest"
)

// servingWait bounds the wait for a serving decision.
const servingWait = 5 * time.Second

// Every address of a vSphere VM is what VMware Tools in the guest reports,
// so root in any joined VM could name another node's IP or host name and
// have its kubelet certified for it: the approver used to approve every
// SAN among the VM's addresses. By default those addresses now back no
// serving SAN (the Node's own name, the VM's name in vCenter, does); with
// trustedAddressSources they do.
func TestServingDoesNotTrustTheGuestByDefault(t *testing.T) {
	w := newWorld(t, nil)
	a := approvertest.Start(t, w.cloud)
	w.add(t, vspheretest.VM{Name: "web-1", UUID: uuid(1), IP: "127.0.90.61", HostName: "web-1.corp.example"})
	a.Node("web-1", agentid.ProviderID(uuid(1)))

	for _, c := range []struct {
		sans []string
		want string
	}{
		{[]string{"web-1"}, csrapprover.ReasonApproved},
		{[]string{"web-1", "127.0.90.61"}, csrapprover.ReasonSANAsserted},
		{[]string{"web-1.corp.example"}, csrapprover.ReasonSANAsserted},
	} {
		if got := a.Serve(servingWait, "web-1", c.sans...); got != c.want {
			t.Errorf("serving %v: %q, want %q", c.sans, got, c.want)
		}
	}

	trusting := newWorld(t, func(c *Config) { c.TrustedAddressSources = []string{SourceGuestNet, SourceGuestHostName} })
	b := approvertest.Start(t, trusting.cloud)
	trusting.add(t, vspheretest.VM{Name: "web-2", UUID: uuid(2), IP: "127.0.90.62", HostName: "web-2.corp.example"})
	b.Node("web-2", agentid.ProviderID(uuid(2)))
	if got := b.Serve(servingWait, "web-2", "web-2", "web-2.corp.example", "127.0.90.62"); got != csrapprover.ReasonApproved {
		t.Errorf("serving with the guest's sources trusted: %q", got)
	}
}

// With the guest trusted, a VM whose guest reports its neighbour's IP, or
// its neighbour's name as its host name, gets no certificate for it, and
// nor does the neighbour while the claim stands.
func TestServingForAnotherVMsAddressIsDenied(t *testing.T) {
	w := newWorld(t, func(c *Config) { c.TrustedAddressSources = []string{SourceGuestNet, SourceGuestHostName} })
	a := approvertest.Start(t, w.cloud)
	w.add(t, vspheretest.VM{Name: "victim", UUID: uuid(1), IP: "127.0.90.71", HostName: "victim"})
	w.add(t, vspheretest.VM{Name: "evil", UUID: uuid(2), IP: "127.0.90.71", HostName: "victim"})
	a.Node("victim", agentid.ProviderID(uuid(1)), v1.NodeAddress{Type: v1.NodeInternalIP, Address: "127.0.90.71"})
	a.Node("evil", agentid.ProviderID(uuid(2)))
	for _, c := range []struct {
		node string
		sans []string
	}{
		{"evil", []string{"127.0.90.71"}},
		{"evil", []string{"victim"}},
		{"victim", []string{"victim", "127.0.90.71"}},
	} {
		if got := a.Serve(servingWait, c.node, c.sans...); got != csrapprover.ReasonAddressClaimedTwice {
			t.Errorf("%s serving %v: %q, want %q", c.node, c.sans, got, csrapprover.ReasonAddressClaimedTwice)
		}
	}
}

// A clone that kept its original's BIOS UUID (vCenter allows it) lists
// under the original's providerID. The view used to keep the last VM
// listed, so the clone could stand for the original: its power state
// decided whether the original's Node existed, and the original's requests
// were judged on the clone's record. Now the CCM answers for neither
// (errors: no initialization, no deletion) and the approver decides for
// neither.
func TestClonesWithOneUUIDAreDecidedForNeither(t *testing.T) {
	w := newWorld(t, nil)
	a := approvertest.Start(t, w.cloud)
	w.add(t, vspheretest.VM{Name: "db-1", UUID: uuid(1), IP: "127.0.90.81"})
	w.add(t, vspheretest.VM{Name: "db-1-clone", UUID: uuid(1), IP: "127.0.90.82", Off: true})
	pid := agentid.ProviderID(uuid(1))
	a.Node("db-1", pid)

	ctx := context.Background()
	instances, _ := w.cloud.InstancesV2()
	original := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "db-1"}, Spec: v1.NodeSpec{ProviderID: pid}}
	clone := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "db-1-clone"}}
	for _, n := range []*v1.Node{original, clone} {
		if exists, err := instances.InstanceExists(ctx, n); !errors.Is(err, view.ErrAmbiguous) {
			t.Errorf("InstanceExists(%s) = %v, %v; want an ErrAmbiguous (the Node is never deleted for it)", n.Name, exists, err)
		}
		if md, err := instances.InstanceMetadata(ctx, n); !errors.Is(err, view.ErrAmbiguous) {
			t.Errorf("InstanceMetadata(%s) = %+v, %v; want an ErrAmbiguous (not initialized)", n.Name, md, err)
		}
	}
	if got := a.Serve(2*time.Second, "db-1", "db-1"); got != "" {
		t.Errorf("db-1's serving CSR was decided: %q; want no decision while the clone holds its UUID", got)
	}
}
