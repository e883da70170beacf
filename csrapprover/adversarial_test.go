package csrapprover

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/local/attest"
	"github.com/mooring-dev/mooring/cloud/local/identity"
	"github.com/mooring-dev/mooring/cloud/view"
	"github.com/mooring-dev/mooring/csrapprover/spent"
	"github.com/mooring-dev/mooring/internal/evidence"
	"github.com/mooring-dev/mooring/internal/ticket"
)

// The adversarial suite: named attacks on the join path, each against the
// real decision code (the Decider, and the controller's replay index where
// the attack needs earlier CSRs), each with the exact outcome expected.
//
// Outcomes besides a deny reason:
const (
	// outcomePending: no decision; the CSR is retried (a cloud or API error).
	outcomePending = "pending"
	// outcomeApproved: the legitimate CSR an attack tried to block.
	outcomeApproved = "approved"
	// outcomeIgnored: not a signer the approver acts on.
	outcomeIgnored = "ignored"
)

type attack struct {
	name string
	// base is the valid request the attack starts from: "join", "ticket"
	// (a join with a join ticket), "serving" or "renewal".
	base   string
	mutate func(w *world, s *csrSpec)
	// setup changes the world first (nodes, cloud).
	setup func(w *world)
	// earlier are CSRs filed before the attack's (for replay attacks), made
	// from the attack's own spec and key where keyed is set.
	earlier func(w *world, t *testing.T, mine *certificatesv1.CertificateSigningRequest) []*certificatesv1.CertificateSigningRequest
	// deleted are CSRs filed and approved before the attack's, then
	// deleted (as kube-controller-manager's CSR cleaner deletes decided
	// CSRs after an hour): the replay index no longer holds them.
	deleted func(w *world, t *testing.T, mine *certificatesv1.CertificateSigningRequest) []*certificatesv1.CertificateSigningRequest
	// want is the outcome: a deny reason or one of the outcomes above.
	want string
	// apiserver says when the kube-apiserver already refuses the request
	// (the case is listed all the same, the approver must refuse it too).
	apiserver string
}

func attackBase(w *world, t *testing.T, base string) csrSpec {
	switch base {
	case "join":
		return w.joinSpec(t)
	case "ticket":
		return w.ticketJoinSpec(t)
	case "serving":
		return servingSpec()
	case "renewal":
		s := w.joinSpec(t)
		s.username, s.groups, s.evidence = "system:node:node-1", []string{"system:nodes", "system:authenticated"}, nil
		return s
	}
	t.Fatalf("unknown base %q", base)
	return csrSpec{}
}

// adversarialNodes is the cluster every attack starts from: node-1 and
// node-2 registered and initialized (not Ready, so node-1 may still join),
// node-3 on a stopped instance, node-4 on a terminated one, node-5 on an
// instance of another cluster, node-6 not initialized.
func adversarialNodes() fakeNodes {
	n := func(name, pid string) *v1.Node {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NodeSpec{ProviderID: pid}}
	}
	return fakeNodes{
		"node-1": n("node-1", "local://i-1"), "node-2": n("node-2", "local://i-2"), "node-3": n("node-3", "local://i-3"),
		"node-4": n("node-4", "local://i-4"), "node-5": n("node-5", "local://i-5"), "node-6": n("node-6", ""),
	}
}

// token signs claims about instance id with keys, bound to binding.
func tokenWith(t *testing.T, w *world, keys *identity.KeySet, id, binding string, edit func(*identity.Claims)) []byte {
	t.Helper()
	c := w.claims(t, id, binding, time.Now())
	if edit != nil {
		edit(&c)
	}
	tok, err := keys.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	return []byte(tok)
}

func evidenceOf(data []byte) []evidence.Block {
	return []evidence.Block{{Type: attest.Type, Data: data}}
}

// handMadeToken builds a compact JWS around a header the attacker chose,
// with the attacker's signature bytes: only to be refused.
func handMadeToken(t *testing.T, header map[string]any, claims any, sign func(input []byte) []byte) []byte {
	t.Helper()
	h, _ := json.Marshal(header)
	p, _ := json.Marshal(claims)
	b64 := base64.RawURLEncoding.EncodeToString
	input := b64(h) + "." + b64(p)
	return []byte(input + "." + b64(sign([]byte(input))))
}

func withEvidence(f func(w *world, t *testing.T, binding string) []evidence.Block) func(*world, *csrSpec) {
	return func(w *world, s *csrSpec) { s.evidenceT = f }
}

var (
	oidUID      = asn1.ObjectIdentifier{0, 9, 2342, 19200300, 100, 1, 1}
	oidKeyUsage = asn1.ObjectIdentifier{2, 5, 29, 15}
)

// knowsAPIServer: the approver has learned the apiserver's serving
// certificate (api.example.internal, 10.0.0.10), and node-1's instance
// claims that name and IP.
func knowsAPIServer(w *world) {
	n := newAPIServerNames("test", func(context.Context) (*x509.Certificate, error) {
		return &x509.Certificate{DNSNames: []string{"api.example.internal"}, IPAddresses: []net.IP{net.ParseIP("10.0.0.10")}}, nil
	})
	_, _ = n.Refresh(context.Background()) // cannot fail; if it did, the attack would stay pending
	w.decider.cfg.APIServerNames = n
	claimsAPIServer(w, "api.example.internal", "10.0.0.10")
}

func mustKey[K crypto.Signer](k K, err error) crypto.Signer {
	if err != nil {
		panic(err)
	}
	return k
}

func int32p(v int32) *int32 { return &v }

func attacks() []attack {
	set := func(f func(s *csrSpec)) func(*world, *csrSpec) { return func(_ *world, s *csrSpec) { f(s) } }
	servingAs := func(node string) func(s *csrSpec) {
		return func(s *csrSpec) {
			s.cn, s.username, s.dns, s.ips = "system:node:"+node, "system:node:"+node, []string{node}, nil
		}
	}
	renewalAs := func(node string) func(s *csrSpec) {
		return func(s *csrSpec) { s.cn, s.username = "system:node:"+node, "system:node:"+node }
	}
	joinAs := func(node, id string) func(w *world, s *csrSpec) {
		return func(w *world, s *csrSpec) {
			s.cn = "system:node:" + node
			s.evidenceT = func(w *world, t *testing.T, b string) []evidence.Block {
				return evidenceOf(tokenWith(t, w, w.keys, id, b, nil))
			}
		}
	}
	token := func(edit func(*identity.Claims)) func(*world, *csrSpec) {
		return withEvidence(func(w *world, t *testing.T, b string) []evidence.Block {
			return evidenceOf(tokenWith(t, w, w.keys, "i-1", b, edit))
		})
	}
	outage := func(w *world) { w.decider.instances = failingInstances{} }
	withTicket := func(make func(w *world, t *testing.T) []byte) func(*world, *csrSpec) {
		return withEvidence(func(w *world, t *testing.T, _ string) []evidence.Block { return ticketEvidence(make(w, t)) })
	}
	// ticketIssued is a ticket for the instance called name, issued ago
	// (negative: in the future), living life.
	ticketIssued := func(name string, ago, life time.Duration) func(*world, *csrSpec) {
		return withTicket(func(w *world, t *testing.T) []byte {
			return issueTicket(t, w.tickets, name, cluster, time.Now().Add(-ago), life)
		})
	}
	ticketAs := func(node, ticketName string) func(*world, *csrSpec) {
		return func(w *world, s *csrSpec) {
			s.cn = "system:node:" + node
			ticketIssued(ticketName, 5*time.Minute, time.Hour)(w, s)
		}
	}
	ticketClaims := func(edit func(map[string]any)) func(*world, *csrSpec) {
		return withTicket(func(w *world, t *testing.T) []byte {
			return signTicket(t, w.tickets, w.tickets.SigningKey(), nil, edit)
		})
	}
	instanceEdit := func(id string, edit func(*view.Instance)) func(*world) {
		return func(w *world) {
			in := w.instances["local://"+id]
			edit(&in)
			w.instances[in.ProviderID] = in
		}
	}
	// listing adds an address to an instance's record; asserting adds
	// one a guest or a tenant asserts.
	listing := func(t v1.NodeAddressType, addr string) func(*view.Instance) {
		return func(in *view.Instance) {
			in.Addresses = append(slices.Clone(in.Addresses), v1.NodeAddress{Type: t, Address: addr})
		}
	}
	asserting := func(t v1.NodeAddressType, addr, by string) func(*view.Instance) {
		return func(in *view.Instance) {
			listing(t, addr)(in)
			in.Asserted = map[string]string{addr: by}
		}
	}
	createdAt := func(d time.Duration) func(*view.Instance) {
		return func(in *view.Instance) { in.Created = time.Now().Add(d) }
	}
	return []attack{
		// Serving certificates for what a guest or a tenant asserts
		// (VMware Tools' guest.net and guest.hostName on vSphere,
		// accessIPv4 and the hostname metadata item on OpenStack): the
		// instance lists them, so they used to be approved.
		{name: "serving/an IP only the guest reports", base: "serving",
			setup:  instanceEdit("i-1", asserting(v1.NodeInternalIP, "127.10.0.77", "VMware Tools (guest.net)")),
			mutate: set(func(s *csrSpec) { s.ips = []string{"127.10.0.77"} }), want: ReasonSANAsserted},
		{name: "serving/a host name only the tenant sets", base: "serving",
			setup:  instanceEdit("i-1", asserting(v1.NodeHostName, "payments-db", "the server's metadata item hostname")),
			mutate: set(func(s *csrSpec) { s.dns = []string{"PAYMENTS-DB."} }), want: ReasonSANAsserted},
		// A source the backend trusts, reporting another node's address or
		// name: the instance lists it, and so does the owner (instance or
		// Node); neither gets a certificate for it.
		{name: "serving/another instance's IP, reported as its own", base: "serving",
			setup:  instanceEdit("i-1", listing(v1.NodeInternalIP, "127.10.0.2")),
			mutate: set(func(s *csrSpec) { s.ips = []string{"127.10.0.2"} }), want: ReasonAddressClaimedTwice},
		{name: "serving/another instance's node name, reported as its host name", base: "serving",
			setup:  instanceEdit("i-1", listing(v1.NodeHostName, "node-2")),
			mutate: set(func(s *csrSpec) { s.dns = []string{"node-2"} }), want: ReasonAddressClaimedTwice},
		{name: "serving/an IP another Node carries, no instance listing it", base: "serving",
			setup: func(w *world) {
				instanceEdit("i-1", listing(v1.NodeExternalIP, "127.10.0.99"))(w)
				w.nodes["node-2"].Status.Addresses = []v1.NodeAddress{{Type: v1.NodeExternalIP, Address: "127.10.0.99"}}
			},
			mutate: set(func(s *csrSpec) { s.ips = []string{"127.10.0.99"} }), want: ReasonAddressClaimedTwice},
		{name: "serving/the name of a Node not yet initialized, reported as its host name", base: "serving",
			setup:  instanceEdit("i-1", listing(v1.NodeHostName, "node-6")),
			mutate: set(func(s *csrSpec) { s.dns = []string{"Node-6."} }), want: ReasonAddressClaimedTwice},
		{name: "serving/its own IP, which another running instance lists too", base: "serving",
			setup:  instanceEdit("i-2", listing(v1.NodeInternalIP, "127.10.0.1")),
			mutate: set(func(s *csrSpec) { s.dns = nil }), want: ReasonAddressClaimedTwice},
		// Serving certificates: other nodes' addresses and names, in every form.
		{name: "serving/another node's InternalIP", base: "serving", mutate: set(func(s *csrSpec) { s.ips = []string{"127.10.0.2"} }), want: ReasonSANNotOfInstance},
		{name: "serving/another node's IP as IPv4-mapped IPv6", base: "serving", mutate: set(func(s *csrSpec) { s.ips = []string{"::ffff:127.10.0.2"} }), want: ReasonSANNotOfInstance},
		{name: "serving/another node's hostname", base: "serving", mutate: set(func(s *csrSpec) { s.dns = []string{"node-2"} }), want: ReasonSANNotOfInstance},
		{name: "serving/another node's internal DNS name", base: "serving", mutate: set(func(s *csrSpec) { s.dns = []string{"node-2.local-1.localcloud.internal"} }), want: ReasonSANNotOfInstance},
		{name: "serving/another node's name upper case with a trailing dot", base: "serving", mutate: set(func(s *csrSpec) { s.dns = []string{"NODE-2."} }), want: ReasonSANNotOfInstance},
		{name: "serving/another node's IP written as a DNS SAN", base: "serving", mutate: set(func(s *csrSpec) { s.dns = []string{"127.10.0.2"} }), want: ReasonSANNotOfInstance},
		{name: "serving/IPv6 loopback", base: "serving", mutate: set(func(s *csrSpec) { s.ips = []string{"::1"} }), want: ReasonSANNotOfInstance},
		{name: "serving/unspecified address 0.0.0.0", base: "serving", mutate: set(func(s *csrSpec) { s.ips = []string{"0.0.0.0"} }), want: ReasonSANNotOfInstance},
		{name: "serving/its own IP plus another node's", base: "serving", mutate: set(func(s *csrSpec) { s.ips = []string{"127.10.0.1", "127.10.0.2"} }), want: ReasonSANNotOfInstance},
		{name: "serving/a subdomain of its own name", base: "serving", mutate: set(func(s *csrSpec) { s.dns = []string{"evil.node-1.local-1.localcloud.internal"} }), want: ReasonSANNotOfInstance},
		// The cluster's own names.
		{name: "serving/kubernetes", base: "serving", mutate: set(func(s *csrSpec) { s.dns = []string{"kubernetes"} }), want: ReasonReservedName},
		{name: "serving/kubernetes.default.svc.cluster.local mixed case with a dot", base: "serving", mutate: set(func(s *csrSpec) { s.dns = []string{"Kubernetes.Default.SVC.cluster.local."} }), want: ReasonReservedName},
		{name: "serving/localhost", base: "serving", mutate: set(func(s *csrSpec) { s.dns = []string{"localhost"} }), want: ReasonReservedName},
		{name: "serving/a Service's name", base: "serving", mutate: set(func(s *csrSpec) { s.dns = []string{"vault.secrets.svc"} }), want: ReasonReservedName},
		{name: "serving/the apiserver's configured name", base: "serving", mutate: set(func(s *csrSpec) { s.dns = []string{"api.example.com"} }), want: ReasonReservedName},
		// Names and IPs of the apiserver's serving certificate, learned in
		// the TLS handshake with it, which node-1's instance claims as its
		// own hostname and address.
		{name: "serving/the apiserver's certificate name as the instance's hostname", base: "serving", setup: knowsAPIServer,
			mutate: set(func(s *csrSpec) { s.dns = []string{"api.example.internal"} }), want: ReasonReservedName},
		{name: "serving/the apiserver's certificate IP as the instance's address", base: "serving", setup: knowsAPIServer,
			mutate: set(func(s *csrSpec) { s.ips = []string{"10.0.0.10"} }), want: ReasonReservedName},
		{name: "serving/before the apiserver's certificate was seen", base: "serving", setup: func(w *world) {
			w.decider.cfg.APIServerNames = newAPIServerNames("test", func(context.Context) (*x509.Certificate, error) { return nil, errors.New("no handshake yet") })
		}, want: outcomePending},
		// Wildcards and SAN types.
		{name: "serving/wildcard of its own domain", base: "serving", mutate: set(func(s *csrSpec) { s.dns = []string{"*.local-1.localcloud.internal"} }), want: ReasonBadSAN},
		{name: "serving/a bare wildcard", base: "serving", mutate: set(func(s *csrSpec) { s.dns = []string{"*"} }), want: ReasonBadSAN},
		{name: "serving/email SAN", base: "serving", mutate: set(func(s *csrSpec) { s.emails = []string{"root@node-1"} }), want: ReasonBadSAN},
		{name: "serving/URI SAN", base: "serving", mutate: set(func(s *csrSpec) { s.uris = []string{"spiffe://cluster.local/ns/kube-system/sa/admin"} }), want: ReasonBadSAN},
		{name: "serving/no SAN at all", base: "serving", mutate: set(func(s *csrSpec) { s.dns, s.ips = nil, nil }), want: ReasonTooManySANs},
		{name: "serving/17 SANs", base: "serving", mutate: set(func(s *csrSpec) { s.dns = strings.Split(strings.Repeat("node-1,", 17), ",")[:17] }), want: ReasonTooManySANs},
		// Requester and usage tricks.
		{name: "serving/requested by another node", base: "serving", mutate: set(func(s *csrSpec) { s.username = "system:node:node-2" }), want: ReasonRequesterMismatch,
			apiserver: "NodeRestriction refuses a node's CSR whose CN names another node"},
		{name: "serving/requester outside system:nodes", base: "serving", mutate: set(func(s *csrSpec) { s.groups = []string{"system:authenticated"} }), want: ReasonRequesterMismatch},
		{name: "serving/requested with a bootstrap token", base: "serving", mutate: set(func(s *csrSpec) {
			s.username, s.groups = "system:bootstrap:abcdef", []string{"system:bootstrappers"}
		}), want: ReasonRequesterMismatch},
		{name: "serving/client auth added", base: "serving", mutate: set(func(s *csrSpec) { s.usages = append(servingUsages, certificatesv1.UsageClientAuth) }), want: ReasonBadUsages},
		{name: "serving/server auth missing", base: "serving", mutate: set(func(s *csrSpec) { s.usages = servingUsages[:1] }), want: ReasonBadUsages},
		{name: "serving/key encipherment on an ECDSA key", base: "serving", mutate: set(func(s *csrSpec) { s.usages = append(servingUsages, certificatesv1.UsageKeyEncipherment) }), want: ReasonBadUsages},
		{name: "serving/cert sign usage", base: "serving", mutate: set(func(s *csrSpec) { s.usages = append(servingUsages, certificatesv1.UsageCertSign) }), want: ReasonBadUsages},
		// The instance behind the node.
		{name: "serving/node not initialized", base: "serving", mutate: set(servingAs("node-6")), want: ReasonNodeNotInitialized},
		{name: "serving/node unknown", base: "serving", mutate: set(servingAs("node-9")), want: ReasonNodeNotFound},
		{name: "serving/instance stopped", base: "serving", mutate: set(servingAs("node-3")), want: ReasonInstanceNotRunning},
		{name: "serving/instance terminated", base: "serving", mutate: set(servingAs("node-4")), want: ReasonInstanceNotRunning},
		{name: "serving/instance of another cluster", base: "serving", mutate: set(servingAs("node-5")), want: ReasonInstanceNotInCluster},
		{name: "serving/node carries another instance's providerID", base: "serving",
			setup: func(w *world) { w.nodes["node-1"].Spec.ProviderID = "local://i-2" }, want: ReasonNodeNameMismatch},

		// Subject, key and shape of either signer.
		{name: "subject/extra O system:masters", base: "join", mutate: set(func(s *csrSpec) { s.orgs = []string{"system:nodes", "system:masters"} }), want: ReasonBadSubject},
		{name: "subject/O missing", base: "join", mutate: set(func(s *csrSpec) { s.orgs = nil }), want: ReasonBadSubject},
		{name: "subject/an OU", base: "join", mutate: set(func(s *csrSpec) { s.ous = []string{"ops"} }), want: ReasonBadSubject},
		{name: "subject/a UID attribute", base: "serving", mutate: set(func(s *csrSpec) {
			s.extraNames = []pkix.AttributeTypeAndValue{{Type: oidUID, Value: "0"}}
		}), want: ReasonBadSubject},
		{name: "subject/two CNs", base: "join", mutate: set(func(s *csrSpec) {
			s.rawSubject = pkix.RDNSequence{
				{{Type: oidOrganization, Value: "system:nodes"}},
				{{Type: oidCommonName, Value: "system:node:node-1"}},
				{{Type: oidCommonName, Value: "system:node:node-2"}},
			}
		}), want: ReasonBadSubject},
		{name: "subject/CN without the node prefix", base: "join", mutate: set(func(s *csrSpec) { s.cn = "node-1" }), want: ReasonBadSubject},
		{name: "subject/CN with an empty node name", base: "join", mutate: set(func(s *csrSpec) { s.cn = "system:node:" }), want: ReasonBadSubject},
		{name: "key/RSA 1024", base: "join", mutate: set(func(s *csrSpec) { s.key = mustKey(rsa.GenerateKey(rand.Reader, 1024)) }), want: ReasonWeakKey},
		{name: "key/ECDSA P-224", base: "serving", mutate: set(func(s *csrSpec) { s.key = mustKey(ecdsa.GenerateKey(elliptic.P224(), rand.Reader)) }), want: ReasonWeakKey},
		{name: "extension/basic constraints CA", base: "join", mutate: set(func(s *csrSpec) {
			val, _ := asn1.Marshal(struct{ IsCA bool }{true})
			s.extensions = []pkix.Extension{{Id: oidBasicConstr, Critical: true, Value: val}}
		}), want: ReasonBadExtension},
		{name: "extension/key usage cert sign", base: "serving", mutate: set(func(s *csrSpec) {
			val, _ := asn1.Marshal(asn1.BitString{Bytes: []byte{0x04}, BitLength: 6})
			s.extensions = []pkix.Extension{{Id: oidKeyUsage, Critical: true, Value: val}}
		}), want: ReasonBadExtension},
		{name: "expiration/ten years", base: "renewal", mutate: set(func(s *csrSpec) { s.expirationSeconds = int32p(10 * 365 * 24 * 3600) }), want: ReasonExpirationTooLong},

		// Malformed, oversized and multi-block requests.
		{name: "request/not PEM", base: "join", mutate: set(func(s *csrSpec) { s.rawRequest = []byte("hello") }), want: ReasonMalformedRequest},
		{name: "request/broken base64", base: "join", mutate: set(func(s *csrSpec) {
			s.rawRequest = []byte("-----BEGIN CERTIFICATE REQUEST-----\nnope\n-----END CERTIFICATE REQUEST-----\n")
		}), want: ReasonMalformedRequest},
		{name: "request/1 MiB", base: "join", mutate: set(func(s *csrSpec) { s.rawRequest = bytes.Repeat([]byte("A"), 1<<20) }), want: ReasonRequestTooLarge},
		{name: "request/garbage after the blocks", base: "join", mutate: set(func(s *csrSpec) {
			s.transform = func(r []byte) []byte { return append(r, "garbage"...) }
		}), want: ReasonMalformedRequest},
		{name: "request/a second CSR block", base: "join", mutate: set(func(s *csrSpec) {
			s.transform = func(r []byte) []byte { first, _ := pem.Decode(r); return append(r, pem.EncodeToMemory(first)...) }
		}), want: ReasonMalformedRequest},
		{name: "request/malformed block before the CSR", base: "join", mutate: set(func(s *csrSpec) {
			s.transform = func(r []byte) []byte {
				return append([]byte("-----BEGIN CERTIFICATE REQUEST-----\n!!\n-----END CERTIFICATE REQUEST-----\n"), r...)
			}
		}), want: ReasonMalformedRequest, apiserver: "accepted: the apiserver's pem.Decode skips the broken block"},
		{name: "request/five evidence blocks", base: "join", mutate: set(func(s *csrSpec) {
			s.transform = func(r []byte) []byte {
				for _, typ := range []string{"A", "B", "C", "D", "E"} {
					r = append(r, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: []byte("x")})...)
				}
				return r
			}
		}), want: ReasonRequestTooLarge},
		{name: "request/signature of the CSR broken", base: "join", mutate: set(func(s *csrSpec) {
			s.transform = func(r []byte) []byte {
				b, rest := pem.Decode(r)
				b.Bytes[len(b.Bytes)-3] ^= 0xff
				return append(pem.EncodeToMemory(b), rest...)
			}
		}), want: ReasonMalformedRequest},

		// Joins: evidence.
		{name: "join/stolen bootstrap token, no evidence", base: "join", mutate: set(func(s *csrSpec) { s.evidence = nil }), want: ReasonNoEvidence},
		{name: "join/evidence of an unknown type", base: "join", mutate: withEvidence(func(*world, *testing.T, string) []evidence.Block {
			return []evidence.Block{{Type: "AWS IDENTITY DOCUMENT", Data: []byte("{}")}}
		}), want: ReasonUnknownEvidence},
		{name: "join/two pieces of evidence", base: "join", mutate: withEvidence(func(w *world, t *testing.T, b string) []evidence.Block {
			return append(evidenceOf(tokenWith(t, w, w.keys, "i-1", b, nil)), evidence.Block{Type: "OTHER", Data: []byte("x")})
		}), want: ReasonMalformedRequest},
		{name: "join/token signed by another key", base: "join", mutate: withEvidence(func(w *world, t *testing.T, b string) []evidence.Block {
			return evidenceOf(tokenWith(t, w, w.otherKeys, "i-1", b, nil))
		}), want: ReasonEvidenceSignature},
		{name: "join/claims edited after signing", base: "join", mutate: withEvidence(func(w *world, t *testing.T, b string) []evidence.Block {
			tok := strings.Split(string(tokenWith(t, w, w.keys, "i-2", b, nil)), ".")
			c := w.claims(t, "i-1", b, time.Now())
			p, _ := json.Marshal(c)
			return evidenceOf([]byte(tok[0] + "." + base64.RawURLEncoding.EncodeToString(p) + "." + tok[2]))
		}), want: ReasonEvidenceSignature},
		{name: "join/alg none", base: "join", mutate: withEvidence(func(w *world, t *testing.T, b string) []evidence.Block {
			return evidenceOf(handMadeToken(t, map[string]any{"alg": "none", "kid": w.keys.Active().ID}, w.claims(t, "i-1", b, time.Now()), func([]byte) []byte { return nil }))
		}), want: ReasonEvidenceSignature},
		{name: "join/HS256 keyed with the cloud's public key", base: "join", mutate: withEvidence(func(w *world, t *testing.T, b string) []evidence.Block {
			pub, _ := x509.MarshalPKIXPublicKey(&w.keys.Active().Private.PublicKey)
			return evidenceOf(handMadeToken(t, map[string]any{"alg": "HS256", "kid": w.keys.Active().ID}, w.claims(t, "i-1", b, time.Now()), func(in []byte) []byte {
				m := hmac.New(sha256.New, pub)
				m.Write(in)
				return m.Sum(nil)
			}))
		}), want: ReasonEvidenceSignature},
		{name: "join/token carrying its own key (jwk header)", base: "join", mutate: withEvidence(func(w *world, t *testing.T, b string) []evidence.Block {
			k := w.otherKeys.Active()
			raw, err := k.Private.PublicKey.Bytes() // 0x04 || X || Y
			if err != nil {
				t.Fatal(err)
			}
			x, y := raw[1:33], raw[33:]
			jwk := map[string]string{"kty": "EC", "crv": "P-256", "x": base64.RawURLEncoding.EncodeToString(x), "y": base64.RawURLEncoding.EncodeToString(y)}
			return evidenceOf(handMadeToken(t, map[string]any{"alg": "ES256", "kid": w.keys.Active().ID, "jwk": jwk}, w.claims(t, "i-1", b, time.Now()), func(in []byte) []byte {
				sum := sha256.Sum256(in)
				r, s, _ := ecdsa.Sign(rand.Reader, k.Private, sum[:])
				return append(r.FillBytes(make([]byte, 32)), s.FillBytes(make([]byte, 32))...)
			}))
		}), want: ReasonEvidenceMalformed},
		{name: "join/expired token", base: "join", mutate: token(func(c *identity.Claims) {
			c.IssuedAt, c.NotBefore, c.Expiry = c.IssuedAt-3600, c.NotBefore-3600, c.Expiry-3600
		}), want: ReasonEvidenceExpired},
		{name: "join/token not yet valid", base: "join", mutate: token(func(c *identity.Claims) {
			c.IssuedAt, c.NotBefore, c.Expiry = c.IssuedAt+3600, c.NotBefore+3600, c.Expiry+3600
		}), want: ReasonEvidenceExpired},
		{name: "join/token living a day", base: "join", mutate: token(func(c *identity.Claims) { c.Expiry = c.IssuedAt + 86400 }), want: ReasonEvidenceExpired},
		{name: "join/token of another issuer", base: "join", mutate: token(func(c *identity.Claims) { c.Issuer = "other-cloud" }), want: ReasonEvidenceIssuer},
		{name: "join/token about another subject", base: "join", mutate: token(func(c *identity.Claims) { c.Subject = "i-2" }), want: ReasonEvidenceMalformed},
		{name: "join/token bound to another key", base: "join", mutate: func(_ *world, s *csrSpec) {
			s.keyForEvidence = mustKey(ecdsa.GenerateKey(elliptic.P256(), rand.Reader)).Public()
		}, want: ReasonEvidenceNotBound},
		// Joins: the instance and the node name.
		{name: "join/instance of another cluster", base: "join", mutate: joinAs("node-5", "i-5"), want: ReasonInstanceNotInCluster},
		// The cloud signed the token while the instance was another
		// cluster's; its record says this cluster's now (re-tagged since,
		// or the record is wrong): the evidence itself is of another
		// cluster, and is denied without a lookup.
		{name: "join/token signed for another cluster, the instance this cluster's now", base: "join", mutate: token(func(c *identity.Claims) {
			c.Instance.Cluster = "c2"
		}), want: ReasonInstanceNotInCluster},
		{name: "join/instance stopped", base: "join", mutate: joinAs("node-3", "i-3"), want: ReasonInstanceNotRunning},
		{name: "join/instance terminated", base: "join", mutate: joinAs("node-4", "i-4"), want: ReasonInstanceNotRunning},
		{name: "join/instance the cloud does not know", base: "join", mutate: joinAs("node-9", "i-9"),
			setup: func(w *world) { w.instances["local://i-9"] = view.Instance{ID: "i-9", Name: "node-9"} }, want: ReasonInstanceNotInCluster},
		{name: "join/evidence of another instance (its name maps to another node)", base: "join", mutate: func(w *world, s *csrSpec) {
			joinAs("node-1", "i-2")(w, s)
		}, want: ReasonNodeNameMismatch},
		{name: "join/a control-plane node's name", base: "join", mutate: func(w *world, s *csrSpec) {
			joinAs("master-0", "i-1")(w, s)
		}, want: ReasonNodeNameMismatch},
		{name: "join/node name taken by another instance", base: "join", setup: func(w *world) { w.nodes["node-1"].Spec.ProviderID = "local://i-7" }, want: ReasonNodeNameTaken},
		{name: "join/a Ready node joins again", base: "join", setup: func(w *world) {
			w.nodes["node-1"].Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}
		}, want: ReasonNodeAlreadyJoined},
		// Joins: requester and shape.
		{name: "join/requester a plain user", base: "join", mutate: set(func(s *csrSpec) { s.username, s.groups = "alice", []string{"system:authenticated"} }), want: ReasonRequesterNotAllowed},
		{name: "join/requester a service account", base: "join", mutate: set(func(s *csrSpec) {
			s.username, s.groups = "system:serviceaccount:default:x", []string{"system:serviceaccounts", "system:authenticated"}
		}), want: ReasonRequesterNotAllowed},
		{name: "join/requester claims system:nodes without being a node", base: "join", mutate: set(func(s *csrSpec) {
			s.username, s.groups = "mallory", []string{"system:nodes"}
		}), want: ReasonRequesterNotAllowed},
		{name: "join/SANs on a client certificate", base: "join", mutate: set(func(s *csrSpec) { s.ips = []string{"127.10.0.1"} }), want: ReasonSANsOnClientCert},
		{name: "join/server auth usage", base: "join", mutate: set(func(s *csrSpec) { s.usages = append(clientUsages, certificatesv1.UsageServerAuth) }), want: ReasonBadUsages},

		// Renewal abuse.
		{name: "renewal/of another node", base: "renewal", mutate: set(func(s *csrSpec) { s.cn = "system:node:node-2" }), want: ReasonRequesterMismatch,
			apiserver: "NodeRestriction refuses a node's CSR whose CN names another node"},
		{name: "renewal/instance terminated", base: "renewal", mutate: set(renewalAs("node-4")), want: ReasonInstanceNotRunning},
		{name: "renewal/instance stopped", base: "renewal", mutate: set(renewalAs("node-3")), want: ReasonInstanceNotRunning},
		{name: "renewal/instance of another cluster", base: "renewal", mutate: set(renewalAs("node-5")), want: ReasonInstanceNotInCluster},
		{name: "renewal/node deleted", base: "renewal", mutate: set(renewalAs("node-9")), want: ReasonNodeNotFound},
		{name: "renewal/node not initialized", base: "renewal", mutate: set(renewalAs("node-6")), want: ReasonNodeNotInitialized},
		{name: "renewal/node carries another instance's providerID", base: "renewal",
			setup: func(w *world) { w.nodes["node-1"].Spec.ProviderID = "local://i-2" }, want: ReasonNodeNameMismatch},
		{name: "renewal/with SANs", base: "renewal", mutate: set(func(s *csrSpec) { s.dns = []string{"node-1"} }), want: ReasonSANsOnClientCert},
		{name: "renewal/server auth usage", base: "renewal", mutate: set(func(s *csrSpec) { s.usages = servingUsages }), want: ReasonBadUsages},

		// Cloud errors and outages: never approve.
		{name: "outage/join", base: "join", setup: outage, want: outcomePending},
		{name: "outage/serving", base: "serving", setup: outage, want: outcomePending},
		{name: "outage/renewal", base: "renewal", setup: outage, want: outcomePending},
		{name: "outage/the cloud's keys cannot be fetched", base: "join", setup: func(w *world) {
			v, _ := attest.New(func(context.Context) ([]byte, error) { return nil, errors.New("keys unreachable") }, attest.Options{Issuer: issuer})
			w.decider.verifiers[attest.Type] = v
		}, want: outcomePending},
		// Issue 28: evidence that can never verify is denied even while the
		// keys cannot be had, instead of holding its requester's place.
		{name: "outage/an expired token while the cloud's keys cannot be fetched", base: "join", setup: func(w *world) {
			v, _ := attest.New(func(context.Context) ([]byte, error) { return nil, errors.New("keys unreachable") }, attest.Options{Issuer: issuer})
			w.decider.verifiers[attest.Type] = v
		}, mutate: token(func(c *identity.Claims) {
			c.IssuedAt, c.NotBefore, c.Expiry = c.IssuedAt-3600, c.NotBefore-3600, c.Expiry-3600
		}), want: ReasonEvidenceExpired},

		// Replays (the controller's index of the CSRs the apiserver holds).
		{name: "replay/the same request filed again a second later", base: "join",
			earlier: func(w *world, t *testing.T, mine *certificatesv1.CertificateSigningRequest) []*certificatesv1.CertificateSigningRequest {
				return []*certificatesv1.CertificateSigningRequest{named(mine, "earlier", mine.CreationTimestamp.Add(-time.Second))}
			}, want: ReasonEvidenceReplayed},
		{name: "replay/an unsigned token naming the victim's token id filed first cannot block it", base: "join",
			earlier: func(w *world, t *testing.T, mine *certificatesv1.CertificateSigningRequest) []*certificatesv1.CertificateSigningRequest {
				_, blocks, _ := evidence.Decode(mine.Spec.Request)
				victim, _ := identity.Peek(string(blocks[0].Data))
				s := w.joinSpec(t)
				s.evidenceT = func(w *world, t *testing.T, b string) []evidence.Block {
					return evidenceOf(tokenWith(t, w, w.otherKeys, "i-1", b, func(c *identity.Claims) { c.ID = victim.ID }))
				}
				return []*certificatesv1.CertificateSigningRequest{named(w.csr(t, s), "attacker", mine.CreationTimestamp.Add(-time.Second))}
			}, want: outcomeApproved},
		{name: "replay/a same-second copy of the request under a name that sorts first cannot block it", base: "join",
			earlier: func(w *world, t *testing.T, mine *certificatesv1.CertificateSigningRequest) []*certificatesv1.CertificateSigningRequest {
				return []*certificatesv1.CertificateSigningRequest{named(mine, "0-copy", mine.CreationTimestamp.Time)}
			}, want: outcomeApproved},
		{name: "replay/the victim's token copied onto another key filed first cannot block it", base: "join",
			earlier: func(w *world, t *testing.T, mine *certificatesv1.CertificateSigningRequest) []*certificatesv1.CertificateSigningRequest {
				_, blocks, _ := evidence.Decode(mine.Spec.Request)
				s := w.joinSpec(t)
				s.evidence = func(string) []evidence.Block { return blocks }
				return []*certificatesv1.CertificateSigningRequest{named(w.csr(t, s), "attacker", mine.CreationTimestamp.Add(-time.Second))}
			}, want: outcomeApproved},

		// Joins with a join ticket (docs/tickets.md): the ticket itself.
		{name: "ticket/expired", base: "ticket", mutate: ticketIssued("node-1", 2*time.Hour, time.Hour), want: ReasonEvidenceExpired},
		{name: "ticket/issued in the future", base: "ticket", mutate: ticketIssued("node-1", -time.Hour, time.Hour), want: ReasonEvidenceExpired},
		{name: "ticket/forged: another key under the issuer's kid", base: "ticket", mutate: withTicket(func(w *world, t *testing.T) []byte {
			return signTicket(t, newTicketKeys(t), w.tickets.SigningKey(), nil, nil)
		}), want: ReasonEvidenceSignature},
		{name: "ticket/signed by an unknown kid", base: "ticket", mutate: withTicket(func(w *world, t *testing.T) []byte {
			return issueTicket(t, newTicketKeys(t), "node-1", cluster, time.Now(), time.Hour)
		}), want: ReasonEvidenceSignature},
		{name: "ticket/alg none", base: "ticket", mutate: withTicket(func(w *world, t *testing.T) []byte {
			return handMadeToken(t, map[string]any{"alg": "none", "kid": w.tickets.SigningKey(), "typ": ticket.HeaderType},
				ticketClaimsOf("node-1", cluster), func([]byte) []byte { return nil })
		}), want: ReasonEvidenceMalformed},
		{name: "ticket/HS256 keyed with the issuer's public key", base: "ticket", mutate: withTicket(hs256Ticket), want: ReasonEvidenceSignature},
		{name: "ticket/header carries its own key (jwk)", base: "ticket", mutate: withTicket(func(w *world, t *testing.T) []byte {
			return signTicket(t, newTicketKeys(t), w.tickets.SigningKey(), &jose.SignerOptions{EmbedJWK: true}, nil)
		}), want: ReasonEvidenceMalformed},
		{name: "ticket/an extra claim", base: "ticket", mutate: ticketClaims(func(c map[string]any) { c["groups"] = []string{"system:masters"} }), want: ReasonEvidenceMalformed},
		{name: "ticket/no expiry", base: "ticket", mutate: ticketClaims(func(c map[string]any) { delete(c, "exp") }), want: ReasonEvidenceMalformed},
		{name: "ticket/of another cluster", base: "ticket", mutate: withTicket(func(w *world, t *testing.T) []byte {
			return issueTicket(t, w.tickets, "node-1", "c2", time.Now().Add(-5*time.Minute), time.Hour)
		}), want: ReasonEvidenceCluster},
		// Single use, though not bound to the CSR key.
		{name: "ticket/reused on a later request with another key", base: "ticket",
			earlier: func(w *world, t *testing.T, mine *certificatesv1.CertificateSigningRequest) []*certificatesv1.CertificateSigningRequest {
				_, blocks, _ := evidence.Decode(mine.Spec.Request)
				s := w.ticketJoinSpec(t)
				s.evidenceT = func(*world, *testing.T, string) []evidence.Block { return blocks }
				return []*certificatesv1.CertificateSigningRequest{named(w.csr(t, s), "first-use", mine.CreationTimestamp.Add(-time.Second))}
			}, want: ReasonEvidenceReplayed},
		{name: "ticket/reused under another key after the CSR that spent it was deleted", base: "ticket",
			deleted: func(w *world, t *testing.T, mine *certificatesv1.CertificateSigningRequest) []*certificatesv1.CertificateSigningRequest {
				_, blocks, _ := evidence.Decode(mine.Spec.Request)
				s := w.ticketJoinSpec(t)
				s.evidenceT = func(*world, *testing.T, string) []evidence.Block { return blocks }
				return []*certificatesv1.CertificateSigningRequest{named(w.csr(t, s), "first-use", mine.CreationTimestamp.Add(-2*time.Hour))}
			}, want: ReasonTicketSpent},
		{name: "ticket/copied by a CSR watcher in the owner's second under a name that sorts first", base: "ticket",
			earlier: func(w *world, t *testing.T, mine *certificatesv1.CertificateSigningRequest) []*certificatesv1.CertificateSigningRequest {
				_, blocks, _ := evidence.Decode(mine.Spec.Request)
				s := w.ticketJoinSpec(t)
				s.evidenceT = func(*world, *testing.T, string) []evidence.Block { return blocks }
				return []*certificatesv1.CertificateSigningRequest{named(w.csr(t, s), "zz-owner", mine.CreationTimestamp.Time)}
			}, want: ReasonEvidenceReplayed},
		// The instance the ticket names.
		{name: "ticket/for another instance's name", base: "ticket", mutate: ticketAs("node-1", "node-2"), want: ReasonNodeNameMismatch},
		{name: "ticket/instance created before the ticket was issued", base: "ticket", setup: instanceEdit("i-1", createdAt(-2*time.Hour)), want: ReasonInstanceCreatedOutsideTicket},
		{name: "ticket/instance created after the ticket expired (by the cloud's clock)", base: "ticket", setup: instanceEdit("i-1", createdAt(2*time.Hour)), want: ReasonInstanceCreatedOutsideTicket},
		{name: "ticket/the cloud does not say when the instance was created", base: "ticket",
			setup: instanceEdit("i-1", func(in *view.Instance) { in.Created = time.Time{} }), want: ReasonInstanceCreatedOutsideTicket},
		{name: "ticket/two instances of its name", base: "ticket", setup: func(w *world) {
			twin := instance("i-8", "node-1", view.StatePending, cluster)
			twin.Created = time.Now()
			w.instances[twin.ProviderID] = twin
		}, want: ReasonInstanceNameAmbiguous},
		{name: "ticket/instance of another cluster", base: "ticket", mutate: ticketAs("node-5", "node-5"), want: ReasonInstanceNotInCluster},
		{name: "ticket/no instance of its name", base: "ticket", mutate: ticketAs("node-9", "node-9"), want: ReasonInstanceNotInCluster},
		{name: "ticket/instance stopped", base: "ticket", mutate: ticketAs("node-3", "node-3"), want: ReasonInstanceNotRunning},
		{name: "ticket/instance terminated", base: "ticket", mutate: ticketAs("node-4", "node-4"), want: ReasonInstanceNotRunning},
		{name: "ticket/the node name policy maps the instance to another node name", base: "ticket",
			setup: instanceEdit("i-1", func(in *view.Instance) { in.NodeName = "ip-127-10-0-1" }), want: ReasonNodeNameMismatch},
		{name: "ticket/node name taken by another instance", base: "ticket", setup: func(w *world) { w.nodes["node-1"].Spec.ProviderID = "local://i-7" }, want: ReasonNodeNameTaken},
		{name: "ticket/a Ready node joins again", base: "ticket", setup: func(w *world) {
			w.nodes["node-1"].Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}
		}, want: ReasonNodeAlreadyJoined},
		{name: "ticket/keys cannot be read", base: "ticket", setup: func(w *world) {
			w.decider.verifiers[ticket.BlockType] = NewTicketVerifier(unreadableTicketKeys{}, cluster)
		}, want: outcomePending},
		{name: "ticket/expired while the keys cannot be read", base: "ticket", setup: func(w *world) {
			w.decider.verifiers[ticket.BlockType] = NewTicketVerifier(unreadableTicketKeys{}, cluster)
		}, mutate: ticketIssued("node-1", 2*time.Hour, time.Hour), want: ReasonEvidenceExpired},
		{name: "ticket/cloud outage", base: "ticket", setup: outage, want: outcomePending},

		// Signers the approver never acts on.
		{name: "signer/kube-apiserver-client with a node subject", base: "join", mutate: set(func(s *csrSpec) { s.signer = certificatesv1.KubeAPIServerClientSignerName }), want: outcomeIgnored},
		{name: "signer/look-alike kubelet-serving", base: "serving", mutate: set(func(s *csrSpec) { s.signer = "kubernetes.io/kubelet-serving2" }), want: outcomeIgnored},
	}
}

// TestAdversarialSuite runs every attack; it counts them and fails on any
// approval that is not the legitimate CSR an attack tried to block.
func TestAdversarialSuite(t *testing.T) {
	cases := attacks()
	var denied, pending, ignored, protected, wrong int
	for _, a := range cases {
		t.Run(a.name, func(t *testing.T) {
			got := runAttack(t, a)
			switch {
			case got == a.want && got == outcomeApproved:
				protected++
			case got == a.want && got == outcomePending:
				pending++
			case got == a.want && got == outcomeIgnored:
				ignored++
			case got == a.want:
				denied++
			case got == outcomeApproved:
				wrong++
				t.Fatalf("APPROVED, want %s", a.want)
			default:
				t.Fatalf("outcome %s, want %s", got, a.want)
			}
			if a.apiserver != "" {
				t.Logf("kube-apiserver: %s", a.apiserver)
			}
		})
	}
	if len(cases) < 45 {
		t.Errorf("%d attack cases, the suite promises at least 45", len(cases))
	}
	t.Logf("adversarial suite: %d cases: %d denied with the expected reason, %d left pending, %d ignored (other signers), %d owners not blocked; %d wrong approvals",
		len(cases), denied, pending, ignored, protected, wrong)
	fmt.Printf("adversarial suite: %d cases, %d wrong approvals\n", len(cases), wrong)
}

func runAttack(t *testing.T, a attack) string {
	t.Helper()
	w := newWorld(t)
	w.nodes = adversarialNodes()
	w.decider.nodes = w.nodes
	if a.setup != nil {
		a.setup(w)
	}
	s := attackBase(w, t, a.base)
	if a.mutate != nil {
		a.mutate(w, &s)
	}
	csr := named(w.csr(t, s), "attack", time.Now())
	if !ours(csr) {
		return outcomeIgnored
	}
	d := w.decider
	if a.earlier != nil {
		d = replayDecider(t, w, a.earlier(w, t, csr)...)
	}
	if a.deleted != nil {
		d = replayDecider(t, w)
		for _, c := range a.deleted(w, t, csr) {
			if dec, err := d.Decide(context.Background(), c); err != nil || !dec.Approve {
				t.Fatalf("the earlier CSR %s was not approved: %+v, %v", c.Name, dec, err)
			}
		}
	}
	dec, err := d.Decide(context.Background(), csr)
	switch {
	case err != nil:
		return outcomePending
	case dec.Approve:
		return outcomeApproved
	}
	return dec.Reason
}

// replayDecider is w's decider with a controller's replay index holding
// the earlier CSRs.
func replayDecider(t *testing.T, w *world, earlier ...*certificatesv1.CertificateSigningRequest) *Decider {
	t.Helper()
	client := withShards(t, fake.NewClientset())
	factory := informers.NewSharedInformerFactory(client, 0)
	verifiers := slices.Collect(maps.Values(w.decider.verifiers))
	ctrl, err := New(client, factory.Certificates().V1().CertificateSigningRequests(), factory.Core().V1().Nodes(),
		w.decider.cfg, verifiers, w.instances, Options{SpentTickets: spent.New(client.CoreV1(), "kube-system", TicketClockSkew)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range earlier {
		if err := ctrl.indexer.Add(c); err != nil {
			t.Fatal(err)
		}
	}
	d := *ctrl.decider
	d.nodes = w.nodes
	return &d
}

// stallingVerifier is the local cloud's verifier, except that evidence it
// would reject fails as when the cloud cannot be asked (a transient error,
// retried): what an attacker gets from evidence that names keys or
// credentials the cloud cannot check now. It keeps the verifier's
// PeekMachine.
type stallingVerifier struct{ *attest.Verifier }

func (s stallingVerifier) Verify(ctx context.Context, data []byte, binding string, now time.Time) (cloud.Attestation, error) {
	att, err := s.Verifier.Verify(ctx, data, binding, now)
	if _, rejected := cloud.IsRejection(err); rejected {
		return cloud.Attestation{}, errors.New("the cloud's keys cannot be fetched")
	}
	return att, err
}

// evilJoin is a join of node name filed with bootstrap token requester
// whose evidence claims instance id, signed by keys the cloud does not
// publish.
func evilJoin(t *testing.T, w *world, requester, id, node, name string) *certificatesv1.CertificateSigningRequest {
	s := w.joinSpec(t)
	s.cn, s.username = "system:node:"+node, requester
	s.evidence = func(b string) []evidence.Block {
		c, err := identity.NewClaims(issuer, b, identity.InstanceClaims{ID: id, Name: node, Cluster: cluster}, time.Now(), 5*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := w.otherKeys.Sign(c)
		if err != nil {
			t.Fatal(err)
		}
		return evidenceOf([]byte(tok))
	}
	return named(w.csr(t, s), name, time.Now())
}

// goodJoinOfNode2 is a valid join of node-2 filed with bootstrap token
// requester.
func goodJoinOfNode2(t *testing.T, w *world, requester string) *certificatesv1.CertificateSigningRequest {
	s := w.joinSpec(t)
	s.cn, s.username = "system:node:node-2", requester
	s.evidence = func(b string) []evidence.Block { return evidenceOf(w.token(t, w.keys, "i-2", b, time.Now())) }
	return named(w.csr(t, s), "good-join", time.Now())
}

// Attack on the gate: a bootstrap token's holder files joins whose
// evidence claims as many machines as it likes, each its own, and each
// failing to verify for good (retried, never released here: the worst
// case). Bounded per claimed machine alone, they would take every place of
// max-pending and hold every other requester's CSRs back. The token's share
// for attested joins keeps half the places for the rest: another token's
// join is approved at once.
func TestAttackClaimingManyMachinesCannotFillTheGate(t *testing.T) {
	w := newWorld(t)
	const evil, places = "system:bootstrap:evil00", 8
	var csrs []*certificatesv1.CertificateSigningRequest
	for i := range 2 * places {
		csrs = append(csrs, evilJoin(t, w, evil, fmt.Sprintf("i-evil-%d", i), fmt.Sprintf("evil-%d", i), fmt.Sprintf("evil-%02d", i)))
	}
	sv := stallingVerifier{w.decider.verifiers[attest.Type].(*attest.Verifier)}
	r := startControllerWith(t, w, controllerSetup{verifier: sv,
		opts: Options{MaxPending: places, FailuresBeforeRelease: 1 << 20}}, csrs...)
	deadline := time.Now().Add(5 * time.Second)
	for r.ctrl.gate.held() < places/2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // every attacking CSR has tried to enter
	if h := r.ctrl.gate.held(); h != places/2 {
		t.Fatalf("the attacker holds %d places, want its share %d of %d", h, places/2, places)
	}
	good := goodJoinOfNode2(t, w, "system:bootstrap:good01")
	if _, err := r.client.CertificatesV1().CertificateSigningRequests().Create(context.Background(), good, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := r.waitReasonFor(t, good.Name, 2*time.Second); got != "Approved/"+ReasonApproved {
		t.Fatalf("another token's join during the attack: %s", got)
	}
	for _, c := range csrs {
		if got := r.reason(t, c.Name); got != "" {
			t.Errorf("%s was decided: %s", c.Name, got)
		}
	}
}

// Attack on the gate: the holder of the fleet's bootstrap token files a
// join claiming a victim's instance first, with evidence that keeps failing,
// to hold the instance's one place. It holds it only until it has failed
// FailuresBeforeRelease times; the victim's join, of the same token and
// waiting in line, gets the place then and is approved.
func TestAttackHoldingAVictimsMachineOnlyDelaysIt(t *testing.T) {
	w := newWorld(t)
	const token = "system:bootstrap:abcdef"
	squat := evilJoin(t, w, token, "i-2", "node-2", "a-squat")
	sv := stallingVerifier{w.decider.verifiers[attest.Type].(*attest.Verifier)}
	r := startControllerWith(t, w, controllerSetup{verifier: sv}, squat)
	deadline := time.Now().Add(5 * time.Second)
	for r.ctrl.gate.held() < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	victim := goodJoinOfNode2(t, w, token)
	if a, b := r.ctrl.gateKey(victim), r.ctrl.gateKey(squat); a != b {
		t.Fatalf("the two joins are counted apart: %+v, %+v", a, b)
	}
	if _, err := r.client.CertificatesV1().CertificateSigningRequests().Create(context.Background(), victim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := r.waitReasonFor(t, victim.Name, 10*time.Second); got != "Approved/"+ReasonApproved {
		t.Fatalf("the victim's join: %s", got)
	}
	if got := r.reason(t, squat.Name); got != "" {
		t.Errorf("the squatting join was decided: %s", got)
	}
}
