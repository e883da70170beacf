package azure_test

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-tpm-tools/simulator"
	"github.com/google/go-tpm/legacy/tpm2"
	"github.com/google/go-tpm/tpmutil"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/azure"
	"github.com/mooring-dev/mooring/cloud/azure/agentid"
	"github.com/mooring-dev/mooring/cloud/azure/azuretest"
	"github.com/mooring-dev/mooring/cloud/tpm"
	"github.com/mooring-dev/mooring/cloud/tpm/node"
	"github.com/mooring-dev/mooring/cloud/view"
)

// vtpmBed is a cloud with two Trusted Launch VMs and a provider trusting
// the cloud's test vTPM CA.
type vtpmBed struct {
	c    *azuretest.Cloud
	p    *azure.Cloud
	a, b azuretest.VM
	inA  view.Instance
}

func newVTPMBed(t *testing.T) *vtpmBed {
	t.Helper()
	c := start(t)
	a := c.Put(azuretest.VM{Name: "node-a", PrivateIP: "127.0.81.211", Tags: tags(), SecurityType: azuretest.SecurityTypeTrustedLaunch, VTPM: true, SecureBoot: true})
	b := c.Put(azuretest.VM{Name: "node-b", PrivateIP: "127.0.81.212", Tags: tags(), SecurityType: azuretest.SecurityTypeTrustedLaunch, VTPM: true, SecureBoot: true})
	dir := t.TempDir()
	roots, err := c.WriteRoots(dir)
	if err != nil {
		t.Fatal(err)
	}
	vroots, vinter, err := c.WriteVTPMRoots(dir)
	if err != nil {
		t.Fatal(err)
	}
	p := providerWith(t, c, azure.Config{AttestationRootsFile: roots, AttestationAIAAllowedHosts: []string{c.AIAHost()},
		VTPMRootsFile: vroots, VTPMIntermediatesFile: vinter})
	return &vtpmBed{c: c, p: p, a: a, b: b, inA: instance(t, p, a.VMID)}
}

func instance(t *testing.T, p *azure.Cloud, vmID string) view.Instance {
	t.Helper()
	all, err := p.InstanceView().List(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(all, func(in view.Instance) bool { return in.ID == vmID })
	if i < 0 {
		t.Fatalf("VM %s not in the view", vmID)
	}
	return all[i]
}

// withTPM runs f with a fresh simulated TPM (go-tpm-tools' simulator, one
// per process at a time), closed after.
func withTPM(t *testing.T, f func(rw io.ReadWriter)) {
	t.Helper()
	sim, err := simulator.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	f(sim)
}

// quote is the agent's TPM evidence (agentid's key, node.Quote) for
// binding at now.
func quote(t *testing.T, rw io.ReadWriter, binding string, now time.Time) *tpm.Evidence {
	t.Helper()
	blk, err := node.Quote(rw, (&agentid.NodeIdentity{}).TPMKey(), binding, now, nil)
	if err != nil {
		t.Fatal(err)
	}
	if blk.Type != tpm.EvidenceType {
		t.Fatalf("block type %q", blk.Type)
	}
	e, err := tpm.Parse(blk.Data)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func (bed *vtpmBed) verify(t *testing.T, e *tpm.Evidence, binding string, now time.Time, policy *tpm.PCRPolicy) error {
	t.Helper()
	data, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	req := cloud.TPMRequest{Data: data, Binding: binding, CSR: "csr-1", CSRUID: "uid-1", Now: now, Quote: tpm.QuoteOptions{Policy: policy}}
	return bed.p.VerifyTPM(context.Background(), req, cloud.Attestation{InstanceID: bed.a.VMID}, bed.inA)
}

func wantReject(t *testing.T, err error, reason, contains string) {
	t.Helper()
	r, ok := cloud.IsRejection(err)
	if !ok {
		t.Fatalf("got %v, want a %s rejection", err, reason)
	}
	if r.Reason != reason || !strings.Contains(err.Error(), contains) {
		t.Fatalf("got %s: %v; want %s containing %q", r.Reason, err, reason, contains)
	}
}

// TestVTPMConstantsAgree: azuretest provisions where agentid reads.
func TestVTPMConstantsAgree(t *testing.T) {
	if azuretest.AKHandle != agentid.AKHandle || azuretest.AKCertNVIndex != agentid.AKCertNVIndex ||
		azuretest.AKCertName("AbC-1") != agentid.AKCertName("AbC-1") {
		t.Fatal("azuretest and agentid disagree on the AK's handle, NV index or name")
	}
}

// TestViewVTPM: the view's VTPM is the Compute API's securityProfile:
// TrustedLaunch or ConfidentialVM with vTpmEnabled; a Standard VM, a
// Trusted Launch VM with its vTPM off, and scale-set VMs alike.
func TestViewVTPM(t *testing.T) {
	c := start(t)
	on := c.Put(azuretest.VM{Name: "tl", Tags: tags(), SecurityType: azuretest.SecurityTypeTrustedLaunch, VTPM: true, SecureBoot: true})
	cvm := c.Put(azuretest.VM{Name: "cvm", Tags: tags(), SecurityType: azuretest.SecurityTypeConfidentialVM, VTPM: true})
	off := c.Put(azuretest.VM{Name: "tl-novtpm", Tags: tags(), SecurityType: azuretest.SecurityTypeTrustedLaunch, SecureBoot: true})
	std := c.Put(azuretest.VM{Name: "std", Tags: tags()})
	c.PutScaleSet("pool", tags())
	ss := c.Put(azuretest.VM{ScaleSet: "pool", InstanceID: "0", SecurityType: azuretest.SecurityTypeTrustedLaunch, VTPM: true})
	p := provider(t, c)
	for vm, want := range map[string]bool{on.VMID: true, cvm.VMID: true, off.VMID: false, std.VMID: false, ss.VMID: true} {
		if got := instance(t, p, vm).VTPM; got != want {
			t.Errorf("VM %s: VTPM %v, want %v", vm, got, want)
		}
	}
}

// TestVTPMJoin: a vTPM provisioned as Azure does (AK at 0x81000003, its
// certificate naming the VM in NV 0x01C101D0) proves the VM's join; a PCR
// policy the quote meets passes.
func TestVTPMJoin(t *testing.T) {
	bed := newVTPMBed(t)
	if !bed.inA.VTPM {
		t.Fatal("the view does not say the Trusted Launch VM has a vTPM")
	}
	withTPM(t, func(rw io.ReadWriter) {
		cert, err := bed.c.ProvisionVTPM(bed.a.VMID, rw)
		if err != nil {
			t.Fatal(err)
		}
		if cert.Subject.CommonName != bed.a.VMID+".TrustedVM.Azure.windows.net" {
			t.Fatalf("AK certificate names %q", cert.Subject.CommonName)
		}
		now := time.Now()
		b := binding(t)
		e := quote(t, rw, b, now)
		if len(e.AKCert) == 0 || len(e.EKPublic) != 0 {
			t.Fatalf("evidence: AK certificate %d bytes, EK %d bytes; want the certificate and no EK", len(e.AKCert), len(e.EKPublic))
		}
		if err := bed.verify(t, e, b, now, nil); err != nil {
			t.Fatalf("genuine vTPM evidence: %v", err)
		}
		pol, err := tpm.ParsePCRPolicy("7=" + hex.EncodeToString(e.PCRs[7]))
		if err != nil {
			t.Fatal(err)
		}
		if err := bed.verify(t, e, b, now, pol); err != nil {
			t.Fatalf("under a PCR policy the quote meets: %v", err)
		}
	})
}

// TestVTPMAttacks: each must be denied, and each is denied by its own
// check (the message names it).
func TestVTPMAttacks(t *testing.T) {
	bed := newVTPMBed(t)
	now := time.Now()
	b := binding(t)
	// Evidence of VM b's TPM, made for VM a's CSR key: b's own AK and
	// certificate (another TPM's quote).
	var fromB *tpm.Evidence
	withTPM(t, func(rw io.ReadWriter) {
		if _, err := bed.c.ProvisionVTPM(bed.b.VMID, rw); err != nil {
			t.Fatal(err)
		}
		fromB = quote(t, rw, b, now)
	})
	withTPM(t, func(rw io.ReadWriter) {
		if _, err := bed.c.ProvisionVTPM(bed.a.VMID, rw); err != nil {
			t.Fatal(err)
		}
		good := quote(t, rw, b, now)
		if err := bed.verify(t, good, b, now, nil); err != nil {
			t.Fatalf("VM a's own evidence: %v", err)
		}
		t.Run("AnotherTPMsQuote", func(t *testing.T) {
			wantReject(t, bed.verify(t, fromB, b, now, nil), tpm.RejectKey, "not this VM's")
		})
		t.Run("AnotherTPMsQuoteWithThisVMsCertificate", func(t *testing.T) {
			e := *fromB
			e.AKCert = good.AKCert
			wantReject(t, bed.verify(t, &e, b, now, nil), tpm.RejectKey, "another key")
		})
		t.Run("AnotherTPMsAKWithThisTPMsQuote", func(t *testing.T) {
			e := *good
			e.AKPublic = fromB.AKPublic
			wantReject(t, bed.verify(t, &e, b, now, nil), tpm.RejectQuote, "does not verify")
		})
		t.Run("ReplayedForAnotherKey", func(t *testing.T) {
			wantReject(t, bed.verify(t, good, binding(t), now, nil), tpm.RejectQuote, "does not verify")
		})
		t.Run("ReplayedLater", func(t *testing.T) {
			wantReject(t, bed.verify(t, good, b, now.Add(tpm.DefaultMaxAge+time.Minute), nil), tpm.RejectExpired, "outside")
		})
		t.Run("PCRsOutsidePolicy", func(t *testing.T) {
			sum := sha256.Sum256([]byte("another boot"))
			pol, err := tpm.ParsePCRPolicy("7=" + hex.EncodeToString(sum[:]))
			if err != nil {
				t.Fatal(err)
			}
			wantReject(t, bed.verify(t, good, b, now, pol), tpm.RejectPCRs, "PCR 7")
		})
		t.Run("NoCertificate", func(t *testing.T) {
			e := *good
			e.AKCert = nil
			wantReject(t, bed.verify(t, &e, b, now, nil), tpm.RejectKey, "no AK certificate")
		})
		t.Run("ActivationAnswer", func(t *testing.T) {
			e := *good
			e.Activation = &tpm.Activation{ChallengeCSR: "csr-0", ChallengeUID: "uid-0", Secret: []byte("x")}
			wantReject(t, bed.verify(t, &e, b, now, nil), tpm.RejectMalformed, "credential activation")
		})
		t.Run("DocumentOfAnotherVM", func(t *testing.T) {
			data, _ := good.Marshal()
			err := bed.p.VerifyTPM(context.Background(), cloud.TPMRequest{Data: data, Binding: b, Now: now}, cloud.Attestation{InstanceID: bed.b.VMID}, bed.inA)
			wantReject(t, err, tpm.RejectKey, "the attested document names")
		})
	})
	// The TPM's AK certified for another VM.
	t.Run("CertificateOfAnotherVM", func(t *testing.T) {
		withTPM(t, func(rw io.ReadWriter) {
			if _, err := azuretest.ProvisionVTPM(rw, bed.c.VTPMIntermediate, azuretest.AKCertName(bed.b.VMID)); err != nil {
				t.Fatal(err)
			}
			wantReject(t, bed.verify(t, quote(t, rw, b, now), b, now, nil), tpm.RejectKey, "not this VM's")
		})
	})
	// A label that is only part of the VM id (as the one public genuine
	// certificate's 12 digits may be) names no VM for mooring.
	t.Run("PartOfTheVMID", func(t *testing.T) {
		withTPM(t, func(rw io.ReadWriter) {
			label := bed.a.VMID[len(bed.a.VMID)-12:] + azuretest.AKCertNameSuffix
			if _, err := azuretest.ProvisionVTPM(rw, bed.c.VTPMIntermediate, label); err != nil {
				t.Fatal(err)
			}
			wantReject(t, bed.verify(t, quote(t, rw, b, now), b, now, nil), tpm.RejectKey, "not this VM's")
		})
	})
	// A certificate naming the VM from a CA under another root, offered
	// with its intermediate in the evidence.
	t.Run("ChainToAnotherRoot", func(t *testing.T) {
		withTPM(t, func(rw io.ReadWriter) {
			root, err := azuretest.NewRootCA("rogue vTPM root")
			if err != nil {
				t.Fatal(err)
			}
			inter, err := root.NewIntermediate("Global Virtual TPM CA - 01")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := azuretest.ProvisionVTPM(rw, inter, azuretest.AKCertName(bed.a.VMID)); err != nil {
				t.Fatal(err)
			}
			e := quote(t, rw, b, now)
			e.Intermediates = [][]byte{inter.Cert.Raw}
			wantReject(t, bed.verify(t, e, b, now, nil), tpm.RejectKey, "does not chain to the vTPM roots")
		})
	})
	// A certificate of the vTPM CA that is no AIK certificate.
	t.Run("NotAnAIKCertificate", func(t *testing.T) {
		withTPM(t, func(rw io.ReadWriter) {
			good, err := bed.c.ProvisionVTPM(bed.a.VMID, rw)
			if err != nil {
				t.Fatal(err)
			}
			other, err := bed.c.VTPMIntermediate.IssueCertFor(good.PublicKey, azuretest.AKCertName(bed.a.VMID), nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := azuretest.WriteNV(rw, azuretest.AKCertNVIndex, other.Raw); err != nil {
				t.Fatal(err)
			}
			wantReject(t, bed.verify(t, quote(t, rw, b, now), b, now, nil), tpm.RejectKey, "not an attestation key certificate")
		})
	})
}

// TestVTPMDefaultRootIsMicrosofts: without vtpmRootsFile the provider
// trusts Microsoft's root alone: the test CA's certificates do not chain.
func TestVTPMDefaultRootIsMicrosofts(t *testing.T) {
	bed := newVTPMBed(t)
	roots, err := bed.c.WriteRoots(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	bed.p = providerWith(t, bed.c, azure.Config{AttestationRootsFile: roots})
	withTPM(t, func(rw io.ReadWriter) {
		if _, err := bed.c.ProvisionVTPM(bed.a.VMID, rw); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		b := binding(t)
		wantReject(t, bed.verify(t, quote(t, rw, b, now), b, now, nil), tpm.RejectKey, "does not chain to the vTPM roots")
	})
}

// TestVTPMNoCertificateInNV: a vTPM whose AK has no certificate (NV
// 0x01C101D0 undefined) gives evidence without one, which is denied.
func TestVTPMNoCertificateInNV(t *testing.T) {
	bed := newVTPMBed(t)
	withTPM(t, func(rw io.ReadWriter) {
		if _, err := bed.c.ProvisionVTPM(bed.a.VMID, rw); err != nil {
			t.Fatal(err)
		}
		if err := undefineNV(rw, azuretest.AKCertNVIndex); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		b := binding(t)
		e := quote(t, rw, b, now)
		if len(e.AKCert) != 0 {
			t.Fatal("evidence carries a certificate the TPM does not have")
		}
		wantReject(t, bed.verify(t, e, b, now, nil), tpm.RejectKey, "no AK certificate")
	})
}

func undefineNV(rw io.ReadWriter, idx uint32) error {
	return tpm2.NVUndefineSpace(rw, "", tpm2.HandleOwner, tpmutil.Handle(idx))
}

func readPEM(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatalf("%s: no PEM", path)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestGenuineVTPMChain: a genuine Trusted Launch AK certificate (read
// from a VM's NV 0x01C101D0, testdata/README.md) chains to Microsoft's
// root through Global Virtual TPM CA - 03 (certs/), with the clock pinned
// inside its validity; it is an AIK certificate whose common name is a
// 12-digit label under TrustedVM.Azure.windows.net, not a VM id, so
// mooring's name check (the whole VM id) would refuse it.
func TestGenuineVTPMChain(t *testing.T) {
	root := readPEM(t, "certs/azure-virtual-tpm-root-ca-2023.pem")
	inter := readPEM(t, "certs/global-virtual-tpm-ca-03.pem")
	ak := readPEM(t, "testdata/azure-vtpm-ak-cert-2026-07-27.pem")
	if root.Subject.CommonName != "Azure Virtual TPM Root Certificate Authority 2023" || root.SerialNumber.Text(16) != "51f431da2c92088a4e29e0d929de4aa7" {
		t.Fatalf("root %q serial %x", root.Subject.CommonName, root.SerialNumber)
	}
	roots, inters := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(root)
	inters.AddCert(inter)
	opts := x509.VerifyOptions{Roots: roots, Intermediates: inters, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
		CurrentTime: time.Date(2026, 8, 1, 0, 0, 0, 0, time.UTC)}
	chains, err := ak.Verify(opts)
	if err != nil {
		t.Fatalf("genuine AK certificate: %v", err)
	}
	if len(chains[0]) != 3 {
		t.Fatalf("chain of %d", len(chains[0]))
	}
	if !slices.ContainsFunc(ak.UnknownExtKeyUsage, azuretest.OIDAIKCertificate.Equal) {
		t.Fatalf("no AIK EKU: %v", ak.UnknownExtKeyUsage)
	}
	label, ok := strings.CutSuffix(ak.Subject.CommonName, azuretest.AKCertNameSuffix)
	if !ok || len(label) != 12 {
		t.Fatalf("common name %q", ak.Subject.CommonName)
	}
	opts.CurrentTime = time.Date(2027, 5, 1, 0, 0, 0, 0, time.UTC)
	if _, err := ak.Verify(opts); err == nil {
		t.Fatal("verified after its notAfter")
	}
	roots = x509.NewCertPool()
	rogue, err := azuretest.NewRootCA("Azure Virtual TPM Root Certificate Authority 2023")
	if err != nil {
		t.Fatal(err)
	}
	roots.AddCert(rogue.Cert)
	opts.Roots, opts.CurrentTime = roots, time.Date(2026, 8, 1, 0, 0, 0, 0, time.UTC)
	if _, err := ak.Verify(opts); err == nil {
		t.Fatal("verified under a root of the same name")
	}
}

// TestVTPMConfigFiles: unreadable or non-certificate vTPM files stop the
// provider at start, naming the field.
func TestVTPMConfigFiles(t *testing.T) {
	c := start(t)
	dir := t.TempDir()
	bad := dir + "/bad.pem"
	if err := os.WriteFile(bad, []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for field, cfg := range map[string]azure.Config{
		"vtpmRootsFile":         {VTPMRootsFile: dir + "/missing.pem"},
		"vtpmIntermediatesFile": {VTPMIntermediatesFile: bad},
	} {
		cfg.SubscriptionID, cfg.ResourceGroup, cfg.ClusterID, cfg.ARMEndpoint = c.Subscription(), c.ResourceGroup(), cluster, c.Endpoint()
		if _, err := azure.NewWithCredential(cfg, c.Credential()); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v", field, err)
		}
	}
}
