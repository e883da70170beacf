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
	"github.com/mooring-dev/mooring/cloud/digitalocean/digitaloceantest"
	"github.com/mooring-dev/mooring/internal/csrreason"
	"github.com/mooring-dev/mooring/internal/evidence"
	"github.com/mooring-dev/mooring/internal/ticket"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// TestDigitalOceanNodesJoin: mooring on DigitalOcean, against the
// DigitalOcean-compatible endpoint (cloud/digitalocean/digitaloceantest:
// droplets listed by tag, page by page, and a metadata service per
// droplet) with the real godo client in mooring-ccm and the approver.
// DigitalOcean signs no droplet identity, so each of three droplets is
// provisioned as an admin would: a join ticket issued for its name, then
// the droplet created tagged k8s:<cluster> with the ticket in its user
// data. Each mooring-agent (cloud: digitalocean) reads its metadata
// service and presents the ticket; the standalone mooring-csr-approver
// (--cloud-provider=digitalocean, --ticket-keys-file) checks it against
// the droplet list's record (one droplet of the name, in the cluster,
// created within the ticket's life); mooring-ccm initializes the Nodes
// with digitalocean:// providerIDs, the region and size labels and the
// droplets' addresses; serving certificates are approved. Then ticket
// attacks on DigitalOcean are denied by the real approver, each with its
// reason, and a good ticket passes.
func TestDigitalOceanNodesJoin(t *testing.T) {
	tickets := harness.NewTicketIssuer(t)
	j := joinThreeWith(t, func(t testing.TB) *harness.DigitalOceanCloud { return harness.StartDigitalOceanCloud(t, tickets) },
		"droplets", joinOptions{ApproverArgs: tickets.ApproverArgs()})
	c, do, ctx, start, fleet := j.C, j.Cloud, j.Ctx, j.Start, j.Fleet

	checkDigitalOceanNodes(ctx, t, c, do, fleet)
	t.Logf("3 nodes Ready, initialized with digitalocean:// providerIDs, serving certificates approved, %v after the agents started",
		time.Since(start).Round(time.Millisecond))
	t.Logf("cloud calls: list %d, get %d, metadata %d", do.Calls(digitaloceantest.MethodList),
		do.Calls(digitaloceantest.MethodGet), do.Calls(digitaloceantest.MethodMetadata))

	digitalOceanTicketAttacks(ctx, t, c, do, fleet)
	t.Logf("cloud calls after the attacks: list %d, get %d", do.Calls(digitaloceantest.MethodList), do.Calls(digitaloceantest.MethodGet))
}

// checkDigitalOceanNodes waits until every machine's Node is Ready and
// initialized as DigitalOcean's CCM would (providerID, region and size
// labels, no zone, addresses in its order), its client CSR approved for
// its ticket and its serving CSR by mooring.
func checkDigitalOceanNodes(ctx context.Context, t *testing.T, c *testbed.Cluster, do *harness.DigitalOceanCloud, fleet *harness.Fleet) {
	t.Helper()
	for _, m := range fleet.Machines {
		name := m.Name
		node := waitInitialized(ctx, t, c, name)
		var droplet digitaloceantest.Droplet
		for _, d := range do.Droplets() {
			if d.Name == name {
				droplet = d
			}
		}
		if droplet.ID == 0 {
			t.Fatalf("%s: no droplet", name)
		}
		wantPID := "digitalocean://" + strconv.Itoa(droplet.ID)
		if node.Spec.ProviderID != wantPID || node.Labels[corev1.LabelTopologyRegion] != digitaloceantest.DefaultRegion ||
			node.Labels[corev1.LabelInstanceTypeStable] != digitaloceantest.DefaultSize {
			t.Fatalf("%s: providerID %q (want %s), labels %v", name, node.Spec.ProviderID, wantPID, node.Labels)
		}
		if z, ok := node.Labels[corev1.LabelTopologyZone]; ok {
			t.Fatalf("%s: zone label %q; DigitalOcean's CCM sets none", name, z)
		}
		want := []corev1.NodeAddress{
			{Type: corev1.NodeHostName, Address: name}, {Type: corev1.NodeInternalIP, Address: droplet.PrivateIP},
			{Type: corev1.NodeExternalIP, Address: droplet.PublicIP},
		}
		if !sameAddresses(node.Status.Addresses, want) {
			t.Fatalf("%s: addresses %v, want %v", name, node.Status.Addresses, want)
		}
		if !strings.HasPrefix(droplet.PrivateIP, "127.0.83.") || !strings.HasPrefix(droplet.PublicIP, "127.0.84.") {
			t.Fatalf("%s: droplet addresses %s %s", name, droplet.PrivateIP, droplet.PublicIP)
		}
		if approval := clientApproval(ctx, t, c, name); !strings.Contains(approval, "join ticket") {
			t.Errorf("%s: client CSR approved with %q", name, approval)
		}
		servingApprovedByMooring(ctx, t, c, name)
	}
}

// sameAddresses: the same addresses, in the same order (the kubelet may
// add none: it runs with --cloud-provider=external and no --node-ip here).
func sameAddresses(got, want []corev1.NodeAddress) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// digitalOceanTicketAttacks files client CSRs with tickets an attacker can
// get or make, on DigitalOcean: each is denied by the real approver with
// its reason, and a good one passes.
func digitalOceanTicketAttacks(ctx context.Context, t *testing.T, c *testbed.Cluster, do *harness.DigitalOceanCloud, fleet *harness.Fleet) {
	t.Helper()
	tag := do.ClusterTag(e2eCluster)
	tickets := do.Tickets
	issue := func(name, cluster string, iat time.Time, life time.Duration) string {
		t.Helper()
		tok, err := tickets.IssueAt(name, cluster, iat, life)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	droplet := func(name string, tags []string, edit func(*digitaloceantest.Droplet)) {
		do.AddDroplet(name, tags, edit)
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
	droplet("forged", []string{tag}, nil)
	expired := issue("expired", e2eCluster, now.Add(-2*time.Hour), time.Hour)
	droplet("expired", []string{tag}, nil)
	otherAud := issue("other-aud", "another-cluster", now, 0)
	droplet("other-aud", []string{tag}, nil)
	// Made ten minutes before its ticket: an existing droplet of the name.
	early := issue("early", e2eCluster, now, 0)
	droplet("early", []string{tag}, func(d *digitaloceantest.Droplet) { d.Created = now.Add(-10 * time.Minute) })
	// Its created_at is after the ticket (five minutes) expired.
	late := issue("late", e2eCluster, now, 5*time.Minute)
	droplet("late", []string{tag}, func(d *digitaloceantest.Droplet) { d.Created = now.Add(20 * time.Minute) })
	twin := issue("twin", e2eCluster, now, 0)
	droplet("twin", []string{tag}, nil)
	droplet("twin", []string{tag}, nil)
	foreign := issue("foreign", e2eCluster, now, 0)
	droplet("foreign", []string{do.ClusterTag("another-cluster")}, nil)
	untagged := issue("untagged", e2eCluster, now, 0)
	droplet("untagged", []string{"web"}, nil)
	off := issue("off", e2eCluster, now, 0)
	droplet("off", []string{tag}, func(d *digitaloceantest.Droplet) { d.Status = digitaloceantest.StatusOff })
	victim := issue("victim", e2eCluster, now, 0)
	droplet("victim", []string{tag}, nil)
	droplet("thief", []string{tag}, nil)
	good := issue("good", e2eCluster, now, 0)
	droplet("good", []string{tag}, nil)

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
		{"a droplet created before its ticket was issued", "early", withTicket(early), csrreason.InstanceCreatedOutsideTicket},
		{"a droplet created after its ticket expired", "late", withTicket(late), csrreason.InstanceCreatedOutsideTicket},
		{"two droplets of one name", "twin", withTicket(twin), csrreason.InstanceNameAmbiguous},
		{"a droplet of another cluster (tag k8s:another-cluster)", "foreign", withTicket(foreign), csrreason.InstanceNotInCluster},
		{"a droplet without the cluster tag", "untagged", withTicket(untagged), csrreason.InstanceNotInCluster},
		{"a droplet that is off", "off", withTicket(off), csrreason.InstanceNotRunning},
		{"another droplet's ticket (victim's, filed as thief)", "thief", withTicket(victim), csrreason.NodeNameMismatch},
		{"a good ticket", "good", withTicket(good), ""},
	})
}

// TestDigitalOceanTicketJoinThroughCCM: the same ticket join through
// mooring-ccm's embedded approver (--controllers=*,csr-approver,
// --csr-approver-ticket-keys-file) instead of the standalone one: the
// provider's Attester has no evidence verifiers of its own, and the CCM
// adds the ticket verifier as mooring-csr-approver does. Two droplets
// join; a replayed ticket is denied and a good one approved.
func TestDigitalOceanTicketJoinThroughCCM(t *testing.T) {
	agentBin := harness.BuildBinary(t, "agent/cmd/mooring-agent")
	ccmBin := harness.BuildBinary(t, "ccm/cmd/mooring-ccm")
	c := testbed.Start(t, testbed.Options{RBAC: testbed.BootstrapRBAC{MooringApproves: true}})
	tickets := harness.NewTicketIssuer(t)
	do := harness.StartDigitalOceanCloud(t, tickets)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for _, f := range []string{"deploy/csrapprover/role/clusterrole.yaml", "deploy/base/ccm-csrapprover-binding.yaml"} {
		if err := c.Apply(ctx, filepath.Join(harness.RepoRoot(), f)); err != nil {
			t.Fatal(err)
		}
	}
	harness.StartCCM(t, c, ccmBin, do, harness.CCMOptions{Cluster: e2eCluster,
		Args: append([]string{"--controllers=*,csr-approver", "--v=2"}, tickets.CCMArgs()...)})

	start := time.Now()
	fleet := harness.StartFleet(ctx, t, c, nil, harness.FleetOptions{
		Names: []string{"ccm-1", "ccm-2"}, Cluster: e2eCluster, AgentBin: agentBin, Provision: do.Provisioner(e2eCluster),
	})
	for _, m := range fleet.Machines {
		if code, err := m.Agent.Wait(3 * time.Minute); err != nil || code != 0 {
			t.Fatalf("agent of %s: exit %d, %v\n%s", m.Name, code, err, m.Agent.LogTail(30))
		}
	}
	t.Logf("2 droplets joined with tickets through mooring-ccm's approver in %v", time.Since(start).Round(time.Millisecond))
	checkDigitalOceanNodes(ctx, t, c, do, fleet)

	used, err := os.ReadFile(filepath.Join(fleet.Machines[1].Root, cloudinit.TicketPath))
	if err != nil {
		t.Fatal(err)
	}
	good, err := tickets.Issue("good", e2eCluster, 0)
	if err != nil {
		t.Fatal(err)
	}
	do.AddDroplet("good", []string{do.ClusterTag(e2eCluster)}, nil)
	withTicket := func(tok string) func(string) []evidence.Block {
		return func(string) []evidence.Block {
			return []evidence.Block{{Type: ticket.BlockType, Data: []byte(strings.TrimSpace(tok))}}
		}
	}
	runAttacks(ctx, t, c, []attack{
		{"a ticket used a second time (ccm-2's)", "ccm-2", withTicket(string(used)), csrreason.EvidenceReplayed},
		{"a good ticket", "good", withTicket(good), ""},
	})
}
