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
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"golang.org/x/sync/singleflight"
)

// Limits of the published keys.
const (
	maxKeysDocument = 256 << 10
	maxKeys         = 64
	minRSABits      = 2048
)

// keySet is Google's published signing keys as the verifier trusts them:
// fetched on first use, again when they are RefreshInterval old or a token
// names an unknown key id, never more often than MinRefresh (so forged key
// ids cannot make the approver hammer Google), and not used at all once
// MaxKeyAge old without a successful refetch.
type keySet struct {
	url    string
	client *http.Client
	now    func() time.Time

	minRefresh, refreshInterval, maxKeyAge time.Duration

	fetches singleflight.Group

	mu        sync.Mutex
	keys      map[string]*rsa.PublicKey // nil until a fetch succeeds
	fetchedAt time.Time                 // when the fetch that gave keys started
	attempted time.Time                 // when the last fetch completed
	lastErr   error
	fetched   uint64 // completed fetches
}

// errNotYet: a refetch is wanted but MinRefresh has not passed.
var errNotYet = errors.New("refetch not allowed yet")

// lookup returns the key of kid and when the keys it was looked up in were
// fetched. It refetches first when the keys are missing or stale, and when
// kid is unknown (rate-limited). A nil key with a nil error means the keys,
// fetched at the time returned, do not hold kid.
func (k *keySet) lookup(ctx context.Context, kid string) (*rsa.PublicKey, time.Time, error) {
	k.mu.Lock()
	keys, fetchedAt := k.keys, k.fetchedAt
	k.mu.Unlock()
	now := k.now()
	if keys != nil && now.Sub(fetchedAt) < k.refreshInterval {
		if key := keys[kid]; key != nil {
			return key, fetchedAt, nil
		}
	}
	err := k.refresh(ctx)
	k.mu.Lock()
	keys, fetchedAt = k.keys, k.fetchedAt
	k.mu.Unlock()
	switch {
	case keys == nil:
		return nil, time.Time{}, fmt.Errorf("no signing keys of Google to verify with: %w", err)
	case k.now().Sub(fetchedAt) >= k.maxKeyAge:
		return nil, time.Time{}, fmt.Errorf("the signing keys of Google are %s old (limit %s) and could not be refetched: %w",
			k.now().Sub(fetchedAt).Round(time.Second), k.maxKeyAge, err)
	}
	return keys[kid], fetchedAt, nil
}

// refresh fetches the keys unless the last fetch completed under
// MinRefresh ago; concurrent callers share one fetch, which goes on when
// the caller that started it gives up.
func (k *keySet) refresh(ctx context.Context) error {
	k.mu.Lock()
	seen, attempted, lastErr := k.fetched, k.attempted, k.lastErr
	k.mu.Unlock()
	if seen > 0 && k.now().Sub(attempted) < k.minRefresh {
		if lastErr != nil {
			return lastErr
		}
		return errNotYet
	}
	ch := k.fetches.DoChan("keys", func() (any, error) {
		k.mu.Lock()
		if k.fetched != seen { // another fetch completed meanwhile
			err := k.lastErr
			k.mu.Unlock()
			return nil, err
		}
		k.mu.Unlock()
		return nil, k.fetchOnce(context.WithoutCancel(ctx))
	})
	select {
	case r := <-ch:
		return r.Err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (k *keySet) fetchOnce(ctx context.Context) error {
	start := k.now()
	keys, err := k.get(ctx)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.fetched++
	k.attempted = k.now()
	k.lastErr = err
	if err != nil {
		keyFetches.WithLabelValues("error").Inc()
		return err
	}
	keyFetches.WithLabelValues("ok").Inc()
	k.keys, k.fetchedAt = keys, start // the new set replaces the old: retired keys stop verifying
	return nil
}

func (k *keySet) get(ctx context.Context) (map[string]*rsa.PublicKey, error) {
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
