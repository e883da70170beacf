package gce

import (
	"bytes"
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// Limits of the published keys.
const (
	maxKeysDocument = 256 << 10
	maxKeys         = 64
	minRSABits      = 2048
)

// keyFetcher gets Google's published signing keys: the fetch of the
// verifier's key set (internal/keyset), which decides when to call it.
type keyFetcher struct {
	url    string
	client *http.Client
	now    func() time.Time
}

func (k *keyFetcher) get(ctx context.Context) (map[string]*rsa.PublicKey, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch Google's signing keys: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxKeysDocument+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("fetch Google's signing keys from %s: %w", k.url, err)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("fetch Google's signing keys from %s: HTTP %d", k.url, resp.StatusCode)
	case len(body) > maxKeysDocument:
		return nil, fmt.Errorf("the signing keys at %s: over %d bytes", k.url, maxKeysDocument)
	}
	keys, err := ParseKeys(body, k.now())
	if err != nil {
		return nil, fmt.Errorf("the signing keys at %s: %w", k.url, err)
	}
	return keys, nil
}

// ParseKeys reads Google's published token signing keys in either of its
// formats: a JWK set ({"keys": [...]}, oauth2/v3/certs), whose keys must be
// RSA public keys with a key id, for signing, and RS256 if they name an
// algorithm; or an object of key ids to PEM X.509 certificates
// (oauth2/v1/certs), whose certificates must be valid at now and hold RSA
// keys. Keys under 2048 bits are refused; so is a document with no key.
func ParseKeys(data []byte, now time.Time) (map[string]*rsa.PublicKey, error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	out := map[string]*rsa.PublicKey{}
	add := func(kid string, pub any) error {
		rk, ok := pub.(*rsa.PublicKey)
		switch {
		case kid == "":
			return errors.New("a key has no key id")
		case !ok:
			return fmt.Errorf("key %q is not an RSA public key", kid)
		case rk.N.BitLen() < minRSABits:
			return fmt.Errorf("key %q has %d bits, want at least %d", kid, rk.N.BitLen(), minRSABits)
		case out[kid] != nil:
			return fmt.Errorf("key id %q appears twice", kid)
		}
		out[kid] = rk
		return nil
	}
	if _, ok := probe["keys"]; ok {
		var set jose.JSONWebKeySet
		if err := json.Unmarshal(data, &set); err != nil {
			return nil, fmt.Errorf("JWK set: %w", err)
		}
		for _, jwk := range set.Keys {
			switch {
			case !jwk.IsPublic():
				return nil, fmt.Errorf("JWK %q is not a public key", jwk.KeyID)
			case jwk.Use != "" && jwk.Use != "sig":
				continue
			case jwk.Algorithm != "" && jwk.Algorithm != string(jose.RS256):
				continue
			}
			if err := add(jwk.KeyID, jwk.Key); err != nil {
				return nil, err
			}
		}
	} else {
		for kid, raw := range probe {
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return nil, fmt.Errorf("certificate of %q is not a string", kid)
			}
			block, rest := pem.Decode([]byte(s))
			if block == nil || block.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) > 0 {
				return nil, fmt.Errorf("certificate of %q is not one PEM CERTIFICATE", kid)
			}
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("certificate of %q: %w", kid, err)
			}
			if now.Before(cert.NotBefore) || now.After(cert.NotAfter) {
				continue // not valid now: not trusted
			}
			if err := add(kid, cert.PublicKey); err != nil {
				return nil, err
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no usable RS256 signing key")
	}
	if len(out) > maxKeys {
		return nil, fmt.Errorf("%d keys, limit %d", len(out), maxKeys)
	}
	return out, nil
}
