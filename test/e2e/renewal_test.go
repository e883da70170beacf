package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/internal/csrreason"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// A user terminated node-2's instance on a demo cluster and filed 10
// client-certificate renewals as node-2: 4 were approved, by
// kube-controller-manager (reason AutoApproved), because the bed kept
// kubeadm's selfnodeclient grant and the two approvers raced. With the
// grants kept, mooring now reports every approval it did not make and the
// grant itself; with mooring as the only approver (the bed's and the demo's
// layout), none is approved.
func TestRenewalsOfATerminatedInstanceAreNotApproved(t *testing.T) {
	approverBin := harness.BuildBinary(t, "csrapprover/cmd/mooring-csr-approver")
	cloudBin := harness.BuildBinary(t, "cloud/local/cmd/mooring-localcloud")

	t.Run("with kubeadm's grants another approver wins, and mooring says so", func(t *testing.T) {
		// A slow cloud holds mooring's verdict back, so kube-controller-manager
		// wins every race (the user saw it win 4 of 10).
		approved, approver := renewTerminated(t, approverBin, cloudBin, testbed.BootstrapRBAC{}, 3*time.Second)
		if approved != 10 {
			t.Fatalf("%d of 10 renewals approved with kube-controller-manager's grants and a slow cloud, want 10", approved)
		}
		log, err := os.ReadFile(approver.LogPath())
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"kube-controller-manager can approve kubelet client CSRs without mooring's checks",
			"a kubelet CSR was approved by another approver, not by mooring"} {
			if !strings.Contains(string(log), want) {
				t.Errorf("the approver's log does not say %q", want)
			}
		}
		if n := strings.Count(string(log), "approved by another approver"); n < 10 {
			t.Errorf("the approver reported %d approvals it did not make, want at least the 10 renewals", n)
		}
		t.Logf("%d of 10 renewals of a terminated instance were approved by kube-controller-manager; mooring reported them", approved)
	})
	t.Run("with mooring as the only approver none is approved", func(t *testing.T) {
		approved, _ := renewTerminated(t, approverBin, cloudBin, testbed.BootstrapRBAC{MooringApproves: true}, 0)
		if approved != 0 {
			t.Fatalf("%d renewals of a terminated instance were approved", approved)
		}
	})
}

// renewTerminated joins node-2, registers its Node, terminates its
// instance, files 10 renewals with node-2's credentials (the cloud's API
// slowed by latency meanwhile), and counts the approvals. Every renewal
// that is not approved must be denied InstanceNotRunning.
func renewTerminated(t *testing.T, approverBin, cloudBin string, rbac testbed.BootstrapRBAC, latency time.Duration) (int, *testbed.Process) {
	c := testbed.Start(t, testbed.Options{RBAC: rbac})
	lc := harness.StartLocalCloud(t, c, cloudBin)
	approver := harness.StartApprover(t, c, approverBin, lc, e2eCluster, "--instance-max-age=1s")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	in, err := lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "node-2", Cluster: e2eCluster})
	if err != nil {
		t.Fatal(err)
	}
	join, err := harness.Join(ctx, c, "node-2", in.MetadataURL)
	if err != nil {
		t.Fatal(err)
	}
	joined, err := harness.WaitForDecision(ctx, c.Client, join.Name)
	if err != nil {
		t.Fatal(err)
	}
	if harness.Condition(joined, certificatesv1.CertificateApproved) == nil {
		t.Fatalf("join: %+v", joined.Status.Conditions)
	}
	for len(joined.Status.Certificate) == 0 {
		time.Sleep(100 * time.Millisecond)
		if joined, err = c.Client.CertificatesV1().CertificateSigningRequests().Get(ctx, join.Name, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	asNode, err := kubernetes.NewForConfig(&rest.Config{Host: c.URL, TLSClientConfig: rest.TLSClientConfig{
		CAData: c.CA.CertPEM, CertData: joined.Status.Certificate, KeyData: join.KeyPEM}})
	if err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-2"}, Spec: corev1.NodeSpec{ProviderID: "local://" + in.ID}}
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Client.TerminateInstance(ctx, in.ID); err != nil {
		t.Fatal(err)
	}
	if latency > 0 {
		if err := lc.Client.SetFaults(ctx, api.Faults{Latency: api.Duration(latency)}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2 * time.Second) // past the approver's --instance-max-age
	var names []string
	for i := range 10 {
		name := fmt.Sprintf("renew-node-2-%d", i)
		if _, err := asNode.CertificatesV1().CertificateSigningRequests().Create(ctx, renewalCSR(t, name, "node-2"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	approved := 0
	for _, name := range names {
		csr, err := harness.WaitForDecision(ctx, c.Client, name)
		if err != nil {
			t.Fatal(err)
		}
		if cond := harness.Condition(csr, certificatesv1.CertificateApproved); cond != nil {
			approved++
			t.Logf("%s approved: %s: %s", name, cond.Reason, cond.Message)
			continue
		}
		if cond := harness.Condition(csr, certificatesv1.CertificateDenied); cond == nil || cond.Reason != csrreason.InstanceNotRunning {
			t.Errorf("%s: %+v, want denied %s", name, csr.Status.Conditions, csrreason.InstanceNotRunning)
		}
	}
	return approved, approver.Process
}

// renewalCSR is a kubelet's client-certificate renewal of node.
func renewalCSR(t *testing.T, name, node string) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}
}
