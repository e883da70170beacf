// Package attest verifies the local cloud's instance identity tokens as CSR
// evidence: ES256 JWTs from an instance's metadata service whose audience
// is the binding of the CSR key.
package attest

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/local/agentid"
	"github.com/mooring-dev/mooring/cloud/local/identity"
	"github.com/mooring-dev/mooring/internal/keyset"
)

// Type is the evidence block type of a local cloud identity token, the
// one the node agent writes (agentid.EvidenceType).
const Type = agentid.EvidenceType

// KeySource fetches the cloud's published keys (a JWKS document); the
// local cloud client's JWKS method is one.
type KeySource func(ctx context.Context) ([]byte, error)

// Defaults of Options.
const (
	defaultMinRefresh      = 10 * time.Second
	defaultRefreshInterval = 5 * time.Minute
	// The default MaxKeyAge is this many RefreshIntervals.
	defaultMaxKeyAgeIntervals = 3
)

// Options configure a Verifier.
type Options struct {
	// Issuer the tokens must carry.
	Issuer string
	// Skew tolerated on iat/nbf/exp (default 30s) and the longest lifetime
	// accepted (default 15m).
	Skew, MaxLifetime time.Duration
	// MinRefresh bounds how often the keys are refetched after a fetch
	// (default 10s): a token naming an unknown key id refetches them at most
	// this often, so forged kids cannot flood the cloud, and neither do
	// retries while the cloud is down.
	MinRefresh time.Duration
	// RefreshInterval is how long fetched keys are used before the next
	// Verify refetches them first (default 5m). A refetch replaces the
	// trusted keys, so a key the cloud stopped publishing (retired and
	// pruned) stops verifying within about this long.
	RefreshInterval time.Duration
	// MaxKeyAge is how long fetched keys may be used at all (default
	// 3 × RefreshInterval; at least RefreshInterval). It is the longest a
	// withdrawn key can verify while the cloud does not answer. Older keys
	// that cannot
	// be refetched make Verify fail with a transient error, so the CSR is
	// retried rather than judged by stale keys.
	MaxKeyAge time.Duration
	// Now is the clock of key ages (default time.Now). The time tokens are
	// checked at is Verify's now argument.
	Now func() time.Time
}

// Verifier is a cloud.EvidenceVerifier for local cloud identity tokens.
type Verifier struct {
	opts Options
	keys *keyset.Cache[*ecdsa.PublicKey]
}

var _ cloud.EvidenceVerifier = (*Verifier)(nil)

// New makes a verifier; keys are fetched on first use.
func New(keys KeySource, opts Options) (*Verifier, error) {
	if opts.Issuer == "" {
		return nil, errors.New("attest: issuer is required")
	}
	if keys == nil {
		return nil, errors.New("attest: a key source is required")
	}
	if opts.MinRefresh <= 0 {
		opts.MinRefresh = defaultMinRefresh
	}
	if opts.RefreshInterval <= 0 {
		opts.RefreshInterval = defaultRefreshInterval
	}
	if opts.MaxKeyAge <= 0 {
		opts.MaxKeyAge = defaultMaxKeyAgeIntervals * opts.RefreshInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	registerMetrics()
	fetch := func(ctx context.Context) (map[string]*ecdsa.PublicKey, error) {
		data, err := keys(ctx)
		if err != nil {
			return nil, fmt.Errorf("fetch the cloud's identity keys: %w", err)
		}
		parsed, err := identity.ParseJWKS(data)
		if err != nil {
			return nil, fmt.Errorf("the cloud's identity keys: %w", err)
		}
		return parsed, nil
	}
	cache, err := keyset.New(fetch, keyset.Options{
		Name: "the cloud's identity keys", MinRefresh: opts.MinRefresh, RefreshInterval: opts.RefreshInterval,
		MaxAge: opts.MaxKeyAge, Now: opts.Now,
		Observe: func(result string) { keyFetches.WithLabelValues(result).Inc() },
	})
	if err != nil {
		return nil, fmt.Errorf("attest: %w", err)
	}
	return &Verifier{opts: opts, keys: cache}, nil
}

// Type is the evidence block type this verifier reads.
func (v *Verifier) Type() string { return Type }

// Verify checks a token and its binding: its form and claims first, then
// its signature by the cloud's key its kid names, then the claims as
// signed.
//
// Verdicts (*cloud.Rejection): a malformed token, claims that fail (times,
// lifetime, issuer, audience = the binding), a bad signature, and a kid the
// cloud does not publish (not in keys fetched at most MinRefresh ago,
// refetched once for it). Transient (the CSR is retried): the keys could
// not be fetched, or are older than MaxKeyAge and cannot be refetched.
func (v *Verifier) Verify(ctx context.Context, data []byte, binding string, now time.Time) (cloud.Attestation, error) {
	vo := identity.VerifyOptions{Issuer: v.opts.Issuer, Audience: binding, Now: now, Skew: v.opts.Skew, MaxLifetime: v.opts.MaxLifetime}
	var lookupErr error
	claims, err := identity.VerifyWith(string(data), vo, func(kid string) (*ecdsa.PublicKey, error) {
		key, err := v.keys.Lookup(ctx, kid)
		lookupErr = err
		return key, err
	})
	switch {
	case err == nil:
	case lookupErr != nil && errors.Is(err, keyset.ErrUnknownKey):
		return cloud.Attestation{}, cloud.Reject(cloud.RejectSignature, fmt.Errorf("token: %w", err))
	case lookupErr != nil:
		return cloud.Attestation{}, err // the keys could not be had: transient
	default:
		return cloud.Attestation{}, rejection(err)
	}
	return cloud.Attestation{
		InstanceID: claims.Instance.ID,
		ProviderID: agentid.ProviderID(claims.Instance.ID),
		Cluster:    claims.Instance.Cluster,
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

// Peek reads the token id and audience without verifying the token.
func (v *Verifier) Peek(data []byte) (replayKey, binding string, err error) {
	c, err := identity.Peek(string(data))
	if err != nil {
		return "", "", err
	}
	return "local/" + c.ID, c.Audience, nil
}

// PeekMachine reads the instance id the token claims, without verifying
// the token.
func (v *Verifier) PeekMachine(data []byte) (string, error) {
	c, err := identity.Peek(string(data))
	if err != nil {
		return "", err
	}
	if c.Instance.ID == "" {
		return "", errors.New("token names no instance")
	}
	return c.Instance.ID, nil
}

var (
	keyFetches = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "mooring", Subsystem: "local_attest", Name: "key_fetches_total",
		Help: "Fetches of the local cloud's published identity keys (JWKS) by result.",
	}, []string{"result"})
	registerOnce sync.Once
)

func registerMetrics() { registerOnce.Do(func() { legacyregistry.MustRegister(keyFetches) }) }
