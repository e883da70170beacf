package linode

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/linode/linodego"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	restclient "k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
)

// builder hands the provider a client (cloudprovider.ControllerClientBuilder).
type builder struct{ c kubernetes.Interface }

func (b builder) Config(string) (*restclient.Config, error)   { return nil, errors.New("no config") }
func (b builder) ConfigOrDie(string) *restclient.Config       { panic("no config") }
func (b builder) Client(string) (kubernetes.Interface, error) { return b.c, nil }
func (b builder) ClientOrDie(string) kubernetes.Interface     { return b.c }

// certPair is a self-signed certificate for cn and its key, PEM.
func certPair(t *testing.T, cn string) (cert, key []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		DNSNames: []string{cn}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

func tlsSecret(name string, cert, key []byte) *v1.Secret {
	return &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}, Type: v1.SecretTypeTLS,
		Data: map[string][]byte{v1.TLSCertKey: cert, v1.TLSPrivateKeyKey: key}}
}

func httpsSvc(secret string) *v1.Service {
	return lbSvc(map[string]string{AnnPortPrefix + "443": `{"protocol": "https", "tls-secret-name": "` + secret + `"}`},
		v1.ServicePort{Name: "https", Port: 443, Protocol: v1.ProtocolTCP, NodePort: 30443})
}

// An https port's certificate and key come from the Secret its port
// annotation names (read with one GET, through Initialize's client): the
// config holds them as the API does (the API shows <REDACTED> for both,
// and the certificate's fingerprint); ensured again, nothing is written;
// a new certificate in the Secret changes the spec's fingerprint and the
// config, without the key in the fingerprint or in a printed spec.
func TestLBTLSFromSecret(t *testing.T) {
	w, lbs, nodes := lbWorld(t)
	cert, key := certPair(t, "shop.example")
	kc := fake.NewClientset(tlsSecret("cert", cert, key))
	w.cloud.Initialize(builder{kc}, nil)
	svc := httpsSvc("cert")
	if _, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, nodes); err != nil {
		t.Fatal(err)
	}
	nb := w.ln.NodeBalancers()[0]
	cf := nb.Configs[0]
	if cf.Protocol != "https" || cf.SSLCert != string(cert) || cf.SSLKey != string(key) || cf.SSLCommonName != "shop.example" {
		t.Fatalf("config %+v", cf)
	}
	got, err := w.cloud.client.GetNodeBalancerConfig(context.Background(), nb.ID, cf.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.SSLCert != "<REDACTED>" || got.SSLKey != "<REDACTED>" || got.SSLFingerprint == "" {
		t.Errorf("the API's config shows ssl_cert %q, ssl_key %q, ssl_fingerprint %q", got.SSLCert, got.SSLKey, got.SSLFingerprint)
	}
	writes := lbWrites(w)
	if _, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, nodes); err != nil {
		t.Fatal(err)
	}
	if n := lbWrites(w) - writes; n != 0 {
		t.Errorf("ensured again: %d writes, want 0", n)
	}
	before, err := lbs.DesiredFingerprint(context.Background(), svc, nodes)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := (&nodeBalancers{c: w.cloud}).Desired(context.Background(), svc, nodes)
	if err != nil {
		t.Fatal(err)
	}
	if printed := fmt.Sprintf("%+v %#v", spec, spec); strings.Contains(printed, "PRIVATE KEY") {
		t.Errorf("a printed spec shows the key: %s", printed)
	}
	cert2, key2 := certPair(t, "shop.example")
	if _, err := kc.CoreV1().Secrets("shop").Update(context.Background(), tlsSecret("cert", cert2, key2), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	after, err := lbs.DesiredFingerprint(context.Background(), svc, nodes)
	if err != nil {
		t.Fatal(err)
	}
	if after == before {
		t.Error("the fingerprint did not change with the certificate")
	}
	if _, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, nodes); err != nil {
		t.Fatal(err)
	}
	now, _ := w.ln.NodeBalancer(nb.ID)
	if now.Configs[0].SSLCert != string(cert2) || now.Configs[0].SSLKey != string(key2) || now.IPv4 != nb.IPv4 {
		t.Errorf("after the new certificate: config %+v, address %s (was %s)", now.Configs[0], now.IPv4, nb.IPv4)
	}
}

// A Secret that is missing, of another type, without a key, whose key is
// not the certificate's, or that mooring-ccm may not read, and a provider
// without a client: an error naming the Secret (and, forbidden, what to
// enable), never the key; nothing is called in Linode.
func TestLBTLSBadSecret(t *testing.T) {
	cert, key := certPair(t, "shop.example")
	_, otherKey := certPair(t, "other.example")
	opaque := tlsSecret("cert", cert, key)
	opaque.Type = v1.SecretTypeOpaque
	noKey := tlsSecret("cert", cert, nil)
	forbidden := fake.NewClientset()
	forbidden.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "cert", errors.New("RBAC: access denied"))
	})
	for _, tc := range []struct {
		name string
		kc   kubernetes.Interface
		want string
	}{
		{"missing", fake.NewClientset(), "does not exist"},
		{"opaque", fake.NewClientset(opaque), "not kubernetes.io/tls"},
		{"no key", fake.NewClientset(noKey), "lacks"},
		{"another key", fake.NewClientset(tlsSecret("cert", cert, otherKey)), "not a certificate and its key"},
		{"not PEM", fake.NewClientset(tlsSecret("cert", []byte("junk"), key)), "not a certificate and its key"},
		{"forbidden", forbidden, "ccm.tlsSecrets=true"},
		{"no client", nil, "no Kubernetes client"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, lbs, nodes := lbWorld(t)
			if tc.kc != nil {
				w.cloud.Initialize(builder{tc.kc}, nil)
			}
			_, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", httpsSvc("cert"), nodes)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "Secret shop/cert") {
				t.Fatalf("EnsureLoadBalancer: %v, want an error naming Secret shop/cert and %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "PRIVATE KEY") || strings.Contains(err.Error(), string(key[30:60])) {
				t.Errorf("the error shows the key: %v", err)
			}
			if n := lbCalls(w); n != 0 || len(w.ln.NodeBalancers()) != 0 {
				t.Errorf("API calls %d, NodeBalancers %d; want none", n, len(w.ln.NodeBalancers()))
			}
		})
	}
}

// The endpoint checks an https config's certificate and key as the API
// does: both required, PEM, matching; the API's answer shows neither.
func TestEndpointTLSStrict(t *testing.T) {
	w, _, _ := lbWorld(t)
	cert, key := certPair(t, "a.example")
	_, otherKey := certPair(t, "b.example")
	in := w.ln.Instances()[0]
	region := "eu-central"
	for _, tc := range []struct {
		name      string
		cert, key string
		want      string
	}{
		{"no key", string(cert), "", "ssl_cert"},
		{"another key", string(cert), string(otherKey), "ssl_key"},
		{"junk", "junk", string(key), "ssl_key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := w.cloud.client.CreateNodeBalancer(context.Background(), linodego.NodeBalancerCreateOptions{Region: region,
				Configs: []*linodego.NodeBalancerConfigCreateOptions{{Port: 443, Protocol: "https", SSLCert: tc.cert, SSLKey: tc.key,
					Nodes: []linodego.NodeBalancerNodeCreateOptions{{Address: in.PrivateIP + ":30443", Label: "node-1"}}}}})
			var le *linodego.Error
			if !errors.As(err, &le) || le.Code != 400 || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("create: %v, want a 400 naming %s", err, tc.want)
			}
		})
	}
	if len(w.ln.NodeBalancers()) != 0 {
		t.Error("a NodeBalancer was made")
	}
}
