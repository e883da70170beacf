// Package agentid is the OCI backend's side of the node agent: the
// instance's record from the instance metadata service (v2), and as
// evidence a signature over the CSR key's binding by the instance
// principal's key, with its certificate and intermediate, which the
// metadata service serves (/opc/v2/identity/). It registers the node
// identity of the backend "oci" (cloud/nodeid), and holds what the
// approver's verifier and the provider share with it: the evidence's wire
// form (evidence.go), providerIDs, the node name policy and the forms of
// OCIDs (names.go). It imports neither (mooring-agent links it without
// them, and without OCI's SDK).
package agentid

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"
	"unicode"

	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/nodeid/linklocal"
	"github.com/mooring-dev/mooring/internal/evidence"
)

// Name is the backend's name, the agent config's cloud: oci.
const Name = "oci"

func init() { nodeid.Register(Name, nodeid.Of(NewNodeIdentity)) }

// Metadata paths (IMDS v2: every request carries Authorization: Bearer
// Oracle).
const (
	instancePath     = "/opc/v2/instance/"
	vnicsPath        = "/opc/v2/vnics/"
	certPath         = "/opc/v2/identity/cert.pem"
	keyPath          = "/opc/v2/identity/key.pem"
	intermediatePath = "/opc/v2/identity/intermediate.pem"
)

const (
	// maxMetadataBody bounds an answer (each call: linklocal's 10s).
	maxMetadataBody = 64 << 10
	// identityAttempts: the certificate and its key are two reads, and
	// OCI rotates them; a pair that does not match is read again.
	identityAttempts = 3
)

// NodeIdentity is an OCI instance as its node agent sees it: its metadata
// service, v2.
type NodeIdentity struct {
	md  *linklocal.Client
	now func() time.Time
}

var _ nodeid.Identity = (*NodeIdentity)(nil)

// NewNodeIdentity reads the agent's configuration of the oci backend:
// cfg.MetadataURL ("" is http://169.254.169.254; else http://host[:port]),
// cfg.NodeNamePolicy ("" or DisplayName). The backend has no
// cloudSettings. It calls nothing.
func NewNodeIdentity(cfg nodeid.Config) (*NodeIdentity, error) {
	if err := cfg.CheckPlain(Name, PolicyDisplayName); err != nil {
		return nil, err
	}
	md, err := linklocal.Open(Name, cfg.MetadataURL, linklocal.DefaultURL, linklocal.Options{MaxBody: maxMetadataBody,
		Header: http.Header{"Authorization": {"Bearer Oracle"}}})
	if err != nil {
		return nil, err
	}
	return &NodeIdentity{md: md, now: time.Now}, nil
}

// instanceDoc is the part of /opc/v2/instance/ read here.
type instanceDoc struct {
	ID          string `json:"id"`
	DisplayName string `json:"displayName"`
}

// vnicDoc is an entry of /opc/v2/vnics/: its private IPv4 address and
// its IPv6 addresses (a VNIC in an IPv6-only subnet has no private IPv4).
type vnicDoc struct {
	PrivateIP     string   `json:"privateIp"`
	IPv6Addresses []string `json:"ipv6Addresses"`
}

// address is the VNIC's address a kubelet is given: its private IPv4
// address, else its first IPv6 address; "" when it has neither.
func (v vnicDoc) address() string {
	if ip := net.ParseIP(v.PrivateIP); ip != nil && ip.To4() != nil {
		return ip.String()
	}
	for _, a := range v.IPv6Addresses {
		if ip := net.ParseIP(a); ip != nil && ip.To4() == nil {
			return ip.String()
		}
	}
	return ""
}

// Instance reads the instance's id and display name, and the address of
// its first VNIC: the private IPv4 address, or for an IPv6-only VNIC its
// first IPv6 address.
func (n *NodeIdentity) Instance(ctx context.Context) (nodeid.Instance, error) {
	var in instanceDoc
	if err := n.getJSON(ctx, instancePath, &in); err != nil {
		return nodeid.Instance{}, err
	}
	var vnics []vnicDoc
	if err := n.getJSON(ctx, vnicsPath, &vnics); err != nil {
		return nodeid.Instance{}, err
	}
	switch {
	case !ValidOCID(in.ID, "instance"):
		return nodeid.Instance{}, fmt.Errorf("oci: metadata instance id %q is not an instance OCID", in.ID)
	case NodeName(in.DisplayName) == "":
		return nodeid.Instance{}, fmt.Errorf("oci: the instance's display name %q, lower-cased, is not a Node name (an RFC 1123 subdomain)", in.DisplayName)
	case len(vnics) == 0 || vnics[0].address() == "":
		return nodeid.Instance{}, errors.New("oci: metadata vnics: the first VNIC has neither a private IPv4 nor an IPv6 address")
	}
	return nodeid.Instance{
		ID: in.ID, Name: in.DisplayName, NodeName: NodeName(in.DisplayName),
		ProviderID: ProviderID(in.ID),
		InternalIP: vnics[0].address(),
	}, nil
}

// Evidence reads the instance principal's certificate, key and
// intermediate, and signs the binding with the key.
func (n *NodeIdentity) Evidence(ctx context.Context, binding string) (evidence.Block, error) {
	if binding == "" || len(binding) > 256 || strings.ContainsFunc(binding, func(r rune) bool { return r > unicode.MaxASCII || unicode.IsControl(r) || r == ' ' }) {
		return evidence.Block{}, fmt.Errorf("oci: binding %.60q: want 1-256 printable ASCII characters", binding)
	}
	var (
		leaf *x509.Certificate
		key  crypto.Signer
		err  error
	)
	for attempt := 1; ; attempt++ {
		leaf, key, err = n.identity(ctx)
		if err == nil || attempt == identityAttempts || !errors.Is(err, errKeyMismatch) {
			break
		}
		klog.V(2).InfoS("The instance principal's certificate and key did not match (rotated between the reads); reading them again", "attempt", attempt)
	}
	if err != nil {
		return evidence.Block{}, err
	}
	interPEM, err := n.get(ctx, intermediatePath)
	if err != nil {
		return evidence.Block{}, err
	}
	inter, err := parseCertificate(interPEM)
	if err != nil {
		return evidence.Block{}, fmt.Errorf("oci: metadata %s: %w", intermediatePath, err)
	}
	signedAt := n.now().Unix()
	digest := sha256.Sum256(SignedMessage(binding, signedAt))
	sig, err := key.Sign(rand.Reader, digest[:], crypto.SHA256)
	if err != nil {
		return evidence.Block{}, fmt.Errorf("oci: signing the binding with the instance principal's key: %w", err)
	}
	data, err := Evidence{Version: EvidenceVersion, Binding: binding, SignedAt: signedAt, Certificate: leaf.Raw, Intermediate: inter.Raw, Signature: sig}.Marshal()
	if err != nil {
		return evidence.Block{}, fmt.Errorf("oci: %w", err)
	}
	klog.V(2).InfoS("Signed the CSR key's binding with the instance principal's key", "certificateSerial", leaf.SerialNumber.String(),
		"notAfter", leaf.NotAfter.UTC().Format(time.RFC3339))
	return evidence.Block{Type: EvidenceType, Data: data}, nil
}

var errKeyMismatch = errors.New("the instance principal's key is not its certificate's")

// identity reads the leaf certificate and its key, and checks that they
// are a pair.
func (n *NodeIdentity) identity(ctx context.Context) (*x509.Certificate, crypto.Signer, error) {
	certPEM, err := n.get(ctx, certPath)
	if err != nil {
		return nil, nil, err
	}
	leaf, err := parseCertificate(certPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("oci: metadata %s: %w", certPath, err)
	}
	keyPEM, err := n.get(ctx, keyPath)
	if err != nil {
		return nil, nil, err
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("oci: metadata %s: %w", keyPath, err)
	}
	type equaler interface{ Equal(crypto.PublicKey) bool }
	if pub, ok := key.Public().(equaler); !ok || !pub.Equal(leaf.PublicKey) {
		return nil, nil, fmt.Errorf("oci: %w", errKeyMismatch)
	}
	return leaf, key, nil
}

// parseCertificate reads one PEM CERTIFICATE.
func parseCertificate(data []byte) (*x509.Certificate, error) {
	b, rest := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("not a PEM certificate")
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return nil, errors.New("more than one PEM block")
	}
	return x509.ParseCertificate(b.Bytes)
}

// parseKey reads a PEM private key: PKCS #1 RSA (what OCI serves) or
// PKCS #8.
func parseKey(data []byte) (crypto.Signer, error) {
	b, _ := pem.Decode(data)
	if b == nil {
		return nil, errors.New("not a PEM private key")
	}
	switch b.Type {
	case "RSA PRIVATE KEY":
		return x509.ParsePKCS1PrivateKey(b.Bytes)
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
		if err != nil {
			return nil, err
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("a %T key cannot sign", k)
		}
		return s, nil
	}
	return nil, fmt.Errorf("PEM block %q is not a private key", b.Type)
}

func (n *NodeIdentity) getJSON(ctx context.Context, path string, v any) error {
	body, err := n.get(ctx, path)
	if err != nil {
		return err
	}
	return linklocal.DecodeJSON(body, "oci: metadata "+path, v)
}

// get reads a metadata path with the v2 header; an empty answer is an
// error.
func (n *NodeIdentity) get(ctx context.Context, path string) ([]byte, error) {
	body, err := n.md.Get(ctx, path)
	if err == nil && len(bytes.TrimSpace(body)) == 0 {
		return nil, fmt.Errorf("oci: metadata %s is empty", path)
	}
	return body, err
}
