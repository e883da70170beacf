package oci_test

import (
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/nodeid/nodeidtest"
	"github.com/mooring-dev/mooring/cloud/oci"
	"github.com/mooring-dev/mooring/cloud/oci/agentid"
	"github.com/mooring-dev/mooring/cloud/oci/ocitest"
)

// Genuine OCI artefacts: two instance certificates of one instance, a week
// apart, the key of the later one and its intermediate, which Oracle
// published in oci-go-sdk's commit 3678a0438c6a65aac8a9db81e882715f034da23e
// (28 Nov 2017; common/auth_federation_client_test.go and
// common/auth_certificate_retriever_test.go) and replaced the next day as
// "actual OCIDs" (commit 3e36242ba1). testdata/oci-go-sdk-2017/README.md
// says what each file is.
const genuineDir = "testdata/oci-go-sdk-2017/"

// What the genuine certificates name.
const (
	genuineTenancy     = "ocidv1:tenancy:oc1:phx:1460406592660:aaaaaaaab4faofrfkxecohhjuivjq262pu"
	genuineCompartment = "ocid1.compartment.oc1..aaaaaaaa23knn2qi23urqqvvozbro3u5gx2ubdabyygve6x56ciehu2zblvq"
	genuineInstance    = "ocid1.instance.oc1.phx.abyhqljrzcobvbut7kniqdy6sf4fp5654vb7dgbgx6dq3h37oynji4u5n2lq"
	// genuineRootKeyID is the authority key identifier both instance
	// certificates and the intermediate carry: the key of the
	// intermediate's issuer, "Oracle BMCS Instance Identity Root - r2".
	genuineRootKeyID = "0a2920f1e638663fc48ba58aedc0c42cad874a7c"
)

// genuineAt is a time both the 27 Nov certificate (21:01:26 to 22:01:26
// UTC) and its intermediate are valid at.
var genuineAt = time.Date(2017, 11, 27, 21, 30, 0, 0, time.UTC)

func readPEM(t *testing.T, name string) *pem.Block {
	t.Helper()
	data, err := os.ReadFile(genuineDir + name)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatalf("%s: no PEM", name)
	}
	return b
}

func readCert(t *testing.T, name string) *x509.Certificate {
	t.Helper()
	c, err := x509.ParseCertificate(readPEM(t, name).Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type genuine struct {
	leaf, earlier, inter *x509.Certificate
	key                  *rsa.PrivateKey
}

func readGenuine(t *testing.T) genuine {
	t.Helper()
	key, err := x509.ParsePKCS1PrivateKey(readPEM(t, "instance-2017-11-27.key.pem").Bytes)
	if err != nil {
		t.Fatal(err)
	}
	g := genuine{leaf: readCert(t, "instance-2017-11-27.pem"), earlier: readCert(t, "instance-2017-11-20.pem"),
		inter: readCert(t, "intermediate-2017-11-26.pem"), key: key}
	if !g.key.PublicKey.Equal(g.leaf.PublicKey) {
		t.Fatal("the published key is not the certificate's")
	}
	return g
}

// pinned is a verifier of the genuine tenancy whose only trust anchor is
// the genuine intermediate (Oracle's root is published nowhere but the
// authenticated auth service): what docs/oci.md's pinning gave.
func pinned(t *testing.T, g genuine, tenancy string, compartments ...string) *oci.Verifier {
	t.Helper()
	v, err := oci.NewVerifier(oci.VerifierOptions{Roots: oci.StaticRoots(rootsPool(g.inter)), Tenancy: tenancy, Compartments: compartments})
	if err != nil {
		t.Fatalf("a verifier of tenancy %s: %v", tenancy, err)
	}
	return v
}

// TestGenuineOldTenancyCertificate: a genuine instance certificate names
// its tenancy in the old form (opc-tenant:ocidv1:tenancy:oc1:phx:...):
// a configuration of that tenancy is accepted and its certificates
// verify; the tenancy and the compartment are compared with the
// configuration's exactly.
func TestGenuineOldTenancyCertificate(t *testing.T) {
	g := readGenuine(t)
	for _, cfg := range []string{
		"tenancy: " + genuineTenancy + "\ncompartments: [" + genuineCompartment + "]\n",
		// The root compartment of such a tenancy is its OCID.
		"tenancy: " + genuineTenancy + "\ncompartments: [" + genuineTenancy + "]\n",
	} {
		if _, err := oci.ParseConfig(strings.NewReader(cfg + "region: us-phoenix-1\nclusterID: c\nconfigFile: /c\n")); err != nil {
			t.Errorf("a config of the genuine tenancy: %v", err)
		}
	}
	if !agentid.ValidTenancy(genuineTenancy) || !agentid.ValidCompartment(genuineTenancy) {
		t.Error("the genuine tenancy is not a tenancy OCID")
	}

	ctx := context.Background()
	b := nodeidtest.NewBinding(t)
	data, err := ocitest.SignEvidence(g.leaf, g.inter, g.key, b, genuineAt)
	if err != nil {
		t.Fatal(err)
	}
	att, err := pinned(t, g, genuineTenancy, genuineCompartment).Verify(ctx, data, b, genuineAt)
	if err != nil {
		t.Fatalf("genuine evidence of the configured tenancy: %v", err)
	}
	if att.InstanceID != genuineInstance || att.ProviderID != "oci://"+genuineInstance {
		t.Errorf("attestation %+v", att)
	}
	for _, tc := range []struct {
		name                 string
		tenancy, compartment string
		want                 string
	}{
		{"another tenancy configured (the current form)", "ocid1.tenancy.oc1..aaaaaaaab4faofrfkxecohhjuivjq262pu", genuineCompartment, cloud.RejectIssuer},
		{"another tenancy configured (the old form)", "ocidv1:tenancy:oc1:phx:1460406592661:aaaaaaaab4faofrfkxecohhjuivjq262pu", genuineCompartment, cloud.RejectIssuer},
		{"another compartment configured", genuineTenancy, "ocid1.compartment.oc1..aaaaaaaaothercompartment", cloud.RejectIssuer},
		{"the root compartment configured, the instance in a child", genuineTenancy, genuineTenancy, cloud.RejectIssuer},
	} {
		if _, err := pinned(t, g, tc.tenancy, tc.compartment).Verify(ctx, data, b, genuineAt); !isRejection(err, tc.want) {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}
}

// TestGenuineCertificatesAreForClientAuth: genuine instance certificates
// list the extended key usage clientAuth, and only it: the verifier's
// demand for it refuses none of them.
func TestGenuineCertificatesAreForClientAuth(t *testing.T) {
	g := readGenuine(t)
	for name, c := range map[string]*x509.Certificate{"27 Nov": g.leaf, "20 Nov": g.earlier} {
		if !slices.Equal(c.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) || len(c.UnknownExtKeyUsage) != 0 {
			t.Errorf("%s: extended key usages %v %v", name, c.ExtKeyUsage, c.UnknownExtKeyUsage)
		}
	}
	if _, err := g.leaf.Verify(x509.VerifyOptions{Roots: rootsPool(g.inter), CurrentTime: genuineAt,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the genuine chain for client authentication: %v", err)
	}
}

// TestGenuineIntermediatesArePerDevice: the same instance's certificates a
// week apart come from two intermediates (another opc-device), under one
// root key: an intermediate pinned as trust anchor (docs/oci.md's advice
// before) does not verify the instance's certificate of a week before,
// where a root, found by the intermediate's issuer and key, would serve
// both.
func TestGenuineIntermediatesArePerDevice(t *testing.T) {
	g := readGenuine(t)
	if g.leaf.Subject.String() != g.earlier.Subject.String() {
		t.Fatalf("not one instance: %s, %s", g.leaf.Subject, g.earlier.Subject)
	}
	if g.leaf.Issuer.String() == g.earlier.Issuer.String() {
		t.Fatalf("one intermediate: %s", g.leaf.Issuer)
	}
	for _, c := range []*x509.Certificate{g.leaf, g.earlier, g.inter} {
		if hex.EncodeToString(c.AuthorityKeyId) != genuineRootKeyID {
			t.Errorf("%s: authority key id %x, want the root's %s", c.Subject, c.AuthorityKeyId, genuineRootKeyID)
		}
	}
	if g.inter.Issuer.CommonName != "Oracle BMCS Instance Identity Root - r2" || len(g.inter.SubjectKeyId) != 0 {
		t.Errorf("intermediate: issuer %s, subject key id %x", g.inter.Issuer, g.inter.SubjectKeyId)
	}
	earlierAt := time.Date(2017, 11, 20, 20, 30, 0, 0, time.UTC)
	_, err := g.earlier.Verify(x509.VerifyOptions{Roots: rootsPool(g.inter), CurrentTime: earlierAt,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Fatalf("the 20 Nov certificate with the 27 Nov intermediate pinned: %v, want an unknown authority", err)
	}
	t.Logf("pinned intermediate, the same instance a week before: %v", err)
}

// TestGenuineChainNeedsOraclesRoot: the fetched roots are looked up by the
// genuine intermediate's issuer and key: an auth service that does not
// publish Oracle's root (ocitest's) is asked again once, then the chain is
// denied; genuine certificates verify only against Oracle's own roots,
// which a real region's auth service must supply.
func TestGenuineChainNeedsOraclesRoot(t *testing.T) {
	g := readGenuine(t)
	ep := ocitest.NewStarted(t, ocitest.Options{Tenancy: genuineTenancy, Compartment: genuineCompartment})
	clock := newFakeClock()
	v := fetchedVerifier(t, ep, clock)
	in := ep.Put(ocitest.Instance{DisplayName: "a", PrivateIP: "127.0.91.10"})
	if err := verifyNow(t, v, ep, in.ID); err != nil {
		t.Fatalf("an ocitest instance of the genuine tenancy: %v", err)
	}
	clock.Add(2 * oci.DefaultMinRootsRefresh)
	b := nodeidtest.NewBinding(t)
	data, err := ocitest.SignEvidence(g.leaf, g.inter, g.key, b, genuineAt)
	if err != nil {
		t.Fatal(err)
	}
	_, err = v.Verify(context.Background(), data, b, genuineAt)
	if !isRejection(err, cloud.RejectSignature) || !errors.Is(err, oci.ErrUnknownIssuer) ||
		!strings.Contains(err.Error(), "Oracle BMCS Instance Identity Root - r2") || !strings.Contains(err.Error(), genuineRootKeyID) {
		t.Fatalf("genuine evidence, Oracle's root not published: %v", err)
	}
	if n := ep.Calls("roots"); n != 2 {
		t.Errorf("%d fetches of the roots, want 2 (one more for the unknown issuer)", n)
	}
}
