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
	"github.com/mooring-dev/mooring/cloud/hetzner/hetznertest"
	"github.com/mooring-dev/mooring/internal/csrreason"
	"github.com/mooring-dev/mooring/internal/evidence"
	"github.com/mooring-dev/mooring/internal/ticket"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// TestHetznerNodesJoin: mooring on Hetzner Cloud, against the Hetzner
// Cloud-compatible endpoint (cloud/hetzner/hetznertest: the servers API
// with label selector and pagination, a metadata service per server) with
// the real hcloud-go client in every binary. Hetzner signs no instance
// identity, so each of three servers is provisioned as an admin would: a
// join ticket issued for its name, then the server labelled as the
// cluster's; each mooring-agent (cloud: hetzner) reads its metadata service
// and presents the ticket; the standalone mooring-csr-approver
// (--cloud-provider=hetzner, --ticket-keys-file) checks it against the
// servers API's record (the one server of that name, created within the
// ticket's life); mooring-ccm (--cloud-provider=hetzner) initializes the
// Nodes with hcloud:// providerIDs; serving certificates are approved. Then
// ticket attacks are denied by the real approver, each with its reason.
func TestHetznerNodesJoin(t *testing.T) {
	tickets := harness.NewTicketIssuer(t)
	j := joinThreeWith(t, func(tb testing.TB) *harness.HetznerCloud { return harness.StartHetznerCloud(tb, tickets) },
		"Hetzner servers", joinOptions{ApproverArgs: tickets.ApproverArgs(), CCMArgs: tickets.CCMArgs()})
	c, hz, ctx, start, fleet := j.C, j.Cloud, j.Ctx, j.Start, j.Fleet

	for _, m := range fleet.Machines {
		name := m.Name
		srv, ok := hz.Server(name)
		if !ok {
			t.Fatalf("no server %s", name)
		}
		node := waitInitialized(ctx, t, c, name)
		wantPID := fmt.Sprintf("hcloud://%d", srv.ID)
		if node.Spec.ProviderID != wantPID || node.Labels[corev1.LabelTopologyZone] != "fsn1-dc14" ||
			node.Labels[corev1.LabelTopologyRegion] != hetznertest.DefaultLocation ||
			node.Labels[corev1.LabelInstanceTypeStable] != hetznertest.DefaultServerType ||
			node.Labels["instance.hetzner.cloud/provided-by"] != "cloud" {
			t.Fatalf("%s: providerID %q, labels %v", name, node.Spec.ProviderID, node.Labels)
		}
		want := []corev1.NodeAddress{
			{Type: corev1.NodeHostName, Address: name},
			{Type: corev1.NodeExternalIP, Address: srv.PublicIPv4},
			{Type: corev1.NodeInternalIP, Address: srv.PrivateNets[0].IP},
		}
		if fmt.Sprint(node.Status.Addresses) != fmt.Sprint(want) || !strings.HasPrefix(srv.PrivateNets[0].IP, "127.0.85.") {
			t.Fatalf("%s: addresses %v, want %v", name, node.Status.Addresses, want)
		}
		servingApprovedByMooring(ctx, t, c, name)
		if approval := clientApproval(ctx, t, c, name); !strings.Contains(approval, "join ticket") {
			t.Errorf("%s: client CSR approved with %q", name, approval)
		}
	}
	t.Logf("3 nodes Ready, initialized with hcloud:// providerIDs, serving certificates approved, %v after the agents started",
		time.Since(start).Round(time.Millisecond))
	t.Logf("cloud calls: list %d, get %d, metadata %d, unauthorized %d",
		hz.Calls("list"), hz.Calls("get"), hz.Calls("metadata"), hz.Calls("unauthorized"))
	if n := hz.Calls("unauthorized"); n != 0 {
		t.Errorf("%d API calls refused for their token", n)
	}

	hetznerTicketAttacks(ctx, t, c, hz, fleet)
}

// hetznerTicketAttacks joins through the real approver with tickets an
// attacker can get or make, and servers whose record does not fit them:
// each CSR is denied with its reason, and a good one passes.
func hetznerTicketAttacks(ctx context.Context, t *testing.T, c *testbed.Cluster, hz *harness.HetznerCloud, fleet *harness.Fleet) {
	t.Helper()
	now := time.Now()
	issue := func(name, cluster string, iat time.Time, life time.Duration) string {
		t.Helper()
		tok, err := hz.Tickets.IssueAt(name, cluster, iat, life)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	labelled := func(cluster string) map[string]string { return map[string]string{harness.HetznerLabel: cluster} }
	used, err := os.ReadFile(filepath.Join(fleet.Machines[0].Root, cloudinit.TicketPath))
	if err != nil {
		t.Fatal(err)
	}
	// An expired ticket, its server made within its life.
	late := issue("late", e2eCluster, now.Add(-2*time.Hour), time.Hour)
	hz.AddServer(hetznertest.Server{Name: "late", Labels: labelled(e2eCluster), Created: now.Add(-90 * time.Minute)})
	// A ticket signed by a key the approver does not know.
	forged, err := harness.NewTicketIssuer(t).Issue("forged", e2eCluster, 0)
	if err != nil {
		t.Fatal(err)
	}
	hz.AddNode(e2eCluster, "forged")
	// A ticket whose audience is another cluster.
	otherAud := issue("other-aud", "another-cluster", now, 0)
	hz.AddNode(e2eCluster, "other-aud")
	// A server that was there before its ticket (an existing machine of
	// the name), and one the cloud says was made after the ticket expired
	// (its clock ahead): the ticket is valid, the server is not its own.
	early := issue("early", e2eCluster, now, 0)
	hz.AddServer(hetznertest.Server{Name: "early", Labels: labelled(e2eCluster), Created: now.Add(-10 * time.Minute)})
	after := issue("after", e2eCluster, now.Add(-5*time.Minute), 10*time.Minute)
	hz.AddServer(hetznertest.Server{Name: "after", Labels: labelled(e2eCluster), Created: now.Add(15 * time.Minute)})
	// Two servers of one name (the API keeps names unique in a project;
	// the approver does not rely on it).
	twin := issue("twin", e2eCluster, now, 0)
	first := hz.AddNode(e2eCluster, "twin")
	hz.AddServer(hetznertest.Server{ID: first.ID + 1_000_000, Name: "twin", Labels: labelled(e2eCluster)})
	// A server of another cluster under the ticket's name.
	foreign := issue("foreign", e2eCluster, now, 0)
	hz.AddNode("another-cluster", "foreign")
	// Another server's ticket presented for the thief's name.
	victim := issue("victim", e2eCluster, now, 0)
	hz.AddNode(e2eCluster, "victim")
	hz.AddNode(e2eCluster, "thief")
	good := issue("good", e2eCluster, time.Now(), 0)
	hz.AddNode(e2eCluster, "good")

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
		{"a good ticket", "good", withTicket(good), ""},
	})
}
