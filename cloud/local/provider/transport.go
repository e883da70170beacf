package provider

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/klog/v2"
)

// MaxRetryAfter caps how long the provider waits on a 429's Retry-After
// before its one retry.
const MaxRetryAfter = 30 * time.Second

// apiTransport is the provider's side of the cloud's rate limits, as real
// providers have it: every request first waits for a token of the
// client-side limiter (when there is one), and a 429 answer with a
// Retry-After is retried once after that delay when the request can be
// sent again. Every wait ends with the request's context.
type apiTransport struct {
	next    http.RoundTripper
	limiter *rate.Limiter // nil: unlimited
	// maxRetryAfter caps the wait before the retry.
	maxRetryAfter time.Duration
}

// newAPITransport wraps next; a limit of 0 means no client-side limit.
func newAPITransport(next http.RoundTripper, limit float64, burst int) *apiTransport {
	t := &apiTransport{next: next, maxRetryAfter: MaxRetryAfter}
	if limit > 0 {
		t.limiter = rate.NewLimiter(rate.Limit(limit), max(burst, 1))
	}
	return t
}

// RoundTrip sends req, waiting for the limiter and retrying a 429 once.
func (t *apiTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.wait(req.Context()); err != nil {
		closeBody(req)
		return nil, err
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusTooManyRequests {
		return resp, err
	}
	delay, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now())
	if !ok || !replayable(req) {
		return resp, nil
	}
	delay = min(delay, t.maxRetryAfter)
	ctx := req.Context()
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < delay {
		// The retry could not be sent in time: the caller gets the 429,
		// with its Retry-After, rather than a bare timeout.
		return resp, nil
	}
	retry, err := rewind(req)
	if err != nil {
		return resp, nil
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	klog.V(2).InfoS("Cloud API throttled the call; retrying once", "method", req.Method, "path", req.URL.Path, "retryAfter", delay)

	timer := time.NewTimer(delay)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
		closeBody(retry)
		return nil, ctx.Err()
	}
	if err := t.wait(ctx); err != nil {
		closeBody(retry)
		return nil, err
	}
	return t.next.RoundTrip(retry)
}

func (t *apiTransport) wait(ctx context.Context) error {
	if t.limiter == nil {
		return nil
	}
	return t.limiter.Wait(ctx)
}

// replayable: a request whose body can be sent again.
func replayable(req *http.Request) bool {
	if req.GetBody != nil {
		return true
	}
	noBody := req.Body == nil || req.Body == http.NoBody
	return noBody && (req.Method == http.MethodGet || req.Method == http.MethodDelete || req.Method == "")
}

// rewind copies req for a second send, with a fresh body.
func rewind(req *http.Request) (*http.Request, error) {
	retry := req.Clone(req.Context())
	if req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		retry.Body = body
	}
	return retry, nil
}

// closeBody closes a request body the transport will not send: a
// RoundTripper must close it even on errors.
func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// retryAfter parses a Retry-After header: seconds, or an HTTP date.
func retryAfter(h string, now time.Time) (time.Duration, bool) {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0, false
	}
	if s, err := strconv.ParseInt(h, 10, 64); err == nil {
		if s < 0 {
			return 0, false
		}
		if s > int64(MaxRetryAfter/time.Second) {
			return MaxRetryAfter, true // the caller caps it anyway; no overflow
		}
		return time.Duration(s) * time.Second, true
	}
	if at, err := http.ParseTime(h); err == nil {
		return max(at.Sub(now), 0), true
	}
	return 0, false
}
