package gce

import (
	"context"
	"crypto"
	"crypto/x509"
	_ "embed" // Google's EK/AK CA
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"

	"github.com/google/go-tpm-tools/server"
	"google.golang.org/api/googleapi"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/tpm"
	"github.com/mooring-dev/mooring/cloud/view"
)

// TPMConfig configures the proof of a join by the instance's vTPM (a
// Shielded VM's): the roots and intermediates of the CA that certifies
// attestation keys.
type TPMConfig struct {
	// RootsFile holds the PEM certificates an AK certificate must chain
	// to. Default: Google's EK/AK CA Root (tpmca/roots.pem).
	RootsFile string `json:"rootsFile,omitempty"`
	// IntermediatesFile holds PEM certificates that may complete a chain
	// (a Shielded VM's NV holds the AK certificate alone). Default, when
	// rootsFile is unset: Google's EK/AK CA Intermediate
	// (tpmca/intermediates.pem).
	IntermediatesFile string `json:"intermediatesFile,omitempty"`
}

var (
	//go:embed tpmca/roots.pem
	googleTPMRoots []byte
	//go:embed tpmca/intermediates.pem
	googleTPMIntermediates []byte
)

// tpmCAs are the pools AK certificates are verified with.
type tpmCAs struct {
	roots, intermediates *x509.CertPool
}

// load reads the configured (or Google's) roots and intermediates.
func (t TPMConfig) load() (tpmCAs, error) {
	rootsPEM, interPEM := googleTPMRoots, googleTPMIntermediates
	if t.RootsFile != "" {
		b, err := os.ReadFile(t.RootsFile)
		if err != nil {
			return tpmCAs{}, fmt.Errorf("tpm.rootsFile: %w", err)
		}
		rootsPEM, interPEM = b, nil
	}
	if t.IntermediatesFile != "" {
		b, err := os.ReadFile(t.IntermediatesFile)
		if err != nil {
			return tpmCAs{}, fmt.Errorf("tpm.intermediatesFile: %w", err)
		}
		interPEM = append(append([]byte(nil), interPEM...), b...)
	}
	roots, n, err := certPool(rootsPEM)
	if err != nil || n == 0 {
		return tpmCAs{}, fmt.Errorf("tpm roots (%s): want PEM certificates: %v", orDefault(t.RootsFile), err)
	}
	inter, _, err := certPool(interPEM)
	if err != nil {
		return tpmCAs{}, fmt.Errorf("tpm intermediates (%s): %w", orDefault(t.IntermediatesFile), err)
	}
	return tpmCAs{roots: roots, intermediates: inter}, nil
}

func orDefault(path string) string {
	if path == "" {
		return "Google's"
	}
	return path
}

// certPool reads every CERTIFICATE block of PEM text (other text around
// them is skipped; a block of another type is an error).
func certPool(data []byte) (*x509.CertPool, int, error) {
	pool, n := x509.NewCertPool(), 0
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return pool, n, nil
		}
		if b.Type != "CERTIFICATE" {
			return nil, 0, fmt.Errorf("a PEM block of type %q, want CERTIFICATE", b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, 0, err
		}
		pool.AddCert(c)
		n++
	}
}

var _ cloud.TPMVerifier = (*Cloud)(nil)

// VerifyTPM proves a join by the instance's vTPM (cloud.TPMVerifier): the
// quote binds the CSR key (tpm.VerifyQuote), then the attestation key is
// the instance's, by either
//   - its AK certificate (from the vTPM's NV, in the evidence): chained
//     to the configured roots at req.Now, for digital signatures, of the
//     evidence's AK, with Google's instance information extension
//     (go-tpm-tools' server.GetGCEInstanceInfo: production instances only)
//     naming exactly the instance id, project and zone the identity token
//     named and the view found; or
//   - when the evidence carries no AK certificate, the instance's
//     signingKey as instances.getShieldedInstanceIdentity answers it (a
//     failed call is transient; the API saying the instance has no vTPM
//     is a rejection).
func (c *Cloud) VerifyTPM(ctx context.Context, req cloud.TPMRequest, att cloud.Attestation, in view.Instance) error {
	e, err := tpm.Parse(req.Data)
	if err != nil {
		return tpm.Reject(tpm.RejectMalformed, "%v", err)
	}
	ak, err := tpm.VerifyQuote(e, req.Binding, req.Now, req.Quote)
	if err != nil {
		return err
	}
	project, zone, name, err := ParseProviderID(in.ProviderID)
	if err != nil {
		return tpm.Reject(tpm.RejectKey, "%v", err)
	}
	if att.InstanceID != in.ID || att.ProviderID != in.ProviderID {
		return tpm.Reject(tpm.RejectKey, "the identity token names instance %s (%s), the view %s (%s)", att.InstanceID, att.ProviderID, in.ID, in.ProviderID)
	}
	if len(e.AKCert) > 0 {
		if err := c.checkAKCert(e, ak, project, zone, in.ID, req); err != nil {
			return err
		}
		klog.V(2).InfoS("GCE vTPM quote proven by the instance's AK certificate", "instance", in.ProviderID, "instanceID", in.ID)
		return nil
	}
	if err := c.checkShieldedIdentity(ctx, ak, project, zone, name); err != nil {
		return err
	}
	klog.V(2).InfoS("GCE vTPM quote proven by the instance's signing key (getShieldedInstanceIdentity)", "instance", in.ProviderID, "instanceID", in.ID)
	return nil
}

// checkAKCert proves ak the instance's by its certificate.
func (c *Cloud) checkAKCert(e *tpm.Evidence, ak crypto.PublicKey, project, zone, id string, req cloud.TPMRequest) error {
	cert, err := x509.ParseCertificate(e.AKCert)
	if err != nil {
		return tpm.Reject(tpm.RejectMalformed, "AK certificate: %v", err)
	}
	inter := c.tpmCAs.intermediates.Clone()
	for _, der := range e.Intermediates {
		ic, err := x509.ParseCertificate(der)
		if err != nil {
			return tpm.Reject(tpm.RejectMalformed, "AK certificate's intermediate: %v", err)
		}
		inter.AddCert(ic)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: c.tpmCAs.roots, Intermediates: inter, CurrentTime: req.Now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return tpm.Reject(tpm.RejectKey, "the AK certificate (%s) does not chain to the trusted roots: %v", cert.Subject, err)
	}
	if cert.KeyUsage&x509.KeyUsageDigitalSignature == 0 || cert.IsCA {
		return tpm.Reject(tpm.RejectKey, "the AK certificate (%s) is not for a signing key", cert.Subject)
	}
	if !tpm.SameKey(cert.PublicKey, ak) {
		return tpm.Reject(tpm.RejectKey, "the AK certificate (%s) is of another key than the quote's", cert.Subject)
	}
	info, err := server.GetGCEInstanceInfo(cert)
	if err != nil {
		return tpm.Reject(tpm.RejectKey, "the AK certificate's instance information: %v", err)
	}
	if info == nil {
		return tpm.Reject(tpm.RejectKey, "the AK certificate (%s) names no production GCE instance", cert.Subject)
	}
	if strconv.FormatUint(info.GetInstanceId(), 10) != id || info.GetProjectId() != project || info.GetZone() != zone {
		return tpm.Reject(tpm.RejectKey, "the AK certificate is of instance %d of project %s in %s, not of instance %s of project %s in %s",
			info.GetInstanceId(), info.GetProjectId(), info.GetZone(), id, project, zone)
	}
	return nil
}

// checkShieldedIdentity proves ak the instance's by the Compute API.
func (c *Cloud) checkShieldedIdentity(ctx context.Context, ak crypto.PublicKey, project, zone, name string) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout.Duration)
	defer cancel()
	id, err := c.compute.Instances.GetShieldedInstanceIdentity(project, zone, name).Context(ctx).Do()
	var gerr *googleapi.Error
	if errors.As(err, &gerr) && gerr.Code == http.StatusBadRequest {
		return tpm.Reject(tpm.RejectKey, "compute instances.getShieldedInstanceIdentity of %s/%s/%s: %v", project, zone, name, err)
	}
	if err != nil {
		return fmt.Errorf("compute instances.getShieldedInstanceIdentity of %s/%s/%s: %w", project, zone, name, err)
	}
	if id.SigningKey == nil || id.SigningKey.EkPub == "" {
		return tpm.Reject(tpm.RejectKey, "compute instances.getShieldedInstanceIdentity of %s/%s/%s names no signing key", project, zone, name)
	}
	b, _ := pem.Decode([]byte(id.SigningKey.EkPub))
	if b == nil || b.Type != "PUBLIC KEY" {
		return fmt.Errorf("compute instances.getShieldedInstanceIdentity of %s/%s/%s: signingKey.ekPub is no PEM public key", project, zone, name)
	}
	pub, err := x509.ParsePKIXPublicKey(b.Bytes)
	if err != nil {
		return fmt.Errorf("compute instances.getShieldedInstanceIdentity of %s/%s/%s: signingKey.ekPub: %w", project, zone, name, err)
	}
	if !tpm.SameKey(pub, ak) {
		return tpm.Reject(tpm.RejectKey, "the quote's AK is not the signing key compute instances.getShieldedInstanceIdentity names for %s/%s/%s", project, zone, name)
	}
	return nil
}
