package linode

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"os"
	"path/filepath"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/mooring-dev/mooring/cloud/linode/linodetest"
	"github.com/mooring-dev/mooring/csrapprover"
	"github.com/mooring-dev/mooring/internal/evidence"
	"github.com/mooring-dev/mooring/internal/ticket"
)

// A join with a ticket goes through the approver as mooring-csr-approver
// and mooring-ccm build it (csrapprover.NewFromCloud over this Attester,
// which has no evidence verifier, and --ticket-keys-file): approved for the
// Linode created within the ticket's life; denied, each with its reason,
// for one created before or after it, one without the cluster tag or of
// another cluster, one offline, two Linodes of the ticket's label, and a
// ticket filed for another label.
func TestTicketJoinThroughTheApprover(t *testing.T) {
	w := newWorld(t, linodetest.Options{}, nil)
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
	factory := informers.NewSharedInformerFactory(client, 0)
	ctrl, err := csrapprover.NewFromCloud(client, nil, factory, w.cloud, csrapprover.Flags{
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

	// The old Linode predates its ticket; the new one is made after. The
	// others are what an attacker on Linode can arrange: a Linode without
	// the cluster tag, one of another cluster, one offline, two of one
	// label, a ticket filed for another Linode's label.
	now := time.Now()
	w.ln.Put(linodetest.Instance{Label: "old-1", Tags: []string{testTag}, Created: now.Add(-time.Hour)})
	issue := func(name string) []byte {
		tok, _, err := keys.Issue(name, w.cloud.ClusterTag(), now, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return []byte(tok)
	}
	tickets := map[string][]byte{}
	for _, n := range []string{"new-1", "old-1", "untagged-1", "foreign-1", "offline-1", "twin-1", "victim-1", "late-1"} {
		tickets[n] = issue(n)
	}
	w.add("new-1", 10)
	w.add("untagged-1", 11, "web")
	w.add("foreign-1", 12, "k8s:c2")
	off := w.add("offline-1", 13)
	if err := w.ln.SetStatus(off.ID, linodetest.StatusOffline); err != nil {
		t.Fatal(err)
	}
	w.add("twin-1", 14)
	w.add("twin-1", 15)
	w.add("victim-1", 16)
	w.add("thief-1", 17)
	w.ln.Put(linodetest.Instance{Label: "late-1", Tags: []string{testTag}, Created: now.Add(2 * time.Hour)})

	for _, tc := range []struct {
		node   string
		ticket []byte
		want   string
	}{
		{"new-1", tickets["new-1"], csrapprover.ReasonApproved},
		{"old-1", tickets["old-1"], csrapprover.ReasonInstanceCreatedOutsideTicket},
		{"late-1", tickets["late-1"], csrapprover.ReasonInstanceCreatedOutsideTicket},
		{"untagged-1", tickets["untagged-1"], csrapprover.ReasonInstanceNotInCluster},
		{"foreign-1", tickets["foreign-1"], csrapprover.ReasonInstanceNotInCluster},
		{"offline-1", tickets["offline-1"], csrapprover.ReasonInstanceNotRunning},
		{"twin-1", tickets["twin-1"], csrapprover.ReasonInstanceNameAmbiguous},
		{"thief-1", tickets["victim-1"], csrapprover.ReasonNodeNameMismatch},
	} {
		csr := joinCSR(t, tc.node, tc.ticket)
		if _, err := client.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var got string
		for deadline := time.Now().Add(10 * time.Second); got == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			c, err := client.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Status.Conditions) > 0 {
				got = c.Status.Conditions[0].Reason
			}
		}
		if got != tc.want {
			t.Errorf("%s: %q, want %q", tc.node, got, tc.want)
		}
	}
}

// joinCSR is a kubelet client CSR of node by a bootstrap token holder,
// with the ticket after it.
func joinCSR(t *testing.T, node string, tok []byte) *certificatesv1.CertificateSigningRequest {
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
