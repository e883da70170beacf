package tpmtest_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/go-tpm-tools/client"
	"github.com/google/go-tpm/legacy/tpm2"
	"github.com/google/go-tpm/tpmutil"

	"github.com/mooring-dev/mooring/cloud/tpm"
	"github.com/mooring-dev/mooring/cloud/tpm/node"
	"github.com/mooring-dev/mooring/cloud/tpm/tpmtest"
)

// TestSims: two simulators are two TPMs (their EKs differ); a quote made
// through the socket verifies with the AK PublicArea reports; Provision
// writes an index larger than one NV write, read back as the client reads
// GCE's; GCE's AK loads from a provisioned template.
func TestSims(t *testing.T) {
	a := tpmtest.Start(t, t.TempDir())
	b := tpmtest.Start(t, t.TempDir())
	ekA, err := a.EKPublic()
	if err != nil {
		t.Fatal(err)
	}
	ekB, err := b.EKPublic()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(ekA, ekB) {
		t.Fatal("two simulators have the same EK")
	}
	if again, err := a.EKPublic(); err != nil || !bytes.Equal(again, ekA) {
		t.Fatalf("the EK read twice differs (%v)", err)
	}

	rw, err := a.Open()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	blk, err := node.Quote(rw, node.DefaultKey, "binding", now, nil)
	rw.Close()
	if err != nil {
		t.Fatal(err)
	}
	e, err := tpm.Parse(blk.Data)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(e.EKPublic, ekA) {
		t.Fatal("the quote's EK is not EKPublic's")
	}
	ak, err := a.PublicArea(node.DefaultKey)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(e.AKPublic, ak) {
		t.Fatal("the quote's AK is not PublicArea's")
	}
	if _, err := tpm.VerifyQuote(e, "binding", now, tpm.QuoteOptions{}); err != nil {
		t.Fatalf("verify: %v", err)
	}

	big := bytes.Repeat([]byte("0123456789abcdef"), 100) // 1600 bytes: two NV writes
	for range 2 {                                        // the second replaces the first
		if err := b.Provision(0x01c10100, big); err != nil {
			t.Fatal(err)
		}
	}
	rw, err = b.Open()
	if err != nil {
		t.Fatal(err)
	}
	got, err := tpm2.NVReadEx(rw, tpmutil.Handle(0x01c10100), tpm2.HandleOwner, "", 0)
	rw.Close()
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("read back %d bytes (%v), want %d", len(got), err, len(big))
	}

	tmpl, err := client.AKTemplateRSA().Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Provision(client.GceAKTemplateNVIndexRSA, tmpl); err != nil {
		t.Fatal(err)
	}
	if _, err := b.PublicArea(node.GCEKey); err != nil {
		t.Fatalf("GCE's AK from the provisioned template: %v", err)
	}

	a.Stop()
	if _, err := a.EKPublic(); err == nil {
		t.Fatal("a stopped simulator answers")
	}
}
