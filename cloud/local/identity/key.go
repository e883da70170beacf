package identity

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	jose "github.com/go-jose/go-jose/v4"
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

// KeyID is the RFC 7638 JWK thumbprint (SHA-256, base64url without
// padding) of a P-256 public key, as go-jose computes it.
func KeyID(pub *ecdsa.PublicKey) (string, error) {
	if pub == nil || pub.Curve != elliptic.P256() {
		return "", errors.New("identity key: not a P-256 public key")
	}
	jwk := jose.JSONWebKey{Key: pub}
	sum, err := jwk.Thumbprint(crypto.SHA256)
	if err != nil {
		return "", fmt.Errorf("identity key: thumbprint: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(sum), nil
}

// publicJWK is the published form of a key: its public half, its kid, and
// the only algorithm it is used with.
func publicJWK(k *Key) jose.JSONWebKey {
	return jose.JSONWebKey{
		Key:       &k.Private.PublicKey,
		KeyID:     k.ID,
		Algorithm: string(jose.ES256),
		Use:       "sig",
	}
}
