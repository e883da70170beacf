package gcetest

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/mooring-dev/mooring/cloud/tpm/tpmtest"

	"github.com/google/go-tpm-tools/client"
	"github.com/google/go-tpm/legacy/tpm2"
	compute "google.golang.org/api/compute/v1"
)

// Shielded VMs (doc.go): an instance's shieldedInstanceConfig, its vTPM's
// keys as instances.getShieldedInstanceIdentity answers them, and a CA
// that certifies attestation keys as Google's "EK/AK CA" does.

func init() {
	handle(http.MethodGet, `zones/([^/]+)/instances/([^/]+)/getShieldedInstanceIdentity`, (*Cloud).serveShieldedIdentity)
}

// Shielded is an instance's shieldedInstanceConfig.
type Shielded struct {
	VTPM, SecureBoot, IntegrityMonitoring bool
}

// InstanceInfoOID is the AK certificate extension in which Google's EK/AK
// CA names the instance (go-tpm-tools' server.GetGCEInstanceInfo reads it).
var InstanceInfoOID = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 11129, 2, 1, 21}

// InstanceInfo is the extension's content: a SEQUENCE of the zone, the
// project number, the project id, the instance id, the instance name and
// the security properties ([0] security version, [1] isProduction), the
// last explicitly tagged.
type InstanceInfo struct {
	Zone               string `asn1:"utf8"`
	ProjectNumber      int64
	ProjectID          string `asn1:"utf8"`
	InstanceID         int64
	InstanceName       string             `asn1:"utf8"`
	SecurityProperties SecurityProperties `asn1:"explicit,optional"`
}

// SecurityProperties of an instance's AK certificate.
type SecurityProperties struct {
	SecurityVersion int64 `asn1:"explicit,tag:0,optional"`
	IsProduction    bool  `asn1:"explicit,tag:1,optional"`
}

// InstanceInfoOf is what the CA writes for an instance: production.
func InstanceInfoOf(in Instance) InstanceInfo {
	return InstanceInfo{Zone: in.Zone, ProjectNumber: projectNumber(in.Project), ProjectID: in.Project,
		InstanceID: int64(in.ID), InstanceName: in.Name, SecurityProperties: SecurityProperties{IsProduction: true}}
}

// vtpm is what the cloud knows of an instance's vTPM.
type vtpm struct {
	ak, ek crypto.PublicKey
	akCert []byte // DER
}

// tpmCA is the cloud's EK/AK CA: a root and an intermediate that issues.
type tpmCA struct {
	once          sync.Once
	err           error
	root, inter   *x509.Certificate
	rootKey, iKey *rsa.PrivateKey
	serial        int64

	mu    sync.Mutex
	vtpms map[string]vtpm // by project/zone/name
}

func (c *Cloud) ca() (*tpmCA, error) {
	ca := &c.tpm
	ca.once.Do(func() { ca.err = ca.init(c.opts.Now()) })
	return ca, ca.err
}

func (ca *tpmCA) init(now time.Time) error {
	var err error
	if ca.rootKey, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		return err
	}
	if ca.iKey, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		return err
	}
	name := func(cn string) pkix.Name {
		return pkix.Name{Country: []string{"US"}, Province: []string{"California"}, Locality: []string{"Mountain View"},
			Organization: []string{"mooring gcetest"}, OrganizationalUnit: []string{"Google Cloud"}, CommonName: cn}
	}
	rootT := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: name("EK/AK CA Root"),
		NotBefore: now.Add(-24 * time.Hour), NotAfter: now.Add(100 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, rootT, rootT, &ca.rootKey.PublicKey, ca.rootKey)
	if err != nil {
		return err
	}
	if ca.root, err = x509.ParseCertificate(der); err != nil {
		return err
	}
	interT := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: name("EK/AK CA Intermediate"),
		NotBefore: now.Add(-24 * time.Hour), NotAfter: now.Add(100 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true, MaxPathLenZero: true}
	if der, err = x509.CreateCertificate(rand.Reader, interT, ca.root, &ca.iKey.PublicKey, ca.rootKey); err != nil {
		return err
	}
	ca.inter, err = x509.ParseCertificate(der)
	ca.serial = 1000
	return err
}

// TPMRootPEM is the cloud's EK/AK CA root (PEM), the approver's tpm roots.
func (c *Cloud) TPMRootPEM() ([]byte, error) {
	ca, err := c.ca()
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.root.Raw}), nil
}

// TPMIntermediatePEM is the CA's intermediate (PEM), which issues the AK
// certificates; a Shielded VM's NV holds the AK certificate alone, so the
// approver is given it (as Google publishes its own).
func (c *Cloud) TPMIntermediatePEM() ([]byte, error) {
	ca, err := c.ca()
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.inter.Raw}), nil
}

// IssueAKCert certifies an AK for the instance info as Google's EK/AK CA
// does: subject L=zone, O=Google Compute Engine, OU=project id, CN=instance
// id; digital signature only, not a CA; the instance info extension. It
// returns the certificate's DER.
func (c *Cloud) IssueAKCert(ak crypto.PublicKey, info InstanceInfo) ([]byte, error) {
	ca, err := c.ca()
	if err != nil {
		return nil, err
	}
	ext, err := asn1.Marshal(info)
	if err != nil {
		return nil, err
	}
	ca.mu.Lock()
	ca.serial++
	serial := ca.serial
	ca.mu.Unlock()
	now := c.opts.Now()
	t := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject: pkix.Name{Locality: []string{info.Zone}, Organization: []string{"Google Compute Engine"},
			OrganizationalUnit: []string{info.ProjectID}, CommonName: strconv.FormatInt(info.InstanceID, 10)},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(30 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, BasicConstraintsValid: true,
		ExtraExtensions: []pkix.Extension{{Id: InstanceInfoOID, Value: ext}},
	}
	return x509.CreateCertificate(rand.Reader, t, ca.inter, ak, ca.iKey)
}

// NV indexes of GCE's RSA AK (go-tpm-tools' client.GceAKTemplateNVIndexRSA
// and GceAKCertNVIndexRSA).
const (
	AKTemplateNVIndex = 0x01c10001
	AKCertNVIndex     = 0x01c10000
)

// VTPMOptions change what ProvisionVTPM certifies (attack tests).
type VTPMOptions struct {
	// Info edits the AK certificate's instance info.
	Info func(*InstanceInfo)
	// NoCert leaves the AK certificate out of NV (the approver then asks
	// getShieldedInstanceIdentity).
	NoCert bool
}

// ProvisionVTPM makes the TPM rw an instance's vTPM as GCE provisions a
// Shielded VM's: the RSA AK template (go-tpm-tools' client.AKTemplateRSA,
// encoded) at NV 0x01c10001 and the AK certificate the CA issues for the
// key it makes under the endorsement hierarchy at 0x01c10000, so that
// client.GceAttestationKeyRSA loads it. The instance gets
// shieldedInstanceConfig with every option on, and getShieldedInstanceIdentity
// answers its AK and EK.
func (c *Cloud) ProvisionVTPM(rw io.ReadWriter, project, zone, name string, o VTPMOptions) (Instance, error) {
	in, ok := c.Get(project, zone, name)
	if !ok {
		return Instance{}, fmt.Errorf("gcetest: no instance %s/%s/%s", project, zone, name)
	}
	tmpl := client.AKTemplateRSA()
	tmplBytes, err := tmpl.Encode()
	if err != nil {
		return Instance{}, err
	}
	ak, err := client.NewKey(rw, tpm2.HandleEndorsement, tmpl)
	if err != nil {
		return Instance{}, fmt.Errorf("gcetest: the AK: %w", err)
	}
	akPub := ak.PublicKey()
	ak.Close()
	ek, err := client.EndorsementKeyRSA(rw)
	if err != nil {
		return Instance{}, fmt.Errorf("gcetest: the EK: %w", err)
	}
	ekPub := ek.PublicKey()
	ek.Close()
	info := InstanceInfoOf(in)
	if o.Info != nil {
		o.Info(&info)
	}
	cert, err := c.IssueAKCert(akPub, info)
	if err != nil {
		return Instance{}, err
	}
	if err := WriteNV(rw, AKTemplateNVIndex, tmplBytes); err != nil {
		return Instance{}, err
	}
	if !o.NoCert {
		if err := WriteNV(rw, AKCertNVIndex, cert); err != nil {
			return Instance{}, err
		}
	}
	ca, _ := c.ca()
	ca.mu.Lock()
	if ca.vtpms == nil {
		ca.vtpms = map[string]vtpm{}
	}
	ca.vtpms[instanceKey(in.Project, in.Zone, in.Name)] = vtpm{ak: akPub, ek: ekPub, akCert: cert}
	ca.mu.Unlock()
	err = c.instances.Update(instanceKey(in.Project, in.Zone, in.Name), func(in *Instance) {
		if in.Shielded == nil {
			in.Shielded = &Shielded{SecureBoot: true, IntegrityMonitoring: true}
		}
		in.Shielded.VTPM = true
	})
	in, _ = c.Get(project, zone, name)
	return in, err
}

// WriteNV is tpmtest.WriteNV: an NV index defined as the owner's and
// written, as GCE provisions a Shielded VM's vTPM.
func WriteNV(rw io.ReadWriter, index uint32, data []byte) error {
	return tpmtest.WriteNV(rw, index, data)
}

// SetSigningKey makes getShieldedInstanceIdentity answer another AK for
// an instance (attack tests: the API names a key the node's TPM lacks).
func (c *Cloud) SetSigningKey(project, zone, name string, ak crypto.PublicKey) {
	ca, _ := c.ca()
	ca.mu.Lock()
	defer ca.mu.Unlock()
	v := ca.vtpms[instanceKey(project, zone, name)]
	v.ak = ak
	if ca.vtpms == nil {
		ca.vtpms = map[string]vtpm{}
	}
	ca.vtpms[instanceKey(project, zone, name)] = v
}

func pemPublic(k crypto.PublicKey) string {
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		return ""
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

// serveShieldedIdentity answers instances.getShieldedInstanceIdentity:
// signingKey is the AK (its public key and certificate in PEM),
// encryptionKey the EK. An instance without an enabled vTPM answers 400.
func (c *Cloud) serveShieldedIdentity(w http.ResponseWriter, r *http.Request, m []string) {
	project, zone, name := m[1], m[2], m[3]
	if !c.call(w, "getShieldedInstanceIdentity", project) {
		return
	}
	in, ok := c.Get(project, zone, name)
	if !ok {
		notFound("projects/" + project + "/zones/" + zone + "/instances/" + name).write(w)
		return
	}
	ca, _ := c.ca()
	var v vtpm
	if ca != nil {
		ca.mu.Lock()
		v, ok = ca.vtpms[instanceKey(project, zone, name)]
		ca.mu.Unlock()
	}
	if in.Shielded == nil || !in.Shielded.VTPM || !ok {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Instance '%s' does not have a vTPM enabled (Shielded VM).", name))
		return
	}
	out := &compute.ShieldedInstanceIdentity{Kind: "compute#shieldedInstanceIdentity",
		SigningKey:    &compute.ShieldedInstanceIdentityEntry{EkPub: pemPublic(v.ak)},
		EncryptionKey: &compute.ShieldedInstanceIdentityEntry{EkPub: pemPublic(v.ek)}}
	if len(v.akCert) > 0 {
		out.SigningKey.EkCert = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: v.akCert}))
	}
	writeJSON(w, http.StatusOK, out)
}
