package gce

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"testing"
	"time"

	"github.com/google/go-tpm-tools/server"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/gce/gcetest"
	"github.com/mooring-dev/mooring/cloud/tpm"
)

// A genuine Shielded VM AK certificate (testdata/genuine-ak-cert.pem, from
// go-tpm-tools) chains to Google's EK/AK CA Root through its Intermediate
// (tpmca/, the backend's defaults) with the clock pinned inside its
// validity; its instance information parses as production; the
// certificate path proves its key for exactly that instance, project and
// zone, and for no other; before the certificate's notBefore it proves
// nothing. No quote of that vTPM is public: the quote's own check is
// TestVerifyTPM*'s, on the simulator.
func TestGenuineAKCertificate(t *testing.T) {
	data, err := os.ReadFile("testdata/genuine-ak-cert.pem")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatal("no PEM block")
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	info, err := server.GetGCEInstanceInfo(cert)
	if err != nil || info == nil {
		t.Fatalf("instance info: %v, %v", info, err)
	}
	const id, project, zone = "218557372616137117", "google.com:wuale-gcp-testing", "us-central1-a"
	if info.GetInstanceId() != 218557372616137117 || info.GetProjectId() != project || info.GetZone() != zone || info.GetInstanceName() == "" {
		t.Fatalf("instance info %+v", info)
	}
	t.Logf("genuine AK certificate: instance %d (%s) of project %s (%d) in %s", info.GetInstanceId(), info.GetInstanceName(),
		info.GetProjectId(), info.GetProjectNumber(), info.GetZone())

	w := newWorld(t, gcetest.Options{}, nil) // Google's roots: the default
	at := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	e := &tpm.Evidence{AKCert: cert.Raw}
	req := cloud.TPMRequest{Now: at}
	if err := w.cloud.checkAKCert(e, cert.PublicKey, project, zone, id, req); err != nil {
		t.Fatalf("the genuine certificate at %s: %v", at, err)
	}
	for _, c := range []struct{ name, project, zone, id string }{
		{"another instance", project, zone, "218557372616137118"},
		{"another project", "mooring-test", zone, id},
		{"another zone", project, "us-central1-b", id},
	} {
		if r := reason(w.cloud.checkAKCert(e, cert.PublicKey, c.project, c.zone, c.id, req)); r != tpm.RejectKey {
			t.Errorf("the genuine certificate for %s: %s, want %s", c.name, r, tpm.RejectKey)
		}
	}
	early := cloud.TPMRequest{Now: cert.NotBefore.Add(-time.Hour)}
	if r := reason(w.cloud.checkAKCert(e, cert.PublicKey, project, zone, id, early)); r != tpm.RejectKey {
		t.Errorf("before notBefore: %s, want %s", r, tpm.RejectKey)
	}
	// gcetest's CA is no Google root.
	tw := newTPMWorld(t)
	if r := reason(tw.cloud.checkAKCert(e, cert.PublicKey, project, zone, id, req)); r != tpm.RejectKey {
		t.Errorf("under gcetest's roots: %s, want %s", r, tpm.RejectKey)
	}
}
