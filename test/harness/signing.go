package harness

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooring-dev/mooring/test/testbed"
)

// WaitSigning waits until kube-controller-manager signs approved CSRs: it
// files a kube-apiserver-client CSR as the admin, approves it and waits for
// its certificate, then deletes it. kube-controller-manager starts its
// signers a second or two after it reports healthy; a measurement of the
// join path starts after this.
func WaitSigning(ctx context.Context, t testing.TB, c *testbed.Cluster) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "signing-probe"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	csrs := c.Client.CertificatesV1().CertificateSigningRequests()
	name := fmt.Sprintf("signing-probe-%d", time.Now().UnixNano())
	csr, err := csrs.Create(ctx, &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeAPIServerClientSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("signing probe: %v", err)
	}
	defer func() { _ = csrs.Delete(context.Background(), name, metav1.DeleteOptions{}) }()
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "SigningProbe", Message: "the test bed checks its signer",
	})
	if _, err := csrs.UpdateApproval(ctx, name, csr, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("signing probe: %v", err)
	}
	WaitUntil(ctx, t, "kube-controller-manager signs an approved CSR", func() (bool, error) {
		got, err := csrs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return len(got.Status.Certificate) > 0, nil
	})
}
