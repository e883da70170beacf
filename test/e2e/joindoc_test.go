package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/mooring-dev/mooring/internal/doctest"
	"github.com/mooring-dev/mooring/test/harness"
)

// TestJoinDocExamples runs docs/join.md's command examples that need no
// cloud or release (internal/doctest; the others are marked skip with
// their reason): the local cloud's `mooring-agent user-data`, with the
// mooring-agent of this checkout as bin/mooring-agent and a cluster CA as
// ca.crt, as the doc's reader has them. Its output is cloud-config that
// installs that binary by the digest the example computed.
func TestJoinDocExamples(t *testing.T) {
	examples, err := doctest.Parse(filepath.Join(harness.RepoRoot(), "docs", "join.md"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	agent := harness.BuildBinary(t, "agent/cmd/mooring-agent")
	data, err := os.ReadFile(agent)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "mooring-agent"), data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), testCA(t), 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)

	r := &doctest.Runner{Dir: dir, Env: []string{"PATH=" + filepath.Join(dir, "bin") + string(os.PathListSeparator) + os.Getenv("PATH")}}
	outputs := r.Run(t, doctest.Select(examples, "local"))
	if len(outputs) == 0 {
		t.Fatal("docs/join.md has no example of group local that runs")
	}
	for place, out := range outputs {
		if !strings.HasPrefix(out, "#cloud-config\n") {
			t.Fatalf("%s printed no cloud-config:\n%s", place, out)
		}
		var doc map[string]any
		if err := yaml.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("%s: the user-data does not parse: %v", place, err)
		}
		if !strings.Contains(out, hex.EncodeToString(sum[:])) {
			t.Errorf("%s: the user-data does not name the agent's digest %x", place, sum)
		}
	}
	r.Run(t, doctest.Select(examples, "")) // the skipped ones: logged
	r.CheckReplacements(t)
	for _, g := range doctest.Groups(examples) {
		if g != "" && g != "local" {
			t.Errorf("docs/join.md has examples of group %q that this test does not run", g)
		}
	}
}

// testCA is a self-signed CA certificate (PEM), as a cluster's ca.crt.
func testCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kubernetes"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
