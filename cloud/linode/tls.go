package linode

import (
	"context"
	"crypto/sha1" //nolint:gosec // the certificate's fingerprint as Linode's API shows it, not a security check
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strings"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"
)

// secretsGrant is what an operator enables so that mooring-ccm may read
// the Secrets that tls-secret-name names (docs/linode.md).
const secretsGrant = "the Helm value ccm.tlsSecrets=true, or the kustomize component deploy/components/linode-tls-secrets"

// certKey is a port's certificate and key, read from its Secret. It sits
// behind a pointer in portSpec, so that printing a spec prints an address,
// never the key.
type certKey struct{ cert, key string }

// kubeClient is the cluster's client, from Initialize.
type kubeClient struct {
	v atomic.Pointer[kubernetes.Interface]
}

func (k *kubeClient) set(c kubernetes.Interface) { k.v.Store(&c) }

func (k *kubeClient) get() kubernetes.Interface {
	if p := k.v.Load(); p != nil {
		return *p
	}
	return nil
}

// Initialize takes a client of the cluster, with which the provider reads
// the TLS Secrets of https ports (one GET per Secret when it builds a
// Service's spec; no informer, so no list or watch of Secrets).
func (c *Cloud) Initialize(b cloudprovider.ControllerClientBuilder, _ <-chan struct{}) {
	if b == nil {
		return
	}
	kc, err := b.Client("mooring-linode")
	if err != nil {
		klog.ErrorS(err, "No Kubernetes client for the Linode provider: https ports (tls-secret-name) will fail")
		return
	}
	c.kube.set(kc)
}

// certificate reads p's Secret (tls-secret-name) in svc's namespace: of
// type kubernetes.io/tls, with a certificate and a key that match. p.TLS
// becomes the certificate's fingerprint (SHA-1 of its DER, colon-separated
// hex, as the API shows a config's ssl_fingerprint), so that a new
// certificate changes the spec while the key stays out of it.
func (l *nodeBalancers) certificate(ctx context.Context, svc *v1.Service, p *portSpec) error {
	what := fmt.Sprintf("service %s/%s port %d: Secret %s/%s (tls-secret-name of %s%d)", svc.Namespace, svc.Name, p.Port,
		svc.Namespace, p.secret, AnnPortPrefix, p.Port)
	kc := l.c.kube.get()
	if kc == nil {
		return fmt.Errorf("%s: the Linode provider has no Kubernetes client to read it with", what)
	}
	ctx, cancel := context.WithTimeout(ctx, l.c.cfg.RequestTimeout.Duration)
	defer cancel()
	s, err := kc.CoreV1().Secrets(svc.Namespace).Get(ctx, p.secret, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s does not exist", what)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%s: mooring-ccm may not read Secrets; enable it with %s", what, secretsGrant)
	case err != nil:
		return fmt.Errorf("%s: %w", what, err)
	case s.Type != v1.SecretTypeTLS:
		return fmt.Errorf("%s is of type %q, not %s", what, s.Type, v1.SecretTypeTLS)
	case len(s.Data[v1.TLSCertKey]) == 0 || len(s.Data[v1.TLSPrivateKeyKey]) == 0:
		return fmt.Errorf("%s lacks %s or %s", what, v1.TLSCertKey, v1.TLSPrivateKeyKey)
	}
	pair, err := tls.X509KeyPair(s.Data[v1.TLSCertKey], s.Data[v1.TLSPrivateKeyKey])
	if err != nil {
		// crypto/tls names what is wrong without quoting the key.
		return fmt.Errorf("%s: %s and %s are not a certificate and its key: %v", what, v1.TLSCertKey, v1.TLSPrivateKeyKey, err)
	}
	if _, err := x509.ParseCertificate(pair.Certificate[0]); err != nil {
		return fmt.Errorf("%s: %s: %v", what, v1.TLSCertKey, err)
	}
	p.TLS = certFingerprint(pair.Certificate[0])
	p.tls = &certKey{cert: string(s.Data[v1.TLSCertKey]), key: string(s.Data[v1.TLSPrivateKeyKey])}
	return nil
}

// certFingerprint is a certificate's SHA-1 fingerprint as colon-separated
// upper-case hex pairs.
func certFingerprint(der []byte) string {
	sum := sha1.Sum(der) //nolint:gosec // a fingerprint to compare, as the API gives it
	parts := make([]string, len(sum))
	for i, b := range sum {
		parts[i] = fmt.Sprintf("%02X", b)
	}
	return strings.Join(parts, ":")
}
