package agent

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func newCSRKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func csrPEM(t *testing.T, cn string, key crypto.Signer) []byte {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn, Organization: []string{"system:nodes"}}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func certPEM(t *testing.T, key *ecdsa.PrivateKey, notAfter time.Time) []byte {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "x"}, NotBefore: notAfter.Add(-time.Hour), NotAfter: notAfter}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

const signer = certificatesv1.KubeAPIServerClientKubeletSignerName

var usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}

// TestRequestCertificate: a new CSR is created; one of the same name is
// reused only if it asks for the same with the same key; API errors keep
// their reason.
func TestRequestCertificate(t *testing.T) {
	ctx := context.Background()
	key, other := newCSRKey(t), newCSRKey(t)
	mine := csrPEM(t, "system:node:n1", key)
	existing := func(name string, req []byte, signerName string, cert []byte) *certificatesv1.CertificateSigningRequest {
		return &certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
			Spec:   certificatesv1.CertificateSigningRequestSpec{Request: req, SignerName: signerName, Usages: usages},
			Status: certificatesv1.CertificateSigningRequestStatus{Certificate: cert}}
	}
	client := fakeClient{fake.NewClientset(
		existing("same", mine, signer, nil),
		existing("same-valid-cert", mine, signer, certPEM(t, key, time.Now().Add(time.Hour))),
		existing("other-key", csrPEM(t, "system:node:n1", other), signer, nil),
		existing("other-subject", csrPEM(t, "system:node:n2", key), signer, nil),
		existing("other-signer", mine, "example.com/other", nil),
		existing("expired-cert", mine, signer, certPEM(t, key, time.Now().Add(-time.Minute))),
	)}
	csrs := client.CertificateSigningRequests()

	name, _, err := requestCertificate(ctx, csrs, mine, "new", signer, usages, key)
	if err != nil || name != "new" {
		t.Fatalf("new: %q, %v", name, err)
	}
	created, err := csrs.Get(ctx, "new", metav1.GetOptions{})
	if err != nil || string(created.Spec.Request) != string(mine) || created.Spec.SignerName != signer || len(created.Spec.Usages) != 2 {
		t.Fatalf("created %+v, %v", created, err)
	}
	for _, reuse := range []string{"same", "same-valid-cert"} {
		if name, uid, err := requestCertificate(ctx, csrs, mine, reuse, signer, usages, key); err != nil || name != reuse || uid != types.UID("uid-"+reuse) {
			t.Errorf("%s: %q %q %v; want it reused", reuse, name, uid, err)
		}
	}
	for refused, why := range map[string]string{"other-key": "signature", "other-subject": "subjects differ", "other-signer": "signerNames differ", "expired-cert": "expired"} {
		if _, _, err := requestCertificate(ctx, csrs, mine, refused, signer, usages, key); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%s: %v; want an error about %s", refused, err, why)
		}
	}

	forbidden := fake.NewClientset()
	forbidden.PrependReactor("create", "certificatesigningrequests", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(certificatesv1.Resource("certificatesigningrequests"), "x", errors.New("no"))
	})
	_, _, err = requestCertificate(ctx, fakeClient{forbidden}.CertificateSigningRequests(), mine, "x", signer, usages, key)
	if !apierrors.IsForbidden(err) || !strings.HasPrefix(err.Error(), "cannot create certificate signing request: ") {
		t.Fatalf("a refused create: %v", err)
	}
}

// TestWaitForCertificate: the wait ends with the certificate once the CSR
// is approved and issued, with an error when it is denied, failed, deleted
// or replaced, and with wait's interrupted error when its context ends.
func TestWaitForCertificate(t *testing.T) {
	key := newCSRKey(t)
	cert := certPEM(t, key, time.Now().Add(time.Hour))
	csr := func(conds ...certificatesv1.RequestConditionType) *certificatesv1.CertificateSigningRequest {
		c := &certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "mine", UID: "u-1"},
			Spec: certificatesv1.CertificateSigningRequestSpec{Request: csrPEM(t, "system:node:n1", key), SignerName: signer, Usages: usages}}
		for _, ct := range conds {
			c.Status.Conditions = append(c.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{Type: ct, Status: v1.ConditionTrue, Reason: "R", Message: "M"})
		}
		return c
	}
	wait1 := func(objs ...runtime.Object) ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		return waitForCertificate(ctx, fakeClient{fake.NewClientset(objs...)}, "mine", "u-1")
	}

	issued := csr(certificatesv1.CertificateApproved)
	issued.Status.Certificate = cert
	if got, err := wait1(issued); err != nil || string(got) != string(cert) {
		t.Fatalf("issued: %q, %v", got, err)
	}
	for name, c := range map[string]*certificatesv1.CertificateSigningRequest{
		"denied": csr(certificatesv1.CertificateDenied), "failed": csr(certificatesv1.CertificateApproved, certificatesv1.CertificateFailed),
	} {
		if _, err := wait1(c); err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "reason: R") {
			t.Errorf("%s: %v", name, err)
		}
	}
	replaced := csr()
	replaced.UID = "u-2"
	if _, err := wait1(replaced); err == nil || !strings.Contains(err.Error(), "changed UIDs") {
		t.Errorf("replaced: %v", err)
	}
	// Approved but not issued, or pending: the wait goes on until its end.
	for _, c := range []*certificatesv1.CertificateSigningRequest{csr(), csr(certificatesv1.CertificateApproved)} {
		if _, err := wait1(c); !wait.Interrupted(err) {
			t.Errorf("undecided: %v; want interrupted", err)
		}
	}

	// Deleted while waited for.
	client := fake.NewClientset(csr())
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go func() {
		_, err := waitForCertificate(ctx, fakeClient{client}, "mine", "u-1")
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if err := client.CertificatesV1().CertificateSigningRequests().Delete(ctx, "mine", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), "was deleted") {
		t.Fatalf("deleted: %v", err)
	}
}

// TestCSRNameRefusesAnUnknownKey: a key x509 cannot marshal gives an error,
// not a name made of nothing.
func TestCSRNameRefusesAnUnknownKey(t *testing.T) {
	if name, err := CSRName("node-1", struct{}{}); err == nil {
		t.Fatalf("CSRName of an unknown key = %q, want an error", name)
	}
}
