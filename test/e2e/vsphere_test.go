package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/mooring-dev/mooring/agent/cloudinit"
	"github.com/mooring-dev/mooring/cloud/vsphere/vspheretest"
	"github.com/mooring-dev/mooring/internal/csrreason"
	"github.com/mooring-dev/mooring/internal/evidence"
	"github.com/mooring-dev/mooring/internal/ticket"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// TestVSphereNodesJoin: mooring on vSphere, against govmomi's own vCenter
// simulator (vcsim, SOAP and REST, on loopback with TLS and a checked
// password) with govmomi in every binary. vSphere signs no VM identity, so
// each of three VMs is provisioned as an admin would: a join ticket issued
// for its name, then the VM made in the cluster's folder through the API;
// each mooring-agent (cloud: vsphere) reads the BIOS UUID from its SMBIOS
// (as guests of current hardware, of older hardware and of SMBIOS 3.1
// without a readable serial number show it: harness.DefaultGuests) and
// presents the ticket; the standalone mooring-csr-approver
// (--cloud-provider=vsphere, --ticket-keys-file) checks it against the
// folder's VMs (the one VM of that name, created within the ticket's
// life); mooring-ccm initializes the Nodes with vsphere://<BIOS UUID>
// providerIDs, VMware Tools' addresses and the zone and region of the
// hosts' tags; serving certificates are approved. Then ticket attacks are
// denied by the real approver, each with its reason.
func TestVSphereNodesJoin(t *testing.T) {
	tickets := harness.NewTicketIssuer(t)
	j := joinThreeWith(t, func(tb testing.TB) *harness.VSphereCloud { return harness.StartVSphereCloud(tb, tickets) },
		"vSphere VMs", joinOptions{ApproverArgs: tickets.ApproverArgs(), CCMArgs: tickets.CCMArgs()})
	c, vs, ctx, start, fleet := j.C, j.Cloud, j.Ctx, j.Start, j.Fleet

	for _, m := range fleet.Machines {
		name := m.Name
		uuid := vs.UUID(name)
		node := waitInitialized(ctx, t, c, name)
		if node.Spec.ProviderID != "vsphere://"+uuid || node.Labels[corev1.LabelTopologyZone] != harness.VSphereClusterZone ||
			node.Labels[corev1.LabelTopologyRegion] != harness.VSphereRegion ||
			node.Labels[corev1.LabelInstanceTypeStable] != "vsphere-vm.cpu-2.mem-4gb.os-ubuntu64" {
			t.Fatalf("%s: providerID %q (BIOS UUID %s), labels %v", name, node.Spec.ProviderID, uuid, node.Labels)
		}
		var ip string
		for _, a := range node.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				ip = a.Address
			}
		}
		want := []corev1.NodeAddress{
			{Type: corev1.NodeHostName, Address: name},
			{Type: corev1.NodeInternalIP, Address: ip},
			{Type: corev1.NodeExternalIP, Address: ip},
		}
		if fmt.Sprint(node.Status.Addresses) != fmt.Sprint(want) || !strings.HasPrefix(ip, "127.0.87.") {
			t.Fatalf("%s: addresses %v, want %v", name, node.Status.Addresses, want)
		}
		servingApprovedByMooring(ctx, t, c, name)
		if approval := clientApproval(ctx, t, c, name); !strings.Contains(approval, "join ticket") {
			t.Errorf("%s: client CSR approved with %q", name, approval)
		}
	}
	t.Logf("3 nodes Ready, initialized with vsphere:// providerIDs, zones and regions, serving certificates approved, %v after the agents started",
		time.Since(start).Round(time.Millisecond))
	if err := vs.CheckLoopback(); err != nil {
		t.Fatal(err)
	}
	vsphereTicketAttacks(ctx, t, c, vs, fleet)
}

// vsphereTicketAttacks joins through the real approver with tickets an
// attacker can get or make, and VMs whose record does not fit them: each
// CSR is denied with its reason, and a good one passes.
func vsphereTicketAttacks(ctx context.Context, t *testing.T, c *testbed.Cluster, vs *harness.VSphereCloud, fleet *harness.Fleet) {
	t.Helper()
	now := time.Now()
	issue := func(name, cluster string, iat time.Time, life time.Duration) string {
		t.Helper()
		tok, err := vs.Tickets.IssueAt(name, cluster, iat, life)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	add := func(vm vspheretest.VM, created time.Time) {
		t.Helper()
		_, ref, err := vs.AddVM(vm)
		if err != nil {
			t.Fatal(err)
		}
		if !created.IsZero() {
			vs.SetCreated(ref, created)
		}
	}
	used, err := os.ReadFile(filepath.Join(fleet.Machines[0].Root, cloudinit.TicketPath))
	if err != nil {
		t.Fatal(err)
	}
	// An expired ticket, its VM made within its life.
	late := issue("late", e2eCluster, now.Add(-2*time.Hour), time.Hour)
	add(vspheretest.VM{Name: "late"}, now.Add(-90*time.Minute))
	// A ticket signed by a key the approver does not know.
	forged, err := harness.NewTicketIssuer(t).Issue("forged", e2eCluster, 0)
	if err != nil {
		t.Fatal(err)
	}
	add(vspheretest.VM{Name: "forged"}, time.Time{})
	// A ticket whose audience is another cluster.
	otherAud := issue("other-aud", "another-cluster", now, 0)
	add(vspheretest.VM{Name: "other-aud"}, time.Time{})
	// A VM that was there before its ticket (an existing VM of the name),
	// and one vCenter says was made after the ticket expired.
	early := issue("early", e2eCluster, now, 0)
	add(vspheretest.VM{Name: "early"}, now.Add(-10*time.Minute))
	after := issue("after", e2eCluster, now.Add(-5*time.Minute), 10*time.Minute)
	add(vspheretest.VM{Name: "after"}, now.Add(15*time.Minute))
	// Two VMs of one name in the cluster's folder tree (vCenter keeps
	// names unique per folder, not per tree).
	twin := issue("twin", e2eCluster, now, 0)
	sub, err := vs.CreateFolder(vs.Folder, "pool-b")
	if err != nil {
		t.Fatal(err)
	}
	add(vspheretest.VM{Name: "twin"}, time.Time{})
	add(vspheretest.VM{Name: "twin", Folder: sub}, time.Time{})
	// A VM of the ticket's name outside the cluster's folder.
	foreign := issue("foreign", e2eCluster, now, 0)
	add(vspheretest.VM{Name: "foreign", Folder: "/DC0/vm"}, time.Time{})
	// Another VM's ticket presented for the thief's name.
	victim := issue("victim", e2eCluster, now, 0)
	add(vspheretest.VM{Name: "victim"}, time.Time{})
	add(vspheretest.VM{Name: "thief"}, time.Time{})
	// A powered-off VM.
	off := issue("off", e2eCluster, now, 0)
	add(vspheretest.VM{Name: "off", Off: true}, time.Time{})
	good := issue("good", e2eCluster, time.Now(), 0)
	add(vspheretest.VM{Name: "good"}, time.Time{})
	if err := vs.CheckLoopback(); err != nil {
		t.Fatal(err)
	}

	withTicket := func(tok string) func(string) []evidence.Block {
		return func(string) []evidence.Block {
			return []evidence.Block{{Type: ticket.BlockType, Data: []byte(strings.TrimSpace(tok))}}
		}
	}
	runAttacks(ctx, t, c, []attack{
		{"an expired ticket", "late", withTicket(late), csrreason.EvidenceExpired},
		{"a ticket used a second time", fleet.Machines[0].Name, withTicket(string(used)), csrreason.EvidenceReplayed},
		{"a ticket signed by another key", "forged", withTicket(forged), csrreason.EvidenceSignature},
		{"a ticket of another cluster", "other-aud", withTicket(otherAud), csrreason.EvidenceCluster},
		{"another VM's ticket", "thief", withTicket(victim), csrreason.NodeNameMismatch},
		{"a VM created before its ticket", "early", withTicket(early), csrreason.InstanceCreatedOutsideTicket},
		{"a VM created after its ticket expired", "after", withTicket(after), csrreason.InstanceCreatedOutsideTicket},
		{"two VMs of the ticket's name", "twin", withTicket(twin), csrreason.InstanceNameAmbiguous},
		{"a VM outside the cluster's folder", "foreign", withTicket(foreign), csrreason.InstanceNotInCluster},
		{"a powered-off VM", "off", withTicket(off), csrreason.InstanceNotRunning},
		{"a good ticket", "good", withTicket(good), ""},
	})
}
