package agentid

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/google/go-tpm-tools/client"
	"github.com/google/go-tpm/legacy/tpm2"
	"github.com/google/go-tpm/tpmutil"

	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/tpm/node"
)

var _ nodeid.TPMKeyer = (*NodeIdentity)(nil)

// Where Azure keeps a Trusted Launch (or confidential) VM's attestation
// key: the key persisted at AKHandle, its certificate, issued by Azure's
// vTPM CA, in NV index AKCertNVIndex (Microsoft's guest attestation
// library and SDK read both there; docs/azure.md, TPM).
const (
	AKHandle      = 0x81000003
	AKCertNVIndex = 0x01C101D0
)

// AKCertNameSuffix ends the name of a VM's AK certificate: its subject's
// common name is "<label>.TrustedVM.Azure.windows.net". mooring takes the
// label to be the VM's id (see AKCertName).
const AKCertNameSuffix = ".TrustedVM.Azure.windows.net"

// AKCertName is the name an AK certificate of the VM vmID must carry for
// mooring's approver: the VM id (lower case) and AKCertNameSuffix.
// Microsoft does not document the label; the approver requires the whole
// VM id so that a certificate naming anything less binds to no VM
// (docs/azure.md, TPM).
func AKCertName(vmID string) string {
	return strings.ToLower(vmID) + AKCertNameSuffix
}

// TPMKey is the attestation key of Azure's vTPMs: the one Azure persisted
// at AKHandle, with its certificate from AKCertNVIndex (the agent's
// tpm: auto uses it when the machine has a TPM).
func (n *NodeIdentity) TPMKey() node.Key { return node.Key{Load: LoadAK} }

// LoadAK loads the AK Azure persisted at AKHandle and sets its
// certificate from AKCertNVIndex. An index that is missing leaves the key
// without a certificate (the approver then refuses the evidence, saying
// so); a certificate that does not parse or is for another key is an
// error. Closing the key leaves it persisted.
func LoadAK(rw io.ReadWriter) (*client.Key, error) {
	ak, err := client.LoadCachedKey(rw, AKHandle, client.NullSession{})
	if err != nil {
		return nil, fmt.Errorf("the Azure attestation key at %#x: %w", AKHandle, err)
	}
	// NVReadEx hides the TPM's error code; NVReadPublic says whether the
	// index is there.
	if _, err := tpm2.NVReadPublic(rw, tpmutil.Handle(AKCertNVIndex)); isNVMissing(err) {
		return ak, nil
	}
	der, err := tpm2.NVReadEx(rw, tpmutil.Handle(AKCertNVIndex), tpm2.HandleOwner, "", 0)
	if err != nil {
		ak.Close()
		return nil, fmt.Errorf("read the AK certificate at NV %#x: %w", AKCertNVIndex, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		ak.Close()
		return nil, fmt.Errorf("the AK certificate at NV %#x: %w", AKCertNVIndex, err)
	}
	if err := ak.SetCert(cert); err != nil {
		ak.Close()
		return nil, fmt.Errorf("the AK certificate at NV %#x (%s): %w", AKCertNVIndex, cert.Subject.CommonName, err)
	}
	return ak, nil
}

// isNVMissing: the TPM says the index is not defined.
func isNVMissing(err error) bool {
	var he tpm2.HandleError
	if errors.As(err, &he) {
		return he.Code == tpm2.RCHandle
	}
	return false
}
