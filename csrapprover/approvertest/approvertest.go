// Package approvertest runs mooring's CSR approver as mooring-csr-approver
// and mooring-ccm build it (csrapprover.NewFromCloud over a backend's
// cloud.Attester, with --ticket-keys-file) against a fake clientset, so
// that the tests of a backend whose machines join with join tickets see
// what the approver decides for its instances. Only for tests.
package approvertest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/csrapprover"
	"github.com/mooring-dev/mooring/csrapprover/spent"
	"github.com/mooring-dev/mooring/internal/evidence"
	"github.com/mooring-dev/mooring/internal/ticket"
)

// DecisionTimeout bounds how long Join waits for the approver's decision.
const DecisionTimeout = 10 * time.Second

// Approver is a running approver over one Attester, with one ticket
// signing key.
type Approver struct {
	t        testing.TB
	ctx      context.Context
	keys     *ticket.KeySet
	client   *fake.Clientset
	factory  informers.SharedInformerFactory
	attester cloud.Attester
	served   int
}

// Start writes a ticket keys file with one new key, makes the spent-ticket
// ConfigMaps, and runs the approver over attester with it (2 workers,
// instances at most a second old) until the test ends.
func Start(t testing.TB, attester cloud.Attester) *Approver {
	t.Helper()
	keys := &ticket.KeySet{}
	if _, err := keys.AddKey(); err != nil {
		t.Fatal(err)
	}
	data, err := keys.Data()
	if err != nil {
		t.Fatal(err)
	}
	keysFile := filepath.Join(t.TempDir(), ticket.KeysFile)
	if err := os.WriteFile(keysFile, data[ticket.KeysFile], 0o600); err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()
	// The spent-ticket record's ConfigMaps, which the installer ships (the
	// approver does not create them).
	for _, name := range spent.ShardNames() {
		cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: csrapprover.DefaultSpentTicketsNamespace}}
		if _, err := client.CoreV1().ConfigMaps(cm.Namespace).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	factory.Core().V1().Nodes().Informer() // shared with the approver
	ctrl, err := csrapprover.NewFromCloud(client, nil, factory, attester, csrapprover.Flags{
		Workers: 2, TicketKeysFile: keysFile, InstanceMaxAge: time.Second, MaxSANs: 16,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() { ctrl.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; factory.Shutdown() })
	return &Approver{t: t, ctx: ctx, keys: keys, client: client, factory: factory, attester: attester}
}

// Issue issues a ticket for the instance name, for the Attester's cluster,
// valid for an hour from now.
func (a *Approver) Issue(name string) []byte {
	a.t.Helper()
	tok, _, err := a.keys.Issue(name, a.attester.ClusterTag(), time.Now(), time.Hour)
	if err != nil {
		a.t.Fatal(err)
	}
	return []byte(tok)
}

// Join submits a kubelet client CSR for the Node node by a bootstrap token
// holder, with tok after it, and returns the reason of the approver's
// decision ("" when there is none within DecisionTimeout).
func (a *Approver) Join(node string, tok []byte) string {
	a.t.Helper()
	return a.decision(joinCSR(a.t, node, tok), DecisionTimeout)
}

// decision files csr and waits up to wait for the approver's decision.
func (a *Approver) decision(csr *certificatesv1.CertificateSigningRequest, wait time.Duration) string {
	a.t.Helper()
	csrs := a.client.CertificatesV1().CertificateSigningRequests()
	if _, err := csrs.Create(a.ctx, csr, metav1.CreateOptions{}); err != nil {
		a.t.Fatal(err)
	}
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		c, err := csrs.Get(a.ctx, csr.Name, metav1.GetOptions{})
		if err != nil {
			a.t.Fatal(err)
		}
		if len(c.Status.Conditions) > 0 {
			return c.Status.Conditions[0].Reason
		}
	}
	return ""
}

// Node registers the Node name as the CCM leaves it once initialized: with
// providerID and addresses. It returns once the approver's cache has it.
func (a *Approver) Node(name, providerID string, addresses ...v1.NodeAddress) {
	a.t.Helper()
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NodeSpec{ProviderID: providerID},
		Status: v1.NodeStatus{Addresses: addresses}}
	if _, err := a.client.CoreV1().Nodes().Create(a.ctx, node, metav1.CreateOptions{}); err != nil {
		a.t.Fatal(err)
	}
	lister := a.factory.Core().V1().Nodes().Lister()
	for deadline := time.Now().Add(DecisionTimeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err := lister.Get(name); err == nil {
			return
		}
	}
	a.t.Fatalf("the approver's cache never saw Node %s", name)
}

// Serve submits a kubelet serving CSR of the Node node, by that node, for
// sans (IPs and DNS names), and returns the reason of the approver's
// decision ("" when there is none within wait).
func (a *Approver) Serve(wait time.Duration, node string, sans ...string) string {
	a.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		a.t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}}}
	for _, s := range sans {
		if ip := net.ParseIP(s); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, s)
		}
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		a.t.Fatal(err)
	}
	a.served++
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("serving-%s-%d", node, a.served)},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeletServingSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
			Username:   "system:node:" + node, Groups: []string{"system:nodes", "system:authenticated"},
		},
	}
	return a.decision(csr, wait)
}

// Want is a join and the decision the approver is to make of it.
type Want struct {
	// Node is the Node (and instance) name the CSR asks for.
	Node string
	// Ticket is the join ticket after the request (Issue's).
	Ticket []byte
	// Reason is the decision's reason (csrapprover.ReasonApproved, a deny
	// reason).
	Reason string
}

// Expect submits each join in order (Join) and reports every decision
// that is not the one wanted.
func (a *Approver) Expect(wants ...Want) {
	a.t.Helper()
	for _, w := range wants {
		if got := a.Join(w.Node, w.Ticket); got != w.Reason {
			a.t.Errorf("join of %s: %q, want %q", w.Node, got, w.Reason)
		}
	}
}

// joinCSR is a kubelet client CSR (named join-<node>) for the Node node
// by a bootstrap token holder, with the ticket after the request.
func joinCSR(t testing.TB, node string, tok []byte) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	req, err := evidence.Encode(der, evidence.Block{Type: ticket.BlockType, Data: tok})
	if err != nil {
		t.Fatal(err)
	}
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "join-" + node},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request: req, SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages:   []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
			Username: "system:bootstrap:abcdef", Groups: []string{"system:bootstrappers", "system:authenticated"},
		},
	}
}
