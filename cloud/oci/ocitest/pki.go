package ocitest

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/mooring-dev/mooring/cloud/oci/agentid"
)

// CA is an instance identity CA as OCI's: a root and an intermediate that
// issues instance certificates. OCI's intermediates are per device (their
// subject carries opc-device:<fingerprint>, and one instance's
// certificates come from different intermediates a week apart: two
// genuine ones of 2017 in oci-go-sdk's commit 3678a0438c); NewDevice makes
// another intermediate under the same root.
type CA struct {
	Root, Intermediate       *x509.Certificate
	rootKey, intermediateKey *rsa.PrivateKey
	name                     string
}

// DefaultIntermediateLifetime is a device intermediate's validity: a
// genuine one of 2017 was valid 90 days (26 Nov 2017 to 24 Feb 2018).
const DefaultIntermediateLifetime = 90 * 24 * time.Hour

// NewCA makes a root (RSA 2048, valid ten years, named "<name> Instance
// Identity Root - r2", after OCI's "Oracle BMCS Instance Identity Root -
// r2") and an intermediate under it valid five years ("ocitest" for an
// endpoint's own).
func NewCA(name string, now time.Time) (*CA, error) {
	rootKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	rootT := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: name + " Instance Identity Root - r2"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	rootDER, err := x509.CreateCertificate(rand.Reader, rootT, rootT, &rootKey.PublicKey, rootKey)
	if err != nil {
		return nil, err
	}
	root, _ := x509.ParseCertificate(rootDER)
	ca := &CA{Root: root, rootKey: rootKey, name: name}
	return ca.newIntermediate(now, 5*365*24*time.Hour)
}

// NewDevice is another intermediate under the same root, valid
// DefaultIntermediateLifetime from now (a device's, as OCI's).
func (ca *CA) NewDevice(now time.Time) (*CA, error) {
	return ca.newIntermediate(now, DefaultIntermediateLifetime)
}

func (ca *CA) newIntermediate(now time.Time, lifetime time.Duration) (*CA, error) {
	interKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	interT := &x509.Certificate{
		// OCI's intermediate names itself PKISVC Identity Intermediate r2,
		// with an organizational unit opc-device:<fingerprint>.
		SerialNumber: serial(), Subject: pkix.Name{CommonName: ca.name + " Identity Intermediate r2",
			OrganizationalUnit: []string{"opc-device:" + fingerprint(&interKey.PublicKey)}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(lifetime),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	interDER, err := x509.CreateCertificate(rand.Reader, interT, ca.Root, &interKey.PublicKey, ca.rootKey)
	if err != nil {
		return nil, err
	}
	inter, _ := x509.ParseCertificate(interDER)
	return &CA{Root: ca.Root, rootKey: ca.rootKey, Intermediate: inter, intermediateKey: interKey, name: ca.name}, nil
}

// RootPEM is the root certificate, PEM (a rootCAFile).
func (ca *CA) RootPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Root.Raw})
}

// Subject is what an instance certificate names.
type Subject struct {
	Instance, Compartment, Tenancy string
}

// Identity is an instance principal's certificate and key, and the
// intermediate that issued it, as the metadata service serves them.
type Identity struct {
	Certificate  *x509.Certificate
	Key          *rsa.PrivateKey
	Intermediate *x509.Certificate
}

// Issue makes an instance certificate (RSA 2048) with OCI's subject
// layout: common name the instance OCID, organizational units
// opc-certtype:instance, opc-instance:<OCID>, opc-compartment:<OCID>,
// opc-tenant:<OCID>, valid from notBefore for lifetime.
func (ca *CA) Issue(s Subject, notBefore time.Time, lifetime time.Duration) (Identity, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return Identity{}, err
	}
	return ca.IssueFor(s, notBefore, lifetime, key)
}

// IssueFor is Issue for a key of the caller's (a weak one, for attacks).
func (ca *CA) IssueFor(s Subject, notBefore time.Time, lifetime time.Duration, key *rsa.PrivateKey) (Identity, error) {
	return ca.IssueWithUsages(s, notBefore, lifetime, key, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
}

// IssueWithUsages is IssueFor with other extended key usages than OCI's
// clientAuth (none, or serverAuth: for attacks).
func (ca *CA) IssueWithUsages(s Subject, notBefore time.Time, lifetime time.Duration, key *rsa.PrivateKey, usages []x509.ExtKeyUsage) (Identity, error) {
	t := &x509.Certificate{
		SerialNumber: serial(),
		Subject: pkix.Name{CommonName: s.Instance, OrganizationalUnit: []string{
			"opc-certtype:instance", "opc-instance:" + s.Instance, "opc-compartment:" + s.Compartment, "opc-tenant:" + s.Tenancy,
		}},
		NotBefore: notBefore, NotAfter: notBefore.Add(lifetime),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: usages,
	}
	der, err := x509.CreateCertificate(rand.Reader, t, ca.Intermediate, &key.PublicKey, ca.intermediateKey)
	if err != nil {
		return Identity{}, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return Identity{}, err
	}
	return Identity{Certificate: cert, Key: key, Intermediate: ca.Intermediate}, nil
}

// Evidence is the evidence a node of this identity makes for binding,
// signed at signedAt (agentid's wire form, as the agent writes it).
func (id Identity) Evidence(binding string, signedAt time.Time) ([]byte, error) {
	return SignEvidence(id.Certificate, id.Intermediate, id.Key, binding, signedAt)
}

// SignEvidence signs binding with key and puts it with cert and inter
// into evidence: any pairing, for attacks.
func SignEvidence(cert, inter *x509.Certificate, key *rsa.PrivateKey, binding string, signedAt time.Time) ([]byte, error) {
	digest := sha256.Sum256(agentid.SignedMessage(binding, signedAt.Unix()))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, digest[:])
	if err != nil {
		return nil, err
	}
	return agentid.Evidence{Version: agentid.EvidenceVersion, Binding: binding, SignedAt: signedAt.Unix(),
		Certificate: cert.Raw, Intermediate: inter.Raw, Signature: sig}.Marshal()
}

// PEM forms of an identity, as the metadata service serves them.
func (id Identity) certPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: id.Certificate.Raw})
}

func (id Identity) keyPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(id.Key)})
}

func (id Identity) intermediatePEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: id.Intermediate.Raw})
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		panic(fmt.Sprintf("ocitest: random serial: %v", err))
	}
	return n.Add(n, big.NewInt(1))
}

// fingerprint is the SHA-256 of a public key's DER, colon hex.
func fingerprint(pub *rsa.PublicKey) string {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		panic(err)
	}
	sum := sha256.Sum256(der)
	parts := make([]string, len(sum))
	for i, b := range sum {
		parts[i] = fmt.Sprintf("%02x", b)
	}
	return strings.Join(parts, ":")
}
