package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/mooring-dev/mooring/agent/cloudinit"
	"github.com/mooring-dev/mooring/cloud/linode/linodetest"
	"github.com/mooring-dev/mooring/internal/csrreason"
	"github.com/mooring-dev/mooring/internal/evidence"
	"github.com/mooring-dev/mooring/internal/ticket"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// TestLinodeNodesJoin: mooring on Linode, against the Linode-compatible
// endpoint (cloud/linode/linodetest: Linodes listed by tag through
// X-Filter, page by page, and a Metadata service per Linode) with the real
// linodego client in mooring-ccm and the approver. Linode signs no
// instance identity, so each of three Linodes is provisioned as an admin
// would: a join ticket issued for its label, then the Linode created
// tagged k8s:<cluster> with the ticket in its user data. Each
// mooring-agent (cloud: linode) asks its Metadata service for a token,
// then reads its instance and network, and presents the ticket; the
// standalone mooring-csr-approver (--cloud-provider=linode,
// --ticket-keys-file) checks it against the instance list's record (one
// Linode of the label, in the cluster, created within the ticket's life);
// mooring-ccm initializes the Nodes with linode:// providerIDs, the
// region and type labels and the Linodes' addresses; serving
// certificates are approved. Then ticket attacks on Linode are denied by
// the real approver, each with its reason, and a good ticket passes.
func TestLinodeNodesJoin(t *testing.T) {
	tickets := harness.NewTicketIssuer(t)
	j := joinThreeWith(t, func(t testing.TB) *harness.LinodeCloud { return harness.StartLinodeCloud(t, tickets) },
		"Linodes", joinOptions{ApproverArgs: tickets.ApproverArgs()})
	c, ln, ctx, start, fleet := j.C, j.Cloud, j.Ctx, j.Start, j.Fleet

	checkLinodeNodes(ctx, t, c, ln, fleet)
	t.Logf("3 nodes Ready, initialized with linode:// providerIDs, serving certificates approved, %v after the agents started",
		time.Since(start).Round(time.Millisecond))
	t.Logf("cloud calls: list %d, get %d, metadata token %d, instance %d, network %d", ln.Calls(linodetest.MethodList),
		ln.Calls(linodetest.MethodGet), ln.Calls(linodetest.MethodToken), ln.Calls(linodetest.MethodInstance),
		ln.Calls(linodetest.MethodNetwork))

	linodeTicketAttacks(ctx, t, c, ln, fleet)
	t.Logf("cloud calls after the attacks: list %d, get %d", ln.Calls(linodetest.MethodList), ln.Calls(linodetest.MethodGet))
}

// checkLinodeNodes waits until every machine's Node is Ready and
// initialized as Linode's CCM would (providerID, region and type labels,
// no zone, addresses in the API's order by range), its client CSR
// approved for its ticket and its serving CSR by mooring.
func checkLinodeNodes(ctx context.Context, t *testing.T, c *testbed.Cluster, ln *harness.LinodeCloud, fleet *harness.Fleet) {
	t.Helper()
	for _, m := range fleet.Machines {
		name := m.Name
		node := waitInitialized(ctx, t, c, name)
		var in linodetest.Instance
		for _, l := range ln.Instances() {
			if l.Label == name {
				in = l
			}
		}
		if in.ID == 0 {
			t.Fatalf("%s: no Linode", name)
		}
		wantPID := "linode://" + strconv.Itoa(in.ID)
		if node.Spec.ProviderID != wantPID || node.Labels[corev1.LabelTopologyRegion] != linodetest.DefaultRegion ||
			node.Labels[corev1.LabelInstanceTypeStable] != linodetest.DefaultType {
			t.Fatalf("%s: providerID %q (want %s), labels %v", name, node.Spec.ProviderID, wantPID, node.Labels)
		}
		if z, ok := node.Labels[corev1.LabelTopologyZone]; ok {
			t.Fatalf("%s: zone label %q; Linode's CCM sets none", name, z)
		}
		want := []corev1.NodeAddress{
			{Type: corev1.NodeHostName, Address: name}, {Type: corev1.NodeExternalIP, Address: in.PublicIP},
			{Type: corev1.NodeInternalIP, Address: in.PrivateIP},
		}
		if !sameAddresses(node.Status.Addresses, want) {
			t.Fatalf("%s: addresses %v, want %v", name, node.Status.Addresses, want)
		}
		if !strings.HasPrefix(in.PrivateIP, "127.0.97.") || !strings.HasPrefix(in.PublicIP, "127.0.98.") {
			t.Fatalf("%s: Linode addresses %s %s", name, in.PrivateIP, in.PublicIP)
		}
		if approval := clientApproval(ctx, t, c, name); !strings.Contains(approval, "join ticket") {
			t.Errorf("%s: client CSR approved with %q", name, approval)
		}
		servingApprovedByMooring(ctx, t, c, name)
	}
}

// linodeTicketAttacks files client CSRs with tickets an attacker can get
// or make, on Linode: each is denied by the real approver with its
// reason, and a good one passes.
func linodeTicketAttacks(ctx context.Context, t *testing.T, c *testbed.Cluster, ln *harness.LinodeCloud, fleet *harness.Fleet) {
	t.Helper()
	tag := ln.ClusterTag(e2eCluster)
	tickets := ln.Tickets
	issue := func(name, cluster string, iat time.Time, life time.Duration) string {
		t.Helper()
		tok, err := tickets.IssueAt(name, cluster, iat, life)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	linode := func(label string, tags []string, edit func(*linodetest.Instance)) {
		ln.AddLinode(label, tags, edit)
	}
	now := time.Now()
	used, err := os.ReadFile(filepath.Join(fleet.Machines[0].Root, cloudinit.TicketPath))
	if err != nil {
		t.Fatal(err)
	}
	forged, err := harness.NewTicketIssuer(t).Issue("forged", e2eCluster, 0)
	if err != nil {
		t.Fatal(err)
	}
	linode("forged", []string{tag}, nil)
	expired := issue("expired", e2eCluster, now.Add(-2*time.Hour), time.Hour)
	linode("expired", []string{tag}, nil)
	otherAud := issue("other-aud", "another-cluster", now, 0)
	linode("other-aud", []string{tag}, nil)
	// Made ten minutes before its ticket: an existing Linode of the label.
	early := issue("early", e2eCluster, now, 0)
	linode("early", []string{tag}, func(in *linodetest.Instance) { in.Created = now.Add(-10 * time.Minute) })
	// Its created is after the ticket (five minutes) expired.
	late := issue("late", e2eCluster, now, 5*time.Minute)
	linode("late", []string{tag}, func(in *linodetest.Instance) { in.Created = now.Add(20 * time.Minute) })
	twin := issue("twin", e2eCluster, now, 0)
	linode("twin", []string{tag}, nil)
	linode("twin", []string{tag}, nil)
	foreign := issue("foreign", e2eCluster, now, 0)
	linode("foreign", []string{ln.ClusterTag("another-cluster")}, nil)
	untagged := issue("untagged", e2eCluster, now, 0)
	linode("untagged", []string{"web"}, nil)
	offline := issue("offline", e2eCluster, now, 0)
	linode("offline", []string{tag}, func(in *linodetest.Instance) { in.Status = linodetest.StatusOffline })
	provisioning := issue("provisioning", e2eCluster, now, 0)
	linode("provisioning", []string{tag}, func(in *linodetest.Instance) { in.Status = linodetest.StatusProvisioning })
	victim := issue("victim", e2eCluster, now, 0)
	linode("victim", []string{tag}, nil)
	linode("thief", []string{tag}, nil)
	good := issue("good", e2eCluster, now, 0)
	linode("good", []string{tag}, nil)

	withTicket := func(tok string) func(string) []evidence.Block {
		return func(string) []evidence.Block {
			return []evidence.Block{{Type: ticket.BlockType, Data: []byte(strings.TrimSpace(tok))}}
		}
	}
	runAttacks(ctx, t, c, []attack{
		{"a ticket used a second time (node-1's, from its user data)", "node-1", withTicket(string(used)), csrreason.EvidenceReplayed},
		{"a ticket signed by another key (forged)", "forged", withTicket(forged), csrreason.EvidenceSignature},
		{"an expired ticket", "expired", withTicket(expired), csrreason.EvidenceExpired},
		{"a ticket of another cluster", "other-aud", withTicket(otherAud), csrreason.EvidenceCluster},
		{"a Linode created before its ticket was issued", "early", withTicket(early), csrreason.InstanceCreatedOutsideTicket},
		{"a Linode created after its ticket expired", "late", withTicket(late), csrreason.InstanceCreatedOutsideTicket},
		{"two Linodes of one label", "twin", withTicket(twin), csrreason.InstanceNameAmbiguous},
		{"a Linode of another cluster (tag k8s:another-cluster)", "foreign", withTicket(foreign), csrreason.InstanceNotInCluster},
		{"a Linode without the cluster tag", "untagged", withTicket(untagged), csrreason.InstanceNotInCluster},
		{"a Linode that is offline", "offline", withTicket(offline), csrreason.InstanceNotRunning},
		{"a Linode still provisioning", "provisioning", withTicket(provisioning), csrreason.InstanceNotRunning},
		{"another Linode's ticket (victim's, filed as thief)", "thief", withTicket(victim), csrreason.NodeNameMismatch},
		{"a good ticket", "good", withTicket(good), ""},
	})
}
