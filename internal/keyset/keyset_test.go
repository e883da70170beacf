package keyset

import (
	"context"
	"errors"
	"maps"
	"sync"
	"testing"
	"time"
)

// clock is an injectable Options.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// source publishes keys (values are just names), counting fetches; it can
// fail, or hold fetches until released.
type source struct {
	mu      sync.Mutex
	keys    map[string]string
	fail    error
	gate    chan struct{}
	entered chan struct{}
	fetches int
}

func (s *source) fetch(ctx context.Context) (map[string]string, error) {
	s.mu.Lock()
	s.fetches++
	keys, fail, gate, entered := maps.Clone(s.keys), s.fail, s.gate, s.entered
	s.mu.Unlock()
	if entered != nil {
		entered <- struct{}{}
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return keys, fail
}

func (s *source) set(keys map[string]string, fail error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys, s.fail = keys, fail
}

func (s *source) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fetches
}

var t0 = time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)

func newCache(t *testing.T, src *source, clk *clock) *Cache[string] {
	t.Helper()
	c, err := New(src.fetch, Options{Name: "test keys", MinRefresh: 10 * time.Second,
		RefreshInterval: 5 * time.Minute, MaxAge: 15 * time.Minute, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func wantKey(t *testing.T, c *Cache[string], kid, want string) {
	t.Helper()
	got, err := c.Lookup(context.Background(), kid)
	if err != nil || got != want {
		t.Fatalf("Lookup(%s) = %q, %v; want %q", kid, got, err, want)
	}
}

func wantVerdict(t *testing.T, c *Cache[string], kid string) {
	t.Helper()
	if _, err := c.Lookup(context.Background(), kid); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("Lookup(%s) = %v, want the unknown key verdict", kid, err)
	}
}

func wantTransient(t *testing.T, c *Cache[string], kid string) {
	t.Helper()
	if _, err := c.Lookup(context.Background(), kid); err == nil || errors.Is(err, ErrUnknownKey) {
		t.Fatalf("Lookup(%s) = %v, want a transient error", kid, err)
	}
}

func wantFetches(t *testing.T, src *source, n int) {
	t.Helper()
	if got := src.count(); got != n {
		t.Fatalf("%d fetches, want %d", got, n)
	}
}

// An unknown key id costs one fetch, then is a verdict; more of them
// within MinRefresh fetch nothing and are verdicts too.
func TestUnknownKidOneFetchThenVerdict(t *testing.T) {
	clk := &clock{t: t0}
	src := &source{keys: map[string]string{"a": "A"}}
	c := newCache(t, src, clk)
	wantKey(t, c, "a", "A")
	clk.Add(time.Minute)
	wantVerdict(t, c, "forged")
	wantFetches(t, src, 2)
	for range 20 {
		wantVerdict(t, c, "forged")
	}
	wantFetches(t, src, 2)
	// After MinRefresh an unknown kid refetches once, and finds a new key.
	src.set(map[string]string{"a": "A", "b": "B"}, nil)
	clk.Add(10 * time.Second)
	wantKey(t, c, "b", "B")
	wantFetches(t, src, 3)
}

// A key the cloud withdrew stops verifying at the first Lookup once the set
// is RefreshInterval old, with no unknown key id to trigger it.
func TestWithdrawnKeyGoneAfterRefreshInterval(t *testing.T) {
	clk := &clock{t: t0}
	src := &source{keys: map[string]string{"a": "A", "b": "B"}}
	c := newCache(t, src, clk)
	wantKey(t, c, "a", "A")
	src.set(map[string]string{"b": "B"}, nil)
	clk.Add(5*time.Minute - time.Second)
	wantKey(t, c, "a", "A") // within RefreshInterval: the set as fetched
	wantFetches(t, src, 1)
	clk.Add(time.Second)
	wantVerdict(t, c, "a")
	wantFetches(t, src, 2)
	wantKey(t, c, "b", "B")
}

// Fetch failures are never verdicts; the last set serves until MaxAge.
func TestFetchFailuresAreTransient(t *testing.T) {
	clk := &clock{t: t0}
	src := &source{fail: errors.New("cloud down")}
	c := newCache(t, src, clk)
	wantTransient(t, c, "a") // nothing fetched ever
	wantFetches(t, src, 1)
	wantTransient(t, c, "a") // rate-limited after a failure
	wantFetches(t, src, 1)

	src.set(map[string]string{"a": "A"}, nil)
	clk.Add(10 * time.Second)
	wantKey(t, c, "a", "A")
	src.set(nil, errors.New("cloud down"))
	clk.Add(6 * time.Minute)
	wantKey(t, c, "a", "A")  // stale, refetch failed, younger than MaxAge
	wantTransient(t, c, "x") // unknown while refetches fail: not a verdict
	wantFetches(t, src, 3)
	clk.Add(9 * time.Minute)
	wantTransient(t, c, "a") // MaxAge old
	wantFetches(t, src, 4)
	src.set(map[string]string{"a": "A"}, nil)
	clk.Add(10 * time.Second)
	wantKey(t, c, "a", "A")
}

// Concurrent callers share one fetch, and no lock is held while it runs: a
// caller that stops waiting returns at once.
func TestConcurrentLookupsShareOneFetch(t *testing.T) {
	clk := &clock{t: t0}
	gate := make(chan struct{})
	entered := make(chan struct{}, 64)
	src := &source{keys: map[string]string{"a": "A"}, gate: gate, entered: entered}
	c := newCache(t, src, clk)
	const callers = 16
	errs := make(chan error, callers)
	for range callers {
		go func() {
			_, err := c.Lookup(context.Background(), "a")
			errs <- err
		}()
	}
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := c.Lookup(ctx, "a")
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || errors.Is(err, ErrUnknownKey) {
			t.Fatalf("impatient caller: %v, want a transient error", err)
		}
	case <-time.After(10 * time.Second):
		close(gate)
		t.Fatal("a caller past its deadline is held behind the fetch")
	}
	time.Sleep(20 * time.Millisecond)
	close(gate)
	for range callers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	wantFetches(t, src, 1)
}

func TestOptions(t *testing.T) {
	f := (&source{}).fetch
	for name, o := range map[string]Options{
		"zero":                     {},
		"refresh under min":        {MinRefresh: time.Minute, RefreshInterval: time.Second, MaxAge: time.Hour},
		"max age under refresh":    {MinRefresh: time.Second, RefreshInterval: time.Hour, MaxAge: time.Minute},
		"negative min refresh":     {MinRefresh: -1, RefreshInterval: time.Minute, MaxAge: time.Hour},
		"negative refresh":         {MinRefresh: time.Second, RefreshInterval: -1, MaxAge: time.Hour},
		"no max age":               {MinRefresh: time.Second, RefreshInterval: time.Minute},
		"min refresh over max age": {MinRefresh: time.Hour, RefreshInterval: time.Minute, MaxAge: time.Minute},
	} {
		if _, err := New(f, o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := New[string](nil, Options{MinRefresh: time.Second, RefreshInterval: time.Minute, MaxAge: time.Hour}); err == nil {
		t.Error("no fetch: accepted")
	}
}
