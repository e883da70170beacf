package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"slices"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

const uninitializedTaint = "node.cloudprovider.kubernetes.io/uninitialized"

// TestBedNodesJoin proves the test bed: real kubelets bootstrap through the
// CSR API, register tainted as uninitialized, and ask for a serving
// certificate once their Node has an InternalIP.
func TestBedNodesJoin(t *testing.T) {
	const nodes = 3
	c := testbed.Start(t, testbed.Options{Nodes: nodes})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	client := c.Client

	// Every kubelet registers, tainted uninitialized, with no cloud addresses.
	for _, n := range c.Nodes {
		node := waitForNode(ctx, t, c, n.Name)
		if !hasTaint(node, uninitializedTaint, corev1.TaintEffectNoSchedule) {
			t.Errorf("node %s: taints %v, want %s:NoSchedule", n.Name, node.Spec.Taints, uninitializedTaint)
		}
		for _, a := range node.Status.Addresses {
			if a.Type != corev1.NodeHostName {
				t.Errorf("node %s registered with address %v before any cloud set it", n.Name, a)
			}
		}
	}

	// Each kubelet's client CSR was approved and signed.
	csrs, err := client.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var clientCSRs int
	for _, csr := range csrs.Items {
		if csr.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName {
			continue
		}
		clientCSRs++
		if !approved(&csr) || len(csr.Status.Certificate) == 0 {
			t.Errorf("client CSR %s (%s): approved=%v, certificate %d bytes", csr.Name, csr.Spec.Username,
				approved(&csr), len(csr.Status.Certificate))
		}
		if !slices.Contains(csr.Spec.Groups, "system:bootstrappers") {
			t.Errorf("client CSR %s: groups %v, want system:bootstrappers", csr.Name, csr.Spec.Groups)
		}
	}
	if clientCSRs != nodes {
		t.Errorf("%d kubelet client CSRs, want %d", clientCSRs, nodes)
	}

	// Once a Node has an InternalIP (set here as a cloud controller would),
	// its kubelet asks for a serving certificate for that IP and its name.
	for _, n := range c.Nodes {
		start := time.Now()
		if err := c.SetNodeAddresses(ctx, n.Name, []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: n.Address},
			{Type: corev1.NodeHostName, Address: n.Name},
		}); err != nil {
			t.Fatal(err)
		}
		csr := waitForServingCSR(ctx, t, c, n.Name)
		t.Logf("node %s: serving CSR %s %v after its address was set", n.Name, csr.Name, time.Since(start).Round(time.Millisecond))
		checkServingCSR(t, csr, n)
	}
}

func waitForNode(ctx context.Context, t *testing.T, c *testbed.Cluster, name string) *corev1.Node {
	t.Helper()
	var node *corev1.Node
	harness.WaitUntil(ctx, t, "node "+name+" to register", func() (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		node = n
		return true, nil
	})
	return node
}

func waitForServingCSR(ctx context.Context, t *testing.T, c *testbed.Cluster, nodeName string) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	var found *certificatesv1.CertificateSigningRequest
	harness.WaitUntil(ctx, t, "a kubelet-serving CSR from "+nodeName, func() (bool, error) {
		list, err := c.Client.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for i := range list.Items {
			csr := &list.Items[i]
			if csr.Spec.SignerName == certificatesv1.KubeletServingSignerName && csr.Spec.Username == "system:node:"+nodeName {
				found = csr
				return true, nil
			}
		}
		return false, nil
	})
	return found
}

// servingApprovedByMooring waits for the Node's kubelet serving CSR and
// checks that mooring's approver approved it.
func servingApprovedByMooring(ctx context.Context, t *testing.T, c *testbed.Cluster, name string) {
	t.Helper()
	serving := waitForServingCSR(ctx, t, c, name)
	decided, err := harness.WaitForDecision(ctx, c.Client, serving.Name)
	if err != nil {
		t.Fatal(err)
	}
	if cond := harness.Condition(decided, certificatesv1.CertificateApproved); cond == nil || cond.Reason != "MooringApproved" {
		t.Fatalf("%s serving CSR: %+v", name, decided.Status.Conditions)
	}
}

// checkServingCSR checks a kubelet-serving CSR against what the kubelet is
// documented to send (shared/notes/testbed.md).
func checkServingCSR(t *testing.T, csr *certificatesv1.CertificateSigningRequest, n *testbed.Node) {
	t.Helper()
	checkServingCSRSANs(t, csr, n.Name, []string{n.Name}, []string{n.Address})
}

// checkServingCSRSANs checks a kubelet-serving CSR of node name with the
// given DNS and IP SANs, in any order.
func checkServingCSRSANs(t *testing.T, csr *certificatesv1.CertificateSigningRequest, name string, dns, ips []string) {
	t.Helper()
	if !slices.Contains(csr.Spec.Groups, "system:nodes") {
		t.Errorf("serving CSR %s: groups %v, want system:nodes", csr.Name, csr.Spec.Groups)
	}
	wantUsages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}
	if !sameElements(csr.Spec.Usages, wantUsages) {
		t.Errorf("serving CSR %s: usages %v, want %v", csr.Name, csr.Spec.Usages, wantUsages)
	}
	block, _ := pem.Decode(csr.Spec.Request)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		t.Fatalf("serving CSR %s: request is not a PEM CERTIFICATE REQUEST", csr.Name)
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if req.Subject.CommonName != "system:node:"+name || !slices.Equal(req.Subject.Organization, []string{"system:nodes"}) {
		t.Errorf("serving CSR %s: subject %v", csr.Name, req.Subject)
	}
	if !sameElements(req.DNSNames, dns) {
		t.Errorf("serving CSR %s: DNS SANs %v, want %v", csr.Name, req.DNSNames, dns)
	}
	var gotIPs []string
	for _, ip := range req.IPAddresses {
		gotIPs = append(gotIPs, ip.String())
	}
	if !sameElements(gotIPs, ips) {
		t.Errorf("serving CSR %s: IP SANs %v, want %v", csr.Name, gotIPs, ips)
	}
	if len(req.EmailAddresses)+len(req.URIs) > 0 {
		t.Errorf("serving CSR %s: unexpected email/URI SANs", csr.Name)
	}
	if key, ok := req.PublicKey.(*ecdsa.PublicKey); !ok || key.Curve != elliptic.P256() {
		t.Errorf("serving CSR %s: key %T, want ECDSA P-256", csr.Name, req.PublicKey)
	}
}

func approved(csr *certificatesv1.CertificateSigningRequest) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == certificatesv1.CertificateApproved && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func hasTaint(node *corev1.Node, key string, effect corev1.TaintEffect) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == key && t.Effect == effect {
			return true
		}
	}
	return false
}

func sameElements[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}
