package gcetest_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"strconv"
	"testing"

	"github.com/google/go-tpm-tools/server"

	"github.com/mooring-dev/mooring/cloud/gce/gcetest"
)

// The EK/AK CA's AK certificates are as Google's: subject L=zone,
// O=Google Compute Engine, OU=project, CN=instance id; a signing key's
// usage; chained root -> intermediate -> AK; the instance information that
// go-tpm-tools' server.GetGCEInstanceInfo reads (nil unless production).
func TestAKCertificate(t *testing.T) {
	c := gcetest.NewStarted(t, gcetest.Options{})
	in := c.Put(gcetest.Instance{Name: "node-1", InternalIP: "127.0.79.10"})
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := c.IssueAKCert(&key.PublicKey, gcetest.InstanceInfoOf(in))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	s := cert.Subject
	if len(s.Locality) != 1 || s.Locality[0] != in.Zone || len(s.Organization) != 1 || s.Organization[0] != "Google Compute Engine" ||
		len(s.OrganizationalUnit) != 1 || s.OrganizationalUnit[0] != in.Project || s.CommonName != strconv.FormatUint(in.ID, 10) {
		t.Fatalf("subject %s", s)
	}
	if cert.KeyUsage != x509.KeyUsageDigitalSignature || cert.IsCA {
		t.Fatalf("key usage %v, CA %v", cert.KeyUsage, cert.IsCA)
	}
	roots, inters := x509.NewCertPool(), x509.NewCertPool()
	for pool, get := range map[*x509.CertPool]func() ([]byte, error){roots: c.TPMRootPEM, inters: c.TPMIntermediatePEM} {
		p, err := get()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := pem.Decode(p)
		ca, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		pool.AddCert(ca)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inters}); err != nil {
		t.Fatalf("chain: %v", err)
	}
	info, err := server.GetGCEInstanceInfo(cert)
	if err != nil || info == nil {
		t.Fatalf("instance info %v, %v", info, err)
	}
	if info.GetInstanceId() != in.ID || info.GetInstanceName() != in.Name || info.GetProjectId() != in.Project || info.GetZone() != in.Zone || info.GetProjectNumber() == 0 {
		t.Fatalf("instance info %+v", info)
	}
	test := gcetest.InstanceInfoOf(in)
	test.SecurityProperties.IsProduction = false
	der, err = c.IssueAKCert(&key.PublicKey, test)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ = x509.ParseCertificate(der)
	if info, err := server.GetGCEInstanceInfo(cert); err != nil || info != nil {
		t.Fatalf("a non-production certificate's instance info: %v, %v", info, err)
	}
}
