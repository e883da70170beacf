package e2e

import (
	"context"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooring-dev/mooring/internal/evidence"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// provisioningCloud is a cloud stand-in whose instances a test makes for
// a fleet (harness.AWSCloud, GCECloud, AzureCloud).
type provisioningCloud interface {
	harness.Provider
	Provisioner(cluster string) func(ctx context.Context, name string) (harness.Provisioned, error)
}

// TestSignedClouds: mooring on each cloud that signs its instances'
// identity (AWS, GCE, Azure, OCI), against the cloud's compatible endpoint
// on loopback with the cloud's real client libraries in every binary, one
// subtest per cloud on one bed: the control plane outlives each cloud; the
// cloud's mooring-ccm, approver, machines and Nodes do not. In each, three
// machines the cloud provisions join with the cloud's own evidence, their
// Nodes are initialized as the cloud's CCM would, and the cloud-specific
// attacks are denied by the real approver (awsNodesJoin, gceNodesJoin,
// azureNodesJoin, ociNodesJoin).
func TestSignedClouds(t *testing.T) {
	bed := &signedBed{
		agent:    harness.BuildBinary(t, "agent/cmd/mooring-agent"),
		ccm:      harness.BuildBinary(t, "ccm/cmd/mooring-ccm"),
		approver: harness.BuildBinary(t, "csrapprover/cmd/mooring-csr-approver"),
	}
	bed.c = testbed.Start(t, testbed.Options{RBAC: testbed.BootstrapRBAC{MooringApproves: true}})
	t.Run("AWS", func(t *testing.T) { awsNodesJoin(t, bed) })
	t.Run("GCE", func(t *testing.T) { gceNodesJoin(t, bed) })
	t.Run("Azure", func(t *testing.T) { azureNodesJoin(t, bed) })
	t.Run("OCI", func(t *testing.T) { ociNodesJoin(t, bed) })
}

// signedBed is TestSignedClouds' bed, without the bootstrappers'
// auto-approval, and the binaries every cloud runs on it.
type signedBed struct {
	c                    *testbed.Cluster
	agent, ccm, approver string
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

// joinThree starts the cloud, mooring-ccm and the standalone
// mooring-csr-approver on the bed, and three machines (<machines>-1..3)
// that the cloud provisions, and returns once every agent has ended well
// (its node joined, its kubelet started). instances names them in the log
// ("EC2 instances"). When the test ends, the cloud's binaries stop and
// its Nodes and leader election Leases go (endCloud).
func joinThree[P provisioningCloud](t *testing.T, bed *signedBed, startCloud func(testing.TB) P, instances, machines string) cloudJoin[P] {
	t.Helper()
	return joinThreeWith(t, bed, startCloud, instances, machines, joinOptions{})
}

// joinOptions add flags to the binaries joinThreeWith starts (a join ticket
// issuer's, say).
type joinOptions struct {
	ApproverArgs, CCMArgs []string
	// CCMConfig are lines added to mooring-ccm's cloud config.
	CCMConfig string
	// TPM gives bootOnCloud's machine a TPM its cloud provisions (the
	// cloud is a tpmCloud).
	TPM bool
}

// joinThreeWith is joinThree with opts.
func joinThreeWith[P provisioningCloud](t *testing.T, bed *signedBed, startCloud func(testing.TB) P, instances, machines string, opts joinOptions) cloudJoin[P] {
	t.Helper()
	j := cloudJoin[P]{C: bed.c}
	j.Cloud = startCloud(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	j.Ctx = ctx
	// Registered before the fleet's, so it runs once the fleet stopped.
	var procs []*testbed.Process
	t.Cleanup(func() { endCloud(t, j.C, procs) })
	procs = append(procs, harness.StartCCM(t, j.C, bed.ccm, j.Cloud, harness.CCMOptions{Cluster: e2eCluster, CloudConfig: opts.CCMConfig,
		Args: append([]string{"--v=2"}, opts.CCMArgs...)}))
	procs = append(procs, harness.StartApprover(t, j.C, bed.approver, j.Cloud, e2eCluster, opts.ApproverArgs...).Process)

	j.Start = time.Now()
	j.Fleet = harness.StartFleet(ctx, t, j.C, nil, harness.FleetOptions{
		Names: []string{machines + "-1", machines + "-2", machines + "-3"}, Cluster: e2eCluster, AgentBin: bed.agent,
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

// endCloud ends a cloud's turn on a shared bed, once its machines
// stopped: its mooring-ccm and approver (procs) stop, their leader
// election Leases go, so that the next cloud's take over at once, and so
// do the Nodes, which the next cloud's mooring-ccm would otherwise find
// missing from its cloud.
func endCloud(t *testing.T, c *testbed.Cluster, procs []*testbed.Process) {
	t.Helper()
	for _, p := range procs {
		if err := p.Stop(10 * time.Second); err != nil {
			t.Error(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, lease := range []string{"cloud-controller-manager", "mooring-csr-approver"} {
		if err := c.Client.CoordinationV1().Leases("kube-system").Delete(ctx, lease, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	}
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Error(err)
		return
	}
	for _, n := range nodes.Items {
		if t.Failed() {
			t.Logf("Node %s: addresses %v, taints %v, annotations %v", n.Name, n.Status.Addresses, n.Spec.Taints, n.Annotations)
		}
		if err := c.Client.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	}
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
