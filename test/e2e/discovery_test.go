package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"

	"github.com/mooring-dev/mooring/agent"
	"github.com/mooring-dev/mooring/internal/pki"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// TestDiscoveryFindsTheClusterCA: the test bed publishes cluster-info as
// kubeadm does, kube-controller-manager's bootstrapsigner signs it for a new
// bootstrap token, and the agent's caCertHash discovery, reading it as an
// anonymous caller, returns exactly the cluster CA; a wrong pin, a token the
// cluster does not know and another spelling of the server are refused.
func TestDiscoveryFindsTheClusterCA(t *testing.T) {
	c := testbed.Start(t, testbed.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	token, err := c.CreateBootstrapToken(ctx, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tokenID, _, _ := strings.Cut(token, ".")
	if err := c.PublishClusterInfo(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	harness.WaitUntil(ctx, t, "the bootstrapsigner to sign cluster-info for token "+tokenID, func() (bool, error) {
		cm, err := c.Client.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, testbed.ClusterInfoName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return cm.Data["jws-kubeconfig-"+tokenID] != "", nil
	})
	t.Logf("cluster-info signed for token %s %v after it was published", tokenID, time.Since(start).Round(time.Millisecond))

	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(c.CA.Cert.RawSubjectPublicKeyInfo)
	pin := "sha256:" + hex.EncodeToString(sum[:])

	got, err := agent.DiscoverClusterCA(ctx, c.URL, pin, tokenFile)
	if err != nil {
		t.Fatalf("discovery with the cluster CA's pin: %v", err)
	}
	certs, err := certutil.ParseCertsPEM(got)
	if err != nil {
		t.Fatalf("discovered CA: %v", err)
	}
	if len(certs) != 1 || !certs[0].Equal(c.CA.Cert) {
		t.Fatalf("discovered %d certificates, want exactly the cluster CA %s", len(certs), c.CA.Cert.Subject.CommonName)
	}

	// Refusals, each for its reason.
	other, err := pki.NewCA("not-the-cluster-ca")
	if err != nil {
		t.Fatal(err)
	}
	otherSum := sha256.Sum256(other.Cert.RawSubjectPublicKeyInfo)
	wrongPin := "sha256:" + hex.EncodeToString(otherSum[:])
	unknownToken := filepath.Join(dir, "unknown-token")
	if err := os.WriteFile(unknownToken, []byte("zzzzzz.0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, server, pin, tokenFile, want string
	}{
		{"wrong pin", c.URL, wrongPin, tokenFile, "matches " + wrongPin},
		{"token the cluster does not know", c.URL, pin, unknownToken, `no JWS signature jws-kubeconfig-zzzzzz for bootstrap token id "zzzzzz"`},
		{"server not the published one", strings.Replace(c.URL, "127.0.0.1", "localhost", 1), pin, tokenFile, "has server"},
	} {
		got, err := agent.DiscoverClusterCA(ctx, tc.server, tc.pin, tc.tokenFile)
		if err == nil {
			t.Errorf("%s: discovery returned %d bytes of CA, want an error", tc.name, len(got))
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q, want it to contain %q", tc.name, err, tc.want)
		}
	}
}
