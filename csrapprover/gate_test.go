package csrapprover

import (
	"fmt"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/local/attest"
	"github.com/mooring-dev/mooring/cloud/tpm"
	"github.com/mooring-dev/mooring/internal/evidence"
	"github.com/mooring-dev/mooring/internal/ticket"
)

// plain is the gate key of a CSR without a claimed machine; attested of a
// join whose evidence claims machine.
func plain(requester string) gateKey { return gateKey{requester: requester} }
func attested(requester, machine string) gateKey {
	return gateKey{requester: requester, machine: attest.Type + "/" + machine}
}

func TestGateIsExact(t *testing.T) {
	g := newGate(gateLimits{perRequester: 10, attestedPerRequester: 10, perMachine: 1, total: 25})
	var admitted int
	for i := range 50 {
		if g.enter(fmt.Sprintf("a-%d", i), plain("system:bootstrap:abc")) == "" {
			admitted++
		}
	}
	if admitted != 10 {
		t.Fatalf("%d of one requester admitted, limit 10", admitted)
	}
	if g.enter("a-3", plain("system:bootstrap:abc")) != "" {
		t.Fatal("a CSR that holds a place lost it")
	}
	for i := range 20 {
		g.enter(fmt.Sprintf("n-%d", i), plain(fmt.Sprintf("system:node:n-%d", i)))
	}
	if h := g.held(); h != 25 {
		t.Fatalf("%d held, total limit 25", h)
	}
	if next := g.leave("a-0"); next != "a-10" {
		t.Fatalf("the freed place woke %q, want the first in line a-10", next)
	}
	if next := g.leave("a-0"); next != "" {
		t.Fatalf("leaving twice woke %q", next)
	}
	if scope := g.enter("a-10", plain("system:bootstrap:abc")); scope != "" {
		t.Fatalf("a freed place was not given: %s", scope)
	}
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() { g.leave(fmt.Sprintf("n-%d", i%20)) })
	}
	wg.Wait()
	if h := g.held(); h != 10 {
		t.Fatalf("%d held after leaving, want 10", h)
	}
}

// A boot wave's joins share one requester, their bootstrap token: each
// attested join is bounded by its claimed machine and by the requester's
// share for attested joins, not by the per-requester bound, which still
// holds the same requester's CSRs without a claimed machine.
func TestGateBoundsAttestedJoinsPerMachine(t *testing.T) {
	const token = "system:bootstrap:abcdef"
	g := newGate(gateLimits{perRequester: 4, attestedPerRequester: 50, perMachine: 1, total: 100})
	admitted := 0
	for i := range 80 {
		if g.enter(fmt.Sprintf("join-%d", i), attested(token, fmt.Sprintf("i-%d", i))) == "" {
			admitted++
		}
	}
	if admitted != 50 {
		t.Fatalf("%d attested joins of one token admitted at once, want 50 (its share), not 4", admitted)
	}
	if scope := g.enter("join-50", attested(token, "i-50")); scope != "requester" {
		t.Fatalf("the 51st attested join: %q, want held by the requester's share", scope)
	}
	admitted = 0
	for i := range 10 {
		if g.enter(fmt.Sprintf("plain-%d", i), plain(token)) == "" {
			admitted++
		}
	}
	if admitted != 4 {
		t.Fatalf("%d of the token's CSRs without a claimed machine admitted, want 4", admitted)
	}
	if h := g.held(); h != 54 {
		t.Fatalf("%d held, want 54", h)
	}
}

// Two joins claiming one machine (a retry, a copy) are decided one after
// the other, whoever files them; a freed place goes to the one waiting.
func TestGateDecidesOneJoinPerMachineAtOnce(t *testing.T) {
	g := newGate(gateLimits{perRequester: 4, attestedPerRequester: 50, perMachine: 1, total: 100})
	if scope := g.enter("first", attested("system:bootstrap:aaaaaa", "i-1")); scope != "" {
		t.Fatalf("first: %q", scope)
	}
	if scope := g.enter("second", attested("system:bootstrap:bbbbbb", "i-1")); scope != "instance" {
		t.Fatalf("a second join claiming i-1: %q, want held by the instance's bound", scope)
	}
	if scope := g.enter("other", attested("system:bootstrap:bbbbbb", "i-2")); scope != "" {
		t.Fatalf("a join claiming i-2: %q", scope)
	}
	if next := g.leave("first"); next != "second" {
		t.Fatalf("the freed place woke %q, want second", next)
	}
	if scope := g.enter("second", attested("system:bootstrap:bbbbbb", "i-1")); scope != "" {
		t.Fatalf("second after first: %q", scope)
	}
}

// gateKey reads the machine a join's evidence claims; everything else, and
// a join whose evidence cannot be read, is counted by requester alone.
func TestGateKeyOfEachKindOfCSR(t *testing.T) {
	w := newWorld(t)
	c := &Controller{verifiers: map[string]cloud.EvidenceVerifier{}}
	for _, v := range w.decider.verifiers {
		c.verifiers[v.Type()] = v
	}
	const token = "system:bootstrap:abcdef"
	garbage := func(typ string) func(string) []evidence.Block {
		return func(string) []evidence.Block { return []evidence.Block{{Type: typ, Data: []byte("not what it says")}} }
	}
	twoBlocks := w.joinSpec(t)
	twoBlocks.evidence = func(b string) []evidence.Block {
		return []evidence.Block{{Type: attest.Type, Data: w.token(t, w.keys, "i-1", b, time.Now())}, {Type: "OTHER", Data: []byte("x")}}
	}
	withTPM, tpmFirst := w.joinSpec(t), w.joinSpec(t)
	withTPM.evidence = func(b string) []evidence.Block {
		return []evidence.Block{{Type: attest.Type, Data: w.token(t, w.keys, "i-1", b, time.Now())}, {Type: tpm.EvidenceType, Data: []byte("{}")}}
	}
	tpmFirst.evidence = func(b string) []evidence.Block {
		return []evidence.Block{{Type: tpm.EvidenceType, Data: []byte("{}")}, {Type: attest.Type, Data: w.token(t, w.keys, "i-1", b, time.Now())}}
	}
	unreadable, unknownType, renewal := w.joinSpec(t), w.joinSpec(t), attackBase(w, t, "renewal")
	unreadable.evidence, unknownType.evidence = garbage(attest.Type), garbage("SOME OTHER EVIDENCE")
	renewalWithEvidence := renewal
	renewalWithEvidence.evidence = w.joinSpec(t).evidence
	noEvidence := w.joinSpec(t)
	noEvidence.evidence = nil
	for _, tc := range []struct {
		name string
		spec csrSpec
		want gateKey
	}{
		{"attested join", w.joinSpec(t), gateKey{token, attest.Type + "/i-1"}},
		{"ticket join", w.ticketJoinSpec(t), gateKey{token, ticket.BlockType + "/node-1"}},
		{"join without evidence", noEvidence, plain(token)},
		{"unreadable evidence", unreadable, plain(token)},
		{"evidence of a type not accepted", unknownType, plain(token)},
		{"two pieces of evidence", twoBlocks, plain(token)},
		{"attested join with TPM evidence", withTPM, gateKey{token, attest.Type + "/i-1"}},
		{"TPM evidence first", tpmFirst, plain(token)},
		{"renewal", renewal, plain("system:node:node-1")},
		{"renewal carrying evidence", renewalWithEvidence, plain("system:node:node-1")},
		{"serving", servingSpec(), plain("system:node:node-1")},
	} {
		if got := c.gateKey(w.csr(t, tc.spec)); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
	bad := w.csr(t, w.joinSpec(t))
	bad.Spec.Request = []byte("-----BEGIN CERTIFICATE REQUEST-----\nnot base64\n")
	if got := c.gateKey(bad); got != plain(token) {
		t.Errorf("malformed request: %+v", got)
	}
	other := w.csr(t, w.joinSpec(t))
	other.Spec.SignerName = certificatesv1.KubeAPIServerClientSignerName
	if got := c.gateKey(other); got != plain(token) {
		t.Errorf("another signer: %+v", got)
	}
}
