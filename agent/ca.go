package agent

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"k8s.io/cluster-bootstrap/token/jws"
	tokenutil "k8s.io/cluster-bootstrap/token/util"
)

// clusterCA returns the cluster CA bundle: the configured file, or the CA
// discovered from kube-public/cluster-info and pinned by caCertHash (see
// DiscoverClusterCA).
func clusterCA(ctx context.Context, c Config) ([]byte, error) {
	if c.CAFile != "" {
		return readCAFile(c.CAFile)
	}
	return DiscoverClusterCA(ctx, c.APIServer, c.CACertHash, c.BootstrapTokenFile)
}

// readCAFile reads the CA bundle caFile names; a file that cannot be read
// or holds no certificate is a ConfigError.
func readCAFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, configErrorf("caFile: %w", err)
	}
	if _, err := certutil.ParseCertsPEM(data); err != nil {
		return nil, configErrorf("caFile %s: %w", path, err)
	}
	return data, nil
}

// Bounds of a cluster-info read.
const (
	clusterInfoMaxBytes = 1 << 20
	clusterInfoTimeout  = 15 * time.Second
	clusterInfoPath     = "/api/v1/namespaces/kube-public/configmaps/" + bootstrapapi.ConfigMapClusterInfo
)

// DiscoverClusterCA finds the cluster CA the way kubeadm's token discovery
// does, and returns only the CA certificates whose public key matches
// caCertHash, as PEM:
//
//  1. it reads the public kube-public/cluster-info ConfigMap without
//     verifying TLS;
//  2. it checks the detached JWS jws-kubeconfig-<token id> over the
//     ConfigMap's kubeconfig with the bootstrap token in bootstrapTokenFile
//     (kube-controller-manager's bootstrapsigner writes it for tokens with
//     usage-bootstrap-signing=true), so that the kubeconfig is the one the
//     cluster published;
//  3. it requires exactly one cluster in that kubeconfig, whose server is
//     apiServer;
//  4. it keeps the certificates of that cluster's CA data that match the
//     pin, and refuses if none does;
//  5. it reads cluster-info again over TLS verified against those
//     certificates only and requires the same kubeconfig, so that the pinned
//     CA is the one that serves apiServer.
func DiscoverClusterCA(ctx context.Context, apiServer, caCertHash, bootstrapTokenFile string) ([]byte, error) {
	if !caHashRE.MatchString(caCertHash) {
		return nil, configErrorf("caCertHash: want sha256:<64 hex digits>, got %q", caCertHash)
	}
	base := strings.TrimRight(apiServer, "/")
	server, err := url.Parse(base)
	if err != nil || server.Scheme != "https" || server.Host == "" {
		return nil, configErrorf("apiServer: want an https:// URL, got %q", apiServer)
	}
	tokenID, tokenSecret, err := readBootstrapToken(bootstrapTokenFile)
	if err != nil {
		return nil, err
	}

	// 1. Unverified read: cluster-info is public, and nothing in it is
	// trusted until the signature and the pin say so.
	insecure := clusterInfoClient(&tls.Config{InsecureSkipVerify: true}) //nolint:gosec // checked by JWS and pin, then re-read verified
	first, err := fetchClusterInfo(ctx, insecure, base)
	if err != nil {
		return nil, fmt.Errorf("read cluster-info from %s: %w", base, err)
	}

	// 2. The cluster signed this kubeconfig with our token.
	kubeconfig := first[bootstrapapi.KubeConfigKey]
	if kubeconfig == "" {
		return nil, fmt.Errorf("cluster-info from %s has no %q key: the cluster does not publish cluster-info for token discovery",
			base, bootstrapapi.KubeConfigKey)
	}
	sigKey := bootstrapapi.JWSSignatureKeyPrefix + tokenID
	sig, ok := first[sigKey]
	if !ok || sig == "" {
		return nil, fmt.Errorf("cluster-info has no JWS signature %s for bootstrap token id %q: the cluster's "+
			"bootstrapsigner controller (kube-controller-manager) signs cluster-info only for valid, unexpired tokens "+
			"with usage-bootstrap-signing=true; check the token, or wait for the controller to sign", sigKey, tokenID)
	}
	if !jws.DetachedTokenIsValid(sig, kubeconfig, tokenID, tokenSecret) {
		return nil, fmt.Errorf("cluster-info: the JWS signature %s does not verify with bootstrap token id %q: "+
			"the kubeconfig in cluster-info is not the one the cluster signed (tampered with in transit?) or the token "+
			"secret is wrong; refusing to trust it", sigKey, tokenID)
	}

	// 3. One cluster, at the configured server.
	kc, err := clientcmd.Load([]byte(kubeconfig))
	if err != nil {
		return nil, fmt.Errorf("cluster-info kubeconfig: %w", err)
	}
	if len(kc.Clusters) != 1 {
		return nil, fmt.Errorf("cluster-info kubeconfig has %d clusters, want exactly 1", len(kc.Clusters))
	}
	var caData []byte
	for name, cluster := range kc.Clusters {
		if got := strings.TrimRight(cluster.Server, "/"); got != base {
			return nil, fmt.Errorf("cluster-info kubeconfig: cluster %q has server %q, but apiServer is %q; refusing",
				name, cluster.Server, apiServer)
		}
		caData = cluster.CertificateAuthorityData
	}

	// 4. Only the pinned CA certificates.
	certs, err := certutil.ParseCertsPEM(caData)
	if err != nil {
		return nil, fmt.Errorf("cluster-info kubeconfig: certificate-authority-data: %w", err)
	}
	var pinned []*x509.Certificate
	for _, cert := range certs {
		if caHash(cert) == caCertHash {
			pinned = append(pinned, cert)
		}
	}
	if len(pinned) == 0 {
		return nil, fmt.Errorf("caCertHash: none of the %d CA certificates in cluster-info matches %s", len(certs), caCertHash)
	}
	pool := x509.NewCertPool()
	var pinnedPEM []byte
	for _, cert := range pinned {
		pool.AddCert(cert)
		pinnedPEM = append(pinnedPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})...)
	}

	// 5. The pinned CA serves the apiserver, and says the same.
	verified := clusterInfoClient(&tls.Config{RootCAs: pool, ServerName: server.Hostname(), MinVersion: tls.VersionTLS12})
	second, err := fetchClusterInfo(ctx, verified, base)
	if err != nil {
		var verr *tls.CertificateVerificationError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("read cluster-info from %s over TLS verified by the pinned CA (%s): the apiserver's "+
				"certificate does not chain to the pinned CA, so the first read cannot be trusted (is someone "+
				"intercepting the connection?): %w", base, caCertHash, err)
		}
		return nil, fmt.Errorf("read cluster-info from %s over TLS verified by the pinned CA (%s): %w", base, caCertHash, err)
	}
	if second[bootstrapapi.KubeConfigKey] != kubeconfig {
		return nil, fmt.Errorf("cluster-info read over TLS verified by the pinned CA differs from the unverified read: " +
			"refusing (someone between this machine and the apiserver may have altered the first)")
	}
	return pinnedPEM, nil
}

// readBootstrapToken reads a bootstrap token ("<id>.<secret>") from path.
// A file that cannot be read or holds no token is a ConfigError. Errors
// never include the secret.
func readBootstrapToken(path string) (id, secret string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", "", configErrorf("bootstrapTokenFile: %w", err)
	}
	token := strings.TrimSpace(string(data))
	if !tokenutil.IsValidBootstrapToken(token) {
		return "", "", configErrorf("bootstrapTokenFile %s: not a bootstrap token (want <6 of [a-z0-9]>.<16 of [a-z0-9]>)", path)
	}
	id, secret, _ = strings.Cut(token, ".")
	return id, secret, nil
}

// clusterInfoClient is an HTTP client for cluster-info reads: no proxy, no
// redirects, bounded in time.
func clusterInfoClient(tc *tls.Config) *http.Client {
	return &http.Client{
		Timeout: clusterInfoTimeout,
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
			TLSClientConfig:     tc,
			TLSHandshakeTimeout: 10 * time.Second,
			DisableKeepAlives:   true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// fetchClusterInfo GETs the cluster-info ConfigMap and returns its data.
func fetchClusterInfo(ctx context.Context, client *http.Client, base string) (map[string]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+clusterInfoPath, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, clusterInfoMaxBytes+1))
	if err != nil {
		return nil, err
	}
	if len(body) > clusterInfoMaxBytes {
		return nil, fmt.Errorf("response larger than %d bytes", clusterInfoMaxBytes)
	}
	var cm struct {
		Kind string            `json:"kind"`
		Data map[string]string `json:"data"`
	}
	if err := json.Unmarshal(body, &cm); err != nil {
		return nil, fmt.Errorf("decode ConfigMap: %w", err)
	}
	if cm.Kind != "" && cm.Kind != "ConfigMap" {
		return nil, fmt.Errorf("got a %s, want a ConfigMap", cm.Kind)
	}
	if cm.Data == nil {
		return nil, errors.New("ConfigMap has no data")
	}
	return cm.Data, nil
}

// caHash is kubeadm's CA pin: sha256 of the SubjectPublicKeyInfo.
func caHash(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}
