package harness

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/mooring-dev/mooring/cloud/local/attest"
	"github.com/mooring-dev/mooring/cloud/local/client"
	"github.com/mooring-dev/mooring/internal/evidence"
	"github.com/mooring-dev/mooring/test/testbed"
)

// JoinRequest is a kubelet client CSR made the way mooring's agent makes
// it, by a bootstrap token holder.
type JoinRequest struct {
	Name   string // the CSR's name
	Key    *ecdsa.PrivateKey
	KeyPEM []byte
}

// BootstrapClient is a clientset authenticating with the cluster's
// bootstrap token.
func BootstrapClient(c *testbed.Cluster) (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(bootstrapConfig(c))
}

// FastBootstrapClient is BootstrapClient with FastClient's rate limit: the
// bootstrap token of thousands of simulated machines joining at once.
func FastBootstrapClient(c *testbed.Cluster) (kubernetes.Interface, error) {
	return fastClient(bootstrapConfig(c))
}

func bootstrapConfig(c *testbed.Cluster) *rest.Config {
	return &rest.Config{Host: c.URL, BearerToken: c.Token, TLSClientConfig: rest.TLSClientConfig{CAData: c.CA.CertPEM}}
}

// FileJoin creates a kubelet client CSR named name with spec.request
// request, as a joining machine does; cs authenticates as the requester
// (BootstrapClient).
func FileJoin(ctx context.Context, cs kubernetes.Interface, name string, request []byte) error {
	_, err := cs.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    request,
			SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}, metav1.CreateOptions{})
	return err
}

// Join creates a client CSR for node name; with metadataURL set, it carries
// the local cloud instance's identity token bound to the CSR key, else no
// evidence.
func Join(ctx context.Context, c *testbed.Cluster, nodeName, metadataURL string) (*JoinRequest, error) {
	return JoinWith(ctx, c, nodeName, func(binding string) ([]evidence.Block, error) {
		if metadataURL == "" {
			return nil, nil
		}
		tok, err := client.NewMetadata(metadataURL, nil).IdentityToken(ctx, binding)
		if err != nil {
			return nil, fmt.Errorf("identity token: %w", err)
		}
		return []evidence.Block{{Type: attest.Type, Data: []byte(tok)}}, nil
	})
}

// JoinWith creates a client CSR for node name carrying the evidence blocks
// that evidenceFor makes for the CSR key's binding.
func JoinWith(ctx context.Context, c *testbed.Cluster, nodeName string, evidenceFor func(binding string) ([]evidence.Block, error)) (*JoinRequest, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}},
	}, key)
	if err != nil {
		return nil, err
	}
	binding, err := evidence.Binding(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	blocks, err := evidenceFor(binding)
	if err != nil {
		return nil, err
	}
	request, err := evidence.Encode(der, blocks...)
	if err != nil {
		return nil, err
	}
	cs, err := BootstrapClient(c)
	if err != nil {
		return nil, err
	}
	name := "node-csr-" + strings.ToLower(strings.NewReplacer("-", "", "_", "").Replace(binding))[:24]
	if err := FileJoin(ctx, cs, name, request); err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &JoinRequest{Name: name, Key: key, KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})}, nil
}

// WaitForDecision waits until the CSR is approved and issued, or denied,
// and returns it.
func WaitForDecision(ctx context.Context, cs kubernetes.Interface, name string) (*certificatesv1.CertificateSigningRequest, error) {
	for {
		csr, err := cs.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			for _, cond := range csr.Status.Conditions {
				if cond.Type == certificatesv1.CertificateDenied || cond.Type == certificatesv1.CertificateFailed {
					return csr, nil
				}
				if cond.Type == certificatesv1.CertificateApproved && len(csr.Status.Certificate) > 0 {
					return csr, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return csr, fmt.Errorf("CSR %s not decided: %w", name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Condition returns the CSR's condition of type t, if any.
func Condition(csr *certificatesv1.CertificateSigningRequest, t certificatesv1.RequestConditionType) *certificatesv1.CertificateSigningRequestCondition {
	for i := range csr.Status.Conditions {
		if csr.Status.Conditions[i].Type == t {
			return &csr.Status.Conditions[i]
		}
	}
	return nil
}
