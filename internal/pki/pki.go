// Package pki issues the certificates and keys that mooring's test bed, local
// cloud and demo need: a CA made with cfssl's initca and leaf certificates
// signed by cfssl's local signer under named profiles.
//
// It is not used by the agent or the approver, which handle CSRs with
// crypto/x509 and client-go's certificate utilities.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cloudflare/cfssl/config"
	"github.com/cloudflare/cfssl/csr"
	"github.com/cloudflare/cfssl/helpers"
	"github.com/cloudflare/cfssl/initca"
	cflog "github.com/cloudflare/cfssl/log"
	"github.com/cloudflare/cfssl/signer"
	"github.com/cloudflare/cfssl/signer/local"
)

func init() {
	// cfssl logs every signature at info level to the standard logger.
	cflog.Level = cflog.LevelError
}

// Signing profiles a CA issues under.
const (
	// ProfileServer is for TLS servers (server auth).
	ProfileServer = "server"
	// ProfileClient is for TLS clients (client auth).
	ProfileClient = "client"
	// ProfilePeer is for endpoints that are both (server and client auth).
	ProfilePeer = "peer"
)

// Validity of what NewCA creates and issues.
const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 365 * 24 * time.Hour
)

func policy() *config.Signing {
	profile := func(usages ...string) *config.SigningProfile {
		return &config.SigningProfile{
			Usage:        append([]string{"signing", "key encipherment"}, usages...),
			Expiry:       leafValidity,
			ExpiryString: leafValidity.String(),
		}
	}
	return &config.Signing{
		Default: profile("client auth"),
		Profiles: map[string]*config.SigningProfile{
			ProfileServer: profile("server auth"),
			ProfileClient: profile("client auth"),
			ProfilePeer:   profile("server auth", "client auth"),
		},
	}
}

// KeyPair is a PEM certificate and its PEM private key.
type KeyPair struct {
	CertPEM []byte
	KeyPEM  []byte
}

// Write stores the pair as DIR/NAME.crt (0644) and DIR/NAME.key (0600) and
// returns both paths.
func (kp *KeyPair) Write(dir, name string) (certPath, keyPath string, err error) {
	certPath = filepath.Join(dir, name+".crt")
	keyPath = filepath.Join(dir, name+".key")
	if err := os.WriteFile(certPath, kp.CertPEM, 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyPath, kp.KeyPEM, 0o600); err != nil {
		return "", "", err
	}
	return certPath, keyPath, nil
}

// CA is a certificate authority with its key in memory.
type CA struct {
	KeyPair
	Cert   *x509.Certificate
	signer *local.Signer
}

// NewCA creates a self-signed ECDSA P-256 CA named commonName.
func NewCA(commonName string) (*CA, error) {
	req := &csr.CertificateRequest{
		CN:         commonName,
		KeyRequest: &csr.KeyRequest{A: "ecdsa", S: 256},
		CA:         &csr.CAConfig{Expiry: caValidity.String()},
	}
	certPEM, _, keyPEM, err := initca.New(req)
	if err != nil {
		return nil, fmt.Errorf("pki: create CA %q: %w", commonName, err)
	}
	return LoadCA(certPEM, keyPEM)
}

// LoadCA returns the CA whose PEM certificate and key are given.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := helpers.ParseCertificatePEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: parse CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("pki: certificate is not a CA")
	}
	key, err := helpers.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: parse CA key: %w", err)
	}
	s, err := local.NewSigner(key, cert, signer.DefaultSigAlgo(key), policy())
	if err != nil {
		return nil, fmt.Errorf("pki: CA signer: %w", err)
	}
	return &CA{KeyPair: KeyPair{CertPEM: certPEM, KeyPEM: keyPEM}, Cert: cert, signer: s}, nil
}

// Request describes a leaf certificate to issue.
type Request struct {
	CommonName    string
	Organizations []string
	// Hosts are the subject alternative names: IP addresses, DNS names.
	Hosts   []string
	Profile string
}

// Issue creates a new ECDSA P-256 key and a certificate for it signed by the CA.
func (ca *CA) Issue(r Request) (*KeyPair, error) {
	if r.CommonName == "" {
		return nil, errors.New("pki: issue: empty common name")
	}
	if _, ok := policy().Profiles[r.Profile]; !ok {
		return nil, fmt.Errorf("pki: issue %q: unknown profile %q", r.CommonName, r.Profile)
	}
	req := &csr.CertificateRequest{
		CN:         r.CommonName,
		KeyRequest: &csr.KeyRequest{A: "ecdsa", S: 256},
	}
	for _, o := range r.Organizations {
		req.Names = append(req.Names, csr.Name{O: o})
	}
	csrPEM, keyPEM, err := csr.ParseRequest(req)
	if err != nil {
		return nil, fmt.Errorf("pki: key and CSR for %q: %w", r.CommonName, err)
	}
	certPEM, err := ca.signer.Sign(signer.SignRequest{
		Hosts:   r.Hosts,
		Request: string(csrPEM),
		Profile: r.Profile,
	})
	if err != nil {
		return nil, fmt.Errorf("pki: sign %q: %w", r.CommonName, err)
	}
	return &KeyPair{CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// NewSigningKey returns a new ECDSA P-256 key as PKCS#8 PEM and its public key
// as PKIX PEM, for example for service-account token signing.
func NewSigningKey() (privPEM, pubPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	priv, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: priv}),
		pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), nil
}

// SignCSR signs a certificate request (PEM; only its first block is read,
// as the apiserver reads spec.request) under a profile, as a cluster
// signer would: the subject and key are the request's.
func (ca *CA) SignCSR(csrPEM []byte, profile string) ([]byte, error) {
	if _, ok := policy().Profiles[profile]; !ok {
		return nil, fmt.Errorf("pki: sign: unknown profile %q", profile)
	}
	block, _ := pem.Decode(csrPEM)
	if block == nil {
		return nil, errors.New("pki: sign: no PEM block")
	}
	certPEM, err := ca.signer.Sign(signer.SignRequest{
		Request: string(pem.EncodeToMemory(block)),
		Profile: profile,
	})
	if err != nil {
		return nil, fmt.Errorf("pki: sign: %w", err)
	}
	return certPEM, nil
}
