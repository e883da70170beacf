// Package keyset keeps a cloud's published signing keys as an evidence
// verifier trusts them, for every verifier that fetches its keys (GCE's
// certs endpoint, the local cloud's JWKS).
//
// The rules, in the order Lookup applies them:
//   - the keys are fetched on first use, and again before use once they are
//     RefreshInterval old: the newest successfully fetched set replaces the
//     old one wholesale, so a key the cloud withdrew stops verifying at most
//     RefreshInterval after its withdrawal (plus one fetch), as long as the
//     cloud answers;
//   - a key id that is not in the set triggers one refetch; fetches are never
//     closer together than MinRefresh (forged key ids cannot make the
//     verifier hammer the cloud), and concurrent callers share one fetch;
//   - a key id still unknown after a fetch that succeeded, or within
//     MinRefresh of one, is a verdict (ErrUnknownKey): the set was just
//     fetched and the cloud does not publish the key;
//   - when fetches fail, the last set serves until MaxAge old, then nothing
//     does; a key id unknown while the fetch fails is not a verdict (the key
//     may be published by the time the caller retries).
//
// No lock is held while a fetch runs, and a fetch goes on (bounded by
// FetchTimeout) when the caller that started it gives up.
package keyset

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// ErrUnknownKey is the verdict on a key id the cloud does not publish:
// Lookup wraps it when the key id is missing from a set fetched
// successfully at most MinRefresh ago. Every other error of Lookup is
// transient.
var ErrUnknownKey = errors.New("key id is not among the cloud's published keys")

// DefaultFetchTimeout bounds one fetch when Options.FetchTimeout is zero.
const DefaultFetchTimeout = 30 * time.Second

// Fetch gets the published keys by key id. An error leaves the trusted set
// as it was.
type Fetch[K any] func(ctx context.Context) (map[string]K, error)

// Options configure a Cache.
type Options struct {
	// Name says whose keys these are, in errors ("Google's signing keys").
	Name string
	// MinRefresh is the least time between the end of one fetch and the
	// start of the next (required).
	MinRefresh time.Duration
	// RefreshInterval is how long a fetched set is used before Lookup
	// refetches it first (required, at least MinRefresh).
	RefreshInterval time.Duration
	// MaxAge is how long a fetched set may be used at all while refetches
	// fail (required, at least RefreshInterval).
	MaxAge time.Duration
	// FetchTimeout bounds one fetch (default DefaultFetchTimeout).
	FetchTimeout time.Duration
	// Now is the clock of key ages (default time.Now).
	Now func() time.Time
	// Observe, if set, is told the result of every fetch: "ok" or "error".
	Observe func(result string)
}

// Cache is a key set; see the package documentation for its rules.
type Cache[K any] struct {
	fetch Fetch[K]
	o     Options

	fetches singleflight.Group

	mu sync.Mutex
	st state[K]
}

// state is what the fetches so far left.
type state[K any] struct {
	keys      map[string]K // nil until a fetch succeeds
	fetchedAt time.Time    // when the fetch that gave keys started
	attempts  uint64       // fetches completed, successful or not
	doneAt    time.Time    // when the last fetch completed
	lastErr   error        // the last fetch's error; nil if it succeeded
}

// New checks the options and makes a cache; it fetches nothing.
func New[K any](fetch Fetch[K], o Options) (*Cache[K], error) {
	switch {
	case fetch == nil:
		return nil, errors.New("keyset: a fetch function is required")
	case o.MinRefresh <= 0 || o.RefreshInterval <= 0 || o.MaxAge <= 0:
		return nil, errors.New("keyset: MinRefresh, RefreshInterval and MaxAge must be positive")
	case o.RefreshInterval < o.MinRefresh:
		return nil, fmt.Errorf("keyset: RefreshInterval %s is under MinRefresh %s", o.RefreshInterval, o.MinRefresh)
	case o.MaxAge < o.RefreshInterval:
		return nil, fmt.Errorf("keyset: MaxAge %s is under RefreshInterval %s", o.MaxAge, o.RefreshInterval)
	}
	if o.Name == "" {
		o.Name = "the cloud's keys"
	}
	if o.FetchTimeout <= 0 {
		o.FetchTimeout = DefaultFetchTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Cache[K]{fetch: fetch, o: o}, nil
}

func (c *Cache[K]) snapshot() state[K] {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st
}

// Lookup returns the key of kid. An error wrapping ErrUnknownKey is a
// verdict on kid; any other error is transient.
func (c *Cache[K]) Lookup(ctx context.Context, kid string) (K, error) {
	var none K
	s := c.snapshot()
	if s.keys != nil && c.o.Now().Sub(s.fetchedAt) < c.o.RefreshInterval {
		if key, ok := s.keys[kid]; ok {
			return key, nil
		}
	}
	refreshErr := c.refresh(ctx, s)
	s = c.snapshot() // a concurrent fetch may have replaced the set
	age := c.o.Now().Sub(s.fetchedAt)
	switch {
	case s.keys == nil:
		return none, fmt.Errorf("no %s to verify with: %w", c.o.Name, orNotYet(refreshErr))
	case age >= c.o.MaxAge:
		return none, fmt.Errorf("%s are %s old (limit %s) and could not be refetched: %w",
			c.o.Name, age.Round(time.Second), c.o.MaxAge, orNotYet(refreshErr))
	}
	if key, ok := s.keys[kid]; ok {
		return key, nil
	}
	at := s.fetchedAt.UTC().Format(time.RFC3339)
	if refreshErr != nil {
		return none, fmt.Errorf("key id %.64q is not among %s fetched at %s, which could not be refetched: %w",
			kid, c.o.Name, at, refreshErr)
	}
	return none, fmt.Errorf("%w: key id %.64q is not among %s, fetched at %s", ErrUnknownKey, kid, c.o.Name, at)
}

func orNotYet(err error) error {
	if err == nil {
		return errors.New("no fetch allowed yet")
	}
	return err
}

// refresh fetches the keys unless the last fetch completed under
// MinRefresh ago, in which case it returns that fetch's error (nil: the set
// is as fresh as allowed). seen is the state the caller decided on: if a
// fetch completed since, its outcome is the answer and no new fetch runs.
func (c *Cache[K]) refresh(ctx context.Context, seen state[K]) error {
	if seen.attempts > 0 && c.o.Now().Sub(seen.doneAt) < c.o.MinRefresh {
		return seen.lastErr
	}
	fetchCtx := context.WithoutCancel(ctx)
	ch := c.fetches.DoChan("keys", func() (any, error) {
		c.mu.Lock()
		attempts, lastErr := c.st.attempts, c.st.lastErr
		c.mu.Unlock()
		if attempts != seen.attempts {
			return nil, lastErr
		}
		return nil, c.fetchOnce(fetchCtx)
	})
	select {
	case r := <-ch:
		return r.Err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// fetchOnce fetches the keys and, on success, makes them the trusted set,
// replacing the old one: keys the cloud no longer publishes are no longer
// trusted.
func (c *Cache[K]) fetchOnce(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.o.FetchTimeout)
	defer cancel()
	start := c.o.Now()
	keys, err := c.fetch(ctx)
	if err == nil && keys == nil {
		keys = map[string]K{}
	}
	c.mu.Lock()
	c.st.attempts++
	c.st.doneAt = c.o.Now()
	c.st.lastErr = err
	if err == nil {
		c.st.keys, c.st.fetchedAt = keys, start
	}
	c.mu.Unlock()
	if c.o.Observe != nil {
		result := "ok"
		if err != nil {
			result = "error"
		}
		c.o.Observe(result)
	}
	return err
}
