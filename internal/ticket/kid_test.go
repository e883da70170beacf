package ticket

import (
	"crypto"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestKidsAreHexThumbprints: a kid is the first half of the key's RFC 7638
// thumbprint in hex. A base64url thumbprint begins with "-" one time in 64,
// and "keys sign <kid>" then failed as an unknown flag (CI, stop 25).
func TestKidsAreHexThumbprints(t *testing.T) {
	form := regexp.MustCompile(`^[0-9a-f]{32}$`)
	s := &KeySet{}
	for range 200 {
		kid, err := s.AddKey()
		if err != nil {
			t.Fatal(err)
		}
		if !form.MatchString(kid) {
			t.Fatalf("kid %q is not 32 lower-case hex digits", kid)
		}
		pub := s.key(kid).Public()
		thumb, err := pub.Thumbprint(crypto.SHA256)
		if err != nil || hex.EncodeToString(thumb[:16]) != kid {
			t.Fatalf("kid %q is not the public key's thumbprint %x (%v)", kid, thumb, err)
		}
	}
}

// TestPublicKeysFile: the Secret's public-keys.json holds the public halves
// only, verifies the set's tickets, and is what HoldsPrivateKeys tells
// apart from keys.json.
func TestPublicKeysFile(t *testing.T) {
	s := &KeySet{}
	for range 2 {
		if _, err := s.AddKey(); err != nil {
			t.Fatal(err)
		}
	}
	data, err := s.Data()
	if err != nil {
		t.Fatal(err)
	}
	pub := data[PublicKeysFile]
	if HoldsPrivateKeys(pub) || !HoldsPrivateKeys(data[KeysFile]) {
		t.Fatalf("HoldsPrivateKeys: public %v, keys %v", HoldsPrivateKeys(pub), HoldsPrivateKeys(data[KeysFile]))
	}
	if strings.Contains(string(pub), `"d"`) {
		t.Fatalf("public-keys.json holds a private parameter:\n%s", pub)
	}
	keys, err := ParsePublicKeys(pub)
	if err != nil || len(keys) != 2 {
		t.Fatalf("%v, %v", keys, err)
	}
	tok, _, err := s.Issue("web-1", "c1", time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Verify([]byte(tok), keys, Expect{Cluster: "c1", Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := s.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, PublicKeysFile)); err != nil || string(got) != string(pub) {
		t.Fatalf("WriteDir's %s: %q, %v", PublicKeysFile, got, err)
	}
}
