package nodeidtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"testing"

	"github.com/mooring-dev/mooring/internal/evidence"
)

// BoundKey is a fresh P-256 key, as a node makes for its CSR, and its
// binding value (evidence.Binding), which the node's evidence signs.
func BoundKey(t testing.TB) (*ecdsa.PrivateKey, string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b, err := evidence.Binding(k.Public())
	if err != nil {
		t.Fatal(err)
	}
	return k, b
}

// NewBinding is the binding value of a fresh key (BoundKey).
func NewBinding(t testing.TB) string {
	t.Helper()
	_, b := BoundKey(t)
	return b
}
