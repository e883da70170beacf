package bench

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/mooring-dev/mooring/agent"
	_ "github.com/mooring-dev/mooring/cloud/local" // the "local" backend's node identity
	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/client"
	"github.com/mooring-dev/mooring/cloud/local/server"
	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/internal/csrreason"
	"github.com/mooring-dev/mooring/internal/evidence"
	"github.com/mooring-dev/mooring/test/harness"
)

// The invalid joins, in turn.
const (
	// replayed: a copy of another join's request (its key and evidence),
	// filed under another name in a later second. (The same evidence on a
	// CSR of another key is the mis-bound flaw: the binding check denies it
	// before the replay check could.)
	replayed = iota
	// misBound: evidence from the machine's own metadata service, bound to
	// another key than the CSR's.
	misBound
	// expired: evidence bound to the CSR's key, whose lifetime has passed.
	expired
	// otherCluster: a machine of another cluster, with its own valid
	// evidence.
	otherCluster
)

// joinFlaws name the invalid joins and the reason each must be denied for.
var joinFlaws = []struct{ name, reason string }{
	replayed:     {"replayed", csrreason.EvidenceReplayed},
	misBound:     {"mis-bound", csrreason.EvidenceNotBound},
	expired:      {"expired", csrreason.EvidenceExpired},
	otherCluster: {"other cluster", csrreason.InstanceNotInCluster},
}

const (
	// metadataFileMargin is what the local cloud keeps open besides its
	// metadata listeners: its API's connections, its state file.
	metadataFileMargin = 1000
	otherBenchCluster  = "bench-other"
	// verifierSkew is the clock skew the approver tolerates past a token's
	// expiry (the local cloud verifier's default).
	verifierSkew = 30 * time.Second
)

// BenchmarkAttestedJoin: N machines of the local cloud join: each files its
// kubelet client CSR with the bootstrap token, carrying evidence its own
// metadata service signed for the CSR's key, built by the agent's own code
// (agent.JoinRequest). mooring's approver inside mooring-ccm verifies the
// evidence against the cloud's published keys and checks the instance in
// the shared view. 1% of the joins (at least one of each flaw) are invalid,
// in turn replayed, mis-bound, expired and of another cluster; each must
// be denied for its reason, the others approved. Evidence is single use, so
// the second round joins the same machines with fresh keys. It reports what
// BenchmarkCSRApproval reports, the flaws' verdicts, and the machines'
// metadata calls apart from the cloud API calls. MOORING_BENCH_CCM_BASELINE
// compares two mooring-ccm binaries as in BenchmarkCSRApproval.
func BenchmarkAttestedJoin(b *testing.B) {
	n := nodeCount(b)
	checkJoinBench(b, n)
	sideBySide(b, func(b *testing.B, ccmBin, suffix string) { runAttestedJoin(b, n, ccmBin, suffix) })
}

// checkJoinBench skips a join benchmark that cannot run at n machines.
func checkJoinBench(b *testing.B, n int) {
	if n < 2*len(joinFlaws) {
		b.Fatalf("the join benchmarks need at least %d nodes (MOORING_BENCH_NODES=%d)", 2*len(joinFlaws), n)
	}
	// Every machine asks its own metadata service, which is a listener of
	// the local cloud on the machine's address: one open file each.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && uint64(n)+metadataFileMargin > lim.Max {
		b.Skipf("the join benchmarks at %d machines need a metadata listener each: more than the open file limit (%d) allows the local cloud, "+
			"less %d for everything else; raise the hard limit (ulimit -Hn) or run them with fewer nodes", n, lim.Max, metadataFileMargin)
	}
}

// flawsAt places max(4, n/100) invalid joins evenly among n, the flaws in
// turn; the join before each is valid.
func flawsAt(n int) map[int]int {
	invalid := max(len(joinFlaws), n/100)
	at := map[int]int{}
	for j := range invalid {
		at[j*n/invalid+n/(2*invalid)] = j % len(joinFlaws)
	}
	return at
}

// mintedEvidence is evidence taken from a metadata service earlier and
// presented now, whatever the binding asked.
type mintedEvidence struct {
	nodeid.Identity
	block evidence.Block
}

func (m mintedEvidence) Evidence(context.Context, string) (evidence.Block, error) {
	return m.block, nil
}

// boundElsewhere asks the metadata service for evidence bound to another
// binding than the one asked.
type boundElsewhere struct {
	nodeid.Identity
	binding string
}

func (e boundElsewhere) Evidence(ctx context.Context, _ string) (evidence.Block, error) {
	return e.Identity.Evidence(ctx, e.binding)
}

func newKey() (*ecdsa.PrivateKey, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) }

func identityOf(in api.Instance) (nodeid.Identity, error) {
	return nodeid.New("local", nodeid.Config{MetadataURL: in.MetadataURL})
}

func otherName(i int) string { return fmt.Sprintf("other-%04d", i) }

// expiredJoin is a key, and evidence bound to it that has expired by the
// time it is filed.
type expiredJoin struct {
	key   *ecdsa.PrivateKey
	block evidence.Block
}

// runAttestedJoin measures one run with the mooring-ccm binary ccmBin (""
// for the one built from this tree); suffix ends the figures' labels.
func runAttestedJoin(b *testing.B, n int, ccmBin, suffix string) {
	rs := rounds()
	j := newJoinBed(b, n, len(rs), ccmBin, false)
	ctx, cancel := withTimeout(20 * time.Minute)
	defer cancel()
	d := watchDecisions(b, j.w)
	for r, round := range rs {
		reqs := j.makeRound(b, j.flaws, j.expiredAt[r])
		csrRound(ctx, b, j.w, d, reqs, round.rate, "attested join, "+round.label+suffix, "with the bootstrap token")
	}
}

// BenchmarkJoinBacklog: N machines' joins (1% invalid, as in
// BenchmarkAttestedJoin) wait when mooring-ccm starts; it measures the time
// from mooring-ccm's start until all are decided. Before that, in the same
// run, the unthrottled client approves N other valid joins of the same
// machines (unchecked): the same number of approval writes. It reports
// both and their ratio.
func BenchmarkJoinBacklog(b *testing.B) {
	n := nodeCount(b)
	checkJoinBench(b, n)
	for range b.N {
		j := newJoinBed(b, n, 1, "", true)
		ctx, cancel := withTimeout(20 * time.Minute)
		bare := j.makeRound(b, nil, nil)
		backlog(ctx, b, j.w, bare, j.makeRound(b, j.flaws, j.expiredAt[0]), "attested join backlog", "with the bootstrap token")
		cancel()
	}
}

// joinBed is a world whose machines can join, with the invalid joins'
// material ready.
type joinBed struct {
	w     *world
	n     int                  // machines
	cs    kubernetes.Interface // the bootstrap token's client
	flaws map[int]int
	// expiredAt are the expired joins' keys and evidence, per round.
	expiredAt []map[int]expiredJoin
}

// newJoinBed makes the world of n machines for rounds rounds of joins and
// returns once the expired joins' evidence has expired.
func newJoinBed(b *testing.B, n, rounds int, ccmBin string, deferCCM bool) *joinBed {
	flaws := flawsAt(n)
	// Expired evidence, honestly: the local cloud signs identity tokens
	// with one lifetime for all (--token-ttl) and has no other way to get
	// a short-lived one, so it starts with tokens that live 1 s, the
	// expired joins' tokens are taken from their machines' metadata
	// services, and the cloud is restarted with the default lifetime
	// (its keys are in its state) before mooring-ccm starts. Every other
	// token lives the default 5 minutes. The expired ones are filed once
	// their expiry is past the verifier's tolerance.
	expiredAt := make([]map[int]expiredJoin, rounds)
	var expiredBy time.Time
	prepare := func(ctx context.Context, lc *harness.LocalCloud) error {
		var names []string
		for i, f := range flaws {
			switch f {
			case otherCluster:
				if _, err := lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: otherName(i), Cluster: otherBenchCluster}); err != nil {
					return err
				}
			case expired:
				names = append(names, nodeName(i))
			}
		}
		listed, err := lc.Client.ListAllInstances(ctx, client.ListOptions{Names: names})
		if err != nil {
			return err
		}
		byName := map[string]api.Instance{}
		for _, in := range listed {
			byName[in.Name] = in
		}
		for r := range expiredAt {
			expiredAt[r] = map[int]expiredJoin{}
			for i, f := range flaws {
				if f != expired {
					continue
				}
				id, err := identityOf(byName[nodeName(i)])
				if err != nil {
					return err
				}
				key, err := newKey()
				if err != nil {
					return err
				}
				binding, err := evidence.Binding(key.Public())
				if err != nil {
					return err
				}
				block, err := id.Evidence(ctx, binding)
				if err != nil {
					return err
				}
				expiredAt[r][i] = expiredJoin{key: key, block: block}
			}
		}
		expiredBy = time.Now().Add(time.Second + verifierSkew + time.Second)
		return lc.RestartWith("--token-ttl=" + server.DefaultTokenTTL.String())
	}
	w := newWorld(b, worldOptions{instances: n, metadata: true, ccmBin: ccmBin, deferCCM: deferCCM,
		cloudArgs: []string{"--token-ttl=1s"}, prepare: prepare})
	cs, err := harness.FastBootstrapClient(w.c)
	if err != nil {
		b.Fatal(err)
	}
	if d := time.Until(expiredBy); d > 0 {
		b.Logf("waiting %v for the expired joins' evidence to be past the verifier's tolerance", d.Round(time.Second))
		time.Sleep(d)
	}
	return &joinBed{w: w, n: n, cs: cs, flaws: flaws, expiredAt: expiredAt}
}

// makeRound is every machine's join of one round, invalid where flaws
// say.
func (j *joinBed) makeRound(b *testing.B, flaws map[int]int, expiredAt map[int]expiredJoin) []roundCSR {
	reqs := make([]roundCSR, j.n)
	filed := make([]*filedJoin, j.n)
	for i := range j.n {
		r, err := makeJoin(j.w, j.cs, i, flaws, expiredAt, filed)
		if err != nil {
			b.Fatal(err)
		}
		reqs[i] = r
	}
	return reqs
}

// filedJoin is a join's request once it is filed: what a replay copies.
type filedJoin struct {
	name    string
	request []byte
	at      time.Time // by when the apiserver had created it
	done    chan struct{}
}

// makeJoin is machine i's join in a round (or, where flaws say so, the
// invalid request in its place). A valid join is filed as the agent files
// it: the node name from the metadata service, then agent.JoinRequest
// with fresh evidence for a fresh key. filed[i] is set for a valid join
// and done once it is filed.
func makeJoin(w *world, cs kubernetes.Interface, i int, flaws map[int]int, expiredAt map[int]expiredJoin, filed []*filedJoin) (roundCSR, error) {
	flaw, invalid := flaws[i]
	in := w.instances[nodeName(i)]
	key, err := newKey()
	if err != nil {
		return roundCSR{}, err
	}
	r := roundCSR{valid: !invalid}
	if invalid {
		r.flaw, r.wantReason = joinFlaws[flaw].name, joinFlaws[flaw].reason
	}
	// identity is the machine's as its agent would see it, possibly
	// altered by the flaw.
	identity := func() (nodeid.Identity, error) { return identityOf(in) }
	var f *filedJoin
	switch {
	case !invalid:
		f = &filedJoin{done: make(chan struct{})}
		filed[i] = f
	case flaw == replayed:
		orig := filed[i-1]
		name := "replay-of-" + orig.name
		r.name = name
		r.post = func(ctx context.Context, creating func()) error {
			select {
			case <-orig.done:
			case <-ctx.Done():
				return ctx.Err()
			}
			// CSR creation times are whole seconds, and a copy created
			// in the same second as its original cannot be told from it
			// (the approver lets the key's holder through): the replay
			// comes in the next second, as in test/e2e's.
			time.Sleep(time.Until(orig.at.Truncate(time.Second).Add(time.Second + 100*time.Millisecond)))
			creating()
			return harness.FileJoin(ctx, cs, name, orig.request)
		}
		return r, nil
	case flaw == misBound:
		other, err := newKey()
		if err != nil {
			return r, err
		}
		binding, err := evidence.Binding(other.Public())
		if err != nil {
			return r, err
		}
		identity = func() (nodeid.Identity, error) {
			id, err := identityOf(in)
			return boundElsewhere{id, binding}, err
		}
	case flaw == expired:
		e := expiredAt[i]
		key = e.key
		identity = func() (nodeid.Identity, error) {
			id, err := identityOf(in)
			return mintedEvidence{id, e.block}, err
		}
	case flaw == otherCluster:
		in = w.instances[otherName(i)]
	}
	name, err := agent.CSRName(in.Name, key.Public())
	if err != nil {
		return r, err
	}
	r.name = name
	if f != nil {
		f.name = name
	}
	r.post = func(ctx context.Context, creating func()) error {
		request, err := joinRequest(ctx, identity, key, name)
		if err != nil {
			return err
		}
		creating()
		if err := harness.FileJoin(ctx, cs, name, request); err != nil {
			return err
		}
		if f != nil {
			f.request, f.at = request, time.Now()
			close(f.done)
		}
		return nil
	}
	return r, nil
}

// joinRequest builds a join's request as the agent does: it asks the
// metadata service for its node name, then has agent.JoinRequest make the
// CSR and fetch the evidence; the CSR must be named want.
func joinRequest(ctx context.Context, identity func() (nodeid.Identity, error), key *ecdsa.PrivateKey, want string) ([]byte, error) {
	id, err := identity()
	if err != nil {
		return nil, err
	}
	inst, err := id.Instance(ctx)
	if err != nil {
		return nil, err
	}
	name, request, err := agent.JoinRequest(ctx, id, inst.NodeName, key)
	if err != nil {
		return nil, err
	}
	if name != want {
		return nil, fmt.Errorf("the agent names the CSR %s, want %s", name, want)
	}
	return request, nil
}
