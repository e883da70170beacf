package oci

import (
	"context"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/oci/agentid"
)

// ReplayKeyPrefix starts the replay key of OCI evidence; the rest is the
// SHA-256 (hex) of what was signed and by whom: the leaf certificate (DER)
// and the signed message. Not the signature: an ECDSA signature has a
// second valid form, which would be a second key for the same evidence.
const ReplayKeyPrefix = "oci-evidence:"

// Subject attributes of an instance principal's certificate: its
// organizational units are these prefixes and the OCIDs, its common name
// the instance's OCID.
const (
	ouCertType    = "opc-certtype:"
	ouInstance    = "opc-instance:"
	ouCompartment = "opc-compartment:"
	ouTenant      = "opc-tenant:"
	certTypeInst  = "instance"
)

// RSA key sizes accepted in instance certificates.
const (
	minRSABits = 2048
	maxRSABits = 4096
)

// Evidence limits.
const (
	// DefaultMaxEvidenceAge is how long after its signing evidence is
	// accepted: the agent signs right before it files the CSR.
	DefaultMaxEvidenceAge = 5 * time.Minute
	// DefaultMaxCertificateAge is the oldest leaf certificate accepted,
	// from its notBefore, however long it is valid: OCI rotates instance
	// certificates several times a day, so one older than a day has been
	// superseded, and is treated as revoked (OCI publishes no revocation
	// list an approver could read). Genuine certificates are valid about
	// two hours, so their expiry comes first; this bounds one OCI might
	// issue for longer.
	DefaultMaxCertificateAge = 24 * time.Hour
)

// VerifierOptions configure a Verifier.
type VerifierOptions struct {
	// Roots are OCI's instance identity roots: fetched from the region's
	// auth service (FetchedRoots) or the config's rootCAFile
	// (StaticRoots); never from evidence.
	Roots Roots
	// Tenancy is the OCID of the tenancy whose instances may join, in
	// either form (agentid.ValidTenancy), compared exactly.
	Tenancy string
	// Compartments are the compartments whose instances may join: a
	// certificate's opc-compartment must be one of them.
	Compartments []string
	// MaxClockSkew is tolerated on signing times and validity (default 1m).
	MaxClockSkew time.Duration
	// MaxEvidenceAge (default DefaultMaxEvidenceAge) and MaxCertificateAge
	// (default DefaultMaxCertificateAge).
	MaxEvidenceAge, MaxCertificateAge time.Duration
}

// Verifier is a cloud.EvidenceVerifier for OCI instance principal
// signatures.
type Verifier struct {
	roots                    Roots
	tenancy                  string
	compartments             []string
	skew, maxAge, maxCertAge time.Duration
}

var _ cloud.EvidenceVerifier = (*Verifier)(nil)

// NewVerifier checks the options and makes a verifier.
func NewVerifier(o VerifierOptions) (*Verifier, error) {
	if o.Roots == nil {
		return nil, errors.New("oci verifier: OCI's instance identity roots are required")
	}
	if !agentid.ValidTenancy(o.Tenancy) {
		return nil, fmt.Errorf("oci verifier: tenancy %q is not a tenancy OCID", o.Tenancy)
	}
	if len(o.Compartments) == 0 {
		return nil, errors.New("oci verifier: at least one compartment is required")
	}
	for _, c := range o.Compartments {
		if !agentid.ValidCompartment(c) {
			return nil, fmt.Errorf("oci verifier: compartment %q is not a compartment OCID", c)
		}
	}
	if o.MaxClockSkew <= 0 {
		o.MaxClockSkew = DefaultMaxClockSkew
	}
	if o.MaxEvidenceAge <= 0 {
		o.MaxEvidenceAge = DefaultMaxEvidenceAge
	}
	if o.MaxCertificateAge <= 0 {
		o.MaxCertificateAge = DefaultMaxCertificateAge
	}
	return &Verifier{roots: o.Roots, tenancy: o.Tenancy, compartments: slices.Clone(o.Compartments), skew: o.MaxClockSkew,
		maxAge: o.MaxEvidenceAge, maxCertAge: o.MaxCertificateAge}, nil
}

// Type is the evidence block type this verifier reads.
func (v *Verifier) Type() string { return agentid.EvidenceType }

// Peek reads the replay key and the binding the evidence claims, without
// verifying anything.
func (v *Verifier) Peek(data []byte) (replayKey, binding string, err error) {
	e, err := agentid.ParseEvidence(data)
	if err != nil {
		return "", "", err
	}
	return replayKeyOf(e), e.Binding, nil
}

func replayKeyOf(e agentid.Evidence) string {
	h := sha256.New()
	h.Write(e.Certificate)
	h.Write(agentid.SignedMessage(e.Binding, e.SignedAt))
	return ReplayKeyPrefix + hex.EncodeToString(h.Sum(nil))
}

// subject is what an instance principal's certificate says of itself.
type subject struct {
	instance, compartment, tenant string
}

// Verify checks OCI evidence: its form; the signing time; the leaf's
// subject (an instance certificate of an instance OCID, in a configured
// compartment, of the configured tenancy) and its extended key usage
// (clientAuth, as OCI issues them); the chain from the leaf through the
// intermediate to one of OCI's roots, at now, for client authentication
// (crypto/x509); the leaf's age; and the signature over the binding by
// the leaf's key.
//
// Every failure is a verdict (*cloud.Rejection) but one: roots that could
// not be fetched (and are not held, or held past their age) are a
// transient error, and the CSR is decided later. The subject is checked
// before the roots are looked up, so evidence that could never pass is
// denied without a fetch.
func (v *Verifier) Verify(ctx context.Context, data []byte, binding string, now time.Time) (cloud.Attestation, error) {
	e, err := agentid.ParseEvidence(data)
	if err != nil {
		return cloud.Attestation{}, cloud.Reject(cloud.RejectMalformed, err)
	}
	if e.Binding != binding {
		return cloud.Attestation{}, cloud.Reject(cloud.RejectBinding, errors.New("evidence is bound to another key than the CSR's"))
	}
	signedAt := time.Unix(e.SignedAt, 0)
	switch {
	case signedAt.After(now.Add(v.skew)):
		return cloud.Attestation{}, cloud.Reject(cloud.RejectExpired, fmt.Errorf("evidence signed at %s, after now", signedAt.UTC().Format(time.RFC3339)))
	case now.Sub(signedAt) > v.maxAge+v.skew:
		return cloud.Attestation{}, cloud.Reject(cloud.RejectExpired, fmt.Errorf("evidence signed at %s, more than %s ago", signedAt.UTC().Format(time.RFC3339), v.maxAge))
	}
	leaf, err := x509.ParseCertificate(e.Certificate)
	if err != nil {
		return cloud.Attestation{}, cloud.Reject(cloud.RejectMalformed, fmt.Errorf("leaf certificate: %w", err))
	}
	inter, err := x509.ParseCertificate(e.Intermediate)
	if err != nil {
		return cloud.Attestation{}, cloud.Reject(cloud.RejectMalformed, fmt.Errorf("intermediate certificate: %w", err))
	}
	sub, err := readSubject(leaf)
	if err != nil {
		return cloud.Attestation{}, cloud.Reject(cloud.RejectMalformed, err)
	}
	if sub.tenant != v.tenancy {
		return cloud.Attestation{}, cloud.Reject(cloud.RejectIssuer, fmt.Errorf("certificate of tenancy %s, not %s", sub.tenant, v.tenancy))
	}
	if !slices.Contains(v.compartments, sub.compartment) {
		return cloud.Attestation{}, cloud.Reject(cloud.RejectIssuer, fmt.Errorf("certificate of an instance in compartment %s, not one of %v", sub.compartment, v.compartments))
	}
	// OCI's instance certificates are for client authentication (a
	// genuine one lists exactly that extended key usage); one without it
	// is not an instance principal's, whoever certified it.
	if !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		return cloud.Attestation{}, cloud.Reject(cloud.RejectMalformed, fmt.Errorf("certificate (serial %s) is not for client authentication (extended key usages %v)", leaf.SerialNumber, leaf.ExtKeyUsage))
	}
	roots, err := v.roots.For(ctx, inter)
	if errors.Is(err, ErrUnknownIssuer) {
		return cloud.Attestation{}, cloud.Reject(cloud.RejectSignature, err)
	}
	if err != nil {
		return cloud.Attestation{}, fmt.Errorf("oci evidence: OCI's roots: %w", err)
	}
	// The chain, with the clock skew given to the certificates' validity
	// as to the signing time: checked at now, then at now±skew.
	if err := verifyChain(leaf, inter, roots, now, v.skew); err != nil {
		return cloud.Attestation{}, err
	}
	if age := now.Sub(leaf.NotBefore); age > v.maxCertAge+v.skew {
		return cloud.Attestation{}, cloud.Reject(cloud.RejectExpired,
			fmt.Errorf("certificate issued %s ago (serial %s): OCI has rotated it since, it is taken as revoked past %s", age.Round(time.Second), leaf.SerialNumber, v.maxCertAge))
	}
	var alg x509.SignatureAlgorithm
	switch leaf.PublicKeyAlgorithm {
	case x509.RSA:
		// OCI's instance keys are RSA 2048; a key outside 2048-4096 bits
		// is not one OCI issued.
		if n := leaf.PublicKey.(*rsa.PublicKey).N.BitLen(); n < minRSABits || n > maxRSABits {
			return cloud.Attestation{}, cloud.Reject(cloud.RejectMalformed, fmt.Errorf("certificate key of %d bits, want %d-%d", n, minRSABits, maxRSABits))
		}
		alg = x509.SHA256WithRSA
	case x509.ECDSA:
		alg = x509.ECDSAWithSHA256
	default:
		return cloud.Attestation{}, cloud.Reject(cloud.RejectMalformed, fmt.Errorf("certificate key of type %s", leaf.PublicKeyAlgorithm))
	}
	if err := leaf.CheckSignature(alg, agentid.SignedMessage(binding, e.SignedAt), e.Signature); err != nil {
		// Not by this leaf's key, or over something else.
		return cloud.Attestation{}, cloud.Reject(cloud.RejectSignature, fmt.Errorf("the signature is not the certificate key's over the binding: %w", err))
	}
	expires := signedAt.Add(v.maxAge)
	if leaf.NotAfter.Before(expires) {
		expires = leaf.NotAfter
	}
	klog.V(4).InfoS("OCI evidence verified", "instance", sub.instance, "compartment", sub.compartment, "serial", leaf.SerialNumber.String())
	return cloud.Attestation{
		InstanceID: sub.instance,
		ProviderID: agentid.ProviderID(sub.instance),
		ReplayKey:  replayKeyOf(e),
		IssuedAt:   signedAt,
		ExpiresAt:  expires,
		Principal:  "instance " + sub.instance + " of compartment " + sub.compartment,
	}, nil
}

// verifyChain verifies leaf → intermediate → one of roots with
// crypto/x509 at now, for client authentication; a chain that fails only
// on validity at now is tried at now±skew. An expired or not yet valid
// certificate is RejectExpired, any other failure RejectSignature.
func verifyChain(leaf, inter *x509.Certificate, roots *x509.CertPool, now time.Time, skew time.Duration) error {
	inters := x509.NewCertPool()
	inters.AddCert(inter)
	verify := func(at time.Time) error {
		_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inters, CurrentTime: at,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		return err
	}
	err := verify(now)
	var inv x509.CertificateInvalidError
	if errors.As(err, &inv) && inv.Reason == x509.Expired {
		// Within the skew either side?
		if verify(now.Add(-skew)) == nil || verify(now.Add(skew)) == nil {
			return nil
		}
		return cloud.Reject(cloud.RejectExpired, fmt.Errorf("certificate chain: %w", err))
	}
	if err != nil {
		return cloud.Reject(cloud.RejectSignature, fmt.Errorf("certificate chain to OCI's roots: %w", err))
	}
	return nil
}

// readSubject reads an instance principal certificate's subject: exactly
// one organizational unit of each of opc-certtype (instance),
// opc-instance, opc-compartment and opc-tenant, no other, the common name
// the instance's OCID, each OCID of its kind.
func readSubject(c *x509.Certificate) (subject, error) {
	var s subject
	var certType string
	seen := map[string]bool{}
	for _, ou := range c.Subject.OrganizationalUnit {
		var prefix string
		for _, p := range []string{ouCertType, ouInstance, ouCompartment, ouTenant} {
			if strings.HasPrefix(ou, p) {
				prefix = p
			}
		}
		if prefix == "" {
			return s, fmt.Errorf("certificate subject: unknown organizational unit %q", ou)
		}
		if seen[prefix] {
			return s, fmt.Errorf("certificate subject: %s twice", strings.TrimSuffix(prefix, ":"))
		}
		seen[prefix] = true
		val := ou[len(prefix):]
		switch prefix {
		case ouCertType:
			certType = val
		case ouInstance:
			s.instance = val
		case ouCompartment:
			s.compartment = val
		case ouTenant:
			s.tenant = val
		}
	}
	switch {
	case certType != certTypeInst:
		return s, fmt.Errorf("certificate subject: opc-certtype %q, want %s", certType, certTypeInst)
	case !agentid.ValidOCID(s.instance, "instance"):
		return s, fmt.Errorf("certificate subject: opc-instance %q is not an instance OCID", s.instance)
	case !agentid.ValidCompartment(s.compartment):
		return s, fmt.Errorf("certificate subject: opc-compartment %q is not a compartment OCID", s.compartment)
	case !agentid.ValidTenancy(s.tenant):
		return s, fmt.Errorf("certificate subject: opc-tenant %q is not a tenancy OCID", s.tenant)
	case c.Subject.CommonName != s.instance:
		return s, fmt.Errorf("certificate subject: common name %q is not the instance %s", c.Subject.CommonName, s.instance)
	}
	return s, nil
}
