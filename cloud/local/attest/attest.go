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

	"golang.org/x/sync/singleflight"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/local/agentid"
	"github.com/mooring-dev/mooring/cloud/local/identity"
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

// keyFetchTimeout bounds one fetch of the keys. A fetch is shared by every
// Verify waiting for it, so it does not end when the caller that started
// it gives up.
const keyFetchTimeout = 30 * time.Second

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
	// 3 × RefreshInterval; at least RefreshInterval). Older keys that cannot
	// be refetched make Verify fail with a transient error, so the CSR is
	// retried rather than judged by stale keys.
	MaxKeyAge time.Duration
	// Now is the clock of key ages (default time.Now). The time tokens are
	// checked at is Verify's now argument.
	Now func() time.Time
}

// Verifier is a cloud.EvidenceVerifier for local cloud identity tokens.
type Verifier struct {
	keys KeySource
	opts Options

	// fetches shares one fetch of the keys among concurrent callers; no
	// lock is held while it runs.
	fetches singleflight.Group

	mu        sync.Mutex
	verifier  *identity.Verifier // nil until a fetch succeeds
	fetchedAt time.Time          // when the fetch that gave verifier started
	attempts  uint64             // fetches completed, successful or not
	doneAt    time.Time          // when the last fetch completed
	lastErr   error              // the last fetch's error; nil if it succeeded
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
	if opts.MaxKeyAge < opts.RefreshInterval {
		return nil, fmt.Errorf("attest: MaxKeyAge %s is under RefreshInterval %s", opts.MaxKeyAge, opts.RefreshInterval)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Verifier{keys: keys, opts: opts}, nil
}

// Type is the evidence block type this verifier reads.
func (v *Verifier) Type() string { return Type }

// Verify checks a token and its binding. Errors that are not a
// cloud.Rejection (the keys could not be had, or are too old to use) are
// transient: the CSR is retried.
func (v *Verifier) Verify(ctx context.Context, data []byte, binding string, now time.Time) (cloud.Attestation, error) {
	ver, _, err := v.current(ctx, false)
	if err != nil {
		return cloud.Attestation{}, err
	}
	vo := identity.VerifyOptions{Issuer: v.opts.Issuer, Audience: binding, Now: now, Skew: v.opts.Skew, MaxLifetime: v.opts.MaxLifetime}
	claims, err := ver.Verify(string(data), vo)
	if errors.Is(err, identity.ErrUnknownKey) {
		// Perhaps the cloud rotated its key since the last fetch.
		fresh, refreshErr, kerr := v.current(ctx, true)
		if kerr != nil {
			return cloud.Attestation{}, kerr
		}
		if refreshErr != nil {
			// Not a verdict: the key may well be published by now.
			return cloud.Attestation{}, fmt.Errorf("the token's key is not among the cloud's identity keys, which could not be refetched: %w", refreshErr)
		}
		if fresh != ver { // else the keys are as fresh as MinRefresh allows
			claims, err = fresh.Verify(string(data), vo)
		}
	}
	if err != nil {
		return cloud.Attestation{}, rejection(err)
	}
	return cloud.Attestation{
		InstanceID: claims.Instance.ID,
		ProviderID: agentid.ProviderIDPrefix + claims.Instance.ID,
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

// current returns the verifier over the keys to use now. It refetches them
// first when there are none, when they are RefreshInterval old, or when
// unknownKid asks; at most once per MinRefresh after the last fetch.
//
// When a wanted refetch fails (or a recent failure rate-limits it), the
// current keys are still returned if younger than MaxKeyAge, along with
// the failure as refreshErr; otherwise err is a transient error.
func (v *Verifier) current(ctx context.Context, unknownKid bool) (ver *identity.Verifier, refreshErr, err error) {
	now := v.opts.Now()
	v.mu.Lock()
	ver, fetchedAt, attempts, doneAt, lastErr := v.verifier, v.fetchedAt, v.attempts, v.doneAt, v.lastErr
	v.mu.Unlock()

	stale := ver == nil || now.Sub(fetchedAt) >= v.opts.RefreshInterval
	if !stale && !unknownKid {
		return ver, nil, nil
	}
	if attempts == 0 || now.Sub(doneAt) >= v.opts.MinRefresh {
		fresh, err := v.fetch(ctx, attempts)
		if err == nil {
			return fresh, nil, nil
		}
		refreshErr = err
	} else {
		refreshErr = lastErr // nil: the keys are as fresh as MinRefresh allows
	}

	// Fall back on the keys we have, if they are young enough. A
	// concurrent fetch may have replaced them meanwhile.
	v.mu.Lock()
	ver, fetchedAt = v.verifier, v.fetchedAt
	v.mu.Unlock()
	if ver == nil {
		if refreshErr == nil {
			refreshErr = errors.New("no keys fetched yet")
		}
		return nil, nil, fmt.Errorf("no identity keys of the cloud to verify with: %w", refreshErr)
	}
	if age := v.opts.Now().Sub(fetchedAt); age >= v.opts.MaxKeyAge {
		if refreshErr == nil {
			refreshErr = errors.New("refetch not yet allowed")
		}
		return nil, nil, fmt.Errorf("the cloud's identity keys are %s old (limit %s) and could not be refetched: %w",
			age.Round(time.Second), v.opts.MaxKeyAge, refreshErr)
	}
	return ver, refreshErr, nil
}

// fetch refetches the keys, sharing one fetch among concurrent callers.
// seen is the number of completed fetches the caller knew of: if another
// fetch completed since, its outcome is the answer and no new fetch runs.
// The caller stops waiting when ctx ends; the shared fetch goes on.
func (v *Verifier) fetch(ctx context.Context, seen uint64) (*identity.Verifier, error) {
	fetchCtx := context.WithoutCancel(ctx)
	ch := v.fetches.DoChan("keys", func() (any, error) {
		v.mu.Lock()
		if v.attempts != seen {
			ver, err := v.verifier, v.lastErr
			v.mu.Unlock()
			if err == nil && ver == nil {
				err = errors.New("no keys fetched yet")
			}
			return ver, err
		}
		v.mu.Unlock()
		return v.fetchOnce(fetchCtx)
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(*identity.Verifier), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// fetchOnce fetches and parses the keys and, on success, makes them the
// trusted set: the new set replaces the old, so keys the cloud no longer
// publishes are no longer trusted.
func (v *Verifier) fetchOnce(ctx context.Context) (*identity.Verifier, error) {
	ctx, cancel := context.WithTimeout(ctx, keyFetchTimeout)
	defer cancel()
	start := v.opts.Now()
	registerMetrics()

	var keys map[string]*ecdsa.PublicKey
	data, err := v.keys(ctx)
	if err != nil {
		err = fmt.Errorf("fetch the cloud's identity keys: %w", err)
	} else if keys, err = identity.ParseJWKS(data); err != nil {
		err = fmt.Errorf("the cloud's identity keys: %w", err)
	}

	v.mu.Lock()
	defer v.mu.Unlock()
	v.attempts++
	v.doneAt = v.opts.Now()
	v.lastErr = err
	if err != nil {
		keyFetches.WithLabelValues("error").Inc()
		return nil, err
	}
	keyFetches.WithLabelValues("ok").Inc()
	v.verifier = identity.NewVerifier(keys)
	v.fetchedAt = start
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
