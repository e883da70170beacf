package ticket

import (
	"crypto"
	"encoding/hex"
	"regexp"
	"testing"
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
