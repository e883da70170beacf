package azure

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/smallstep/pkcs7"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/azure/agentid"
)

// ReplayKeyPrefix starts the replay key of Azure evidence; the rest is the
// SHA-256 (hex) of the document's signed content, which holds the nonce
// and the timestamps: the container around it may vary, the content not.
const ReplayKeyPrefix = "azure-doc:"

// DefaultSignerNames are the names the signer certificate of Azure's
// public cloud carries: metadata.azure.com and names under it.
var DefaultSignerNames = []string{"metadata.azure.com"}

// Verifier defaults.
const (
	// DefaultMaxDocumentAge is how long after its createdOn a document is
	// accepted (IMDS signs a fresh one for each nonce).
	DefaultMaxDocumentAge = 10 * time.Minute
	// DefaultMaxClockSkew is how far ahead of the approver's clock
	// createdOn may be.
	DefaultMaxClockSkew = 5 * time.Minute
)

// VerifierOptions configure a Verifier.
type VerifierOptions struct {
	// Roots are the certificates the signer must chain to (required; the
	// system's roots in production, a test root in tests).
	Roots *x509.CertPool
	// Intermediates are CA certificates the chain may go through besides
	// those in the PKCS#7 (Azure's document carries only its signer).
	Intermediates []*x509.Certificate
	// SignerNames: the signer certificate must carry one of these DNS
	// names, or a name under one of them (default DefaultSignerNames).
	SignerNames []string
	// Subscriptions are the subscription ids whose VMs may join (required).
	Subscriptions []string
	// MaxDocumentAge and MaxClockSkew bound freshness (defaults above).
	MaxDocumentAge, MaxClockSkew time.Duration
}

// Verifier is a cloud.EvidenceVerifier for IMDS attested documents.
type Verifier struct {
	roots         *x509.CertPool
	intermediates []*x509.Certificate
	names         []string
	subscriptions []string
	maxAge, skew  time.Duration
}

var _ cloud.EvidenceVerifier = (*Verifier)(nil)

// NewVerifier checks the options; it calls nothing.
func NewVerifier(o VerifierOptions) (*Verifier, error) {
	if o.Roots == nil {
		return nil, errors.New("azure verifier: trust roots are required")
	}
	if len(o.Subscriptions) == 0 {
		return nil, errors.New("azure verifier: at least one subscription is required")
	}
	v := &Verifier{roots: o.Roots, intermediates: slices.Clone(o.Intermediates),
		maxAge: o.MaxDocumentAge, skew: o.MaxClockSkew}
	for _, s := range o.Subscriptions {
		if !agentid.ValidUUID(s) {
			return nil, fmt.Errorf("azure verifier: subscription %q is not a subscription id (a UUID)", s)
		}
		v.subscriptions = append(v.subscriptions, strings.ToLower(s))
	}
	names := o.SignerNames
	if len(names) == 0 {
		names = DefaultSignerNames
	}
	for _, n := range names {
		n = strings.TrimSuffix(strings.ToLower(n), ".")
		if n == "" || strings.ContainsAny(n, "* /") || !strings.Contains(n, ".") {
			return nil, fmt.Errorf("azure verifier: signer name %q: want a DNS name such as metadata.azure.com", n)
		}
		v.names = append(v.names, n)
	}
	if v.maxAge <= 0 {
		v.maxAge = DefaultMaxDocumentAge
	}
	if v.skew <= 0 {
		v.skew = DefaultMaxClockSkew
	}
	return v, nil
}

// Type is the evidence block type this verifier reads.
func (v *Verifier) Type() string { return agentid.EvidenceType }

// Peek reads the replay key without verifying anything. The nonce is a
// one-way function of the binding, so no binding is claimed.
func (v *Verifier) Peek(data []byte) (replayKey, binding string, err error) {
	p7, err := parse(data)
	if err != nil {
		return "", "", err
	}
	if len(p7.Content) == 0 {
		return "", "", errors.New("no signed content")
	}
	return contentKey(p7.Content), "", nil
}

// parse is pkcs7.Parse, with a panic on attacker-chosen bytes turned
// into an error: the approver must outlive any evidence.
func parse(data []byte) (p7 *pkcs7.PKCS7, err error) {
	defer func() {
		if r := recover(); r != nil {
			p7, err = nil, fmt.Errorf("unparsable PKCS#7 (%v)", r)
		}
	}()
	return pkcs7.Parse(data)
}

func contentKey(content []byte) string {
	sum := sha256.Sum256(content)
	return ReplayKeyPrefix + hex.EncodeToString(sum[:])
}

// Verify checks an attested document: the PKCS#7 signature over the
// embedded content by its one signer, that signer's chain to the roots at
// now, its name, then the signed content itself: nonce, subscription and
// timestamps. Every failure is a *cloud.Rejection, a signing chain that
// cannot be built to the configured roots (EvidenceIssuer) among them:
// nothing here depends on a call (roots and intermediates come from the
// configuration; Go's chain building fetches nothing), so no failure can
// change on a retry, and none is transient.
func (v *Verifier) Verify(_ context.Context, data []byte, binding string, now time.Time) (cloud.Attestation, error) {
	p7, err := parse(data)
	if err != nil {
		return cloud.Attestation{}, cloud.Reject(cloud.RejectMalformed, fmt.Errorf("PKCS#7: %w", err))
	}
	if len(p7.Signers) != 1 {
		return cloud.Attestation{}, cloud.Reject(cloud.RejectMalformed, fmt.Errorf("PKCS#7 has %d signers, want 1", len(p7.Signers)))
	}
	signer := p7.GetOnlySigner()
	if signer == nil {
		return cloud.Attestation{}, cloud.Reject(cloud.RejectMalformed, errors.New("PKCS#7 holds no certificate of its signer"))
	}
	if len(p7.Content) == 0 {
		return cloud.Attestation{}, cloud.Reject(cloud.RejectMalformed, errors.New("PKCS#7 embeds no content (a detached signature)"))
	}
	// The signature over the embedded content, with the signer's
	// certificate: the library picks the same certificate GetOnlySigner
	// did (by issuer and serial), whose chain is checked next.
	if err := p7.Verify(); err != nil {
		return cloud.Attestation{}, cloud.Reject(cloud.RejectSignature, fmt.Errorf("PKCS#7 signature: %w", err))
	}
	if err := v.checkSigner(signer, p7.Certificates, now); err != nil {
		return cloud.Attestation{}, err
	}
	doc, created, expires, err := parseDocument(p7.Content)
	if err != nil {
		return cloud.Attestation{}, cloud.Reject(cloud.RejectMalformed, err)
	}
	want, err := agentid.Nonce(binding)
	if err != nil {
		return cloud.Attestation{}, cloud.Reject(cloud.RejectBinding, err)
	}
	if doc.Nonce != want {
		return cloud.Attestation{}, cloud.Reject(cloud.RejectBinding, fmt.Errorf("the document's nonce %q is not the CSR key's (%q)", doc.Nonce, want))
	}
	if !slices.Contains(v.subscriptions, doc.SubscriptionID) {
		return cloud.Attestation{}, cloud.Reject(cloud.RejectIssuer, fmt.Errorf("VM %s is of subscription %s, not one of the cluster's", doc.VMID, doc.SubscriptionID))
	}
	switch {
	case !expires.After(created):
		return cloud.Attestation{}, cloud.Reject(cloud.RejectExpired, fmt.Errorf("expiresOn %s is not after createdOn %s", doc.TimeStamp.ExpiresOn, doc.TimeStamp.CreatedOn))
	case !now.Before(expires):
		return cloud.Attestation{}, cloud.Reject(cloud.RejectExpired, fmt.Errorf("the document expired at %s", expires.UTC().Format(time.RFC3339)))
	case created.Sub(now) > v.skew:
		return cloud.Attestation{}, cloud.Reject(cloud.RejectExpired, fmt.Errorf("created at %s, more than %s ahead of %s", created.UTC().Format(time.RFC3339), v.skew, now.UTC().Format(time.RFC3339)))
	case now.Sub(created) > v.maxAge:
		return cloud.Attestation{}, cloud.Reject(cloud.RejectExpired, fmt.Errorf("created at %s, more than %s before %s", created.UTC().Format(time.RFC3339), v.maxAge, now.UTC().Format(time.RFC3339)))
	}
	klog.V(4).InfoS("Azure attested document verified", "vmId", doc.VMID, "subscription", doc.SubscriptionID, "signer", signer.Subject.String())
	return cloud.Attestation{
		InstanceID: doc.VMID,
		ReplayKey:  contentKey(p7.Content),
		IssuedAt:   created,
		ExpiresAt:  expires,
	}, nil
}

// checkSigner chains the signer certificate to the roots at now, through
// the configured intermediates and the PKCS#7's other certificates, and
// requires one of the signer names among its DNS names.
func (v *Verifier) checkSigner(signer *x509.Certificate, bundled []*x509.Certificate, now time.Time) error {
	inter := x509.NewCertPool()
	for _, c := range v.intermediates {
		inter.AddCert(c)
	}
	for _, c := range bundled {
		if c != signer {
			inter.AddCert(c)
		}
	}
	_, err := signer.Verify(x509.VerifyOptions{
		Roots: v.roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	})
	var invalid x509.CertificateInvalidError
	switch {
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return cloud.Reject(cloud.RejectExpired, fmt.Errorf("signer certificate %q: %w", signer.Subject.String(), err))
	case err != nil:
		return cloud.Reject(cloud.RejectIssuer, fmt.Errorf("signer certificate %q does not chain to the Azure roots: %w", signer.Subject.String(), err))
	}
	if !v.nameAllowed(signer) {
		return cloud.Reject(cloud.RejectIssuer, fmt.Errorf("signer certificate %q names %v, none of them %v or under it", signer.Subject.String(), signer.DNSNames, v.names))
	}
	return nil
}

// nameAllowed: a DNS name of the certificate is a signer name, a name
// under one, or a wildcard directly under one. The subject's common name
// does not count.
func (v *Verifier) nameAllowed(c *x509.Certificate) bool {
	for _, dns := range c.DNSNames {
		dns = strings.TrimSuffix(strings.ToLower(dns), ".")
		for _, n := range v.names {
			if dns == n {
				return true
			}
			if label, ok := strings.CutSuffix(dns, "."+n); ok && label != "" && (label == "*" || !strings.Contains(label, "*")) {
				return true
			}
		}
	}
	return false
}
