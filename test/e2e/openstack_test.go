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
	"github.com/mooring-dev/mooring/cloud/openstack/openstacktest"
	"github.com/mooring-dev/mooring/internal/csrreason"
	"github.com/mooring-dev/mooring/internal/evidence"
	"github.com/mooring-dev/mooring/internal/ticket"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// TestOpenStackNodesJoin: mooring on OpenStack, against the
// OpenStack-compatible endpoint (cloud/openstack/openstacktest: Keystone
// with application credentials and expiring tokens, Nova's servers list
// with tags, limit and marker at microversion 2.47, a metadata service per
// server) with the real gophercloud client in the CCM and the approver.
// OpenStack signs nothing mooring checks, so each of three servers is
// provisioned as an admin would: a join ticket issued for its name, then
// the server tagged as the cluster's; each mooring-agent (cloud: openstack)
// reads meta_data.json and presents the ticket; the standalone
// mooring-csr-approver (--cloud-provider=openstack, --ticket-keys-file)
// checks it against Nova's record (the one server of that name, created
// within the ticket's life); mooring-ccm (--cloud-provider=openstack)
// initializes the Nodes with openstack:/// providerIDs, the availability
// zone and the addresses; serving certificates are approved. node-3 is a
// server of a cloud without a metadata service: nothing answers at its
// metadata service's address, and its agent reads its config drive (Nova's
// layout, the address only in network_data.json). Then every Keystone
// token expires, and ticket attacks are denied by the real approver, each
// with its reason, after it renewed its token.
func TestOpenStackNodesJoin(t *testing.T) {
	tickets := harness.NewTicketIssuer(t)
	const driveOnly = "node-3"
	j := joinThreeWith(t, func(tb testing.TB) *harness.OpenStackCloud {
		o := harness.StartOpenStackCloud(tb, tickets, openstacktest.Options{MaxLimit: 2})
		o.ConfigDriveOnly(driveOnly)
		return o
	}, "OpenStack servers", joinOptions{ApproverArgs: tickets.ApproverArgs(), CCMArgs: tickets.CCMArgs()})
	c, osc, ctx, start, fleet := j.C, j.Cloud, j.Ctx, j.Start, j.Fleet

	for _, m := range fleet.Machines {
		name := m.Name
		srv, ok := osc.Server(name)
		if !ok {
			t.Fatalf("no server %s", name)
		}
		node := waitInitialized(ctx, t, c, name)
		if node.Spec.ProviderID != "openstack:///"+srv.ID || node.Labels[corev1.LabelTopologyZone] != openstacktest.DefaultZone ||
			node.Labels[corev1.LabelTopologyRegion] != openstacktest.DefaultRegion ||
			node.Labels[corev1.LabelInstanceTypeStable] != openstacktest.DefaultFlavor {
			t.Fatalf("%s: providerID %q, labels %v", name, node.Spec.ProviderID, node.Labels)
		}
		want := []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: srv.Addresses[0].Addr},
			{Type: corev1.NodeExternalIP, Address: srv.Addresses[1].Addr},
		}
		if !sameAddresses(withoutHostname(node.Status.Addresses), want) || !strings.HasPrefix(srv.Addresses[0].Addr, "127.0.92.") {
			t.Fatalf("%s: addresses %v, want %v", name, node.Status.Addresses, want)
		}
		servingApprovedByMooring(ctx, t, c, name)
		if approval := clientApproval(ctx, t, c, name); !strings.Contains(approval, "join ticket") {
			t.Errorf("%s: client CSR approved with %q", name, approval)
		}
		// The agent's address for the kubelet: local-ipv4 from the metadata
		// service, or network_data.json from the config drive.
		env, err := os.ReadFile(m.EnvFile)
		if err != nil || !strings.Contains(string(env), "--node-ip="+srv.Addresses[0].Addr+" ") && !strings.Contains(string(env), "--node-ip="+srv.Addresses[0].Addr+`"`) {
			t.Errorf("%s: kubelet flags %q %v, want --node-ip=%s", name, env, err, srv.Addresses[0].Addr)
		}
		if name == driveOnly && !srv.NoMetadataService {
			t.Errorf("%s was made with a metadata service", name)
		}
	}
	t.Logf("3 nodes Ready (%s from its config drive, without a metadata service), initialized with openstack:/// providerIDs, serving certificates approved, %v after the agents started",
		driveOnly, time.Since(start).Round(time.Millisecond))
	calls := func() string {
		return fmt.Sprintf("auth %d, list %d, get %d, metadata %d, unauthorized %d; microversion %s", osc.Calls("auth"), osc.Calls("list"),
			osc.Calls("get"), osc.Calls("metadata"), osc.Calls("unauthorized"), osc.LastMicroversion())
	}
	t.Logf("cloud calls: %s", calls())
	// One token for each of the two binaries; Nova served 2.47.
	if osc.Calls("auth") != 2 || osc.Calls("unauthorized") != 0 || osc.LastMicroversion() != "2.47" {
		t.Errorf("cloud calls: %s", calls())
	}

	// Keystone tokens expire (as after an hour): the approver's next
	// listing is refused once, and it authenticates again.
	osc.ExpireTokens()
	openstackTicketAttacks(ctx, t, c, osc, fleet)
	t.Logf("cloud calls after the tokens expired and the attacks: %s", calls())
	if osc.Calls("auth") < 3 || osc.Calls("unauthorized") < 1 || osc.Calls("auth") > osc.Calls("unauthorized")+2 {
		t.Errorf("expired tokens not renewed once each: %s", calls())
	}
}

// withoutHostname is a Node's addresses less the Hostname, which the
// OpenStack CCM gives only from a hostname metadata item.
func withoutHostname(addrs []corev1.NodeAddress) []corev1.NodeAddress {
	var out []corev1.NodeAddress
	for _, a := range addrs {
		if a.Type != corev1.NodeHostName {
			out = append(out, a)
		}
	}
	return out
}

// openstackTicketAttacks joins through the real approver with tickets an
// attacker can get or make, and servers whose record does not fit them:
// each CSR is denied with its reason, and a good one passes.
func openstackTicketAttacks(ctx context.Context, t *testing.T, c *testbed.Cluster, osc *harness.OpenStackCloud, fleet *harness.Fleet) {
	t.Helper()
	now := time.Now()
	issue := func(name, cluster string, iat time.Time, life time.Duration) string {
		t.Helper()
		tok, err := osc.Tickets.IssueAt(name, cluster, iat, life)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	tagged := func(cluster string) []string { return []string{harness.OpenStackTag(cluster)} }
	used, err := os.ReadFile(filepath.Join(fleet.Machines[0].Root, cloudinit.TicketPath))
	if err != nil {
		t.Fatal(err)
	}
	// An expired ticket, its server made within its life.
	late := issue("late", e2eCluster, now.Add(-2*time.Hour), time.Hour)
	osc.AddServer(openstacktest.Server{Name: "late", Tags: tagged(e2eCluster), Created: now.Add(-90 * time.Minute)})
	// A ticket signed by a key the approver does not know.
	forged, err := harness.NewTicketIssuer(t).Issue("forged", e2eCluster, 0)
	if err != nil {
		t.Fatal(err)
	}
	osc.AddNode(e2eCluster, "forged")
	// A ticket whose audience is another cluster.
	otherAud := issue("other-aud", "another-cluster", now, 0)
	osc.AddNode(e2eCluster, "other-aud")
	// A server that was there before its ticket (an existing machine of
	// the name), and one Nova says was made after the ticket expired.
	early := issue("early", e2eCluster, now, 0)
	osc.AddServer(openstacktest.Server{Name: "early", Tags: tagged(e2eCluster), Created: now.Add(-10 * time.Minute)})
	after := issue("after", e2eCluster, now.Add(-5*time.Minute), 10*time.Minute)
	osc.AddServer(openstacktest.Server{Name: "after", Tags: tagged(e2eCluster), Created: now.Add(15 * time.Minute)})
	// Two servers of one name: Nova allows it (names are not unique in a
	// project), so an attacker who can create servers can add a second.
	twin := issue("twin", e2eCluster, now, 0)
	first := osc.AddNode(e2eCluster, "twin")
	osc.AddServer(openstacktest.Server{ID: "0f0f0f0f-0000-4000-8000-" + first.ID[24:], Name: "twin", Tags: tagged(e2eCluster)})
	// A server of another cluster, and one without the tag, under the
	// ticket's name.
	foreign := issue("foreign", e2eCluster, now, 0)
	osc.AddNode("another-cluster", "foreign")
	untagged := issue("untagged", e2eCluster, now, 0)
	osc.AddServer(openstacktest.Server{Name: "untagged"})
	// A server still being built.
	building := issue("building", e2eCluster, now, 0)
	osc.AddServer(openstacktest.Server{Name: "building", Tags: tagged(e2eCluster), Status: openstacktest.StatusBuild})
	// Another server's ticket presented for the thief's name.
	victim := issue("victim", e2eCluster, now, 0)
	osc.AddNode(e2eCluster, "victim")
	osc.AddNode(e2eCluster, "thief")
	good := issue("good", e2eCluster, time.Now(), 0)
	osc.AddNode(e2eCluster, "good")

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
		{"another server's ticket", "thief", withTicket(victim), csrreason.NodeNameMismatch},
		{"a server created before its ticket", "early", withTicket(early), csrreason.InstanceCreatedOutsideTicket},
		{"a server created after its ticket expired", "after", withTicket(after), csrreason.InstanceCreatedOutsideTicket},
		{"two servers of the ticket's name", "twin", withTicket(twin), csrreason.InstanceNameAmbiguous},
		{"a server of another cluster", "foreign", withTicket(foreign), csrreason.InstanceNotInCluster},
		{"a server without the cluster tag", "untagged", withTicket(untagged), csrreason.InstanceNotInCluster},
		{"a server still being built", "building", withTicket(building), csrreason.InstanceNotRunning},
		{"a good ticket", "good", withTicket(good), ""},
	})
}
