package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// approverOnLocalCloud starts the bed without the bootstrappers'
// auto-approval, the local cloud with one instance, node-1, of the
// cluster, and mooring-csr-approver on it. The context bounds the test (3
// minutes).
func approverOnLocalCloud(t *testing.T) (context.Context, *testbed.Cluster, *harness.LocalCloud, *api.Instance, *harness.Approver) {
	t.Helper()
	bin := harness.BuildBinary(t, "csrapprover/cmd/mooring-csr-approver")
	cloudBin := harness.BuildBinary(t, "cloud/local/cmd/mooring-localcloud")
	c := testbed.Start(t, testbed.Options{RBAC: testbed.BootstrapRBAC{MooringApproves: true}})
	lc := harness.StartLocalCloud(t, c, cloudBin)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	in, err := lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "node-1", Cluster: e2eCluster})
	if err != nil {
		t.Fatal(err)
	}
	return ctx, c, lc, in, harness.StartApprover(t, c, bin, lc, e2eCluster)
}

// TestStandaloneApprover: with the bootstrappers' auto-approval removed,
// mooring-csr-approver approves a join whose evidence the local cloud
// signed (and kube-controller-manager signs it), and denies, with a reason,
// a bootstrap-token holder without evidence and one replaying evidence.
func TestStandaloneApprover(t *testing.T) {
	ctx, c, _, in, approver := approverOnLocalCloud(t)

	start := time.Now()
	join, err := harness.Join(ctx, c, "node-1", in.MetadataURL)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := harness.WaitForDecision(ctx, c.Client, join.Name)
	if err != nil {
		t.Fatal(err)
	}
	cond := harness.Condition(csr, certificatesv1.CertificateApproved)
	if cond == nil || cond.Reason != "MooringApproved" {
		t.Fatalf("join with evidence: conditions %+v", csr.Status.Conditions)
	}
	block, _ := pem.Decode(csr.Status.Certificate)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil || cert.Subject.CommonName != "system:node:node-1" {
		t.Fatalf("issued certificate: %v, %v", cert, err)
	}
	t.Logf("join approved and signed %v after the CSR was created: %s", time.Since(start).Round(time.Millisecond), cond.Message)

	// A stolen bootstrap token without evidence gets nothing.
	stolen, err := harness.Join(ctx, c, "node-1", "")
	if err != nil {
		t.Fatal(err)
	}
	denied, err := harness.WaitForDecision(ctx, c.Client, stolen.Name)
	if err != nil {
		t.Fatal(err)
	}
	if cond := harness.Condition(denied, certificatesv1.CertificateDenied); cond == nil || cond.Reason != "NoEvidence" || len(denied.Status.Certificate) > 0 {
		t.Fatalf("join without evidence: %+v", denied.Status)
	} else {
		t.Logf("join without evidence denied: %s: %s", cond.Reason, cond.Message)
	}
	events, err := c.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + stolen.Name})
	if err == nil && len(events.Items) == 0 {
		// Events of cluster-scoped objects land in "default"; give the
		// broadcaster a moment.
		time.Sleep(2 * time.Second)
		events, _ = c.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + stolen.Name})
	}
	if events == nil || len(events.Items) == 0 || events.Items[0].Reason != "NoEvidence" {
		t.Errorf("no NoEvidence Event on the denied CSR")
	}
	checkApproverServing(ctx, t, c, approver)
}

// checkApproverServing: the approver's /metrics, on its secure port,
// answers the cluster admin (allowed by the delegated SubjectAccessReview)
// and refuses an anonymous client; its plain health port answers /healthz
// and /readyz (it leads, its caches synced).
func checkApproverServing(ctx context.Context, t *testing.T, c *testbed.Cluster, a *harness.Approver) {
	t.Helper()
	get := func(hc *http.Client, url string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	metricsURL := "https://" + a.MetricsAddr + "/metrics"
	adminTLS, err := rest.TLSConfigFor(c.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	// A self-signed serving certificate.
	adminTLS.RootCAs, adminTLS.InsecureSkipVerify = nil, true
	admin := &http.Client{Transport: &http.Transport{TLSClientConfig: adminTLS}, Timeout: 10 * time.Second}
	defer admin.CloseIdleConnections()
	if code, body := get(admin, metricsURL); code != http.StatusOK || !strings.Contains(body, "mooring_csr_approver_decisions_total") {
		t.Errorf("admin GET /metrics: %d\n%.500s", code, body)
	}
	anon := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 10 * time.Second}
	defer anon.CloseIdleConnections()
	if code, body := get(anon, metricsURL); code != http.StatusUnauthorized && code != http.StatusForbidden {
		t.Errorf("anonymous GET /metrics: %d, want 401 or 403\n%.300s", code, body)
	}
	plain := &http.Client{Timeout: 10 * time.Second}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := get(plain, "http://"+a.HealthAddr+path); code != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, code, body)
		}
	}
	if code, _ := get(plain, "http://"+a.HealthAddr+"/metrics"); code == http.StatusOK {
		t.Errorf("the plain health port serves /metrics")
	}
}

// TestCCMApprover runs the approver inside mooring-ccm: a kubelet holding
// credentials from an attested join registers, the CCM initializes it, and
// its serving CSR is approved by mooring after a check against the cloud.
func TestCCMApprover(t *testing.T) {
	ccmBin := harness.BuildBinary(t, "ccm/cmd/mooring-ccm")
	cloudBin := harness.BuildBinary(t, "cloud/local/cmd/mooring-localcloud")
	c := testbed.Start(t, testbed.Options{RBAC: testbed.BootstrapRBAC{MooringApproves: true}})
	lc := harness.StartLocalCloud(t, c, cloudBin)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	in, err := lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "node-1", Cluster: e2eCluster})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"deploy/csrapprover/role/clusterrole.yaml", "deploy/base/ccm-csrapprover-binding.yaml"} {
		if err := c.Apply(ctx, filepath.Join(harness.RepoRoot(), f)); err != nil {
			t.Fatal(err)
		}
	}
	harness.StartCCM(t, c, ccmBin, lc, harness.CCMOptions{Cluster: e2eCluster, Args: []string{"--controllers=*,csr-approver", "--v=2"}})

	join, err := harness.Join(ctx, c, "node-1", in.MetadataURL)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := harness.WaitForDecision(ctx, c.Client, join.Name)
	if err != nil {
		t.Fatal(err)
	}
	if harness.Condition(csr, certificatesv1.CertificateApproved) == nil {
		t.Fatalf("join: %+v", csr.Status.Conditions)
	}
	// The kubelet starts with the credentials, as the agent leaves them.
	if _, err := c.AddNodeConfig(ctx, testbed.NodeConfig{Name: "node-1", Address: in.Addresses[0].Address,
		ClientCertPEM: csr.Status.Certificate, ClientKeyPEM: join.KeyPEM}); err != nil {
		t.Fatal(err)
	}
	serving := waitForServingCSR(ctx, t, c, "node-1")
	decided, err := harness.WaitForDecision(ctx, c.Client, serving.Name)
	if err != nil {
		t.Fatal(err)
	}
	cond := harness.Condition(decided, certificatesv1.CertificateApproved)
	if cond == nil || cond.Reason != "MooringApproved" || len(decided.Status.Certificate) == 0 {
		t.Fatalf("serving CSR: %+v", decided.Status.Conditions)
	}
	t.Logf("serving CSR approved: %s", cond.Message)
	node, err := c.Client.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
	if err != nil || node.Spec.ProviderID != "local://"+in.ID {
		t.Fatalf("node: %v, %v", node, err)
	}
}
