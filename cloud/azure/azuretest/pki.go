package azuretest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"time"

	"github.com/smallstep/pkcs7"

	"github.com/mooring-dev/mooring/internal/evidence"
)

// CA is a certificate authority of the test PKI. URL, when set, is where
// its certificate is published: the certificates it issues name it as
// their CA Issuers (AIA) URL, as Microsoft's issuing CAs do.
type CA struct {
	Cert *x509.Certificate
	URL  string
	key  crypto.Signer
}

// Signer signs attested documents: a leaf certificate and its key.
type Signer struct {
	Cert *x509.Certificate
	key  crypto.Signer
}

// nextSerial is a random 120-bit serial number.
func nextSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

// NewRootCA makes a self-signed root.
func NewRootCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: name, Organization: []string{"mooring test"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return &CA{Cert: cert, key: key}, err
}

// NewIntermediate makes a CA under ca.
func (ca *CA) NewIntermediate(name string) (*CA, error) {
	return ca.newIntermediate(name, "")
}

// newIntermediate makes a CA under ca published at url.
func (ca *CA) newIntermediate(name, url string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: name, Organization: []string{"mooring test"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true, KeyUsage: x509.KeyUsageCertSign,
	}
	if ca.URL != "" {
		tmpl.IssuingCertificateURL = []string{ca.URL}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return &CA{Cert: cert, URL: url, key: key}, err
}

// NewSigner makes an RSA-2048 signing certificate under ca for the DNS
// names (Azure's carries metadata.azure.com), valid from notBefore to
// notAfter (zero: an hour ago to a day ahead); its CA Issuers URL is
// ca.URL when set.
func (ca *CA) NewSigner(dnsNames []string, notBefore, notAfter time.Time) (*Signer, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	if notBefore.IsZero() {
		notBefore, notAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	}
	cn := "signer"
	if len(dnsNames) > 0 {
		cn = dnsNames[0]
	}
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: cn},
		NotBefore: notBefore, NotAfter: notAfter, DNSNames: dnsNames,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if ca.URL != "" {
		tmpl.IssuingCertificateURL = []string{ca.URL}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return &Signer{Cert: cert, key: key}, err
}

// Sign makes the PKCS#7 SignedData (DER) of content with the signer, as
// IMDS's genuine documents are made: the content embedded, the signer's
// certificate alone attached, no signed attributes (the signature is over
// the content itself), RSA with SHA-256, and the digest algorithm stated
// as sha256WithRSAEncryption (1.2.840.113549.1.1.11) where CMS would
// write sha256, both in the SignedData and in its SignerInfo. Built with
// github.com/smallstep/pkcs7.
func (s *Signer) Sign(content []byte) ([]byte, error) {
	sd, err := pkcs7.NewSignedData(content)
	if err != nil {
		return nil, err
	}
	sd.SetDigestAlgorithm(pkcs7.OIDDigestAlgorithmSHA256)
	sd.SetEncryptionAlgorithm(pkcs7.OIDEncryptionAlgorithmRSA)
	if err := sd.SignWithoutAttr(s.Cert, s.key, pkcs7.SignerInfoConfig{}); err != nil {
		return nil, err
	}
	raw := sd.GetSignedData()
	for i := range raw.DigestAlgorithmIdentifiers {
		raw.DigestAlgorithmIdentifiers[i].Algorithm = pkcs7.OIDEncryptionAlgorithmRSASHA256
	}
	for i := range raw.SignerInfos {
		raw.SignerInfos[i].DigestAlgorithm.Algorithm = pkcs7.OIDEncryptionAlgorithmRSASHA256
	}
	return sd.Finish()
}

// SignWithAttributes signs as CMS usually does (signed attributes, the
// digest algorithm sha256): a form genuine documents do not take, kept
// to show the verifier reads both.
func (s *Signer) SignWithAttributes(content []byte) ([]byte, error) {
	sd, err := pkcs7.NewSignedData(content)
	if err != nil {
		return nil, err
	}
	sd.SetDigestAlgorithm(pkcs7.OIDDigestAlgorithmSHA256)
	if err := sd.AddSigner(s.Cert, s.key, pkcs7.SignerInfoConfig{}); err != nil {
		return nil, err
	}
	return sd.Finish()
}

// Binding is the binding (internal/evidence.Binding) of a new P-256 key,
// as an agent's CSR key gives one.
func Binding() (string, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	return evidence.Binding(k.Public())
}

// PEM encodes certificates.
func PEM(certs ...*x509.Certificate) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return out
}
