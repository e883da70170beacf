package pki

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"slices"
	"testing"

	"github.com/cloudflare/cfssl/helpers"
)

func TestIssueChainsToCA(t *testing.T) {
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.Issue(Request{
		CommonName:    "system:node:a",
		Organizations: []string{"system:nodes"},
		Hosts:         []string{"127.1.0.1", "node-a"},
		Profile:       ProfilePeer,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM); err != nil {
		t.Fatalf("cert and key do not match: %v", err)
	}
	cert, err := helpers.ParseCertificatePEM(kp.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Errorf("verify for usage %v: %v", usage, err)
		}
	}
	if cert.Subject.CommonName != "system:node:a" || !slices.Equal(cert.Subject.Organization, []string{"system:nodes"}) {
		t.Errorf("subject = %v", cert.Subject)
	}
	if len(cert.IPAddresses) != 1 || !cert.IPAddresses[0].Equal(net.ParseIP("127.1.0.1")) {
		t.Errorf("IP SANs = %v", cert.IPAddresses)
	}
	if !slices.Equal(cert.DNSNames, []string{"node-a"}) {
		t.Errorf("DNS SANs = %v", cert.DNSNames)
	}
}

func TestProfilesLimitUsage(t *testing.T) {
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.Issue(Request{CommonName: "client", Profile: ProfileClient})
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := helpers.ParseCertificatePEM(kp.CertPEM)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("client certificate verified for server auth")
	}
}

func TestIssueRejectsBadRequests(t *testing.T) {
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Issue(Request{Profile: ProfileServer}); err == nil {
		t.Error("empty common name accepted")
	}
	if _, err := ca.Issue(Request{CommonName: "x", Profile: "nope"}); err == nil {
		t.Error("unknown profile accepted")
	}
}

func TestLoadCARoundTrip(t *testing.T) {
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	again, err := LoadCA(ca.CertPEM, ca.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := again.Issue(Request{CommonName: "x", Profile: ProfileServer}); err != nil {
		t.Fatal(err)
	}
	leaf, _ := ca.Issue(Request{CommonName: "leaf", Profile: ProfileServer})
	if _, err := LoadCA(leaf.CertPEM, leaf.KeyPEM); err == nil {
		t.Error("leaf certificate accepted as CA")
	}
}

func TestNewSigningKey(t *testing.T) {
	priv, pub, err := NewSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := helpers.ParsePrivateKeyPEM(priv); err != nil {
		t.Errorf("private key: %v", err)
	}
	if len(pub) == 0 {
		t.Error("empty public key")
	}
}
