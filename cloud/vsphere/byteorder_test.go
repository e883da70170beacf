package vsphere

import (
	"context"
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/cloud/kit/kittest"
	"github.com/mooring-dev/mooring/cloud/view"
	"github.com/mooring-dev/mooring/cloud/vsphere/agentid"
	"github.com/mooring-dev/mooring/cloud/vsphere/vspheretest"
)

// Published pairs of a guest's system UUID (product_uuid, the kubelet's
// systemUUID) and vCenter's config.uuid of the same VM
// (cloud/vsphere/agentid/testdata/README.md).
var publishedPairs = []struct {
	source, vm, systemUUID, configUUID string
}{
	// https://github.com/vmware/pyvmomi/issues/688 (ESXi and vCenter 6.5).
	{"pyvmomi#688", "pyvmomi-688", "5C241F42-A87F-FA60-6AF6-A46351CED0EB", "421f245c-7fa8-60fa-6af6-a46351ced0eb"},
	// https://github.com/kubernetes/kubernetes/issues/58927, comment of
	// 2019-10-11: four Nodes of one cluster, System UUID and ProviderID.
	{"kubernetes#58927 node 1", "k8s-58927-1", "420B0194-7D17-98FD-BED3-42E7B8C0234D", "420b0194-7d17-98fd-bed3-42e7b8c0234d"},
	{"kubernetes#58927 node 2", "k8s-58927-2", "420BE0F9-6E13-06E8-193B-05D28876E082", "420be0f9-6e13-06e8-193b-05d28876e082"},
	{"kubernetes#58927 node 3", "k8s-58927-3", "420B68A9-961F-993F-2740-AEF065F19C48", "420b68a9-961f-993f-2740-aef065f19c48"},
	{"kubernetes#58927 node 4", "k8s-58927-4", "8FCF0B42-F2A2-54D1-329B-575D9BC5E19C", "420bcf8f-a2f2-d154-329b-575d9bc5e19c"},
	// https://github.com/charmed-kubernetes/charm-kubernetes-control-plane/pull/102
	// (virtual hardware upgraded from vSphere 5.5 to 6.5 compatibility).
	{"charm-kubernetes-control-plane#102", "charmed-102", "F5132842-20D4-6171-5DB0-7B96440CCF54", "422813f5-d420-7161-5db0-7b96440ccf54"},
}

// A Node whose providerID holds its VM's UUID as the guest's SMBIOS shows
// it (the kubelet's systemUUID; an agent that fell back to product_uuid on
// a kernel that prints it otherwise than the SMBIOS version says) is found
// in either byte order when exactly one VM of the cluster matches: the
// published pairs of real guests and vCenter, each found as its VM, its
// zone read, and no listing made beyond the first (the other order is
// looked up only when a listing held it). When one VM has a UUID and
// another VM its swapped form, a providerID of either form is ambiguous:
// the CCM decides nothing for it (no initialization, no deletion), as for
// clones that share a UUID.
func TestProviderIDInEitherByteOrder(t *testing.T) {
	w := newWorld(t, nil)
	for i, p := range publishedPairs {
		w.add(t, vspheretest.VM{Name: p.vm, UUID: p.configUUID, IP: "127.0.90." + string(rune('1'+i)) + "1", Host: "DC0_C0_H0"})
	}
	ctx := context.Background()
	instances, _ := w.cloud.InstancesV2()
	zones, _ := w.cloud.Zones()
	node := func(name, uuid string) *v1.Node {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NodeSpec{ProviderID: agentid.ProviderIDPrefix + uuid}}
	}
	if _, err := w.cloud.InstanceView().List(ctx, 0); err != nil {
		t.Fatal(err)
	}
	w.calls.take()
	for _, p := range publishedPairs {
		n := node(p.vm, p.systemUUID)
		md, err := instances.InstanceMetadata(ctx, n)
		if err != nil || md.ProviderID != "vsphere://"+p.configUUID || md.Zone != "zone-a" {
			t.Errorf("%s: providerID %s: metadata %+v, %v; want VM %s's", p.source, n.Spec.ProviderID, md, err, p.vm)
		}
		if ok, err := instances.InstanceExists(ctx, n); !ok || err != nil {
			t.Errorf("%s: exists %v, %v", p.source, ok, err)
		}
		if z, err := zones.GetZoneByProviderID(ctx, n.Spec.ProviderID); err != nil || z.FailureDomain != "zone-a" {
			t.Errorf("%s: zone %+v, %v", p.source, z, err)
		}
	}
	if c := w.calls.take(); total(c) != 0 {
		t.Errorf("lookups within instanceMaxAge called vCenter: %v", c)
	}

	// A VM that has the swapped form of pyvmomi-688's UUID: a providerID
	// of either form names two VMs.
	p := publishedPairs[0]
	impostor := w.add(t, vspheretest.VM{Name: "impostor", UUID: strings.ToLower(p.systemUUID), IP: "127.0.90.99"})
	w.cloud.InstanceView().Invalidate()
	for _, uuid := range []string{p.configUUID, strings.ToLower(p.systemUUID)} {
		n := node(p.vm, uuid)
		var amb *view.AmbiguousError
		if md, err := instances.InstanceMetadata(ctx, n); !errors.As(err, &amb) || len(amb.Instances) != 2 || errors.Is(err, cloudprovider.InstanceNotFound) {
			t.Errorf("providerID %s with both forms listed: metadata %+v, %v; want an AmbiguousError naming both VMs", n.Spec.ProviderID, md, err)
		}
		if ok, err := instances.InstanceExists(ctx, n); !errors.Is(err, view.ErrAmbiguous) {
			t.Errorf("providerID %s with both forms listed: exists %v, %v; want ErrAmbiguous (never deleted)", n.Spec.ProviderID, ok, err)
		}
		if _, err := w.cloud.ConfirmInstance(ctx, n.Spec.ProviderID); !errors.Is(err, view.ErrAmbiguous) || !strings.Contains(err.Error(), "impostor") {
			t.Errorf("ConfirmInstance(%s): %v; want ambiguous", n.Spec.ProviderID, err)
		}
	}
	// The other VMs are answered as before.
	if md, err := instances.InstanceMetadata(ctx, node("k8s-58927-4", publishedPairs[4].systemUUID)); err != nil || md.ProviderID != "vsphere://"+publishedPairs[4].configUUID {
		t.Errorf("k8s-58927-4 beside the twins: %+v, %v", md, err)
	}
	// Outside the cluster's folder the impostor is no VM of the cluster:
	// one VM matches again.
	if err := w.sim.PowerOff(impostor); err != nil {
		t.Fatal(err)
	}
	if err := w.sim.Destroy(impostor); err != nil {
		t.Fatal(err)
	}
	w.add(t, vspheretest.VM{Name: "impostor", UUID: strings.ToLower(p.systemUUID), IP: "127.0.90.99", Folder: "/DC0/vm"})
	w.cloud.InstanceView().Invalidate()
	if md, err := instances.InstanceMetadata(ctx, node(p.vm, p.systemUUID)); err != nil || md.ProviderID != "vsphere://"+p.configUUID {
		t.Errorf("impostor outside the folder: %+v, %v", md, err)
	}
	if in, err := w.cloud.ConfirmInstance(ctx, agentid.ProviderID(p.systemUUID)); err != nil || in.Name != p.vm {
		t.Errorf("ConfirmInstance with the impostor outside the folder: %+v, %v", in, err)
	}
}

// ConfirmInstance asks vCenter for both byte orders of a providerID's UUID:
// the VM of either form, the foreign answer when only a VM outside the
// cluster matches, absent when neither is in vCenter.
func TestConfirmInstanceInEitherByteOrder(t *testing.T) {
	w := newWorld(t, nil)
	ctx := context.Background()
	w.add(t, vspheretest.VM{Name: "in", UUID: uuid(1), IP: "127.0.90.41"})
	w.add(t, vspheretest.VM{Name: "out", UUID: uuid(2), IP: "127.0.90.42", Folder: "/DC0/vm"})
	swappedPID := func(u string) string { return agentid.ProviderID(agentid.SwapUUID(u)) }
	if in, err := w.cloud.ConfirmInstance(ctx, swappedPID(uuid(1))); err != nil || in.Name != "in" || in.ID != uuid(1) {
		t.Errorf("swapped form of in's UUID: %+v, %v", in, err)
	}
	kittest.Confirms(t, "swapped form of out's UUID", w.cloud.ConfirmInstance, swappedPID(uuid(2)), kittest.Foreign, "other byte order")
	kittest.Confirms(t, "neither form in vCenter", w.cloud.ConfirmInstance, swappedPID(uuid(9)), kittest.Absent, "")
	// A Node whose VM is gone is gone in both byte orders.
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gone"}, Spec: v1.NodeSpec{ProviderID: swappedPID(uuid(9))}}
	instances, _ := w.cloud.InstancesV2()
	if ok, err := instances.InstanceExists(ctx, n); ok || err != nil {
		t.Errorf("gone: exists %v, %v", ok, err)
	}
}
