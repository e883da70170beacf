package azure

import (
	"context"
	"crypto/x509"
	"embed"
	"encoding/asn1"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/azure/agentid"
	"github.com/mooring-dev/mooring/cloud/tpm"
	"github.com/mooring-dev/mooring/cloud/view"
)

// Azure's vTPM CA as Microsoft publishes it (certs/README.md): the root,
// the approver's default trust for AK certificates, and an issuing CA.
//
//go:embed certs/azure-virtual-tpm-root-ca-2023.pem certs/global-virtual-tpm-ca-03.pem
var vtpmCerts embed.FS

// oidAIKCertificate is TCG's extended key usage of an attestation key
// certificate (2.23.133.8.3), which Azure's AK certificates carry.
var oidAIKCertificate = asn1.ObjectIdentifier{2, 23, 133, 8, 3}

// VTPMOptions configure the check of Trusted Launch vTPM evidence.
type VTPMOptions struct {
	// Roots the AK certificate must chain to (nil: Microsoft's Azure
	// Virtual TPM Root Certificate Authority 2023, built in).
	Roots *x509.CertPool
	// Intermediates are issuing CAs besides the built-in Global Virtual
	// TPM CA - 03 (the AK certificate in NV is the leaf alone).
	Intermediates []*x509.Certificate
}

// vtpmVerifier proves that TPM evidence's AK is the vTPM's of the VM the
// attested document names: Azure's AK certificate (agentid.LoadAK) chains
// to the roots, certifies the key that signed the quote, and names the
// VM (agentid.AKCertName).
type vtpmVerifier struct {
	roots *x509.CertPool
	inter []*x509.Certificate
}

// builtinVTPM is the embedded root and issuing CA.
func builtinVTPM() (root, inter *x509.Certificate) {
	read := func(name string) *x509.Certificate {
		data, err := vtpmCerts.ReadFile(name)
		if err != nil {
			panic(err) // embedded
		}
		certs, err := parseCerts(name, data)
		if err != nil || len(certs) != 1 {
			panic(fmt.Sprintf("%s: %v", name, err))
		}
		return certs[0]
	}
	return read("certs/azure-virtual-tpm-root-ca-2023.pem"), read("certs/global-virtual-tpm-ca-03.pem")
}

func newVTPMVerifier(o VTPMOptions) *vtpmVerifier {
	root, inter := builtinVTPM()
	v := &vtpmVerifier{roots: o.Roots, inter: append([]*x509.Certificate{inter}, o.Intermediates...)}
	if v.roots == nil {
		v.roots = x509.NewCertPool()
		v.roots.AddCert(root)
	}
	return v
}

// VerifyTPM is cloud.TPMVerifier's: the quote binds the CSR key at a time
// in the window and its PCRs fit the policy (tpm.VerifyQuote), and its AK
// is Azure's AK of the VM the attested document named: its certificate
// (from the vTPM's NV index 0x01C101D0) chains to the vTPM roots at the
// request's time, is an AIK certificate (EKU 2.23.133.8.3), holds the AK
// that signed the quote, and names that VM id. Azure provisions no EK
// certificate and has no API naming a VM's EK, so there is no credential
// activation on Azure. Every verdict is a rejection.
func (c *Cloud) VerifyTPM(_ context.Context, req cloud.TPMRequest, att cloud.Attestation, in view.Instance) error {
	return c.vtpm.verify(req, att, in)
}

var _ cloud.TPMVerifier = (*Cloud)(nil)

func (v *vtpmVerifier) verify(req cloud.TPMRequest, att cloud.Attestation, in view.Instance) error {
	e, err := tpm.Parse(req.Data)
	if err != nil {
		return tpm.Reject(tpm.RejectMalformed, "%v", err)
	}
	if e.Activation != nil {
		return tpm.Reject(tpm.RejectMalformed, "the evidence answers a credential activation challenge; Azure's approver issues none (the AK certificate proves the AK)")
	}
	akPub, err := tpm.VerifyQuote(e, req.Binding, req.Now, req.Quote)
	if err != nil {
		return err
	}
	vmID := strings.ToLower(att.InstanceID)
	if vmID == "" || !strings.EqualFold(vmID, in.ID) {
		return tpm.Reject(tpm.RejectKey, "the attested document names VM %q, the cloud's record %q", att.InstanceID, in.ID)
	}
	if len(e.AKCert) == 0 {
		return tpm.Reject(tpm.RejectKey, "the evidence carries no AK certificate: on Azure only the certificate in the vTPM's NV index %#x proves the AK (is the VM Trusted Launch with its vTPM on?)", agentid.AKCertNVIndex)
	}
	cert, err := x509.ParseCertificate(e.AKCert)
	if err != nil {
		return tpm.Reject(tpm.RejectMalformed, "AK certificate: %v", err)
	}
	if !tpm.SameKey(cert.PublicKey, akPub) {
		return tpm.Reject(tpm.RejectKey, "the AK certificate %q is for another key than the one that signed the quote", cert.Subject.CommonName)
	}
	inter := x509.NewCertPool()
	for _, c := range v.inter {
		inter.AddCert(c)
	}
	for i, der := range e.Intermediates {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return tpm.Reject(tpm.RejectMalformed, "intermediate certificate %d: %v", i, err)
		}
		inter.AddCert(c) // a candidate only: the chain must still end at a root
	}
	_, err = cert.Verify(x509.VerifyOptions{Roots: v.roots, Intermediates: inter, CurrentTime: req.Now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	var invalid x509.CertificateInvalidError
	switch {
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return tpm.Reject(tpm.RejectExpired, "AK certificate %q: %v", cert.Subject.CommonName, err)
	case err != nil:
		return tpm.Reject(tpm.RejectKey, "AK certificate %q (issuer %q) does not chain to the vTPM roots: %v", cert.Subject.CommonName, cert.Issuer.CommonName, err)
	}
	if !slices.ContainsFunc(cert.UnknownExtKeyUsage, oidAIKCertificate.Equal) {
		return tpm.Reject(tpm.RejectKey, "certificate %q is not an attestation key certificate (no extended key usage %s)", cert.Subject.CommonName, oidAIKCertificate)
	}
	want := agentid.AKCertName(vmID)
	if !namesVM(cert, want) {
		return tpm.Reject(tpm.RejectKey, "the AK certificate names %q (DNS names %v), not this VM's %q", cert.Subject.CommonName, cert.DNSNames, want)
	}
	klog.V(4).InfoS("Azure vTPM evidence verified", "vmId", vmID, "akCert", cert.Subject.CommonName, "issuer", cert.Issuer.CommonName, "quotedAt", e.At())
	return nil
}

// namesVM: the certificate's subject common name, or one of its DNS
// names, is want (case-blind).
func namesVM(c *x509.Certificate, want string) bool {
	if strings.EqualFold(c.Subject.CommonName, want) {
		return true
	}
	return slices.ContainsFunc(c.DNSNames, func(n string) bool { return strings.EqualFold(n, want) })
}
