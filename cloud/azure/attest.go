package azure

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
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

// Freshness defaults and limits. IMDS signs a new document for each new
// nonce, so a genuine one is seconds old when the approver first sees it;
// the agent files its CSR right after the document arrives.
const (
	// DefaultMaxDocumentAge is how long after its createdOn a document is
	// accepted (plus the clock skew).
	DefaultMaxDocumentAge = 5 * time.Minute
	// DefaultMaxClockSkew is tolerated between Azure's clock and the
	// approver's, on createdOn and on expiresOn.
	DefaultMaxClockSkew = time.Minute
	// MaxMaxDocumentAge and MaxMaxClockSkew bound what may be configured.
	MaxMaxDocumentAge = 15 * time.Minute
	MaxMaxClockSkew   = 5 * time.Minute
)

// VerifierOptions configure a Verifier.
type VerifierOptions struct {
	// Roots are the certificates the signer must chain to (required; the
	// system's roots in production, a test root in tests).
	Roots *x509.CertPool
	// Intermediates are CA certificates the chain may go through besides
	// those in the PKCS#7 (Azure's document carries only its signer) and
	// those fetched from CA Issuers URLs.
	Intermediates []*x509.Certificate
	// AIAAllowedHosts: the signer's CA Issuers (AIA) URLs are fetched
	// when the chain needs them, only from these hosts (entries "host",
	// "host:port" or "host/path-prefix"); empty fetches nothing.
	AIAAllowedHosts []string
	// AIAClient fetches them (nil: a client of the verifier's own);
	// AIACacheTTL is how long one is kept (default DefaultAIACacheTTL).
	AIAClient   *http.Client
	AIACacheTTL time.Duration
	// SignerNames: the signer certificate must carry one of these DNS
	// names, or a name under one of them (default DefaultSignerNames).
	SignerNames []string
	// Subscriptions are the subscription ids whose VMs may join (required).
	Subscriptions []string
	// MaxDocumentAge is how long after its createdOn a document is
	// accepted, MaxClockSkew how far Azure's clock and the approver's may
	// differ (defaults DefaultMaxDocumentAge, DefaultMaxClockSkew).
	MaxDocumentAge, MaxClockSkew time.Duration
}

// Verifier is a cloud.EvidenceVerifier for IMDS attested documents.
type Verifier struct {
	roots         *x509.CertPool
	intermediates []*x509.Certificate
	aia           *aiaFetcher
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
	v := &Verifier{roots: o.Roots, intermediates: slices.Clone(o.Intermediates), maxAge: o.MaxDocumentAge, skew: o.MaxClockSkew}
	if v.maxAge <= 0 {
		v.maxAge = DefaultMaxDocumentAge
	}
	if v.skew <= 0 {
		v.skew = DefaultMaxClockSkew
	}
	if len(o.AIAAllowedHosts) > 0 {
		allowed, err := parseAIAAllowed(o.AIAAllowedHosts)
		if err != nil {
			return nil, fmt.Errorf("azure verifier: %w", err)
		}
		v.aia = newAIAFetcher(allowed, o.AIAClient, o.AIACacheTTL)
	}
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

// PeekMachine reads the vmId the document's content claims, without
// verifying the signature.
func (v *Verifier) PeekMachine(data []byte) (string, error) {
	p7, err := parse(data)
	if err != nil {
		return "", err
	}
	doc, err := parseDocument(p7.Content)
	if err != nil {
		return "", err
	}
	return doc.VMID, nil
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
// now, its name, then the signed content itself: the nonce of the
// binding, the subscription, and the timestamps at now (see fresh). The
// nonce ties the document to the CSR's key; the timestamps bound when it
// may be used: whoever can ask a VM's IMDS can get documents for keys
// made in advance, and without a bound could keep them for ever. Every
// verdict is a *cloud.Rejection; only a failed download of an issuer
// certificate is an error to retry on.
func (v *Verifier) Verify(ctx context.Context, data []byte, binding string, now time.Time) (cloud.Attestation, error) {
	want, err := agentid.Nonce(binding)
	if err != nil {
		return cloud.Attestation{}, cloud.Reject(cloud.RejectBinding, err)
	}
	return v.verify(ctx, data, want, now)
}

// verify is Verify with the nonce the document must hold.
func (v *Verifier) verify(ctx context.Context, data []byte, wantNonce string, now time.Time) (cloud.Attestation, error) {
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
	if err := v.checkSigner(ctx, signer, p7.Certificates, now); err != nil {
		return cloud.Attestation{}, err
	}
	doc, err := parseDocument(p7.Content)
	if err != nil {
		return cloud.Attestation{}, cloud.Reject(cloud.RejectMalformed, err)
	}
	if doc.Nonce != wantNonce {
		return cloud.Attestation{}, cloud.Reject(cloud.RejectBinding, fmt.Errorf("the document's nonce %q is not the CSR key's (%q)", doc.Nonce, wantNonce))
	}
	if !slices.Contains(v.subscriptions, doc.SubscriptionID) {
		return cloud.Attestation{}, cloud.Reject(cloud.RejectIssuer, fmt.Errorf("VM %s is of subscription %s, not one of the cluster's", doc.VMID, doc.SubscriptionID))
	}
	created, until, err := v.fresh(doc.TimeStamp, now)
	if err != nil {
		return cloud.Attestation{}, err
	}
	klog.V(4).InfoS("Azure attested document verified", "vmId", doc.VMID, "subscription", doc.SubscriptionID, "signer", signer.Subject.String(),
		"createdOn", doc.TimeStamp.CreatedOn, "expiresOn", doc.TimeStamp.ExpiresOn)
	return cloud.Attestation{
		InstanceID: doc.VMID,
		ReplayKey:  contentKey(p7.Content),
		IssuedAt:   created,
		ExpiresAt:  until,
	}, nil
}

// fresh judges the document's timestamps at now: both must be in
// TimeLayout (else EvidenceMalformed); expiresOn must be after createdOn,
// createdOn at most the clock skew ahead of now and at most the maximum
// age plus the skew before it, and now at most the skew past expiresOn
// (else EvidenceExpired). It gives the document's createdOn and the end
// of its acceptance: the earlier of createdOn plus the maximum age and
// expiresOn.
func (v *Verifier) fresh(ts TimeStamp, now time.Time) (created, until time.Time, err error) {
	created, expires, err := ts.Times()
	if err != nil {
		return time.Time{}, time.Time{}, cloud.Reject(cloud.RejectMalformed, err)
	}
	stamp := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	switch {
	case !expires.After(created):
		err = fmt.Errorf("the document's expiresOn %s is not after its createdOn %s", stamp(expires), stamp(created))
	case created.Sub(now) > v.skew:
		err = fmt.Errorf("the document was created at %s, more than %s ahead of the approver's clock (%s)", stamp(created), v.skew, stamp(now))
	case now.Sub(created) > v.maxAge+v.skew:
		err = fmt.Errorf("the document was created at %s, more than %s (+%s clock skew) before the approver's clock (%s); IMDS signs a new one for each key",
			stamp(created), v.maxAge, v.skew, stamp(now))
	case now.Sub(expires) > v.skew:
		err = fmt.Errorf("the document expired at %s (the approver's clock: %s)", stamp(expires), stamp(now))
	}
	if err != nil {
		return time.Time{}, time.Time{}, cloud.Reject(cloud.RejectExpired, err)
	}
	until = created.Add(v.maxAge)
	if expires.Before(until) {
		until = expires
	}
	return created, until, nil
}

// checkSigner chains the signer certificate to the roots at now, through
// the configured intermediates, the PKCS#7's other certificates and, when
// those do not reach a root, the issuers its CA Issuers URLs name
// (fetched from allowed hosts only, at most maxAIAFetches deep), and
// requires one of the signer names among its DNS names. A chain that does
// not verify is a rejection; a download that fails is an error to retry.
func (v *Verifier) checkSigner(ctx context.Context, signer *x509.Certificate, bundled []*x509.Certificate, now time.Time) error {
	inter := x509.NewCertPool()
	for _, c := range v.intermediates {
		inter.AddCert(c)
	}
	for _, c := range bundled {
		if c != signer {
			inter.AddCert(c)
		}
	}
	opts := x509.VerifyOptions{Roots: v.roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
	_, err := signer.Verify(opts)
	// Walk up the CA Issuers URLs while the chain lacks an issuer.
	for next, fetched := signer, 0; err != nil && v.aia != nil && fetched < maxAIAFetches && len(next.IssuingCertificateURL) > 0; fetched++ {
		var unknown x509.UnknownAuthorityError
		if !errors.As(err, &unknown) {
			break
		}
		issuer, ferr := v.fetchIssuer(ctx, next)
		if errors.Is(ferr, errAIANoIssuer) {
			return cloud.Reject(cloud.RejectIssuer, fmt.Errorf("signer certificate %q: its issuer is in no configured file, and %v", signer.Subject.String(), ferr))
		}
		if ferr != nil {
			return fmt.Errorf("azure: the issuer of signer certificate %q: %w", signer.Subject.String(), ferr)
		}
		inter.AddCert(issuer)
		_, err = signer.Verify(opts)
		next = issuer
	}
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

// fetchIssuer downloads the issuer a certificate's CA Issuers URLs name:
// the first that is allowed and answers with a certificate whose subject
// is the certificate's issuer. When every URL gave a definite answer (off
// the allow-list, not there, another certificate) the error wraps
// errAIANoIssuer: the evidence can never verify. When any download failed
// otherwise, the error is one to retry on, and wraps neither sentinel.
func (v *Verifier) fetchIssuer(ctx context.Context, c *x509.Certificate) (*x509.Certificate, error) {
	var errs []error
	definite := 0
	for _, raw := range c.IssuingCertificateURL {
		issuer, err := v.aia.get(ctx, raw)
		switch {
		case errors.Is(err, errAIARefused), errors.Is(err, errAIANoIssuer):
			definite++
			errs = append(errs, err)
		case err != nil:
			errs = append(errs, err)
		case !bytes.Equal(issuer.RawSubject, c.RawIssuer):
			definite++
			errs = append(errs, fmt.Errorf("%s holds %q, not the issuer %q", raw, issuer.Subject.String(), c.Issuer.String()))
		default:
			return issuer, nil
		}
	}
	all := errors.Join(errs...)
	if definite == len(c.IssuingCertificateURL) {
		return nil, fmt.Errorf("%w: %w", errAIANoIssuer, all)
	}
	return nil, errors.New(all.Error()) // to retry: no sentinel may turn it into a verdict
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
