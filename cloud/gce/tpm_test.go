package gce

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-tpm-tools/simulator"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/gce/gcetest"
	"github.com/mooring-dev/mooring/cloud/tpm"
	"github.com/mooring-dev/mooring/cloud/tpm/node"
	"github.com/mooring-dev/mooring/cloud/view"
)

// tpmWorld is a world whose approver trusts gcetest's EK/AK CA, with one
// simulator (the library's, in process: one at a time) as the vTPM of the
// instances a test provisions.
type tpmWorld struct {
	*world
	sim *simulator.Simulator
}

func newTPMWorld(t *testing.T) *tpmWorld {
	t.Helper()
	gc := gcetest.NewStarted(t, gcetest.Options{})
	dir := t.TempDir()
	root, err := gc.TPMRootPEM()
	if err != nil {
		t.Fatal(err)
	}
	inter, err := gc.TPMIntermediatePEM()
	if err != nil {
		t.Fatal(err)
	}
	rf, inf := filepath.Join(dir, "roots.pem"), filepath.Join(dir, "intermediates.pem")
	if err := os.WriteFile(rf, root, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(inf, inter, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Projects: []string{gcetest.DefaultProject}, ClusterID: testCluster, ComputeEndpoint: gc.Endpoint(),
		WithoutAuthentication: true, CertsURL: gc.CertsURL(), TPM: TPMConfig{RootsFile: rf, IntermediatesFile: inf}}
	cfg.MinRefreshInterval.Duration = time.Millisecond
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sim, err := simulator.Get()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	return &tpmWorld{world: &world{gc: gc, cloud: c, cfg: c.Config()}, sim: sim}
}

// join is what the approver has of an instance before its TPM check: the
// identity token verified (att) and the instance the view found (in).
func (w *tpmWorld) join(t *testing.T, gi gcetest.Instance) (cloud.Attestation, view.Instance) {
	t.Helper()
	ctx := context.Background()
	ev, err := w.identity(t, gi).Evidence(ctx, binding)
	if err != nil {
		t.Fatal(err)
	}
	att, err := w.cloud.EvidenceVerifiers()[0].Verify(ctx, ev.Data, binding, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	w.cloud.InstanceView().Invalidate()
	in, err := w.cloud.InstanceView().ByID(ctx, att.InstanceID, 0)
	if err != nil {
		t.Fatal(err)
	}
	return att, in
}

// quote is the node agent's TPM evidence for binding at now.
func (w *tpmWorld) quote(t *testing.T, now time.Time) []byte {
	t.Helper()
	blk, err := node.Quote(w.sim, node.GCEKey, binding, now, nil)
	if err != nil {
		t.Fatal(err)
	}
	return blk.Data
}

func (w *tpmWorld) verify(att cloud.Attestation, in view.Instance, data []byte, now time.Time, o tpm.QuoteOptions) string {
	return reason(w.cloud.VerifyTPM(context.Background(), cloud.TPMRequest{Data: data, Binding: binding, Now: now, Quote: o}, att, in))
}

func (w *tpmWorld) provision(t *testing.T, gi gcetest.Instance, o gcetest.VTPMOptions) gcetest.Instance {
	t.Helper()
	gi, err := w.gc.ProvisionVTPM(w.sim, gi.Project, gi.Zone, gi.Name, o)
	if err != nil {
		t.Fatal(err)
	}
	return gi
}

// A Shielded VM's vTPM proves its join by the AK certificate GCE wrote in
// its NV (the node loads it with client.GceAttestationKeyRSA): the view
// says the instance has a vTPM, the certificate names it, and the Compute
// API is not asked for its identity. An instance without a vTPM shows
// none in the view.
func TestVerifyTPMByAKCertificate(t *testing.T) {
	w := newTPMWorld(t)
	plain := w.add("node-0", "127.0.79.9", nil)
	gi := w.provision(t, w.add("node-1", "127.0.79.10", nil), gcetest.VTPMOptions{})
	if sh := gi.Shielded; sh == nil || !sh.VTPM || !sh.SecureBoot || !sh.IntegrityMonitoring {
		t.Fatalf("shieldedInstanceConfig %+v", gi.Shielded)
	}
	if _, in := w.join(t, plain); in.VTPM {
		t.Fatal("an instance without shieldedInstanceConfig has a vTPM in the view")
	}
	att, in := w.join(t, gi)
	if !in.VTPM {
		t.Fatal("a Shielded VM with enableVtpm has no vTPM in the view")
	}
	now := time.Now()
	data := w.quote(t, now)
	e, err := tpm.Parse(data)
	if err != nil || len(e.AKCert) == 0 {
		t.Fatalf("the evidence carries no AK certificate (%v)", err)
	}
	if r := w.verify(att, in, data, now.Add(time.Second), tpm.QuoteOptions{}); r != "ok" {
		t.Fatalf("VerifyTPM: %s", r)
	}
	if n := w.gc.Calls("getShieldedInstanceIdentity"); n != 0 {
		t.Fatalf("%d getShieldedInstanceIdentity calls, want none with a certificate", n)
	}
}

// Without an AK certificate in the evidence, the Compute API's
// getShieldedInstanceIdentity names the AK: its signingKey proves the
// quote's; another key is a rejection, a failed call transient, an
// instance the API says has no vTPM a rejection.
func TestVerifyTPMByShieldedIdentity(t *testing.T) {
	w := newTPMWorld(t)
	gi := w.provision(t, w.add("node-1", "127.0.79.10", nil), gcetest.VTPMOptions{NoCert: true})
	att, in := w.join(t, gi)
	now := time.Now()
	data := w.quote(t, now)
	if e, _ := tpm.Parse(data); e == nil || len(e.AKCert) != 0 {
		t.Fatal("the evidence carries an AK certificate NV did not hold")
	}
	if r := w.verify(att, in, data, now, tpm.QuoteOptions{}); r != "ok" {
		t.Fatalf("VerifyTPM: %s", r)
	}
	if n := w.gc.Calls("getShieldedInstanceIdentity"); n != 1 {
		t.Fatalf("%d getShieldedInstanceIdentity calls, want 1", n)
	}
	w.gc.Fail("getShieldedInstanceIdentity", 1, 503)
	if r := w.verify(att, in, data, now, tpm.QuoteOptions{}); !strings.HasPrefix(r, "transient: ") {
		t.Fatalf("the API failing: %s, want transient", r)
	}
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	w.gc.SetSigningKey(gi.Project, gi.Zone, gi.Name, &other.PublicKey)
	if r := w.verify(att, in, data, now, tpm.QuoteOptions{}); r != tpm.RejectKey {
		t.Fatalf("the API naming another AK: %s, want %s", r, tpm.RejectKey)
	}
	plain := w.add("node-2", "127.0.79.11", nil)
	att2, in2 := w.join(t, plain)
	if r := w.verify(att2, in2, data, now, tpm.QuoteOptions{}); r != tpm.RejectKey {
		t.Fatalf("an instance without a vTPM: %s, want %s", r, tpm.RejectKey)
	}
}

// The attacks of issue 50 on the certificate path, each denied with its
// reason.
func TestVerifyTPMAttacks(t *testing.T) {
	w := newTPMWorld(t)
	gi := w.add("node-1", "127.0.79.10", nil)
	peer := w.add("node-2", "127.0.79.11", nil)
	att, in := w.join(t, gi)
	now := time.Now()
	check := func(name string, data []byte, at time.Time, o tpm.QuoteOptions, want string) {
		t.Helper()
		if r := w.verify(att, in, data, at, o); r != want {
			t.Errorf("%s: %s, want %s", name, r, want)
		}
	}

	gi = w.provision(t, gi, gcetest.VTPMOptions{})
	good := w.quote(t, now)
	check("the genuine quote", good, now, tpm.QuoteOptions{}, "ok")

	// A replayed quote: made for another CSR key, or too long ago.
	if r := reason(w.cloud.VerifyTPM(context.Background(), cloud.TPMRequest{Data: good, Binding: "another-binding", Now: now}, att, in)); r != tpm.RejectQuote {
		t.Errorf("a quote replayed for another CSR key: %s, want %s", r, tpm.RejectQuote)
	}
	check("a quote replayed an hour later", good, now.Add(time.Hour), tpm.QuoteOptions{}, tpm.RejectExpired)

	// PCRs outside the policy; the quoted value itself passes.
	e, _ := tpm.Parse(good)
	pol, err := tpm.ParsePCRPolicy("7=" + strings.Repeat("ab", 32))
	if err != nil {
		t.Fatal(err)
	}
	check("PCR 7 outside the policy", good, now, tpm.QuoteOptions{Policy: pol}, tpm.RejectPCRs)
	pol, _ = tpm.ParsePCRPolicy("7=" + strings.Repeat("ab", 32) + "|" + hex.EncodeToString(e.PCRs[7]))
	check("PCR 7 the policy allows", good, now, tpm.QuoteOptions{Policy: pol}, "ok")

	// A certificate of another instance, of another project, of another
	// zone, of no production instance.
	for _, c := range []struct {
		name string
		edit func(*gcetest.InstanceInfo)
	}{
		{"an AK certificate of another instance", func(i *gcetest.InstanceInfo) { i.InstanceID, i.InstanceName = int64(peer.ID), peer.Name }},
		{"an AK certificate of the same instance id in another project", func(i *gcetest.InstanceInfo) { i.ProjectID = "another-project" }},
		{"an AK certificate of another zone", func(i *gcetest.InstanceInfo) { i.Zone = "europe-west1-b" }},
		{"a non-production AK certificate", func(i *gcetest.InstanceInfo) { i.SecurityProperties.IsProduction = false }},
	} {
		w.provision(t, gi, gcetest.VTPMOptions{Info: c.edit})
		check(c.name, w.quote(t, now), now, tpm.QuoteOptions{}, tpm.RejectKey)
	}

	// A certificate chaining to another root: another cloud's CA certifies
	// this TPM's AK for this very instance.
	rogue := gcetest.NewStarted(t, gcetest.Options{})
	rogue.Put(gi)
	if _, err := rogue.ProvisionVTPM(w.sim, gi.Project, gi.Zone, gi.Name, gcetest.VTPMOptions{}); err != nil {
		t.Fatal(err)
	}
	check("an AK certificate chaining to another root", w.quote(t, now), now, tpm.QuoteOptions{}, tpm.RejectKey)

	// Another TPM's quote: the TPM is wiped (new seeds: another TPM) and
	// provisioned as the peer's; its quote with node-1's genuine
	// certificate swapped in, and with its own (the peer's), are refused.
	w.provision(t, gi, gcetest.VTPMOptions{})
	mine, _ := tpm.Parse(w.quote(t, now))
	if err := w.sim.ManufactureReset(); err != nil {
		t.Fatal(err)
	}
	w.provision(t, peer, gcetest.VTPMOptions{})
	theirs, _ := tpm.Parse(w.quote(t, now))
	if string(theirs.AKPublic) == string(mine.AKPublic) {
		t.Fatal("the wiped TPM has the same AK")
	}
	data, _ := theirs.Marshal()
	check("another TPM's quote with its own certificate (another instance's)", data, now, tpm.QuoteOptions{}, tpm.RejectKey)
	theirs.AKCert = mine.AKCert
	data, _ = theirs.Marshal()
	check("another TPM's quote with this instance's certificate", data, now, tpm.QuoteOptions{}, tpm.RejectKey)
	theirs.AKPublic = mine.AKPublic
	data, _ = theirs.Marshal()
	check("another TPM's quote under this instance's AK", data, now, tpm.QuoteOptions{}, tpm.RejectQuote)
}

// The tpm roots and intermediates are read at start: a file missing, one
// without certificates, or holding another PEM type stops the provider
// with the field named; none set is Google's EK/AK CA.
func TestTPMConfigFiles(t *testing.T) {
	dir := t.TempDir()
	empty, key := filepath.Join(dir, "empty.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(empty, []byte("no certificate here\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, []byte("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		tpm  TPMConfig
		want string
	}{
		{"a missing roots file", TPMConfig{RootsFile: filepath.Join(dir, "nope.pem")}, "tpm.rootsFile"},
		{"a roots file without certificates", TPMConfig{RootsFile: empty}, "tpm roots (" + empty},
		{"a roots file of another PEM type", TPMConfig{RootsFile: key}, `type "PUBLIC KEY"`},
		{"a missing intermediates file", TPMConfig{IntermediatesFile: filepath.Join(dir, "nope.pem")}, "tpm.intermediatesFile"},
	} {
		cfg := Config{Projects: []string{gcetest.DefaultProject}, ClusterID: testCluster, TPM: c.tpm}
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.name, err, c.want)
		}
	}
	if _, err := (TPMConfig{}).load(); err != nil {
		t.Fatalf("Google's defaults: %v", err)
	}
	_, roots, err1 := certPool(googleTPMRoots)
	_, inters, err2 := certPool(googleTPMIntermediates)
	if err1 != nil || err2 != nil || roots != 1 || inters != 1 {
		t.Fatalf("Google's EK/AK CA: %d roots (%v), %d intermediates (%v), want one each", roots, err1, inters, err2)
	}
}
