package keyset

import (
	"context"
	"errors"
	"maps"
	"sync"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

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

func newCache(t *testing.T, src *source, clk *testingclock.FakeClock) *Cache[string] {
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
	clk := testingclock.NewFakeClock(t0)
	src := &source{keys: map[string]string{"a": "A"}}
	c := newCache(t, src, clk)
	wantKey(t, c, "a", "A")
	clk.Step(time.Minute)
	wantVerdict(t, c, "forged")
	wantFetches(t, src, 2)
	for range 20 {
		wantVerdict(t, c, "forged")
	}
	wantFetches(t, src, 2)
	// After MinRefresh an unknown kid refetches once, and finds a new key.
	src.set(map[string]string{"a": "A", "b": "B"}, nil)
	clk.Step(10 * time.Second)
	wantKey(t, c, "b", "B")
	wantFetches(t, src, 3)
}

// A key the cloud withdrew stops verifying at the first Lookup once the set
// is RefreshInterval old, with no unknown key id to trigger it.
func TestWithdrawnKeyGoneAfterRefreshInterval(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	src := &source{keys: map[string]string{"a": "A", "b": "B"}}
	c := newCache(t, src, clk)
	wantKey(t, c, "a", "A")
	src.set(map[string]string{"b": "B"}, nil)
	clk.Step(5*time.Minute - time.Second)
	wantKey(t, c, "a", "A") // within RefreshInterval: the set as fetched
	wantFetches(t, src, 1)
	clk.Step(time.Second)
	wantVerdict(t, c, "a")
	wantFetches(t, src, 2)
	wantKey(t, c, "b", "B")
}

// Fetch failures are never verdicts; the last set serves until MaxAge.
func TestFetchFailuresAreTransient(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	src := &source{fail: errors.New("cloud down")}
	c := newCache(t, src, clk)
	wantTransient(t, c, "a") // nothing fetched ever
	wantFetches(t, src, 1)
	wantTransient(t, c, "a") // rate-limited after a failure
	wantFetches(t, src, 1)

	src.set(map[string]string{"a": "A"}, nil)
	clk.Step(10 * time.Second)
	wantKey(t, c, "a", "A")
	src.set(nil, errors.New("cloud down"))
	clk.Step(6 * time.Minute)
	wantKey(t, c, "a", "A")  // stale, refetch failed, younger than MaxAge
	wantTransient(t, c, "x") // unknown while refetches fail: not a verdict
	wantFetches(t, src, 3)
	clk.Step(9 * time.Minute)
	wantTransient(t, c, "a") // MaxAge old
	wantFetches(t, src, 4)
	src.set(map[string]string{"a": "A"}, nil)
	clk.Step(10 * time.Second)
	wantKey(t, c, "a", "A")
}

// Concurrent callers share one fetch, and no lock is held while it runs: a
// caller that stops waiting returns at once, with a transient error while
// there are no keys, and with the keys it has (young enough) while a
// periodic refetch is slow.
func TestConcurrentLookupsShareOneFetch(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
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
	if _, err := impatientLookup(t, c, gate); err == nil || errors.Is(err, ErrUnknownKey) {
		t.Fatalf("impatient caller without keys: %v, want a transient error", err)
	}
	time.Sleep(20 * time.Millisecond) // let the others reach the shared fetch
	close(gate)
	for range callers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	wantFetches(t, src, 1)

	gate2 := make(chan struct{})
	src.mu.Lock()
	src.gate = gate2
	src.mu.Unlock()
	clk.Step(6 * time.Minute)
	go func() {
		_, err := c.Lookup(context.Background(), "a")
		errs <- err
	}()
	<-entered
	if key, err := impatientLookup(t, c, gate2); err != nil || key != "A" {
		t.Fatalf("impatient caller during a slow refetch: %q, %v", key, err)
	}
	close(gate2)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	wantFetches(t, src, 2)
}

// impatientLookup looks "a" up with a short deadline while a fetch is held
// at gate. A cache that held a lock during the fetch would keep it
// waiting: then gate is opened, to end the test rather than hang it.
func impatientLookup(t *testing.T, c *Cache[string], gate chan struct{}) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	type result struct {
		key string
		err error
	}
	done := make(chan result, 1)
	go func() {
		key, err := c.Lookup(ctx, "a")
		done <- result{key, err}
	}()
	select {
	case r := <-done:
		return r.key, r.err
	case <-time.After(10 * time.Second):
		close(gate)
		t.Fatal("a caller past its deadline is held behind the fetch")
		return "", nil
	}
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
