package identity

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"time"
)

// Key is one identity signing key: an ECDSA P-256 key whose ID is the
// RFC 7638 thumbprint of its public half.
type Key struct {
	ID      string
	Private *ecdsa.PrivateKey
	Created time.Time
}

// NewKey makes a fresh P-256 key created at now.
func NewKey(now time.Time) (*Key, error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate identity key: %w", err)
	}
	return newKey(priv, now)
}

func newKey(priv *ecdsa.PrivateKey, created time.Time) (*Key, error) {
	id, err := KeyID(&priv.PublicKey)
	if err != nil {
		return nil, err
	}
	return &Key{ID: id, Private: priv, Created: created.UTC()}, nil
}

// MarshalPEM encodes the private key as a PKCS #8 "PRIVATE KEY" block.
func (k *Key) MarshalPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k.Private)
	if err != nil {
		return nil, fmt.Errorf("marshal identity key %s: %w", k.ID, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParseKeyPEM reads a key written by MarshalPEM. The ID is derived from the
// key itself, never stored beside it.
func ParseKeyPEM(data []byte, created time.Time) (*Key, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, errors.New("identity key: no PRIVATE KEY PEM block")
	}
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("identity key: %w", err)
	}
	priv, ok := parsed.(*ecdsa.PrivateKey)
	if !ok || priv.Curve != elliptic.P256() {
		return nil, fmt.Errorf("identity key: want an ECDSA P-256 key, got %T", parsed)
	}
	return newKey(priv, created)
}

// KeyID is the RFC 7638 JWK thumbprint of a P-256 public key, base64url.
func KeyID(pub *ecdsa.PublicKey) (string, error) {
	x, y, err := coordinates(pub)
	if err != nil {
		return "", err
	}
	// The thumbprint input is the required members in lexicographic order,
	// without whitespace.
	canonical := fmt.Sprintf(`{"crv":"P-256","kty":"EC","x":"%s","y":"%s"}`, b64(x), b64(y))
	sum := sha256.Sum256([]byte(canonical))
	return b64(sum[:]), nil
}

// coordinates returns the 32-byte big-endian X and Y of a P-256 key.
func coordinates(pub *ecdsa.PublicKey) (x, y []byte, err error) {
	if pub == nil || pub.Curve != elliptic.P256() {
		return nil, nil, errors.New("identity key: not a P-256 public key")
	}
	raw, err := pub.Bytes()
	if err != nil {
		return nil, nil, fmt.Errorf("identity key: %w", err)
	}
	// Uncompressed point: 0x04 || X || Y.
	if len(raw) != 65 || raw[0] != 4 {
		return nil, nil, errors.New("identity key: unexpected point encoding")
	}
	return raw[1:33], raw[33:], nil
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
