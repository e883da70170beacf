package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooring-dev/mooring/agent/cloudinit"
	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/csrapprover"
	"github.com/mooring-dev/mooring/internal/csrreason"
	"github.com/mooring-dev/mooring/internal/evidence"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// TestTicketJoinOnLocalCloud: join tickets work with a cloud that signs
// identity too. On the local cloud, two machines join with a ticket issued
// for their name before their instance was created, and one beside them
// with the cloud's signed evidence, all through mooring-ccm's embedded
// approver given the keys (--csr-approver-ticket-keys-file). Then ticket
// attacks are denied by that approver, each with its reason.
func TestTicketJoinOnLocalCloud(t *testing.T) {
	agentBin := harness.BuildBinary(t, "agent/cmd/mooring-agent")
	ccmBin := harness.BuildBinary(t, "ccm/cmd/mooring-ccm")
	cloudBin := harness.BuildBinary(t, "cloud/local/cmd/mooring-localcloud")
	c := testbed.Start(t, testbed.Options{RBAC: testbed.BootstrapRBAC{MooringApproves: true}})
	lc := harness.StartLocalCloud(t, c, cloudBin)
	tickets := harness.NewTicketIssuer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// An instance older than its ticket by more than the skew the approver
	// allows (ticket issuer's, cloud's and approver's clocks): made first;
	// its ticket, issued once the fleet joined, is dated by an issuer whose
	// clock is earlyIssuerAhead fast, within the skew (so the ticket itself
	// is good), and is issued once the instance is older than the rest of
	// the skew: the approver compares the instance's creation with the
	// ticket's iat, as it would a ticket issued a minute after the
	// instance, without the test waiting that minute.
	if _, err := lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "early", Cluster: e2eCluster}); err != nil {
		t.Fatal(err)
	}
	earlyCreated := time.Now()
	for _, f := range []string{"deploy/csrapprover/role/clusterrole.yaml", "deploy/base/ccm-csrapprover-binding.yaml"} {
		if err := c.Apply(ctx, filepath.Join(harness.RepoRoot(), f)); err != nil {
			t.Fatal(err)
		}
	}
	harness.StartCCM(t, c, ccmBin, lc, harness.CCMOptions{Cluster: e2eCluster,
		Args: append([]string{"--controllers=*,csr-approver", "--v=2"}, tickets.CCMArgs()...)})

	start := time.Now()
	fleet := harness.StartFleet(ctx, t, c, lc, harness.FleetOptions{
		Names: []string{"ticket-1", "ticket-2", "attested-1"}, Cluster: e2eCluster, AgentBin: agentBin,
		Tickets: tickets, TicketNames: []string{"ticket-1", "ticket-2"},
	})
	for _, m := range fleet.Machines {
		if code, err := m.Agent.Wait(3 * time.Minute); err != nil || code != 0 {
			t.Fatalf("agent of %s: exit %d, %v\n%s", m.Name, code, err, m.Agent.LogTail(30))
		}
	}
	t.Logf("2 machines joined with tickets and 1 with signed evidence in %v", time.Since(start).Round(time.Millisecond))
	for _, m := range fleet.Machines {
		waitNode(ctx, t, c, m.Name, "Ready and initialized", func(n *corev1.Node) bool {
			return harness.NodeReady(n) && n.Spec.ProviderID == "local://"+m.Instance.ID && !hasTaint(n, uninitializedTaint, corev1.TaintEffectNoSchedule)
		})
		servingApprovedByMooring(ctx, t, c, m.Name)
		approval := clientApproval(ctx, t, c, m.Name)
		byTicket := strings.Contains(approval, "join ticket")
		if byTicket != strings.HasPrefix(m.Name, "ticket-") {
			t.Errorf("%s: client CSR approved with %q", m.Name, approval)
		}
	}

	// Ticket attacks against the embedded approver, on the local cloud.
	create := func(name, cluster string) {
		t.Helper()
		if _, err := lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: name, Cluster: cluster}); err != nil {
			t.Fatal(err)
		}
	}
	issue := func(name, cluster string, iat time.Time, life time.Duration) string {
		t.Helper()
		tok, err := tickets.IssueAt(name, cluster, iat, life)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	used, err := os.ReadFile(filepath.Join(fleet.Machines[0].Root, cloudinit.TicketPath))
	if err != nil {
		t.Fatal(err)
	}
	forged, err := harness.NewTicketIssuer(t).Issue("forged", e2eCluster, 0)
	if err != nil {
		t.Fatal(err)
	}
	create("forged", e2eCluster)
	late := issue("late", e2eCluster, time.Now().Add(-2*time.Hour), time.Hour)
	create("late", e2eCluster)
	otherAud := issue("other-aud", "another-cluster", time.Now(), 0)
	create("other-aud", e2eCluster)
	// iat is whole seconds (up to 1 s earlier than asked): 3 s to spare.
	time.Sleep(time.Until(earlyCreated.Add(csrapprover.TicketClockSkew - earlyIssuerAhead + 3*time.Second)))
	early := issue("early", e2eCluster, time.Now().Add(earlyIssuerAhead), 0)
	foreign := issue("foreign", e2eCluster, time.Now(), 0)
	create("foreign", "another-cluster")
	victim := issue("victim", e2eCluster, time.Now(), 0)
	create("victim", e2eCluster)
	create("thief", e2eCluster)
	good := issue("good", e2eCluster, time.Now(), 0)
	create("good", e2eCluster)

	runAttacksAtOnce(ctx, t, c, []attack{
		{"a ticket used a second time", "ticket-1", withTicket(string(used)), csrreason.EvidenceReplayed},
		{"a ticket signed by another key", "forged", withTicket(forged), csrreason.EvidenceSignature},
		{"an expired ticket", "late", withTicket(late), csrreason.EvidenceExpired},
		{"a ticket of another cluster", "other-aud", withTicket(otherAud), csrreason.EvidenceCluster},
		{"an instance created before its ticket", "early", withTicket(early), csrreason.InstanceCreatedOutsideTicket},
		{"an instance of another cluster", "foreign", withTicket(foreign), csrreason.InstanceNotInCluster},
		{"another instance's ticket", "thief", withTicket(victim), csrreason.NodeNameMismatch},
		{"a good ticket", "good", withTicket(good), ""},
	})

	// kube-controller-manager's CSR cleaner deletes decided CSRs after an
	// hour, and a ticket may live a day: with the CSR that spent it gone,
	// the same ticket under a new key is still spent (the Node "good"
	// was never made, as when a node is deleted or not yet Ready).
	deleteCSRsHolding(ctx, t, c, good)
	runAttacks(ctx, t, c, []attack{
		{"a ticket used again after the CSR that spent it was deleted", "good", withTicket(good), csrreason.TicketSpent},
	})
}

// earlyIssuerAhead is how fast the clock of the issuer of the "early"
// instance's ticket in TestTicketJoinOnLocalCloud runs: less than
// csrapprover.TicketClockSkew, by a margin for the approver's own clock
// (a ticket dated further ahead than the skew is not yet valid).
const earlyIssuerAhead = csrapprover.TicketClockSkew - 10*time.Second

// deleteCSRsHolding deletes every CSR whose evidence is the ticket tok, as
// the CSR cleaner does an hour after they were decided.
func deleteCSRsHolding(ctx context.Context, t *testing.T, c *testbed.Cluster, tok string) {
	t.Helper()
	list, err := c.Client.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deleted := 0
	for _, csr := range list.Items {
		_, blocks, err := evidence.Decode(csr.Spec.Request)
		if err != nil || len(blocks) != 1 || string(blocks[0].Data) != strings.TrimSpace(tok) {
			continue
		}
		if err := c.Client.CertificatesV1().CertificateSigningRequests().Delete(ctx, csr.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		deleted++
	}
	if deleted == 0 {
		t.Fatal("no CSR holds the ticket")
	}
	// The approver's informer sees the deletions before the next request.
	time.Sleep(2 * time.Second)
}

// clientApproval is the message of the approval of the node's client CSR
// (the agent's, mooring-<node>-<key hash>).
func clientApproval(ctx context.Context, t *testing.T, c *testbed.Cluster, node string) string {
	t.Helper()
	list, err := c.Client.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		csr := &list.Items[i]
		if csr.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName || !strings.HasPrefix(csr.Name, "mooring-"+node+"-") {
			continue
		}
		if cond := harness.Condition(csr, certificatesv1.CertificateApproved); cond != nil {
			return cond.Message
		}
	}
	t.Fatalf("%s: no approved client CSR", node)
	return ""
}
