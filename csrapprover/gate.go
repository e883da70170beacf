package csrapprover

import (
	"slices"
	"strings"
	"sync"

	certificatesv1 "k8s.io/api/certificates/v1"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/tpm"
	"github.com/mooring-dev/mooring/internal/evidence"
)

// gateKey is what a CSR is counted under in the gate: its requester, and
// for an attested join the machine its evidence claims (its evidence type
// and the claim). Nothing is verified here: the claim only sorts the CSR,
// and a CSR whose evidence cannot be read is counted by requester alone,
// as every CSR without evidence is.
func (c *Controller) gateKey(csr *certificatesv1.CertificateSigningRequest) gateKey {
	k := gateKey{requester: csr.Spec.Username}
	if csr.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName || strings.HasPrefix(csr.Spec.Username, nodeUserPrefix) {
		return k
	}
	blocks, err := evidence.Blocks(csr.Spec.Request)
	// One piece of the cloud's evidence, and the TPM's after it or not.
	if err != nil || len(blocks) == 0 || len(blocks) > 2 || (len(blocks) == 2 && blocks[1].Type != tpm.EvidenceType) {
		return k
	}
	p, ok := c.verifiers[blocks[0].Type].(cloud.MachinePeeker)
	if !ok {
		return k
	}
	if m, err := p.PeekMachine(blocks[0].Data); err == nil && m != "" {
		k.machine = blocks[0].Type + "/" + m
	}
	return k
}

// gateKey: requester, and machine ("" when the CSR is no attested join).
type gateKey struct{ requester, machine string }

// gateLimits are the gate's bounds: per requester for CSRs without a
// claimed machine; per claimed machine, and per requester for attested
// joins, for those with one; and in all.
type gateLimits struct{ perRequester, attestedPerRequester, perMachine, total int }

// gate bounds the CSRs being decided at once. A CSR without a claimed
// machine counts against its requester's bound; an attested join counts
// against its claimed machine's bound and against its requester's bound
// for attested joins, which is a share of the total: a boot wave's joins
// all come from one bootstrap token and need not wait on each other, but
// one token's holder, claiming as many machines as it likes, cannot take
// every place. Every CSR counts against the total. It is exact (a count of
// places held, not of timestamps) and a CSR held back waits in line: a
// freed place goes to the first waiting CSR it fits.
type gate struct {
	mu          sync.Mutex
	limits      gateLimits
	holders     map[string]gateKey // CSR name -> key
	byRequester map[string]int     // CSRs without a claimed machine
	byAttested  map[string]int     // attested joins, by requester
	byMachine   map[string]int
	line        []waiter
	inLine      map[string]bool
	// yielded are CSRs that gave their place back after failing again
	// and again; they wait to retry and are woken with the holders.
	yielded map[string]bool
}

type waiter struct {
	name string
	key  gateKey
}

func newGate(l gateLimits) *gate {
	return &gate{limits: l, holders: map[string]gateKey{}, byRequester: map[string]int{}, byAttested: map[string]int{},
		byMachine: map[string]int{}, inLine: map[string]bool{}, yielded: map[string]bool{}}
}

// enter takes a place for CSR name under key, or keeps the one it has.
// It returns "" when the CSR may be decided, or the scope whose limit holds
// it back ("requester", "instance" or "total"); the CSR then waits in line.
func (g *gate) enter(name string, key gateKey) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.holders[name]; ok {
		return ""
	}
	delete(g.yielded, name)
	scope := g.full(key)
	if scope == "" {
		g.holders[name] = key
		g.count(key, 1)
		g.dropFromLine(name)
	} else if !g.inLine[name] {
		g.inLine[name] = true
		g.line = append(g.line, waiter{name, key})
	}
	return scope
}

// count adds d to the counts key is under. g.mu is held.
func (g *gate) count(key gateKey, d int) {
	add := func(m map[string]int, k string) {
		if m[k] += d; m[k] == 0 {
			delete(m, k)
		}
	}
	if key.machine == "" {
		add(g.byRequester, key.requester)
		return
	}
	add(g.byAttested, key.requester)
	add(g.byMachine, key.machine)
}

func (g *gate) full(key gateKey) string {
	switch {
	case key.machine == "" && g.byRequester[key.requester] >= g.limits.perRequester:
		return "requester"
	case key.machine != "" && g.byMachine[key.machine] >= g.limits.perMachine:
		return "instance"
	case key.machine != "" && g.byAttested[key.requester] >= g.limits.attestedPerRequester:
		return "requester"
	case len(g.holders) >= g.limits.total:
		return "total"
	}
	return ""
}

// leave gives up the place of CSR name, if it holds one, and leaves the
// line. It returns the waiting CSR the freed place now fits, or "".
func (g *gate) leave(name string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.dropFromLine(name)
	delete(g.yielded, name)
	next, _ := g.free(name)
	return next
}

// yield gives up the place of CSR name, which failed again and again but
// is not done: it is retried later and then waits in line like a new CSR.
// ok is false when it held no place. next is the waiting CSR the freed
// place now fits, or "".
func (g *gate) yield(name string) (next string, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	next, ok = g.free(name)
	if ok {
		g.yielded[name] = true
	}
	return next, ok
}

// free drops name's place, if it holds one, and finds the first waiting
// CSR the freed place fits. g.mu is held.
func (g *gate) free(name string) (string, bool) {
	key, ok := g.holders[name]
	if !ok {
		return "", false
	}
	delete(g.holders, name)
	g.count(key, -1)
	for _, w := range g.line {
		if g.full(w.key) == "" {
			return w.name, true
		}
	}
	return "", true
}

func (g *gate) dropFromLine(name string) {
	if !g.inLine[name] {
		return
	}
	delete(g.inLine, name)
	g.line = slices.DeleteFunc(g.line, func(w waiter) bool { return w.name == name })
}

// names lists the CSRs holding a place, and those that gave theirs back
// after failing and wait to retry.
func (g *gate) names() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]string, 0, len(g.holders)+len(g.yielded))
	for n := range g.holders {
		out = append(out, n)
	}
	for n := range g.yielded {
		out = append(out, n)
	}
	return out
}

// held counts the places taken.
func (g *gate) held() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.holders)
}
