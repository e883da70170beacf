package node_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-tpm-tools/simulator"

	"github.com/mooring-dev/mooring/cloud/tpm"
	"github.com/mooring-dev/mooring/cloud/tpm/node"
)

// TestQuoteVerifies: a quote the simulator makes for a binding verifies
// for that binding at its time, and for no other binding or time.
func TestQuoteVerifies(t *testing.T) {
	sim, err := simulator.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	now := time.Unix(1_790_000_000, 0)
	blk, err := node.Quote(sim, node.DefaultKey, "binding-a", now, nil)
	if err != nil {
		t.Fatal(err)
	}
	if blk.Type != tpm.EvidenceType {
		t.Fatalf("type %q", blk.Type)
	}
	e, err := tpm.Parse(blk.Data)
	if err != nil {
		t.Fatal(err)
	}
	if len(e.EKPublic) == 0 {
		t.Fatal("no EK public area with DefaultKey")
	}
	if err := tpm.CheckAKAttributes(e.AKPublic); err != nil {
		t.Fatalf("the default AK: %v", err)
	}
	if _, err := tpm.VerifyQuote(e, "binding-a", now.Add(time.Minute), tpm.QuoteOptions{}); err != nil {
		t.Fatalf("verify: %v", err)
	}
	var r *tpm.Rejection
	if _, err := tpm.VerifyQuote(e, "binding-b", now, tpm.QuoteOptions{}); !errors.As(err, &r) || r.Reason != tpm.RejectQuote {
		t.Fatalf("another binding: %v", err)
	}
	if _, err := tpm.VerifyQuote(e, "binding-a", now.Add(time.Hour), tpm.QuoteOptions{}); !errors.As(err, &r) || r.Reason != tpm.RejectExpired {
		t.Fatalf("an hour later: %v", err)
	}
	e.Time++
	if _, err := tpm.VerifyQuote(e, "binding-a", now, tpm.QuoteOptions{}); !errors.As(err, &r) || r.Reason != tpm.RejectQuote {
		t.Fatalf("time moved: %v", err)
	}
}
