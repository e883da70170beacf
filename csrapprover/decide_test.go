package csrapprover

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/local/attest"
	"github.com/mooring-dev/mooring/cloud/local/identity"
	"github.com/mooring-dev/mooring/cloud/view"
	"github.com/mooring-dev/mooring/internal/evidence"
	"github.com/mooring-dev/mooring/internal/ticket"
)

const (
	issuer  = "test-cloud"
	cluster = "c1"
)

// fakeInstances is the cloud's record for unit tests.
type fakeInstances map[string]view.Instance

func (f fakeInstances) ByProviderID(_ context.Context, pid string, _ time.Duration) (view.Instance, error) {
	if in, ok := f[pid]; ok {
		return in, nil
	}
	return view.Instance{}, view.ErrNotFound
}

func (f fakeInstances) ByID(_ context.Context, id string, _ time.Duration) (view.Instance, error) {
	for _, in := range f {
		if in.ID == id {
			return in, nil
		}
	}
	return view.Instance{}, view.ErrNotFound
}

// Named lists the instances of a name, case-insensitively, by id.
func (f fakeInstances) Named(_ context.Context, name string, _ time.Duration) ([]view.Instance, error) {
	var out []view.Instance
	for _, in := range f {
		if strings.EqualFold(in.Name, name) {
			out = append(out, in)
		}
	}
	if len(out) == 0 {
		return nil, view.ErrNotFound
	}
	slices.SortFunc(out, func(a, b view.Instance) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// WithAddress lists the instances not terminated that list address, by id.
func (f fakeInstances) WithAddress(_ context.Context, address string, _ time.Duration) ([]view.Instance, error) {
	var out []view.Instance
	key := view.AddressKey(address)
	for _, in := range f {
		if in.State == view.StateTerminated {
			continue
		}
		match := view.AddressKey(in.NodeName) == key
		for _, a := range in.Addresses {
			match = match || view.AddressKey(a.Address) == key
		}
		if match {
			out = append(out, in)
		}
	}
	slices.SortFunc(out, func(a, b view.Instance) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

type fakeNodes map[string]*v1.Node

func (f fakeNodes) WithAddress(address string) ([]*v1.Node, error) {
	var out []*v1.Node
	for _, n := range f {
		for _, a := range n.Status.Addresses {
			if view.AddressKey(a.Address) == view.AddressKey(address) {
				out = append(out, n)
				break
			}
		}
	}
	return out, nil
}

func (f fakeNodes) Get(name string) (*v1.Node, error) {
	if n, ok := f[name]; ok {
		return n, nil
	}
	return nil, apierrors.NewNotFound(v1.Resource("nodes"), name)
}

type fakeReplays map[string]string

func (f fakeReplays) EarlierHolder(_ context.Context, key string, _ *certificatesv1.CertificateSigningRequest) (string, error) {
	return f[key], nil
}

// spentKey is where fakeReplays records a spent ticket.
func spentKey(replayKey string) string { return "spent:" + replayKey }

func (f fakeReplays) SpentBy(_ context.Context, key string, csr *certificatesv1.CertificateSigningRequest) (string, error) {
	if by := f[spentKey(key)]; by != csr.Name {
		return by, nil
	}
	return "", nil
}

func (f fakeReplays) Spend(ctx context.Context, key string, _ time.Time, csr *certificatesv1.CertificateSigningRequest) (string, error) {
	if by, _ := f.SpentBy(ctx, key, csr); by != "" {
		return by, nil
	}
	f[spentKey(key)] = csr.Name
	return "", nil
}

type world struct {
	keys      *identity.KeySet
	otherKeys *identity.KeySet
	// tickets issues join tickets the decider accepts.
	tickets   *ticket.KeySet
	instances fakeInstances
	nodes     fakeNodes
	replays   fakeReplays
	decider   *Decider
}

func instance(id, name string, state view.State, clusterTag string) view.Instance {
	return view.Instance{
		ProviderID: "local://" + id, ID: id, Name: name, NodeName: name, State: state, Cluster: clusterTag,
		Addresses: []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: "127.10.0." + id[len(id)-1:]},
			{Type: v1.NodeHostName, Address: name},
			{Type: v1.NodeInternalDNS, Address: name + ".local-1.localcloud.internal"},
		},
	}
}

func newWorld(t *testing.T) *world {
	t.Helper()
	k, _ := identity.NewKey(time.Now())
	o, _ := identity.NewKey(time.Now())
	w := &world{
		keys: identity.NewKeySet(k), otherKeys: identity.NewKeySet(o),
		instances: fakeInstances{},
		nodes:     fakeNodes{},
		replays:   fakeReplays{},
	}
	for _, in := range []view.Instance{
		instance("i-1", "node-1", view.StateRunning, cluster),
		instance("i-2", "node-2", view.StateRunning, cluster),
		instance("i-3", "node-3", view.StateStopped, cluster),
		instance("i-4", "node-4", view.StateTerminated, cluster),
		instance("i-5", "node-5", view.StateRunning, "other"),
	} {
		// Made a minute ago: after the tickets the tests issue.
		in.Created = time.Now().Add(-time.Minute)
		w.instances[in.ProviderID] = in
	}
	w.tickets = &ticket.KeySet{}
	if _, err := w.tickets.AddKey(); err != nil {
		t.Fatal(err)
	}
	jwks, _ := w.keys.JWKS()
	v, err := attest.New(func(context.Context) ([]byte, error) { return jwks, nil }, attest.Options{Issuer: issuer})
	if err != nil {
		t.Fatal(err)
	}
	w.decider = NewDecider(Config{Cluster: cluster, ReservedNames: []string{"api.example.com"},
		MaxExpiration: 8760 * time.Hour},
		[]cloud.EvidenceVerifier{v, NewTicketVerifier(staticTicketKeys(w.tickets.PublicKeys()), cluster)}, w.instances, w.nodes, w.replays)
	return w
}

// claims are an identity token's claims about instance id, issued at at
// for audience, valid 5 minutes.
func (w *world) claims(t *testing.T, id, audience string, at time.Time) identity.Claims {
	t.Helper()
	in := w.instances["local://"+id]
	c, err := identity.NewClaims(issuer, audience, identity.InstanceClaims{ID: id, Name: in.Name, Cluster: in.Cluster}, at, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (w *world) token(t *testing.T, keys *identity.KeySet, id, audience string, at time.Time) []byte {
	t.Helper()
	tok, err := keys.Sign(w.claims(t, id, audience, at))
	if err != nil {
		t.Fatal(err)
	}
	return []byte(tok)
}

type csrSpec struct {
	cn, username string
	orgs, groups []string
	dns          []string
	ips          []string
	emails       []string
	uris         []string
	usages       []certificatesv1.KeyUsage
	signer       string
	evidence     func(binding string) []evidence.Block
	// evidenceT makes the evidence with the world and test at hand.
	evidenceT      func(w *world, t *testing.T, binding string) []evidence.Block
	rawRequest     []byte
	keyForEvidence crypto.PublicKey // when set, the evidence is bound to this key instead
	// key signs the request (default: a fresh ECDSA P-256 key).
	key crypto.Signer
	// extraNames, ous and extensions go into the request as they are.
	extraNames []pkix.AttributeTypeAndValue
	// rawSubject replaces the subject built from the fields above.
	rawSubject pkix.RDNSequence
	ous        []string
	extensions []pkix.Extension
	// expirationSeconds is spec.expirationSeconds.
	expirationSeconds *int32
	// transform rewrites the encoded request.
	transform func([]byte) []byte
}

func (w *world) csr(t *testing.T, s csrSpec) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	key := s.key
	if key == nil {
		key, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	tmpl := &x509.CertificateRequest{
		Subject:  pkix.Name{CommonName: s.cn, Organization: s.orgs, OrganizationalUnit: s.ous, ExtraNames: s.extraNames},
		DNSNames: s.dns, EmailAddresses: s.emails, ExtraExtensions: s.extensions,
	}
	if s.rawSubject != nil {
		raw, err := asn1.Marshal(s.rawSubject)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.RawSubject = raw
	}
	for _, ip := range s.ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	for _, u := range s.uris {
		pu, _ := url.Parse(u)
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []evidence.Block
	if s.evidence != nil || s.evidenceT != nil {
		pub := key.Public()
		if s.keyForEvidence != nil {
			pub = s.keyForEvidence
		}
		b, _ := evidence.Binding(pub)
		if s.evidenceT != nil {
			blocks = s.evidenceT(w, t, b)
		} else {
			blocks = s.evidence(b)
		}
	}
	req := s.rawRequest
	if req == nil {
		if req, err = evidence.Encode(der, blocks...); err != nil {
			t.Fatal(err)
		}
	}
	if s.transform != nil {
		req = s.transform(req)
	}
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "csr-test", UID: "uid-test", CreationTimestamp: metav1.Now()},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request: req, SignerName: s.signer, Usages: s.usages, Username: s.username, Groups: s.groups,
			ExpirationSeconds: s.expirationSeconds,
		},
	}
}

var (
	clientUsages  = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	servingUsages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}
)

// joinSpec is a valid join of node-1 by a bootstrap token holder.
func (w *world) joinSpec(t *testing.T) csrSpec {
	return csrSpec{
		cn: "system:node:node-1", orgs: []string{"system:nodes"},
		username: "system:bootstrap:abcdef", groups: []string{"system:bootstrappers", "system:authenticated"},
		usages: clientUsages, signer: certificatesv1.KubeAPIServerClientKubeletSignerName,
		evidence: func(b string) []evidence.Block {
			return []evidence.Block{{Type: attest.Type, Data: w.token(t, w.keys, "i-1", b, time.Now())}}
		},
	}
}

// servingSpec is a valid serving request of node-1.
func servingSpec() csrSpec {
	return csrSpec{
		cn: "system:node:node-1", orgs: []string{"system:nodes"},
		username: "system:node:node-1", groups: []string{"system:nodes", "system:authenticated"},
		usages: servingUsages, signer: certificatesv1.KubeletServingSignerName,
		dns: []string{"node-1", "node-1.local-1.localcloud.internal"}, ips: []string{"127.10.0.1"},
	}
}

func (w *world) decide(t *testing.T, csr *certificatesv1.CertificateSigningRequest) Decision {
	t.Helper()
	d, err := w.decider.Decide(context.Background(), csr)
	if err != nil {
		t.Fatalf("Decide: %v", err)
	}
	return d
}

func TestValidRequestsAreApproved(t *testing.T) {
	w := newWorld(t)
	if d := w.decide(t, w.csr(t, w.joinSpec(t))); !d.Approve || !strings.Contains(d.Message, "i-1") {
		t.Fatalf("join: %+v", d)
	}
	w.nodes["node-1"] = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Spec: v1.NodeSpec{ProviderID: "local://i-1"}}
	if d := w.decide(t, w.csr(t, servingSpec())); !d.Approve {
		t.Fatalf("serving: %+v", d)
	}
	mixed := servingSpec()
	mixed.dns = []string{"NODE-1.", "Node-1.Local-1.LocalCloud.Internal"}
	if d := w.decide(t, w.csr(t, mixed)); !d.Approve {
		t.Fatalf("serving, mixed case and trailing dots of its own names: %+v", d)
	}
	renew := w.joinSpec(t)
	renew.username, renew.groups, renew.evidence = "system:node:node-1", []string{"system:nodes"}, nil
	if d := w.decide(t, w.csr(t, renew)); !d.Approve {
		t.Fatalf("renewal: %+v", d)
	}
}

func TestBadClientRequestsAreDenied(t *testing.T) {
	w := newWorld(t)
	taken := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-2"}, Spec: v1.NodeSpec{ProviderID: "local://i-9"}}
	ready := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Spec: v1.NodeSpec{ProviderID: "local://i-1"},
		Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}}}
	otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tokenFor := func(keys *identity.KeySet, id string, at time.Time) func(string) []evidence.Block {
		return func(b string) []evidence.Block {
			return []evidence.Block{{Type: attest.Type, Data: w.token(t, keys, id, b, at)}}
		}
	}
	cases := []struct {
		name   string
		mutate func(*csrSpec)
		setup  func()
		reason string
	}{
		{"forged evidence (another key)", func(s *csrSpec) { s.evidence = tokenFor(w.otherKeys, "i-1", time.Now()) }, nil, ReasonEvidenceSignature},
		{"re-signed evidence", func(s *csrSpec) {
			s.evidence = func(b string) []evidence.Block {
				tok := string(w.token(t, w.keys, "i-1", b, time.Now()))
				parts := strings.Split(tok, ".")
				forged := parts[0] + "." + parts[1] + "." + strings.Split(string(w.token(t, w.otherKeys, "i-1", b, time.Now())), ".")[2]
				return []evidence.Block{{Type: attest.Type, Data: []byte(forged)}}
			}
		}, nil, ReasonEvidenceSignature},
		{"evidence of another instance", func(s *csrSpec) { s.evidence = tokenFor(w.keys, "i-2", time.Now()) }, nil, ReasonNodeNameMismatch},
		{"evidence bound to another key", func(s *csrSpec) { s.keyForEvidence = &otherKey.PublicKey }, nil, ReasonEvidenceNotBound},
		{"expired evidence", func(s *csrSpec) { s.evidence = tokenFor(w.keys, "i-1", time.Now().Add(-time.Hour)) }, nil, ReasonEvidenceExpired},
		{"future evidence", func(s *csrSpec) { s.evidence = tokenFor(w.keys, "i-1", time.Now().Add(time.Hour)) }, nil, ReasonEvidenceExpired},
		{"replayed evidence", nil, func() { w.replays["*"] = "csr-earlier" }, ReasonEvidenceReplayed},
		{"missing evidence", func(s *csrSpec) { s.evidence = nil }, nil, ReasonNoEvidence},
		{"unknown evidence type", func(s *csrSpec) {
			s.evidence = func(string) []evidence.Block {
				return []evidence.Block{{Type: "AWS IDENTITY DOCUMENT", Data: []byte("{}")}}
			}
		}, nil, ReasonUnknownEvidence},
		{"requester not a bootstrapper", func(s *csrSpec) { s.groups = []string{"system:authenticated"} }, nil, ReasonRequesterNotAllowed},
		{"another node renewing", func(s *csrSpec) { s.username, s.groups = "system:node:node-2", []string{"system:nodes"} }, nil, ReasonRequesterMismatch},
		{"extra O", func(s *csrSpec) { s.orgs = []string{"system:nodes", "system:masters"} }, nil, ReasonBadSubject},
		{"wrong CN", func(s *csrSpec) { s.cn = "admin" }, nil, ReasonBadSubject},
		{"SANs on a client CSR", func(s *csrSpec) { s.dns = []string{"node-1"} }, nil, ReasonSANsOnClientCert},
		{"server usage", func(s *csrSpec) { s.usages = append(clientUsages, certificatesv1.UsageServerAuth) }, nil, ReasonBadUsages},
		{"missing client auth", func(s *csrSpec) { s.usages = clientUsages[:1] }, nil, ReasonBadUsages},
		{"instance stopped", func(s *csrSpec) { s.cn = "system:node:node-3"; s.evidence = tokenFor(w.keys, "i-3", time.Now()) }, nil, ReasonInstanceNotRunning},
		{"instance terminated", func(s *csrSpec) { s.cn = "system:node:node-4"; s.evidence = tokenFor(w.keys, "i-4", time.Now()) }, nil, ReasonInstanceNotRunning},
		{"instance of another cluster", func(s *csrSpec) { s.cn = "system:node:node-5"; s.evidence = tokenFor(w.keys, "i-5", time.Now()) }, nil, ReasonInstanceNotInCluster},
		{"node name taken by another instance", func(s *csrSpec) { s.cn = "system:node:node-2"; s.evidence = tokenFor(w.keys, "i-2", time.Now()) },
			func() { w.nodes["node-2"] = taken }, ReasonNodeNameTaken},
		{"ready node joins again", nil, func() { w.nodes["node-1"] = ready }, ReasonNodeAlreadyJoined},
		{"malformed PEM", func(s *csrSpec) { s.rawRequest = []byte("-----BEGIN CERTIFICATE REQUEST-----\nnope\n") }, nil, ReasonMalformedRequest},
		{"garbage after the CSR", func(s *csrSpec) { s.rawRequest = append(w.csr(t, w.joinSpec(t)).Spec.Request, "garbage"...) }, nil, ReasonMalformedRequest},
		{"1 MiB request", func(s *csrSpec) { s.rawRequest = bytes.Repeat([]byte("A"), 1<<20) }, nil, ReasonRequestTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w.nodes, w.replays = fakeNodes{}, fakeReplays{}
			w.decider.nodes, w.decider.replays = w.nodes, replayAll{w.replays}
			if tc.setup != nil {
				tc.setup()
			}
			s := w.joinSpec(t)
			if tc.mutate != nil {
				tc.mutate(&s)
			}
			d := w.decide(t, w.csr(t, s))
			if d.Approve || d.Reason != tc.reason {
				t.Fatalf("decision %+v, want denied with %s", d, tc.reason)
			}
		})
	}
}

// replayAll answers for every key with the "*" entry, if any.
type replayAll struct{ m fakeReplays }

func (r replayAll) EarlierHolder(context.Context, string, *certificatesv1.CertificateSigningRequest) (string, error) {
	return r.m["*"], nil
}

func (r replayAll) SpentBy(ctx context.Context, key string, csr *certificatesv1.CertificateSigningRequest) (string, error) {
	return r.m.SpentBy(ctx, key, csr)
}

func (r replayAll) Spend(ctx context.Context, key string, expiry time.Time, csr *certificatesv1.CertificateSigningRequest) (string, error) {
	return r.m.Spend(ctx, key, expiry, csr)
}

func TestBadServingRequestsAreDenied(t *testing.T) {
	w := newWorld(t)
	cases := []struct {
		name   string
		mutate func(*csrSpec)
		reason string
	}{
		{"another node's IP", func(s *csrSpec) { s.ips = []string{"127.10.0.2"} }, ReasonSANNotOfInstance},
		{"another node's name", func(s *csrSpec) { s.dns = []string{"node-2"} }, ReasonSANNotOfInstance},
		{"wildcard", func(s *csrSpec) { s.dns = []string{"*.local-1.localcloud.internal"} }, ReasonBadSAN},
		{"kubernetes.default.svc", func(s *csrSpec) { s.dns = []string{"kubernetes.default.svc"} }, ReasonReservedName},
		{"mixed-case trailing-dot cluster name", func(s *csrSpec) { s.dns = []string{"KUBERNETES.Default.SVC.cluster.local."} }, ReasonReservedName},
		{"the apiserver's name", func(s *csrSpec) { s.dns = []string{"API.example.com."} }, ReasonReservedName},
		{"email SAN", func(s *csrSpec) { s.emails = []string{"a@b.c"} }, ReasonBadSAN},
		{"URI SAN", func(s *csrSpec) { s.uris = []string{"spiffe://x/y"} }, ReasonBadSAN},
		{"too many SANs", func(s *csrSpec) { s.dns = strings.Split(strings.Repeat("node-1,", 17), ",")[:17] }, ReasonTooManySANs},
		{"requester is another node", func(s *csrSpec) { s.username = "system:node:node-2" }, ReasonRequesterMismatch},
		{"requester not in system:nodes", func(s *csrSpec) { s.groups = []string{"system:authenticated"} }, ReasonRequesterMismatch},
		{"client usage", func(s *csrSpec) { s.usages = append(servingUsages, certificatesv1.UsageClientAuth) }, ReasonBadUsages},
		{"extra O", func(s *csrSpec) { s.orgs = []string{"system:nodes", "x"} }, ReasonBadSubject},
	}
	w.nodes["node-1"] = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Spec: v1.NodeSpec{ProviderID: "local://i-1"}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := servingSpec()
			tc.mutate(&s)
			if d := w.decide(t, w.csr(t, s)); d.Approve || d.Reason != tc.reason {
				t.Fatalf("decision %+v, want denied with %s", d, tc.reason)
			}
		})
	}
	// The Node's instance is stopped, or the Node is unknown or uninitialized.
	w.nodes["node-3"] = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-3"}, Spec: v1.NodeSpec{ProviderID: "local://i-3"}}
	w.nodes["node-6"] = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-6"}}
	for node, reason := range map[string]string{"node-3": ReasonInstanceNotRunning, "node-7": ReasonNodeNotFound, "node-6": ReasonNodeNotInitialized} {
		s := servingSpec()
		s.cn, s.username, s.dns, s.ips = "system:node:"+node, "system:node:"+node, []string{node}, nil
		if d := w.decide(t, w.csr(t, s)); d.Approve || d.Reason != reason {
			t.Errorf("%s: decision %+v, want %s", node, d, reason)
		}
	}
}

// failingInstances stands for a cloud outage.
type failingInstances struct{}

func (failingInstances) ByProviderID(context.Context, string, time.Duration) (view.Instance, error) {
	return view.Instance{}, errors.New("cloud down")
}

func (failingInstances) ByID(context.Context, string, time.Duration) (view.Instance, error) {
	return view.Instance{}, errors.New("cloud down")
}

func (failingInstances) Named(context.Context, string, time.Duration) ([]view.Instance, error) {
	return nil, errors.New("cloud down")
}

func (failingInstances) WithAddress(context.Context, string, time.Duration) ([]view.Instance, error) {
	return nil, errors.New("cloud down")
}

func TestCloudOutageDecidesNothing(t *testing.T) {
	w := newWorld(t)
	w.decider.instances = failingInstances{}
	if d, err := w.decider.Decide(context.Background(), w.csr(t, w.joinSpec(t))); err == nil {
		t.Fatalf("a cloud outage produced a decision: %+v", d)
	}
	w.nodes["node-1"] = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Spec: v1.NodeSpec{ProviderID: "local://i-1"}}
	if d, err := w.decider.Decide(context.Background(), w.csr(t, servingSpec())); err == nil {
		t.Fatalf("a cloud outage produced a decision: %+v", d)
	}
}

func TestLookAlikeSignerIsNotOurs(t *testing.T) {
	csr := &certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{SignerName: "kubernetes.io/kube-apiserver-client-kubelet2"}}
	if ours(csr) {
		t.Fatal("a look-alike signer is handled")
	}
	for _, s := range []string{"kubernetes.io/kube-apiserver-client", "example.com/kubelet-serving", "Kubernetes.io/kubelet-serving"} {
		csr.Spec.SignerName = s
		if ours(csr) {
			t.Errorf("%s is handled", s)
		}
	}
}

// listSource is a cloud whose instances a test edits.
type listSource struct {
	mu    sync.Mutex
	items []view.Instance
}

func (s *listSource) ListInstances(context.Context) ([]view.Instance, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.items), nil
}

func (s *listSource) set(items ...view.Instance) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.items = items
}

// The documented bound of --instance-max-age: an instance terminated less
// than that long before a decision may still be seen running (the join is
// approved), and is not once the record is older.
func TestInstanceMaxAgeBound(t *testing.T) {
	w := newWorld(t)
	clk := testingclock.NewFakePassiveClock(time.Now())
	src := &listSource{}
	src.set(w.instances["local://i-1"])
	v := view.New(src, view.Options{Clock: clk, MinRefreshInterval: time.Millisecond})
	w.decider.instances = v
	w.decider.cfg.InstanceMaxAge = 10 * time.Second
	if d := w.decide(t, w.csr(t, w.joinSpec(t))); !d.Approve {
		t.Fatalf("running instance: %+v", d)
	}
	terminated := w.instances["local://i-1"]
	terminated.State = view.StateTerminated
	src.set(terminated)
	clk.SetTime(clk.Now().Add(9 * time.Second))
	if d := w.decide(t, w.csr(t, w.joinSpec(t))); !d.Approve {
		t.Fatalf("within instance-max-age of the last list the record is believed: %+v", d)
	}
	clk.SetTime(clk.Now().Add(2 * time.Second))
	if d := w.decide(t, w.csr(t, w.joinSpec(t))); d.Approve || d.Reason != ReasonInstanceNotRunning {
		t.Fatalf("past instance-max-age: %+v, want %s", d, ReasonInstanceNotRunning)
	}
}

// checkingVerifier is a verifier with a check of the instance's current
// record (cloud.InstanceChecker) that answers err.
type checkingVerifier struct {
	cloud.EvidenceVerifier
	err error
	// saw is the instance and attestation the check was given.
	saw struct {
		att cloud.Attestation
		in  view.Instance
	}
}

func (v *checkingVerifier) CheckInstance(att cloud.Attestation, in view.Instance) error {
	v.saw.att, v.saw.in = att, in
	return v.err
}

// A verifier's instance check runs on the instance found for a join: its
// rejection denies with its reason, any other error decides nothing, and
// renewals do not run it.
func TestVerifierInstanceCheck(t *testing.T) {
	w := newWorld(t)
	local := w.decider.verifiers[attest.Type]
	for _, tc := range []struct {
		err  error
		want string // a reason, or "" for no decision
	}{
		{nil, ReasonApproved},
		{cloud.Reject(cloud.RejectInstanceIdentity, errors.New("profile swapped")), ReasonInstanceIdentity},
		{errors.New("unreadable record"), ""},
	} {
		v := &checkingVerifier{EvidenceVerifier: local, err: tc.err}
		w.decider.verifiers[attest.Type] = v
		d, err := w.decider.Decide(context.Background(), w.csr(t, w.joinSpec(t)))
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("check error %v: decided %+v", tc.err, d)
		case tc.want != "" && (err != nil || d.Reason != tc.want || d.Approve != (tc.want == ReasonApproved)):
			t.Errorf("check error %v: %+v, %v; want %s", tc.err, d, err, tc.want)
		}
		if v.saw.in.ID != "i-1" || v.saw.att.InstanceID != "i-1" {
			t.Errorf("the check saw instance %q for evidence of %q", v.saw.in.ID, v.saw.att.InstanceID)
		}
	}
	w.nodes["node-1"] = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Spec: v1.NodeSpec{ProviderID: "local://i-1"}}
	renew := w.joinSpec(t)
	renew.username, renew.groups, renew.evidence = "system:node:node-1", []string{"system:nodes"}, nil
	if d := w.decide(t, w.csr(t, renew)); !d.Approve {
		t.Fatalf("renewal with a failing instance check: %+v", d)
	}
}
