package cloudtest

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Base is what every test endpoint holds: its servers (the API, one per
// instance of key K), the calls it counts and the faults a test injects.
// An endpoint embeds it, so that Close, Calls and Fail are its own
// methods; an endpoint whose Fail takes more (an error code) or
// queues instead of replacing writes its own, which hides Base's. The
// zero value is ready.
type Base[K comparable] struct {
	Servers Servers[K]
	Counter Counter
	Faults  Faults
}

// Close stops every server of the endpoint.
func (b *Base[K]) Close() error { return b.Servers.Close() }

// Calls is how many calls of method were counted, answered or failed.
func (b *Base[K]) Calls(method string) int { return b.Counter.Get(method) }

// Fail makes the next n calls of method answer HTTP status (with the
// endpoint's error body), in place of the method's earlier faults; n <= 0
// clears them.
func (b *Base[K]) Fail(method string, n, status int) {
	b.Faults.Set(method, Fault{Left: n, Status: status})
}

// URL starts (once) the server of key, whose requests serve answers with
// the key, after check (nil: none) says the key is known; it returns its
// base URL, http://host:port. Its errors begin with endpoint.
func (s *Servers[K]) URL(endpoint string, key K, check func(K) error, serve func(K, http.ResponseWriter, *http.Request)) (string, error) {
	if check != nil {
		if err := check(key); err != nil {
			return "", err
		}
	}
	addr, err := s.Instance(key, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { serve(key, w, r) }))
	if err != nil {
		return "", fmt.Errorf("%s: %w", endpoint, err)
	}
	return "http://" + addr, nil
}

// Started starts e, made by a New that returned err (which fails the
// test), and closes it when the test ends; it returns e. An endpoint's
// NewStarted is `c, err := New(opts); return cloudtest.Started(t, c, err)`.
func Started[E Endpoint](t testing.TB, e E, err error) E {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	Start(t, e)
	return e
}

// Positive is v when it is above zero, else def: an option's default.
func Positive[T int | int64 | float64 | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// AtMost is v when it is above zero and at most limit, else limit: an
// option that lowers a limit (a largest page).
func AtMost[T int | int64 | float64 | time.Duration](v, limit T) T {
	if v > 0 && v <= limit {
		return v
	}
	return limit
}

// Clock is now, or time.Now when now is nil: an option's default clock.
func Clock(now func() time.Time) func() time.Time {
	if now == nil {
		return time.Now
	}
	return now
}

// Outage is an endpoint's outage switch. Embedded, SetOutage is the
// endpoint's; the endpoint answers as down while Out is set.
type Outage struct{ Out atomic.Bool }

// SetOutage makes every API request answer as in an outage (the
// endpoint's way: an error, or nothing) while on.
func (o *Outage) SetOutage(on bool) { o.Out.Store(on) }

// Pages is the hook an endpoint runs before each page of a list is
// answered. Embedded, BeforePage is the endpoint's; the endpoint runs
// Before with the page's number (from 1).
type Pages struct{ Before Hook[int] }

// BeforePage sets f, run with the page's number before each page of the
// list is answered, outside the endpoint's locks (f may change the
// instances and inject faults: a test changes the instances between pages
// there); nil clears it.
func (p *Pages) BeforePage(f func(page int)) { p.Before.Set(f) }

// Table is what a test sets by key, such as a page's status or whether a
// page is short; a key set to the zero value is removed. The zero value is
// ready; it is safe for concurrent use.
type Table[K, V comparable] struct {
	mu sync.Mutex
	m  map[K]V
}

// Set sets the value of k (the zero value removes it).
func (t *Table[K, V]) Set(k K, v V) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var zero V
	if v == zero {
		delete(t.m, k)
		return
	}
	if t.m == nil {
		t.m = map[K]V{}
	}
	t.m[k] = v
}

// Get is the value of k: the zero value when it is not set.
func (t *Table[K, V]) Get(k K) V {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[k]
}
