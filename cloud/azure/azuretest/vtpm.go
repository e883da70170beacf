package azuretest

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mooring-dev/mooring/cloud/tpm/tpmtest"

	"github.com/google/go-tpm-tools/client"
	"github.com/google/go-tpm/legacy/tpm2"
)

// Trusted Launch, as the Compute API reports it and as Azure provisions a
// VM's vTPM (the facts, with their sources: docs/azure.md, TPM):
//
//   - a VM's properties.securityProfile: securityType TrustedLaunch (or
//     ConfidentialVM) and uefiSettings.vTpmEnabled / secureBootEnabled
//     (VM.SecurityType, VM.VTPM, VM.SecureBoot);
//   - the vTPM holds an attestation key persisted at 0x81000003, and in NV
//     index 0x01C101D0 its certificate, issued by Azure's vTPM CA: a root
//     ("Azure Virtual TPM Root Certificate Authority 2023") and issuing CAs
//     ("Global Virtual TPM CA - NN"), EKU 2.23.133.8.3 (TCG's AIK
//     certificate) and 1.3.6.1.4.1.311.10.3.12, the subject's common name
//     "<label>.TrustedVM.Azure.windows.net". Microsoft does not say what the
//     label is; here it is the VM id (AKCertName), the name
//     mooring's approver requires.
//
// What it does not model: an EK certificate (Azure provisions none that
// anyone has found), the AK certificate's renewal through IMDS, the
// intermediates' AIA URLs (the genuine CA - 03 certificates carry none).

// Where Azure keeps the AK and its certificate, and the name the
// certificate carries (agentid's AKHandle, AKCertNVIndex, AKCertName: this
// package cannot import agentid, whose tests use it; a test in
// cloud/azure holds them equal).
const (
	AKHandle         = 0x81000003
	AKCertNVIndex    = 0x01C101D0
	AKCertNameSuffix = ".TrustedVM.Azure.windows.net"
)

// AKCertName is the common name of VM vmID's AK certificate here.
func AKCertName(vmID string) string { return strings.ToLower(vmID) + AKCertNameSuffix }

// Security types of securityProfile.securityType.
const (
	SecurityTypeTrustedLaunch  = "TrustedLaunch"
	SecurityTypeConfidentialVM = "ConfidentialVM"
)

// OIDs of the AK certificate's extended key usage, as Azure's carry.
var (
	OIDAIKCertificate = asn1.ObjectIdentifier{2, 23, 133, 8, 3}
	oidMicrosoftTPM   = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 311, 10, 3, 12}
)

// newVTPMCA makes the test vTPM CA: a root standing for Azure's and an
// issuing CA under it.
func (c *Cloud) newVTPMCA() error {
	root, err := NewRootCA("mooring test Azure Virtual TPM Root Certificate Authority")
	if err != nil {
		return err
	}
	inter, err := root.NewIntermediate("mooring test Global Virtual TPM CA - 01")
	if err != nil {
		return err
	}
	c.VTPMRoot, c.VTPMIntermediate = root, inter
	return nil
}

// WriteVTPMRoots writes the vTPM root as a PEM file into dir (the
// config's vtpmRootsFile) and the issuing CA as another
// (vtpmIntermediatesFile): the AK certificate in NV is the leaf alone.
func (c *Cloud) WriteVTPMRoots(dir string) (roots, intermediates string, err error) {
	roots = filepath.Join(dir, "azure-vtpm-roots.pem")
	if err := os.WriteFile(roots, PEM(c.VTPMRoot.Cert), 0o600); err != nil {
		return "", "", err
	}
	intermediates = filepath.Join(dir, "azure-vtpm-intermediates.pem")
	return roots, intermediates, os.WriteFile(intermediates, PEM(c.VTPMIntermediate.Cert), 0o600)
}

// IssueAKCert issues an AK certificate for the public key pub with the
// subject common name cn, as Azure's vTPM CA does (see the file's doc),
// valid an hour ago to a day ahead.
func (ca *CA) IssueAKCert(pub crypto.PublicKey, cn string) (*x509.Certificate, error) {
	return ca.IssueCertFor(pub, cn, []asn1.ObjectIdentifier{oidMicrosoftTPM, OIDAIKCertificate})
}

// IssueCertFor issues a certificate for pub with the common name cn and
// the extended key usages eku, as IssueAKCert with others (none: a
// certificate that is no AIK certificate).
func (ca *CA) IssueCertFor(pub crypto.PublicKey, cn string, eku []asn1.ObjectIdentifier) (*x509.Certificate, error) {
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, UnknownExtKeyUsage: eku,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.key)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

// ProvisionVTPM provisions the TPM rw as Azure provisions VM vmID's vTPM
// before it boots: an AK (go-tpm-tools' RSA AK template, under the
// endorsement hierarchy) persisted at AKHandle, and its
// certificate from the test vTPM CA, naming the VM, in NV index
// AKCertNVIndex. It returns the certificate. The VM need not
// exist yet.
func (c *Cloud) ProvisionVTPM(vmID string, rw io.ReadWriter) (*x509.Certificate, error) {
	return ProvisionVTPM(rw, c.VTPMIntermediate, AKCertName(vmID))
}

// ProvisionVTPM provisions rw's AK and writes a certificate from ca with
// the common name cn (a test's own: another VM's name, another CA).
func ProvisionVTPM(rw io.ReadWriter, ca *CA, cn string) (*x509.Certificate, error) {
	ak, err := client.NewCachedKey(rw, tpm2.HandleEndorsement, client.AKTemplateRSA(), AKHandle)
	if err != nil {
		return nil, fmt.Errorf("vTPM: persist the AK at %#x: %w", AKHandle, err)
	}
	pub := ak.PublicKey()
	ak.Close() // a persistent key stays
	cert, err := ca.IssueAKCert(pub, cn)
	if err != nil {
		return nil, err
	}
	if err := WriteNV(rw, AKCertNVIndex, cert.Raw); err != nil {
		return nil, err
	}
	return cert, nil
}

// WriteNV is tpmtest.WriteNV: an NV index defined as the owner's and
// written, as Azure provisions a Trusted Launch vTPM.
func WriteNV(rw io.ReadWriter, idx uint32, data []byte) error {
	return tpmtest.WriteNV(rw, idx, data)
}
