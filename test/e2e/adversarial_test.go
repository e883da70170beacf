package e2e

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/attest"
	"github.com/mooring-dev/mooring/cloud/local/client"
	"github.com/mooring-dev/mooring/cloud/local/identity"
	"github.com/mooring-dev/mooring/internal/csrreason"
	"github.com/mooring-dev/mooring/internal/evidence"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// TestAdversarialE2E files attack CSRs against mooring's approver on one
// live bed: a control plane without the bootstrappers' auto-approval, the
// local cloud with instances node-1, node-2 and node-3, and mooring-ccm
// running the approver (--controllers=*,csr-approver). node-1 joins for
// real and runs a real kubelet (Ready, initialized by the CCM); the attacks
// come from a stolen bootstrap token and from node-1's own kubelet
// credentials. Each attack asserts its exact outcome: denied with a reason,
// refused by the kube-apiserver at create, or left pending. A valid join
// during a cloud outage, approved once the cloud answers again, is the
// positive control.
func TestAdversarialE2E(t *testing.T) {
	const instanceMaxAge = 2 * time.Second
	ccmBin := harness.BuildBinary(t, "ccm/cmd/mooring-ccm")
	cloudBin := harness.BuildBinary(t, "cloud/local/cmd/mooring-localcloud")
	c := testbed.Start(t, testbed.Options{RBAC: testbed.BootstrapRBAC{MooringApproves: true}})
	lc := harness.StartLocalCloud(t, c, cloudBin)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	inst := map[string]*api.Instance{}
	for _, name := range []string{"node-1", "node-2", "node-3"} {
		in, err := lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: name, Cluster: e2eCluster})
		if err != nil {
			t.Fatal(err)
		}
		inst[name] = in
	}
	for _, f := range []string{"deploy/csrapprover/role/clusterrole.yaml", "deploy/base/ccm-csrapprover-binding.yaml"} {
		if err := c.Apply(ctx, filepath.Join(harness.RepoRoot(), f)); err != nil {
			t.Fatal(err)
		}
	}
	ccm := harness.StartCCM(t, c, ccmBin, lc, harness.CCMOptions{Cluster: e2eCluster, Args: []string{
		"--controllers=*,csr-approver", "--v=2", "--csr-approver-instance-max-age=" + instanceMaxAge.String(),
	}})

	// node-1 joins for real: an attested join, then a kubelet with the
	// credentials, initialized by the CCM, its serving certificate approved.
	setup := time.Now()
	join, err := harness.Join(ctx, c, "node-1", inst["node-1"].MetadataURL)
	if err != nil {
		t.Fatal(err)
	}
	joinCSR, err := harness.WaitForDecision(ctx, c.Client, join.Name)
	if err != nil {
		t.Fatal(err)
	}
	if cond := harness.Condition(joinCSR, certificatesv1.CertificateApproved); cond == nil || cond.Reason != csrreason.Approved {
		t.Fatalf("node-1 join: %+v", joinCSR.Status.Conditions)
	}
	node1, err := c.AddNodeConfig(ctx, testbed.NodeConfig{Name: "node-1", Address: internalIP(t, inst["node-1"]),
		ClientCertPEM: joinCSR.Status.Certificate, ClientKeyPEM: join.KeyPEM})
	if err != nil {
		t.Fatal(err)
	}
	harness.WaitUntil(ctx, t, "node-1 Ready and initialized", func() (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && harness.NodeReady(n) && n.Spec.ProviderID == "local://"+inst["node-1"].ID &&
			!hasTaint(n, uninitializedTaint, corev1.TaintEffectNoSchedule), err
	})
	serving, err := harness.WaitForDecision(ctx, c.Client, waitForServingCSR(ctx, t, c, "node-1").Name)
	if err != nil {
		t.Fatal(err)
	}
	if cond := harness.Condition(serving, certificatesv1.CertificateApproved); cond == nil || cond.Reason != csrreason.Approved {
		t.Fatalf("node-1 serving CSR: %+v", serving.Status.Conditions)
	}
	t.Logf("node-1 joined, Ready, initialized, serving certificate approved in %v", time.Since(setup).Round(time.Millisecond))

	// The two attackers: whoever stole the bootstrap token, and whoever
	// holds node-1's kubelet client credentials (its kubeconfig on the bed).
	stolen, err := harness.BootstrapClient(c)
	if err != nil {
		t.Fatal(err)
	}
	node1Config, err := clientcmd.BuildConfigFromFlags("", node1.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	asNode1, err := kubernetes.NewForConfig(node1Config)
	if err != nil {
		t.Fatal(err)
	}
	review, err := asNode1.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil || review.Status.UserInfo.Username != "system:node:node-1" {
		t.Fatalf("node-1's kubeconfig authenticates as %+v, %v", review, err)
	}

	_, node1Blocks, err := evidence.Decode(joinCSR.Spec.Request)
	if err != nil || len(node1Blocks) != 1 {
		t.Fatalf("node-1's join request: %d evidence blocks, %v", len(node1Blocks), err)
	}

	clientUsages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	servingUsages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}
	node2IP := net.ParseIP(internalIP(t, inst["node-2"]))

	cases := []attackCase{
		{
			name: "01-stolen-token-no-evidence", as: stolen, signer: clientSigner, usages: clientUsages,
			request: func(t *testing.T) []byte {
				return request(t, csrDER(t, newKey(t), csrFields{node: "node-1"}))
			},
			want: expect{deny: csrreason.NoEvidence},
		},
		{
			// The attacker reached node-2's metadata service and had it
			// bind a token to its own key, then asks for node-1's name.
			name: "02-node2-evidence-for-node1-name", as: stolen, signer: clientSigner, usages: clientUsages,
			request: func(t *testing.T) []byte {
				k := newKey(t)
				return request(t, csrDER(t, k, csrFields{node: "node-1"}), metadataToken(ctx, t, inst["node-2"], k.Public()))
			},
			want: expect{deny: csrreason.NodeNameMismatch},
		},
		{
			// node-1's (approved) join evidence, copied onto a CSR of
			// the attacker's key.
			name: "03-copied-evidence-other-key", as: stolen, signer: clientSigner, usages: clientUsages,
			request: func(t *testing.T) []byte {
				return request(t, csrDER(t, newKey(t), csrFields{node: "node-1"}), string(node1Blocks[0].Data))
			},
			want: expect{deny: csrreason.EvidenceNotBound},
		},
		{
			// node-1's join request, byte for byte, filed again under
			// another name, in a later second than the original.
			name: "04-replayed-request", as: stolen, signer: clientSigner, usages: clientUsages,
			request: func(t *testing.T) []byte {
				if d := time.Until(joinCSR.CreationTimestamp.Add(1100 * time.Millisecond)); d > 0 {
					time.Sleep(d)
				}
				return joinCSR.Spec.Request
			},
			want: expect{deny: csrreason.EvidenceReplayed},
		},
		{
			// A token the attacker signed itself (its own ES256 key and
			// kid), claiming node-2, which has no Node yet.
			name: "05-forged-token-own-key", as: stolen, signer: clientSigner, usages: clientUsages,
			request: func(t *testing.T) []byte {
				k := newKey(t)
				signing, err := identity.NewKey(time.Now())
				if err != nil {
					t.Fatal(err)
				}
				return request(t, csrDER(t, k, csrFields{node: "node-2"}), forgeToken(t, signing, inst["node-2"], k.Public()))
			},
			want: expect{deny: csrreason.EvidenceSignature},
		},
		{
			// The same forgery naming the cloud's real key id.
			name: "05b-forged-token-real-kid", as: stolen, signer: clientSigner, usages: clientUsages,
			request: func(t *testing.T) []byte {
				k := newKey(t)
				signing, err := identity.NewKey(time.Now())
				if err != nil {
					t.Fatal(err)
				}
				signing.ID = cloudKeyID(ctx, t, lc)
				return request(t, csrDER(t, k, csrFields{node: "node-2"}), forgeToken(t, signing, inst["node-2"], k.Public()))
			},
			want: expect{deny: csrreason.EvidenceSignature},
		},
		{
			// A token of node-3, fetched while it ran; node-3 is then
			// terminated, and the join is filed once the approver's record
			// must be newer than the termination.
			name: "06-terminated-instance", as: stolen, signer: clientSigner, usages: clientUsages,
			request: func(t *testing.T) []byte {
				k := newKey(t)
				tok := metadataToken(ctx, t, inst["node-3"], k.Public())
				if _, err := lc.Client.TerminateInstance(ctx, inst["node-3"].ID); err != nil {
					t.Fatal(err)
				}
				if _, err := client.NewMetadata(inst["node-3"].MetadataURL, nil).IdentityToken(ctx, "x"); err == nil {
					t.Errorf("node-3's metadata service still answers after termination")
				}
				time.Sleep(instanceMaxAge + time.Second)
				return request(t, csrDER(t, k, csrFields{node: "node-3"}), tok)
			},
			want: expect{deny: csrreason.InstanceNotRunning},
		},
		{
			// node-1's own metadata, a fresh key: a second join of a Ready node.
			name: "07-rejoin-ready-node", as: stolen, signer: clientSigner, usages: clientUsages,
			request: func(t *testing.T) []byte {
				k := newKey(t)
				return request(t, csrDER(t, k, csrFields{node: "node-1"}), metadataToken(ctx, t, inst["node-1"], k.Public()))
			},
			want: expect{deny: csrreason.NodeAlreadyJoined},
		},
		{
			// node-1 asks for node-2's client certificate. The apiserver's
			// NodeRestriction admission already refuses it (a node may only
			// create CSRs with its own CN); mooring would deny it too.
			name: "08-node1-client-cert-for-node2", as: asNode1, signer: clientSigner, usages: clientUsages,
			request: func(t *testing.T) []byte {
				return request(t, csrDER(t, newKey(t), csrFields{node: "node-2"}))
			},
			want: expect{forbidden: "can only create a node CSR with CN=system:node:node-1", orDeny: csrreason.RequesterMismatch},
		},
		{
			name: "09-serving-san-node2-ip", as: asNode1, signer: servingSigner, usages: servingUsages,
			request: func(t *testing.T) []byte {
				return request(t, csrDER(t, newKey(t), csrFields{node: "node-1", dns: []string{"node-1"}, ips: []net.IP{node2IP}}))
			},
			want: expect{deny: csrreason.SANNotOfInstance},
		},
		{
			name: "10-serving-san-reserved-name", as: asNode1, signer: servingSigner, usages: servingUsages,
			request: func(t *testing.T) []byte {
				return request(t, csrDER(t, newKey(t), csrFields{node: "node-1", dns: []string{"kubernetes.default.svc"}}))
			},
			want: expect{deny: csrreason.ReservedName},
		},
		{
			name: "11-serving-san-wildcard", as: asNode1, signer: servingSigner, usages: servingUsages,
			request: func(t *testing.T) []byte {
				return request(t, csrDER(t, newKey(t), csrFields{node: "node-1", dns: []string{"*.something"}}))
			},
			want: expect{deny: csrreason.BadSAN},
		},
		{
			// node-2's IP as an IPv4-mapped IPv6 address: 16 bytes in the
			// SAN (Go's x509 would write 4, so the extension is built here).
			name: "12-serving-san-node2-ipv4-mapped", as: asNode1, signer: servingSigner, usages: servingUsages,
			request: func(t *testing.T) []byte {
				der := csrDER(t, newKey(t), csrFields{node: "node-1", rawIPs: [][]byte{node2IP.To16()}})
				req, err := x509.ParseCertificateRequest(der)
				if err != nil || len(req.IPAddresses) != 1 || len(req.IPAddresses[0]) != net.IPv6len {
					t.Fatalf("the CSR does not carry a 16-byte IP SAN: %v, %v", req.IPAddresses, err)
				}
				return request(t, der)
			},
			want: expect{deny: csrreason.SANNotOfInstance},
		},
		{
			// Valid evidence of node-2, bound to a 1024-bit RSA key.
			name: "13-weak-rsa-1024", as: stolen, signer: clientSigner, usages: clientUsages,
			request: func(t *testing.T) []byte {
				k, err := rsa.GenerateKey(rand.Reader, 1024)
				if err != nil {
					t.Fatal(err)
				}
				return request(t, csrDER(t, k, csrFields{node: "node-2"}), metadataToken(ctx, t, inst["node-2"], k.Public()))
			},
			want: expect{deny: csrreason.WeakKey},
		},
		// Further cheap cases.
		{
			name: "15-two-evidence-blocks", as: stolen, signer: clientSigner, usages: clientUsages,
			request: func(t *testing.T) []byte {
				k := newKey(t)
				return request(t, csrDER(t, k, csrFields{node: "node-2"}),
					metadataToken(ctx, t, inst["node-2"], k.Public()), metadataToken(ctx, t, inst["node-2"], k.Public()))
			},
			want: expect{deny: csrreason.MalformedRequest},
		},
		{
			name: "16-client-cert-with-san", as: stolen, signer: clientSigner, usages: clientUsages,
			request: func(t *testing.T) []byte {
				k := newKey(t)
				return request(t, csrDER(t, k, csrFields{node: "node-2", dns: []string{"node-2"}}), metadataToken(ctx, t, inst["node-2"], k.Public()))
			},
			want: expect{deny: csrreason.SANsOnClientCert},
		},
		{
			name: "17-ca-basic-constraints", as: stolen, signer: clientSigner, usages: clientUsages,
			request: func(t *testing.T) []byte {
				k := newKey(t)
				bc, err := asn1.Marshal(struct {
					IsCA bool `asn1:"optional"`
				}{IsCA: true})
				if err != nil {
					t.Fatal(err)
				}
				ext := pkix.Extension{Id: asn1.ObjectIdentifier{2, 5, 29, 19}, Critical: true, Value: bc}
				return request(t, csrDER(t, k, csrFields{node: "node-2", extra: []pkix.Extension{ext}}), metadataToken(ctx, t, inst["node-2"], k.Public()))
			},
			want: expect{deny: csrreason.BadExtension},
		},
		{
			// A serving certificate for node-1 asked by the bootstrap token
			// holder: NodeRestriction does not apply to it, mooring does.
			name: "18-serving-cert-by-bootstrap-token", as: stolen, signer: servingSigner, usages: servingUsages,
			request: func(t *testing.T) []byte {
				return request(t, csrDER(t, newKey(t), csrFields{node: "node-1", ips: []net.IP{net.ParseIP(internalIP(t, inst["node-1"]))}}))
			},
			want: expect{deny: csrreason.RequesterMismatch},
		},
		{
			name: "19-p224-key", as: stolen, signer: clientSigner, usages: clientUsages,
			request: func(t *testing.T) []byte {
				k, err := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
				if err != nil {
					t.Fatal(err)
				}
				return request(t, csrDER(t, k, csrFields{node: "node-2"}), metadataToken(ctx, t, inst["node-2"], k.Public()))
			},
			want: expect{deny: csrreason.WeakKey},
		},
		{
			// A node subject with valid evidence, for a signer that is not
			// the approver's: it is ignored (no condition), and no one
			// else approves it either.
			name: "20-other-signer-ignored", as: stolen, signer: certificatesv1.KubeAPIServerClientSignerName, usages: clientUsages,
			request: func(t *testing.T) []byte {
				k := newKey(t)
				return request(t, csrDER(t, k, csrFields{node: "node-2"}), metadataToken(ctx, t, inst["node-2"], k.Public()))
			},
			want: expect{pending: 5 * time.Second},
		},
	}

	var (
		mu      sync.Mutex
		results []attackResult
	)
	for _, ac := range cases {
		t.Run(ac.name, func(t *testing.T) {
			r := &attackResult{name: ac.name, csr: "adv-" + ac.name, outcome: "failed before a decision"}
			defer func() {
				mu.Lock()
				results = append(results, *r)
				mu.Unlock()
			}()
			runAttack(ctx, t, c.Client, ccm, ac, r)
		})
	}

	// 14. The positive control: a valid join for node-2 while every call to
	// the cloud fails waits (no verdict), and is approved once the cloud
	// answers again.
	t.Run("14-cloud-outage-valid-join-waits", func(t *testing.T) {
		k := newKey(t)
		// Before the outage: the metadata service is faulted too.
		tok := metadataToken(ctx, t, inst["node-2"], k.Public())
		before, err := lc.Client.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := lc.Client.SetFaults(ctx, api.Faults{ErrorRate: 1}); err != nil {
			t.Fatal(err)
		}
		cleared := false
		t.Cleanup(func() {
			if !cleared {
				_ = lc.Client.ClearFaults(context.Background())
			}
		})
		// Every instance record the approver holds is now older than
		// --csr-approver-instance-max-age, so judging needs the cloud.
		time.Sleep(instanceMaxAge + 500*time.Millisecond)
		name := "adv-14-outage-valid-join"
		if err := fileCSR(ctx, stolen, name, clientSigner, clientUsages, request(t, csrDER(t, k, csrFields{node: "node-2"}), tok)); err != nil {
			t.Fatal(err)
		}
		if err := stillPending(ctx, c.Client, name, 5*time.Second); err != nil {
			t.Fatalf("during the outage: %v\n%s", err, decidedLog(ccm, name))
		}
		during, err := lc.Client.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if during.Faulted <= before.Faulted || during.Calls["ListInstances"] <= before.Calls["ListInstances"] {
			t.Errorf("the cloud's counters show no failed calls during the outage: before %+v, during %+v", before, during)
		}
		t.Logf("outage: join pending for 5s; cloud calls failed by the fault: %d (ListInstances calls %d)",
			during.Faulted-before.Faulted, during.Calls["ListInstances"]-before.Calls["ListInstances"])
		if err := lc.Client.ClearFaults(ctx); err != nil {
			t.Fatal(err)
		}
		cleared = true
		restored := time.Now()
		csr, err := decision(ctx, c.Client, name)
		if err != nil {
			t.Fatalf("after the outage: %v\n%s", err, decidedLog(ccm, name))
		}
		if cond := harness.Condition(csr, certificatesv1.CertificateApproved); cond == nil || cond.Reason != csrreason.Approved || len(csr.Status.Certificate) == 0 {
			t.Fatalf("after the outage: %+v\n%s", csr.Status.Conditions, decidedLog(ccm, name))
		}
		t.Logf("approved %v after the cloud came back", time.Since(restored).Round(time.Millisecond))
	})

	// No attack CSR may be approved, whenever it was decided.
	list, err := c.Client.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	attacks := map[string]bool{}
	for _, r := range results {
		attacks[r.csr] = true
	}
	approvedWrongly := 0
	for i := range list.Items {
		csr := &list.Items[i]
		if attacks[csr.Name] && harness.Condition(csr, certificatesv1.CertificateApproved) != nil {
			approvedWrongly++
			t.Errorf("attack CSR %s was APPROVED: %+v", csr.Name, csr.Status.Conditions)
		}
	}
	denied, refused, pending := 0, 0, 0
	for _, r := range results {
		t.Logf("  %-36s %s", r.name, r.outcome)
		if !r.ok {
			continue
		}
		switch {
		case strings.HasPrefix(r.outcome, "denied"):
			denied++
		case strings.HasPrefix(r.outcome, "refused"):
			refused++
		case strings.HasPrefix(r.outcome, "pending"):
			pending++
		}
	}
	t.Logf("adversarial e2e: %d cases, %d denied as expected, %d approved wrongly (%d refused by the apiserver at create, %d left pending as expected)",
		len(results), denied, approvedWrongly, refused, pending)
}

const (
	clientSigner  = certificatesv1.KubeAPIServerClientKubeletSignerName
	servingSigner = certificatesv1.KubeletServingSignerName
)

// attackCase is one attack CSR: who files it, for which signer and
// usages, and how its spec.request is made.
type attackCase struct {
	name    string
	as      kubernetes.Interface
	signer  string
	usages  []certificatesv1.KeyUsage
	request func(t *testing.T) []byte
	want    expect
}

// expect is an attack's one acceptable outcome.
type expect struct {
	// deny: the CSR is Denied with this reason.
	deny string
	// forbidden: the apiserver refuses the CSR at create with Forbidden
	// and an error containing this; should it be created anyway, orDeny is
	// the reason mooring must deny it with.
	forbidden, orDeny string
	// pending: nobody decides the CSR for this long.
	pending time.Duration
}

type attackResult struct {
	name, csr, outcome string
	ok                 bool
}

// runAttack files the attack and checks its outcome.
func runAttack(ctx context.Context, t *testing.T, admin kubernetes.Interface, ccm *testbed.Process, ac attackCase, res *attackResult) {
	t.Helper()
	name := res.csr
	err := fileCSR(ctx, ac.as, name, ac.signer, ac.usages, ac.request(t))
	switch {
	case ac.want.forbidden != "" && err != nil:
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), ac.want.forbidden) {
			res.outcome = "refused at create: " + err.Error()
			t.Fatalf("refused at create, but not as expected: %v", err)
		}
		res.outcome, res.ok = "refused at create: Forbidden: "+ac.want.forbidden, true
		t.Logf("%s: %v", ac.name, err)
		return
	case err != nil:
		res.outcome = "refused at create: " + err.Error()
		t.Fatalf("create: %v", err)
	case ac.want.forbidden != "":
		t.Logf("the apiserver let %s through; mooring must deny it %s", name, ac.want.orDeny)
		ac.want.deny = ac.want.orDeny
	}
	if ac.want.pending > 0 {
		if err := stillPending(ctx, admin, name, ac.want.pending); err != nil {
			res.outcome = err.Error()
			t.Fatalf("%v\n%s", err, decidedLog(ccm, name))
		}
		res.outcome, res.ok = fmt.Sprintf("pending (no condition for %v)", ac.want.pending), true
		return
	}
	csr, err := decision(ctx, admin, name)
	if err != nil {
		if csr != nil && harness.Condition(csr, certificatesv1.CertificateApproved) != nil {
			res.outcome = "APPROVED (not yet signed)"
		}
		t.Fatalf("%v: %+v\n%s", err, csr, decidedLog(ccm, name))
	}
	if cond := harness.Condition(csr, certificatesv1.CertificateApproved); cond != nil {
		res.outcome = "APPROVED: " + cond.Message
		t.Fatalf("attack approved: %s: %s\n%s", cond.Reason, cond.Message, decidedLog(ccm, name))
	}
	cond := harness.Condition(csr, certificatesv1.CertificateDenied)
	if cond == nil {
		t.Fatalf("not denied: %+v", csr.Status.Conditions)
	}
	res.outcome = fmt.Sprintf("denied %s: %s", cond.Reason, cond.Message)
	if cond.Reason != ac.want.deny || len(csr.Status.Certificate) > 0 {
		t.Fatalf("denied %s (%s), want %s\n%s", cond.Reason, cond.Message, ac.want.deny, decidedLog(ccm, name))
	}
	res.ok = true
	t.Logf("%s: %s: %s", name, cond.Reason, cond.Message)
}

// csrFields is what a CSR asks for: CN system:node:NODE, O system:nodes,
// and SANs; rawIPs are IP SANs written byte for byte.
type csrFields struct {
	node   string
	dns    []string
	ips    []net.IP
	rawIPs [][]byte
	extra  []pkix.Extension
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// csrDER makes a CSR (DER) signed with key.
func csrDER(t *testing.T, key crypto.Signer, f csrFields) []byte {
	t.Helper()
	tmpl := &x509.CertificateRequest{
		Subject:         pkix.Name{CommonName: "system:node:" + f.node, Organization: []string{"system:nodes"}},
		DNSNames:        f.dns,
		IPAddresses:     f.ips,
		ExtraExtensions: f.extra,
	}
	if len(f.rawIPs) > 0 {
		// A SAN extension of our own: GeneralNames with dNSName [2] and
		// iPAddress [7], as given.
		var names []asn1.RawValue
		for _, d := range f.dns {
			names = append(names, asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 2, Bytes: []byte(d)})
		}
		for _, ip := range f.rawIPs {
			names = append(names, asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 7, Bytes: ip})
		}
		value, err := asn1.Marshal(names)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.DNSNames, tmpl.IPAddresses = nil, nil
		tmpl.ExtraExtensions = append(tmpl.ExtraExtensions, pkix.Extension{Id: asn1.ObjectIdentifier{2, 5, 29, 17}, Value: value})
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// request is spec.request: the CSR, then each token as a local identity
// token block, as the agent writes it.
func request(t *testing.T, der []byte, tokens ...string) []byte {
	t.Helper()
	var blocks []evidence.Block
	for _, tok := range tokens {
		blocks = append(blocks, evidence.Block{Type: attest.Type, Data: []byte(tok)})
	}
	req, err := evidence.Encode(der, blocks...)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// metadataToken asks an instance's metadata service for a token bound to pub.
func metadataToken(ctx context.Context, t *testing.T, in *api.Instance, pub crypto.PublicKey) string {
	t.Helper()
	binding, err := evidence.Binding(pub)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := client.NewMetadata(in.MetadataURL, nil).IdentityToken(ctx, binding)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// forgeToken signs, with a key that is not the cloud's, a token that says
// everything a real one of in would say, bound to pub.
func forgeToken(t *testing.T, signing *identity.Key, in *api.Instance, pub crypto.PublicKey) string {
	t.Helper()
	binding, err := evidence.Binding(pub)
	if err != nil {
		t.Fatal(err)
	}
	ic := identity.InstanceClaims{ID: in.ID, Name: in.Name, Zone: in.Zone, Region: in.Region, InstanceType: in.InstanceType, Cluster: in.Cluster}
	for _, a := range in.Addresses {
		ic.Addresses = append(ic.Addresses, identity.Address{Type: string(a.Type), Address: a.Address})
	}
	claims, err := identity.NewClaims("mooring-localcloud", binding, ic, time.Now(), 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := identity.NewKeySet(signing).Sign(claims)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// cloudKeyID is the kid of a key the cloud publishes.
func cloudKeyID(ctx context.Context, t *testing.T, lc *harness.LocalCloud) string {
	t.Helper()
	data, err := lc.Client.JWKS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := identity.ParseJWKS(data)
	if err != nil {
		t.Fatal(err)
	}
	for kid := range keys {
		return kid
	}
	t.Fatal("the cloud publishes no key")
	return ""
}

func internalIP(t *testing.T, in *api.Instance) string {
	t.Helper()
	for _, a := range in.Addresses {
		if a.Type == api.InternalIP {
			return a.Address
		}
	}
	t.Fatalf("instance %s has no InternalIP", in.Name)
	return ""
}

func fileCSR(ctx context.Context, cs kubernetes.Interface, name, signer string, usages []certificatesv1.KeyUsage, request []byte) error {
	_, err := cs.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       certificatesv1.CertificateSigningRequestSpec{Request: request, SignerName: signer, Usages: usages},
	}, metav1.CreateOptions{})
	return err
}

// decision waits up to 30 s for the CSR to be denied, or approved and signed.
func decision(ctx context.Context, cs kubernetes.Interface, name string) (*certificatesv1.CertificateSigningRequest, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return harness.WaitForDecision(ctx, cs, name)
}

// stillPending checks, for d, that the CSR gets no condition.
func stillPending(ctx context.Context, cs kubernetes.Interface, name string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		csr, err := cs.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(csr.Status.Conditions) > 0 {
			return fmt.Errorf("CSR %s was decided: %+v", name, csr.Status.Conditions)
		}
		if time.Now().After(deadline) {
			return nil
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// decidedLog is the approver's log lines about a CSR, for failures.
func decidedLog(p *testbed.Process, name string) string {
	data, _ := os.ReadFile(p.LogPath())
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, name) {
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		return "approver log: nothing about " + name
	}
	return "approver log:\n" + strings.Join(out[max(0, len(out)-10):], "\n")
}
