package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/internal/evidence"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
	certificatesv1 "k8s.io/api/certificates/v1"
)

// provisioningCloud is a cloud stand-in whose instances a test makes for
// a fleet (harness.AWSCloud, GCECloud, AzureCloud).
type provisioningCloud interface {
	harness.Provider
	Provisioner(cluster string) func(ctx context.Context, name string) (harness.Provisioned, error)
}

// cloudJoin is a bed whose three machines joined through a cloud's path.
type cloudJoin[P provisioningCloud] struct {
	C     *testbed.Cluster
	Cloud P
	// Ctx bounds the test (4 minutes); Start is when the agents started.
	Ctx   context.Context
	Start time.Time
	Fleet *harness.Fleet
}

// joinThree starts the bed without the bootstrappers' auto-approval, the
// cloud, mooring-ccm and the standalone mooring-csr-approver on it, and
// three machines (node-1..3) that the cloud provisions, and returns once
// every agent has ended well (its node joined, its kubelet started).
// instances names them in the log ("EC2 instances").
func joinThree[P provisioningCloud](t *testing.T, startCloud func(testing.TB) P, instances string) cloudJoin[P] {
	t.Helper()
	return joinThreeWith(t, startCloud, instances, joinOptions{})
}

// joinOptions add flags to the binaries joinThreeWith starts (a join ticket
// issuer's, say).
type joinOptions struct {
	ApproverArgs, CCMArgs []string
}

// joinThreeWith is joinThree with opts.
func joinThreeWith[P provisioningCloud](t *testing.T, startCloud func(testing.TB) P, instances string, opts joinOptions) cloudJoin[P] {
	t.Helper()
	agentBin := harness.BuildBinary(t, "agent/cmd/mooring-agent")
	ccmBin := harness.BuildBinary(t, "ccm/cmd/mooring-ccm")
	approverBin := harness.BuildBinary(t, "csrapprover/cmd/mooring-csr-approver")
	j := cloudJoin[P]{C: testbed.Start(t, testbed.Options{RBAC: testbed.BootstrapRBAC{MooringApproves: true}})}
	j.Cloud = startCloud(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	j.Ctx = ctx
	harness.StartCCM(t, j.C, ccmBin, j.Cloud, harness.CCMOptions{Cluster: e2eCluster, Args: append([]string{"--v=2"}, opts.CCMArgs...)})
	harness.StartApprover(t, j.C, approverBin, j.Cloud, e2eCluster, opts.ApproverArgs...)

	j.Start = time.Now()
	j.Fleet = harness.StartFleet(ctx, t, j.C, nil, harness.FleetOptions{
		Names: []string{"node-1", "node-2", "node-3"}, Cluster: e2eCluster, AgentBin: agentBin,
		Provision: j.Cloud.Provisioner(e2eCluster),
	})
	for _, m := range j.Fleet.Machines {
		code, err := m.Agent.Wait(3 * time.Minute)
		if err != nil || code != 0 {
			t.Fatalf("agent of %s: exit %d, %v\n%s", m.Name, code, err, m.Agent.LogTail(30))
		}
	}
	t.Logf("3 agents joined their %s and started the kubelets in %v", instances, time.Since(j.Start).Round(time.Millisecond))
	return j
}

// attack is a join with evidence an attacker can make or obtain.
type attack struct {
	name, node string
	evidence   func(binding string) []evidence.Block
	want       string // deny reason; "" approves
}

// runAttacks files each attack's client CSR as a bootstrap token holder
// and checks the real approver's decision: denied with the attack's
// reason, or approved when it wants none.
func runAttacks(ctx context.Context, t *testing.T, c *testbed.Cluster, attacks []attack) {
	t.Helper()
	for _, tc := range attacks {
		began := time.Now()
		req, err := harness.JoinWith(ctx, c, tc.node, func(binding string) ([]evidence.Block, error) { return tc.evidence(binding), nil })
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		decided, err := harness.WaitForDecision(ctx, c.Client, req.Name)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		approved := harness.Condition(decided, certificatesv1.CertificateApproved)
		denied := harness.Condition(decided, certificatesv1.CertificateDenied)
		switch {
		case tc.want == "" && approved == nil:
			t.Errorf("%s: not approved: %+v", tc.name, decided.Status.Conditions)
		case tc.want != "" && (denied == nil || denied.Reason != tc.want):
			t.Errorf("%s: want denied %s, got %+v", tc.name, tc.want, decided.Status.Conditions)
		default:
			t.Logf("%s: %s in %v: %s", tc.name, decided.Status.Conditions[0].Reason, time.Since(began).Round(time.Millisecond),
				decided.Status.Conditions[0].Message)
		}
	}
}
