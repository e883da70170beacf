package csrapprover

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/local/agentid"
	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/localtest"
	"github.com/mooring-dev/mooring/cloud/local/provider"
	"github.com/mooring-dev/mooring/cloud/view"
	"github.com/mooring-dev/mooring/internal/evidence"
	"github.com/mooring-dev/mooring/internal/ticket"
	"github.com/mooring-dev/mooring/internal/ticket/tickettest"
)

// staticTicketKeys are ticket keys that never change.
type staticTicketKeys map[string]*ecdsa.PublicKey

func (k staticTicketKeys) Keys() (map[string]*ecdsa.PublicKey, error) { return k, nil }

// unreadableTicketKeys stands for a key file that cannot be read.
type unreadableTicketKeys struct{}

func (unreadableTicketKeys) Keys() (map[string]*ecdsa.PublicKey, error) {
	return nil, errors.New("join ticket keys: permission denied")
}

// issueTicket signs a ticket for the instance called name, of clusterTag,
// issued at at for life.
func issueTicket(t *testing.T, keys *ticket.KeySet, name, clusterTag string, at time.Time, life time.Duration) []byte {
	t.Helper()
	tok, _, err := keys.Issue(name, clusterTag, at, life)
	if err != nil {
		t.Fatal(err)
	}
	return []byte(tok)
}

// ticketOf is w's ticket for the instance called name, issued five minutes
// ago for an hour.
func (w *world) ticketOf(t *testing.T, name string) []byte {
	return issueTicket(t, w.tickets, name, cluster, time.Now().Add(-5*time.Minute), time.Hour)
}

func newTicketKeys(t *testing.T) *ticket.KeySet {
	t.Helper()
	keys := &ticket.KeySet{}
	if _, err := keys.AddKey(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// ticketClaimsOf are a valid ticket's claims, issued five minutes ago.
func ticketClaimsOf(name, clusterTag string) map[string]any {
	return map[string]any{
		"jti": "attackerchosen0000000A", "sub": name, "aud": clusterTag,
		"iat": time.Now().Add(-5 * time.Minute).Unix(), "exp": time.Now().Add(55 * time.Minute).Unix(),
	}
}

// signingKey digs the private signing key out of a key set's Secret form.
func signingKey(t *testing.T, keys *ticket.KeySet) *ecdsa.PrivateKey {
	t.Helper()
	data, err := keys.Data()
	if err != nil {
		t.Fatal(err)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(data[ticket.KeysFile], &set); err != nil {
		t.Fatal(err)
	}
	return set.Key(keys.SigningKey())[0].Key.(*ecdsa.PrivateKey)
}

// signTicket signs node-1's ticket claims, changed by edit, with keys'
// signing key under kid, with extra signer options.
func signTicket(t *testing.T, keys *ticket.KeySet, kid string, opts *jose.SignerOptions, edit func(map[string]any)) []byte {
	t.Helper()
	if opts == nil {
		opts = &jose.SignerOptions{}
	}
	claims := ticketClaimsOf("node-1", cluster)
	if edit != nil {
		edit(claims)
	}
	tok, err := tickettest.Sign(signingKey(t, keys), jose.ES256, kid, opts.WithType(ticket.HeaderType), claims)
	if err != nil {
		t.Fatal(err)
	}
	return []byte(tok)
}

// hs256Ticket is node-1's ticket MACed with the issuer's public key (DER)
// under its kid: the algorithm confusion attack.
func hs256Ticket(w *world, t *testing.T) []byte {
	t.Helper()
	pub, err := x509.MarshalPKIXPublicKey(w.tickets.PublicKeys()[w.tickets.SigningKey()])
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tickettest.Sign(pub, jose.HS256, w.tickets.SigningKey(), (&jose.SignerOptions{}).WithType(ticket.HeaderType),
		ticketClaimsOf("node-1", cluster))
	if err != nil {
		t.Fatal(err)
	}
	return []byte(tok)
}

func ticketEvidence(data []byte) []evidence.Block {
	return []evidence.Block{{Type: ticket.BlockType, Data: data}}
}

// ticketJoinSpec is a valid join of node-1 with a join ticket for its
// instance.
func (w *world) ticketJoinSpec(t *testing.T) csrSpec {
	s := w.joinSpec(t)
	s.evidence = nil
	s.evidenceT = func(w *world, t *testing.T, _ string) []evidence.Block {
		return ticketEvidence(w.ticketOf(t, "node-1"))
	}
	return s
}

func TestTicketJoinIsApproved(t *testing.T) {
	w := newWorld(t)
	d := w.decide(t, w.csr(t, w.ticketJoinSpec(t)))
	if !d.Approve || !strings.Contains(d.Message, "join ticket") || !strings.Contains(d.Message, "i-1") {
		t.Fatalf("decision %+v", d)
	}
	// The name is compared as the view compares names: case-insensitively.
	s := w.ticketJoinSpec(t)
	s.evidenceT = func(w *world, t *testing.T, _ string) []evidence.Block {
		return ticketEvidence(w.ticketOf(t, "NODE-1"))
	}
	if d := w.decide(t, w.csr(t, s)); !d.Approve {
		t.Fatalf("upper-case ticket name: %+v", d)
	}
	// A terminated instance of the same name from before is no rival.
	old := instance("i-9", "node-1", view.StateTerminated, cluster)
	old.Created = time.Now().Add(-48 * time.Hour)
	w.instances[old.ProviderID] = old
	if d := w.decide(t, w.csr(t, w.ticketJoinSpec(t))); !d.Approve {
		t.Fatalf("with a terminated namesake: %+v", d)
	}
}

// TestTicketsNeedConfiguredKeys: without the ticket verifier (no
// --ticket-keys-file) a ticket is evidence of an unknown type.
func TestTicketsNeedConfiguredKeys(t *testing.T) {
	w := newWorld(t)
	delete(w.decider.verifiers, ticket.BlockType)
	if d := w.decide(t, w.csr(t, w.ticketJoinSpec(t))); d.Approve || d.Reason != ReasonUnknownEvidence {
		t.Fatalf("decision %+v, want %s", d, ReasonUnknownEvidence)
	}
}

func TestTicketVerifierPeekAndReplayKey(t *testing.T) {
	w := newWorld(t)
	v := NewTicketVerifier(staticTicketKeys(w.tickets.PublicKeys()), cluster)
	tok := w.ticketOf(t, "node-1")
	key, binding, err := v.Peek(tok)
	if err != nil || binding != "" || !strings.HasPrefix(key, "ticket/") {
		t.Fatalf("Peek: %q %q %v", key, binding, err)
	}
	att, err := v.Verify(context.Background(), tok, "any-binding", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if att.ReplayKey != key || att.InstanceName != "node-1" || att.InstanceID != "" || att.ProviderID != "" {
		t.Fatalf("attestation %+v", att)
	}
	// Keys that cannot be read are no verdict: the CSR waits.
	v = NewTicketVerifier(unreadableTicketKeys{}, cluster)
	if _, err := v.Verify(context.Background(), tok, "", time.Now()); err == nil {
		t.Fatal("verified without keys")
	} else if _, rejected := cloud.IsRejection(err); rejected {
		t.Fatalf("unreadable keys denied the CSR: %v", err)
	}
}

// TestTicketJoinWithTheLocalCloud: tickets work with a backend's real view,
// the local cloud's: its instances' names, clusters and creation times
// decide.
func TestTicketJoinWithTheLocalCloud(t *testing.T) {
	lc := localtest.Start(t, nil)
	ctx := context.Background()
	v := view.New(provider.Source{Client: lc.Client, Cluster: cluster, NamePolicy: agentid.NameFromInstanceName}, view.Options{})
	w := newWorld(t)
	w.decider.instances = v
	join := func(name string, issued time.Time) Decision {
		t.Helper()
		s := w.ticketJoinSpec(t)
		s.cn = "system:node:" + name
		tok := issueTicket(t, w.tickets, name, cluster, issued, time.Hour)
		s.evidenceT = func(*world, *testing.T, string) []evidence.Block { return ticketEvidence(tok) }
		v.Invalidate()
		return w.decide(t, w.csr(t, s))
	}
	for _, c := range []struct{ name, cluster string }{{"web-1", cluster}, {"web-3", "c2"}} {
		if _, err := lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: c.name, Cluster: c.cluster}); err != nil {
			t.Fatal(err)
		}
	}
	if d := join("web-1", time.Now().Add(-time.Minute)); !d.Approve {
		t.Fatalf("web-1, made after its ticket: %+v", d)
	}
	if d := join("web-2", time.Now().Add(-time.Minute)); d.Reason != ReasonInstanceNotInCluster {
		t.Fatalf("no instance web-2: %+v", d)
	}
	if d := join("web-3", time.Now().Add(-time.Minute)); d.Reason != ReasonInstanceNotInCluster {
		t.Fatalf("web-3, of another cluster: %+v", d)
	}
	// Ten minutes on, a ticket issued five minutes ago was issued after
	// web-1 was made: web-1 was not made for it.
	w.decider.now = func() time.Time { return time.Now().Add(10 * time.Minute) }
	if d := join("web-1", time.Now().Add(5*time.Minute)); d.Reason != ReasonInstanceCreatedOutsideTicket {
		t.Fatalf("web-1, made before its ticket: %+v", d)
	}
}

// TestTicketCopyInTheSameSecondBlocksBoth: a ticket is not bound to a key,
// so a copy filed in the same second as its owner's request (by someone
// watching CSRs with a bootstrap token) cannot be ordered after it; the
// copy must not win by a name that sorts first, and both are refused.
func TestTicketCopyInTheSameSecondBlocksBoth(t *testing.T) {
	w := newWorld(t)
	tok := w.ticketOf(t, "node-1")
	s := w.ticketJoinSpec(t)
	s.evidenceT = func(*world, *testing.T, string) []evidence.Block { return ticketEvidence(tok) }
	now := time.Now()
	owner := named(w.csr(t, s), "mooring-node-1-owner", now)
	thief := named(w.csr(t, s), "0-thief", now) // another key: every csr() makes one
	for _, c := range []struct {
		csr, other *certificatesv1.CertificateSigningRequest
	}{{owner, thief}, {thief, owner}} {
		d, err := replayDecider(t, w, c.other).Decide(context.Background(), c.csr)
		if err != nil || d.Approve || d.Reason != ReasonEvidenceReplayed {
			t.Fatalf("%s beside %s: %+v, %v; want %s", c.csr.Name, c.other.Name, d, err, ReasonEvidenceReplayed)
		}
	}
	// The very same request filed twice in a second blocks nobody.
	again := named(owner, "0-again", now)
	if d, err := replayDecider(t, w, again).Decide(context.Background(), owner); err != nil || !d.Approve {
		t.Fatalf("same request twice: %+v, %v", d, err)
	}
}

// ticketOnlyCloud is a backend that signs no evidence of its own.
type ticketOnlyCloud struct{ v *view.View }

func (ticketOnlyCloud) EvidenceVerifiers() []cloud.EvidenceVerifier { return nil }
func (c ticketOnlyCloud) InstanceView() *view.View                  { return c.v }
func (ticketOnlyCloud) ClusterTag() string                          { return cluster }

// TestTicketKeysFlag: --ticket-keys-file adds the ticket verifier to any
// backend's, and a key file that cannot be read stops the start.
func TestTicketKeysFlag(t *testing.T) {
	dir := t.TempDir()
	if err := newTicketKeys(t).WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	a := ticketOnlyCloud{view.New(provider.Source{}, view.Options{})}
	build := func(f Flags) (*Controller, error) {
		client := fake.NewClientset()
		return NewFromCloud(client, nil, informers.NewSharedInformerFactory(client, 0), a, f)
	}
	c, err := build(Flags{TicketKeysFile: filepath.Join(dir, ticket.KeysFile)})
	if err != nil {
		t.Fatal(err)
	}
	if c.verifiers[ticket.BlockType] == nil || c.decider.verifiers[ticket.BlockType] == nil {
		t.Fatal("no ticket verifier with --ticket-keys-file")
	}
	if c, err = build(Flags{}); err != nil || c.verifiers[ticket.BlockType] != nil {
		t.Fatalf("without the flag: ticket verifier %v, %v", c.verifiers[ticket.BlockType], err)
	}
	if _, err := build(Flags{TicketKeysFile: filepath.Join(dir, "missing.json")}); err == nil {
		t.Fatal("started with a missing key file")
	}
}

// Issue 28: a ticket that can never pass was retried for ever while the
// ticket keys could not be read, since the keys were read first. Its form,
// times, lifetime and cluster are checked before the keys are asked for.
func TestTicketClaimsCheckedBeforeKeys(t *testing.T) {
	w := newWorld(t)
	v := NewTicketVerifier(unreadableTicketKeys{}, cluster)
	cases := []struct {
		name, want string
		tok        []byte
	}{
		{"expired", ReasonEvidenceExpired, issueTicket(t, w.tickets, "node-1", cluster, time.Now().Add(-3*time.Hour), time.Hour)},
		{"issued in the future", ReasonEvidenceExpired, issueTicket(t, w.tickets, "node-1", cluster, time.Now().Add(time.Hour), time.Hour)},
		{"another cluster", ReasonEvidenceCluster, issueTicket(t, w.tickets, "node-1", "another-cluster", time.Now(), time.Hour)},
		{"malformed", ReasonEvidenceMalformed, []byte("not.a.ticket")},
	}
	for _, tc := range cases {
		_, err := v.Verify(context.Background(), tc.tok, "", time.Now())
		if r, ok := cloud.IsRejection(err); !ok || r.Reason != tc.want {
			t.Errorf("%s: %v, want a %s denial", tc.name, err, tc.want)
		}
	}
}
