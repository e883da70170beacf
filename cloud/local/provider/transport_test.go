package provider

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud/local/client"
	"github.com/mooring-dev/mooring/cloud/local/localtest"
	"github.com/mooring-dev/mooring/cloud/local/server"
)

func TestAPIRateLimit(t *testing.T) {
	e := setup(t, "apiRateLimit: 5", "apiRateBurst: 1")
	ctx := context.Background()
	start := time.Now()
	for range 6 {
		if _, err := e.provider.Client().ListInstances(ctx, client.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// One call at once, then one per 200 ms: 1 s for six.
	if d := time.Since(start); d < 800*time.Millisecond {
		t.Fatalf("6 calls at 5/s with burst 1 took %v", d)
	}

	// The wait ends with the caller's context.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	var failed bool
	for range 3 {
		if _, err := e.provider.Client().ListInstances(short, client.ListOptions{}); err != nil {
			failed = true
			break
		}
	}
	if !failed {
		t.Fatal("calls beyond the limit did not end with their context")
	}
}

// throttleOnce answers the first n requests with 429 and Retry-After, then
// 200 with the request body echoed.
func throttleOnce(t *testing.T, n int32, retryAfter string) (*httptest.Server, *atomic.Int32) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if hits.Add(1) <= n {
			w.Header().Set("Retry-After", retryAfter)
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		_, _ = w.Write(append([]byte("ok:"), body...))
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func TestRetryAfter429(t *testing.T) {
	srv, hits := throttleOnce(t, 1, "1")
	hc := &http.Client{Transport: newAPITransport(http.DefaultTransport, 0, 0)}
	start := time.Now()
	resp, err := hc.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	if resp.StatusCode != http.StatusOK || hits.Load() != 2 {
		t.Fatalf("status %d after %d requests", resp.StatusCode, hits.Load())
	}
	if d < 800*time.Millisecond || d > 10*time.Second {
		t.Fatalf("the retry came after %v; want about 1s", d)
	}
	if string(body) != "ok:" {
		t.Fatalf("body %q", body)
	}

	// A POST built with a replayable body is sent again, body and all.
	srv, hits = throttleOnce(t, 1, "0")
	resp, err = hc.Post(srv.URL, "application/json", strings.NewReader(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || hits.Load() != 2 || string(body) != `ok:{"a":1}` {
		t.Fatalf("POST: status %d, body %q after %d requests", resp.StatusCode, body, hits.Load())
	}

	// Only once: a second 429 is the answer.
	srv, hits = throttleOnce(t, 5, "0")
	resp, err = hc.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || hits.Load() != 2 {
		t.Fatalf("status %d after %d requests; want 429 after 2", resp.StatusCode, hits.Load())
	}

	// A body that cannot be replayed is not retried.
	srv, hits = throttleOnce(t, 1, "0")
	req, _ := http.NewRequest(http.MethodPost, srv.URL, io.NopCloser(strings.NewReader("x")))
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || hits.Load() != 1 {
		t.Fatalf("unreplayable body: status %d after %d requests", resp.StatusCode, hits.Load())
	}

	// A deadline before the retry: the 429 comes back at once.
	srv, hits = throttleOnce(t, 1, "20")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	start = time.Now()
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || hits.Load() != 1 || time.Since(start) > time.Second {
		t.Fatalf("short deadline: status %d after %d requests in %v", resp.StatusCode, hits.Load(), time.Since(start))
	}

	// Cancellation ends the wait.
	srv, hits = throttleOnce(t, 1, "20")
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	start = time.Now()
	if resp, err = hc.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("a cancelled wait answered %d", resp.StatusCode)
	}
	if hits.Load() != 1 || time.Since(start) > 5*time.Second {
		t.Fatalf("cancelled: %d requests in %v", hits.Load(), time.Since(start))
	}
}

func TestRetryAfterParse(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for h, want := range map[string]time.Duration{
		"0": 0, "3": 3 * time.Second, " 2 ": 2 * time.Second, "99999999999999999": MaxRetryAfter,
		now.Add(7 * time.Second).Format(http.TimeFormat): 7 * time.Second,
		now.Add(-time.Hour).Format(http.TimeFormat):      0,
	} {
		if got, ok := retryAfter(h, now); !ok || got != want {
			t.Errorf("Retry-After %q: %v %v; want %v", h, got, ok, want)
		}
	}
	for _, h := range []string{"", "-1", "soon", "1.5"} {
		if got, ok := retryAfter(h, now); ok {
			t.Errorf("Retry-After %q accepted as %v", h, got)
		}
	}
}

// The local cloud's own rate limit: the provider's calls wait out its 429s.
func TestCloudThrottlingRetried(t *testing.T) {
	lc := localtest.Start(t, func(c *server.Config) {
		c.BootDelay = 0
		c.RateLimit = 1
		c.RateBurst = 1
	})
	cfg, err := ParseConfig(strings.NewReader("endpoint: " + lc.URL + "\ntokenFile: " + lc.TokenFile + "\ncluster: c1\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 2 {
		if _, err := p.Client().ListInstances(ctx, client.ListOptions{}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	st, err := lc.Client.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Throttled != 1 || st.Calls["ListInstances"] != 3 {
		t.Fatalf("stats %+v; want the second call throttled once and retried", st)
	}
}
