package csrapprover

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
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooring-dev/mooring/agent"
	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/local/attest"
	"github.com/mooring-dev/mooring/cloud/local/identity"
	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/view"
	"github.com/mooring-dev/mooring/internal/evidence"
)

// listed is a cloud that lists the same instances every time.
type listed []view.Instance

func (l listed) ListInstances(context.Context) ([]view.Instance, error) { return l, nil }

// signingIdentity is an instance's metadata service: it signs identity
// tokens for the instance with the cloud's keys.
type signingIdentity struct {
	keys *identity.KeySet
	in   view.Instance
}

func (s signingIdentity) Instance(context.Context) (nodeid.Instance, error) {
	return nodeid.Instance{ID: s.in.ID, Name: s.in.Name, NodeName: s.in.NodeName, ProviderID: s.in.ProviderID}, nil
}

func (s signingIdentity) Evidence(_ context.Context, binding string) (evidence.Block, error) {
	c, err := identity.NewClaims(issuer, binding, identity.InstanceClaims{ID: s.in.ID, Name: s.in.Name, Cluster: s.in.Cluster}, time.Now(), 5*time.Minute)
	if err != nil {
		return evidence.Block{}, err
	}
	tok, err := s.keys.Sign(c)
	return evidence.Block{Type: attest.Type, Data: []byte(tok)}, err
}

// BenchmarkDecide is the approver's whole decision on one CSR, as each of
// its workers makes it, on a ready view of 5,000 instances (a fresh
// snapshot: no cloud call) with the cloud's keys fetched: a join as the
// agent builds it (agent.JoinRequest), a renewal and a serving CSR, all
// approved; "join/parallel" is the workers deciding joins at once.
func BenchmarkDecide(b *testing.B) {
	ctx := context.Background()
	k, err := identity.NewKey(time.Now())
	if err != nil {
		b.Fatal(err)
	}
	keys := identity.NewKeySet(k)
	jwks, err := keys.JWKS()
	if err != nil {
		b.Fatal(err)
	}
	verifier, err := attest.New(func(context.Context) ([]byte, error) { return jwks, nil }, attest.Options{Issuer: issuer})
	if err != nil {
		b.Fatal(err)
	}
	fleet := make(listed, 5000)
	for i := range fleet {
		fleet[i] = instance(fmt.Sprintf("i-%04d", i), fmt.Sprintf("node-%04d", i), view.StateRunning, cluster)
	}
	instances := view.New(fleet, view.Options{})
	if err := instances.Refresh(ctx, time.Hour); err != nil {
		b.Fatal(err)
	}
	// node-0002 has joined; node-0001 is joining.
	joined := fleet[2]
	nodes := fakeNodes{joined.NodeName: &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: joined.NodeName}, Spec: v1.NodeSpec{ProviderID: joined.ProviderID}}}
	d := NewDecider(Config{Cluster: cluster, InstanceMaxAge: time.Hour}, []cloud.EvidenceVerifier{verifier}, instances, nodes, fakeReplays{})

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	_, join, err := agent.JoinRequest(ctx, signingIdentity{keys, fleet[1]}, fleet[1].NodeName, key)
	if err != nil {
		b.Fatal(err)
	}
	subject := pkix.Name{CommonName: "system:node:" + joined.NodeName, Organization: []string{"system:nodes"}}
	renewal, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: subject}, key)
	if err != nil {
		b.Fatal(err)
	}
	serving, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: subject, DNSNames: []string{joined.NodeName}, IPAddresses: []net.IP{net.ParseIP(joined.Addresses[0].Address)},
	}, key)
	if err != nil {
		b.Fatal(err)
	}
	csr := func(request []byte, signer, user string, groups []string, usages []certificatesv1.KeyUsage) *certificatesv1.CertificateSigningRequest {
		return &certificatesv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{Name: "csr-bench", UID: "uid-bench", CreationTimestamp: metav1.Now()},
			Spec:       certificatesv1.CertificateSigningRequestSpec{Request: request, SignerName: signer, Username: user, Groups: groups, Usages: usages},
		}
	}
	asBootstrapper, asNode := []string{"system:bootstrappers", "system:authenticated"}, []string{"system:nodes", "system:authenticated"}
	pemCSR := func(der []byte) []byte {
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	}
	joinCSR := csr(join, certificatesv1.KubeAPIServerClientKubeletSignerName, "system:bootstrap:abcdef", asBootstrapper, clientUsages)
	for _, c := range []struct {
		name string
		csr  *certificatesv1.CertificateSigningRequest
	}{
		{"join", joinCSR},
		{"renewal", csr(pemCSR(renewal), certificatesv1.KubeAPIServerClientKubeletSignerName, "system:node:"+joined.NodeName, asNode, clientUsages)},
		{"serving", csr(pemCSR(serving), certificatesv1.KubeletServingSignerName, "system:node:"+joined.NodeName, asNode, servingUsages)},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if dd, err := d.Decide(ctx, c.csr); err != nil || !dd.Approve {
					b.Fatalf("%+v, %v", dd, err)
				}
			}
		})
	}
	b.Run("join/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if dd, err := d.Decide(ctx, joinCSR); err != nil || !dd.Approve {
					b.Errorf("%+v, %v", dd, err)
					return
				}
			}
		})
	})
}
