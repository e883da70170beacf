// Package attest verifies the local cloud's instance identity tokens as CSR
// evidence: ES256 JWTs from an instance's metadata service whose audience
// is the binding of the CSR key.
package attest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/local/identity"
)

// Type is the evidence block type of a local cloud identity token.
const Type = "MOORING LOCAL IDENTITY TOKEN"

// ProviderIDPrefix of local cloud instances' Nodes.
const ProviderIDPrefix = "local://"

// KeySource fetches the cloud's published keys (a JWKS document); the
// local cloud client's JWKS method is one.
type KeySource func(ctx context.Context) ([]byte, error)

// Options configure a Verifier.
type Options struct {
	// Issuer the tokens must carry.
	Issuer string
	// Skew tolerated on iat/nbf/exp (default 30s) and the longest lifetime
	// accepted (default 15m).
	Skew, MaxLifetime time.Duration
	// MinRefresh bounds how often an unknown key id refetches the keys
	// (default 10s), so forged kids cannot flood the cloud.
	MinRefresh time.Duration
}

// Verifier is a cloud.EvidenceVerifier for local cloud identity tokens.
type Verifier struct {
	keys KeySource
	opts Options

	mu        sync.Mutex
	verifier  *identity.Verifier
	fetchedAt time.Time
}

var _ cloud.EvidenceVerifier = (*Verifier)(nil)

// New makes a verifier; keys are fetched on first use.
func New(keys KeySource, opts Options) (*Verifier, error) {
	if opts.Issuer == "" {
		return nil, errors.New("attest: issuer is required")
	}
	if opts.MinRefresh <= 0 {
		opts.MinRefresh = 10 * time.Second
	}
	return &Verifier{keys: keys, opts: opts}, nil
}

// Type is the evidence block type this verifier reads.
func (v *Verifier) Type() string { return Type }

// Verify checks a token and its binding.
func (v *Verifier) Verify(ctx context.Context, data []byte, binding string, now time.Time) (cloud.Attestation, error) {
	ver, err := v.current(ctx, false)
	if err != nil {
		return cloud.Attestation{}, err
	}
	vo := identity.VerifyOptions{Issuer: v.opts.Issuer, Audience: binding, Now: now, Skew: v.opts.Skew, MaxLifetime: v.opts.MaxLifetime}
	claims, err := ver.Verify(string(data), vo)
	if errors.Is(err, identity.ErrUnknownKey) {
		// Perhaps the cloud rotated its key since the last fetch.
		if ver, err = v.current(ctx, true); err != nil {
			return cloud.Attestation{}, err
		}
		claims, err = ver.Verify(string(data), vo)
	}
	if err != nil {
		return cloud.Attestation{}, rejection(err)
	}
	return cloud.Attestation{
		InstanceID: claims.Instance.ID,
		ProviderID: ProviderIDPrefix + claims.Instance.ID,
		ReplayKey:  "local/" + claims.ID,
		IssuedAt:   time.Unix(claims.IssuedAt, 0),
		ExpiresAt:  time.Unix(claims.Expiry, 0),
	}, nil
}

func rejection(err error) error {
	switch {
	case errors.Is(err, identity.ErrAudience):
		return cloud.Reject(cloud.RejectBinding, err)
	case errors.Is(err, identity.ErrExpired), errors.Is(err, identity.ErrNotYetValid), errors.Is(err, identity.ErrLifetime):
		return cloud.Reject(cloud.RejectExpired, err)
	case errors.Is(err, identity.ErrIssuer):
		return cloud.Reject(cloud.RejectIssuer, err)
	case errors.Is(err, identity.ErrBadSignature), errors.Is(err, identity.ErrUnknownKey), errors.Is(err, identity.ErrAlgorithm):
		return cloud.Reject(cloud.RejectSignature, err)
	default:
		return cloud.Reject(cloud.RejectMalformed, err)
	}
}

// current returns the verifier over the newest keys, fetching them when
// there are none or when refresh is asked and MinRefresh has passed.
func (v *Verifier) current(ctx context.Context, refresh bool) (*identity.Verifier, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.verifier != nil && (!refresh || time.Since(v.fetchedAt) < v.opts.MinRefresh) {
		return v.verifier, nil
	}
	data, err := v.keys(ctx)
	registerMetrics()
	if err != nil {
		keyFetches.WithLabelValues("error").Inc()
		if v.verifier != nil {
			return v.verifier, nil // keep the keys we have
		}
		return nil, fmt.Errorf("fetch the cloud's identity keys: %w", err)
	}
	keyFetches.WithLabelValues("ok").Inc()
	keys, err := identity.ParseJWKS(data)
	if err != nil {
		return nil, fmt.Errorf("the cloud's identity keys: %w", err)
	}
	v.verifier = identity.NewVerifier(keys)
	v.fetchedAt = time.Now()
	return v.verifier, nil
}

// Peek reads the token id and audience without verifying the token.
func (v *Verifier) Peek(data []byte) (replayKey, binding string, err error) {
	c, err := identity.Peek(string(data))
	if err != nil {
		return "", "", err
	}
	return "local/" + c.ID, c.Audience, nil
}

var (
	keyFetches = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "mooring", Subsystem: "local_attest", Name: "key_fetches_total",
		Help: "Fetches of the local cloud's published identity keys (JWKS) by result.",
	}, []string{"result"})
	registerOnce sync.Once
)

func registerMetrics() { registerOnce.Do(func() { legacyregistry.MustRegister(keyFetches) }) }
