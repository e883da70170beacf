package agent

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/cluster-bootstrap/token/jws"
)

// The bootstrap token of these tests, and another secret for the same id.
const (
	testTokenID     = "abcdef"
	testTokenSecret = "0123456789abcdef"
	otherSecret     = "fedcba9876543210"
)

// testCA is a self-signed CA made for one test.
type testCA struct {
	cert *x509.Certificate
	key  crypto.Signer
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pemBytes, err := certutil.EncodeCertificates(cert)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pemBytes}
}

// servingCert is a kube-apiserver-like serving certificate for 127.0.0.1
// signed by ca.
func (ca *testCA) servingCert(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// fakeAPIServer serves kube-public/cluster-info over TLS with a serving
// certificate of the given CA; data decides the ConfigMap's data for the
// n-th read (1-based), knowing the server's URL.
type fakeAPIServer struct {
	*httptest.Server
	data func(n int, url string) map[string]string

	mu    sync.Mutex
	reads int
}

func startFakeAPIServer(t *testing.T, servingCA *testCA, data func(n int, url string) map[string]string) *fakeAPIServer {
	t.Helper()
	f := &fakeAPIServer{data: data}
	f.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/api/v1/namespaces/kube-public/configmaps/cluster-info" {
			http.NotFound(w, r)
			return
		}
		f.mu.Lock()
		f.reads++
		n := f.reads
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]string{"name": "cluster-info", "namespace": "kube-public"},
			"data":     f.data(n, f.URL),
		})
	}))
	f.TLS = &tls.Config{Certificates: []tls.Certificate{servingCA.servingCert(t)}}
	// The TLS failures the tests provoke are expected; keep them out of the
	// test log.
	f.Config.ErrorLog = log.New(io.Discard, "", 0)
	f.StartTLS()
	t.Cleanup(f.Close)
	return f
}

func (f *fakeAPIServer) readCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

// clusterInfoKubeconfig is the kubeconfig kubeadm publishes in cluster-info:
// one cluster, no credentials.
func clusterInfoKubeconfig(t *testing.T, server string, caPEM []byte) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[""] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// signed is cluster-info data with kubeconfig signed by the token secret, as
// the bootstrapsigner controller writes it.
func signed(t *testing.T, kubeconfig, secret string) map[string]string {
	t.Helper()
	sig, err := jws.ComputeDetachedSignature(kubeconfig, testTokenID, secret)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{"kubeconfig": kubeconfig, "jws-kubeconfig-" + testTokenID: sig}
}

func writeTokenFile(t *testing.T, token string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// discover runs the agent's discovery (caCertHash mode) against apiServer.
func discover(t *testing.T, apiServer string, pin string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return clusterCA(ctx, Config{
		APIServer:          apiServer,
		CACertHash:         pin,
		BootstrapTokenFile: writeTokenFile(t, testTokenID+"."+testTokenSecret),
	})
}

// wantOnly checks that got is exactly the certificate of ca.
func wantOnly(t *testing.T, got []byte, ca *testCA) {
	t.Helper()
	certs, err := certutil.ParseCertsPEM(got)
	if err != nil {
		t.Fatalf("returned CA bundle: %v\n%s", err, got)
	}
	if len(certs) != 1 || !certs[0].Equal(ca.cert) {
		var names []string
		for _, c := range certs {
			names = append(names, c.Subject.CommonName)
		}
		t.Fatalf("returned CA bundle holds %v, want only %s", names, ca.cert.Subject.CommonName)
	}
}

func wantError(t *testing.T, got []byte, err error, substrings ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("discovery succeeded with %d bytes of CA, want an error containing %q", len(got), substrings)
	}
	for _, s := range substrings {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not contain %q", err, s)
		}
	}
}

// The real path: cluster-info signed with the token, served by an apiserver
// whose certificate the pinned CA signed; the CA comes back, read twice.
// A trailing slash on either URL does not matter.
func TestDiscoveryReturnsThePinnedCA(t *testing.T) {
	ca := newTestCA(t, "cluster-ca")
	for _, slash := range []struct{ published, configured string }{{"", ""}, {"/", ""}, {"", "/"}} {
		srv := startFakeAPIServer(t, ca, func(_ int, url string) map[string]string {
			return signed(t, clusterInfoKubeconfig(t, url+slash.published, ca.pem), testTokenSecret)
		})
		got, err := discover(t, srv.URL+slash.configured, caHash(ca.cert))
		if err != nil {
			t.Fatalf("published %q, configured %q: %v", srv.URL+slash.published, srv.URL+slash.configured, err)
		}
		wantOnly(t, got, ca)
		if n := srv.readCount(); n != 2 {
			t.Errorf("cluster-info read %d times, want 2 (unverified, then verified by the pinned CA)", n)
		}
	}
}

// A man in the middle adds their CA to the bundle but cannot re-sign: the
// JWS over the original kubeconfig no longer matches.
func TestDiscoveryRefusesAKubeconfigChangedAfterSigning(t *testing.T) {
	ca, evil := newTestCA(t, "cluster-ca"), newTestCA(t, "attacker-ca")
	srv := startFakeAPIServer(t, ca, func(_ int, url string) map[string]string {
		data := signed(t, clusterInfoKubeconfig(t, url, ca.pem), testTokenSecret)
		data["kubeconfig"] = clusterInfoKubeconfig(t, url, append(append([]byte{}, ca.pem...), evil.pem...))
		return data
	})
	got, err := discover(t, srv.URL, caHash(ca.cert))
	wantError(t, got, err, "jws-kubeconfig-"+testTokenID, "does not verify", testTokenID)
}

// A bundle with the pinned CA and another one, correctly signed (as if the
// attacker knew the token secret): only the pinned CA is returned.
func TestDiscoveryNeverReturnsUnpinnedCAs(t *testing.T) {
	ca, extra := newTestCA(t, "cluster-ca"), newTestCA(t, "attacker-ca")
	for _, bundle := range [][]byte{
		append(append([]byte{}, ca.pem...), extra.pem...),
		append(append([]byte{}, extra.pem...), ca.pem...),
	} {
		srv := startFakeAPIServer(t, ca, func(_ int, url string) map[string]string {
			return signed(t, clusterInfoKubeconfig(t, url, bundle), testTokenSecret)
		})
		got, err := discover(t, srv.URL, caHash(ca.cert))
		if err != nil {
			t.Fatal(err)
		}
		wantOnly(t, got, ca)
	}
}

// No signature for our token: refused, naming the token id and what signs.
func TestDiscoveryRefusesAMissingSignature(t *testing.T) {
	ca := newTestCA(t, "cluster-ca")
	srv := startFakeAPIServer(t, ca, func(_ int, url string) map[string]string {
		data := signed(t, clusterInfoKubeconfig(t, url, ca.pem), testTokenSecret)
		delete(data, "jws-kubeconfig-"+testTokenID)
		// A signature for another token is no signature for ours.
		data["jws-kubeconfig-zzzzzz"] = "x..y"
		return data
	})
	got, err := discover(t, srv.URL, caHash(ca.cert))
	wantError(t, got, err, "no JWS signature", `"`+testTokenID+`"`, "bootstrapsigner", "usage-bootstrap-signing=true")
}

// Signed with another secret for the same token id: refused.
func TestDiscoveryRefusesASignatureOfAnotherSecret(t *testing.T) {
	ca := newTestCA(t, "cluster-ca")
	srv := startFakeAPIServer(t, ca, func(_ int, url string) map[string]string {
		return signed(t, clusterInfoKubeconfig(t, url, ca.pem), otherSecret)
	})
	got, err := discover(t, srv.URL, caHash(ca.cert))
	wantError(t, got, err, "does not verify", testTokenID)
}

// A signed kubeconfig for another server: refused.
func TestDiscoveryRefusesAnotherServer(t *testing.T) {
	ca := newTestCA(t, "cluster-ca")
	srv := startFakeAPIServer(t, ca, func(int, string) map[string]string {
		return signed(t, clusterInfoKubeconfig(t, "https://203.0.113.7:6443", ca.pem), testTokenSecret)
	})
	got, err := discover(t, srv.URL, caHash(ca.cert))
	wantError(t, got, err, "https://203.0.113.7:6443", srv.URL, "apiServer")
}

// Two clusters in cluster-info: refused.
func TestDiscoveryRefusesMoreThanOneCluster(t *testing.T) {
	ca := newTestCA(t, "cluster-ca")
	srv := startFakeAPIServer(t, ca, func(_ int, url string) map[string]string {
		cfg := clientcmdapi.NewConfig()
		cfg.Clusters["a"] = &clientcmdapi.Cluster{Server: url, CertificateAuthorityData: ca.pem}
		cfg.Clusters["b"] = &clientcmdapi.Cluster{Server: url, CertificateAuthorityData: ca.pem}
		data, err := clientcmd.Write(*cfg)
		if err != nil {
			t.Fatal(err)
		}
		return signed(t, string(data), testTokenSecret)
	})
	got, err := discover(t, srv.URL, caHash(ca.cert))
	wantError(t, got, err, "2 clusters", "exactly 1")
}

// No CA in cluster-info has the pinned key: refused.
func TestDiscoveryRefusesWhenNoCAMatchesThePin(t *testing.T) {
	ca, other := newTestCA(t, "cluster-ca"), newTestCA(t, "other-ca")
	srv := startFakeAPIServer(t, ca, func(_ int, url string) map[string]string {
		return signed(t, clusterInfoKubeconfig(t, url, ca.pem), testTokenSecret)
	})
	got, err := discover(t, srv.URL, caHash(other.cert))
	wantError(t, got, err, caHash(other.cert), "matches")
}

// An attacker terminates TLS with its own certificate and serves a correctly
// signed copy of cluster-info: the second read, verified by the pinned CA,
// fails.
func TestDiscoveryRefusesAServerThePinnedCADidNotSign(t *testing.T) {
	ca, evil := newTestCA(t, "cluster-ca"), newTestCA(t, "attacker-ca")
	srv := startFakeAPIServer(t, evil, func(_ int, url string) map[string]string {
		return signed(t, clusterInfoKubeconfig(t, url, ca.pem), testTokenSecret)
	})
	got, err := discover(t, srv.URL, caHash(ca.cert))
	wantError(t, got, err, "verified by the pinned CA", "does not chain to the pinned CA")
	if n := srv.readCount(); n != 1 {
		t.Errorf("the attacker's server answered %d reads, want 1 (the second must fail in the TLS handshake)", n)
	}
}

// The verified read returns another kubeconfig than the unverified one:
// refused.
func TestDiscoveryRefusesADifferentSecondRead(t *testing.T) {
	ca := newTestCA(t, "cluster-ca")
	srv := startFakeAPIServer(t, ca, func(n int, url string) map[string]string {
		kubeconfig := clusterInfoKubeconfig(t, url, ca.pem)
		if n > 1 {
			kubeconfig += "# changed\n"
		}
		return signed(t, kubeconfig, testTokenSecret)
	})
	got, err := discover(t, srv.URL, caHash(ca.cert))
	wantError(t, got, err, "differs")
}

// A token file that is not "<id>.<secret>" is refused without echoing it.
func TestDiscoveryRefusesABadTokenFile(t *testing.T) {
	ca := newTestCA(t, "cluster-ca")
	srv := startFakeAPIServer(t, ca, func(_ int, url string) map[string]string {
		return signed(t, clusterInfoKubeconfig(t, url, ca.pem), testTokenSecret)
	})
	for _, token := range []string{"", "abcdef", "ABCDEF.0123456789abcdef", "abcdef.0123456789abcde!", "abcdef:0123456789abcdef"} {
		path := writeTokenFile(t, token)
		_, err := DiscoverClusterCA(context.Background(), srv.URL, caHash(ca.cert), path)
		if err == nil || !strings.Contains(err.Error(), "bootstrapTokenFile") {
			t.Errorf("token %q: error %v, want one naming bootstrapTokenFile", token, err)
		} else if token != "" && strings.Contains(err.Error(), token) {
			t.Errorf("token %q: the error echoes the token: %v", token, err)
		}
	}
	if n := srv.readCount(); n != 0 {
		t.Errorf("cluster-info read %d times with a bad token, want 0", n)
	}
}

// An oversized cluster-info is refused.
func TestDiscoveryBoundsTheResponse(t *testing.T) {
	ca := newTestCA(t, "cluster-ca")
	srv := startFakeAPIServer(t, ca, func(_ int, url string) map[string]string {
		data := signed(t, clusterInfoKubeconfig(t, url, ca.pem), testTokenSecret)
		data["padding"] = strings.Repeat("x", 2<<20)
		return data
	})
	got, err := discover(t, srv.URL, caHash(ca.cert))
	wantError(t, got, err, "larger than")
}
