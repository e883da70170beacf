package server

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/local/api"
)

// handlerFunc serves one operation: it returns the status and the body to
// write as JSON (or a rawBody), or an error.
type handlerFunc func(r *http.Request) (int, any, error)

// rawBody is written as is.
type rawBody struct {
	contentType string
	data        []byte
}

// opKind says which checks an operation goes through.
type opKind int

const (
	// cloudOp: authenticated, counted in Stats, rate-limited and faulted.
	cloudOp opKind = iota
	// publicOp: a cloud operation that needs no token (published keys).
	publicOp
	// adminOp: authenticated, never limited or faulted (stats, faults, rate
	// limit), so a test can always clear what it injected.
	adminOp
	// metadataOp: served on an instance's metadata listener; counted and
	// faulted, not rate-limited, no token.
	metadataOp
)

// gate holds the API's rate limit, faults and counters.
type gate struct {
	mu        sync.Mutex
	limit     api.RateLimit // as set, Burst defaulted; zero: unlimited
	limiter   *rate.Limiter // nil: unlimited
	faults    api.Faults
	calls     map[string]int64
	throttled int64
	faulted   int64
	// staleListed: instances lists left out (Faults.StaleList).
	staleListed int64
	// drawn counts, since the faults were set, the calls that met an error
	// rate: by operation for an operation's own fault, under "" for the
	// faults' own rate.
	drawn map[string]int64
}

func newGate(cfg Config) *gate {
	g := &gate{faults: cfg.Faults, calls: map[string]int64{}}
	g.setRateLimit(api.RateLimit{Limit: cfg.RateLimit, Burst: cfg.RateBurst})
	return g
}

// setRateLimit replaces the rate limit (with a full bucket) and returns it
// as applied: Burst defaulted, or all zero when unlimited. Calls already
// past the limiter are not affected.
func (g *gate) setRateLimit(l api.RateLimit) api.RateLimit {
	var limiter *rate.Limiter
	if l.Limit > 0 {
		l.Burst = l.EffectiveBurst()
		limiter = rate.NewLimiter(rate.Limit(l.Limit), l.Burst)
	} else {
		l = api.RateLimit{}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.limit, g.limiter = l, limiter
	return l
}

func (g *gate) rateLimit() api.RateLimit {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.limit
}

func (g *gate) stats() api.Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	calls := make(map[string]int64, len(g.calls))
	for k, v := range g.calls {
		calls[k] = v
	}
	return api.Stats{Calls: calls, Throttled: g.throttled, Faulted: g.faulted, StaleListed: g.staleListed}
}

func (g *gate) reset() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls = map[string]int64{}
	g.throttled, g.faulted, g.staleListed = 0, 0, 0
}

func (g *gate) setFaults(f api.Faults) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.faults = f
	g.drawn = nil
}

// fails says whether the next call under an error rate (above 0) fails,
// and counts it, and a failure in Stats (key: the operation of an
// operation's own fault, "" for the faults' rate). The failures are spread
// evenly, not drawn at random: of the calls since the faults were set, the
// share rate fails, the first call among them (call n fails when
// ceil(n*rate) grows), so a fault over a few calls shows as surely as one
// over many and a run repeats.
func (g *gate) fails(key string, rate float64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.drawn == nil {
		g.drawn = map[string]int64{}
	}
	g.drawn[key]++
	n := float64(g.drawn[key])
	// The epsilon keeps a product such as 10*0.1 from rounding up.
	failed := math.Ceil(n*rate-1e-9) > math.Ceil((n-1)*rate-1e-9)
	if failed {
		g.faulted++
	}
	return failed
}

// staleList is the set of instance ids lists leave out (Faults.StaleList);
// nil when there are none.
func (g *gate) staleList() map[string]bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.faults.StaleList) == 0 {
		return nil
	}
	set := make(map[string]bool, len(g.faults.StaleList))
	for _, id := range g.faults.StaleList {
		set[id] = true
	}
	return set
}

// leftOut counts instances a list left out for Faults.StaleList.
func (g *gate) leftOut(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.staleListed += int64(n)
}

func (g *gate) getFaults() api.Faults {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.faults
}

// admit counts a call and applies the rate limit (when limited) and faults.
// It returns an error to answer with instead of serving the call.
func (g *gate) admit(r *http.Request, op string, limited bool) error {
	g.mu.Lock()
	g.calls[op]++
	fault, key := api.OperationFault{Latency: g.faults.Latency, ErrorRate: g.faults.ErrorRate}, ""
	if f, ok := g.faults.Operations[op]; ok {
		fault, key = f, op
	}
	limiter := g.limiter
	g.mu.Unlock()

	if limited && limiter != nil {
		res := limiter.Reserve()
		if d := res.Delay(); d > 0 {
			res.Cancel()
			g.mu.Lock()
			g.throttled++
			g.mu.Unlock()
			e := api.Errorf(api.CodeThrottled, "rate limit of %g calls/s exceeded", float64(limiter.Limit()))
			e.Status = http.StatusTooManyRequests
			e.RetryAfter = d
			return e
		}
	}
	if fault.Latency > 0 {
		select {
		case <-time.After(time.Duration(fault.Latency)):
		case <-r.Context().Done():
			return r.Context().Err()
		}
	}
	if fault.ErrorRate > 0 && g.fails(key, fault.ErrorRate) {
		e := api.Errorf(api.CodeUnavailable, "injected fault on %s", op)
		e.Status = fault.Status
		if e.Status == 0 {
			e.Status = http.StatusServiceUnavailable
		}
		return e
	}
	return nil
}

// route registers an operation on mux.
func (s *Server) route(mux *http.ServeMux, pattern, op string, kind opKind, fn handlerFunc) {
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		status, body, err := s.serveOp(r, op, kind, fn)
		if err != nil {
			status = writeError(w, err)
		} else {
			writeBody(w, status, body)
		}
		s.metrics.observe(op, status, time.Since(start))
		if status >= 500 {
			klog.V(2).InfoS("API call failed", "operation", op, "status", status, "err", err)
		} else {
			klog.V(4).InfoS("API call", "operation", op, "status", status)
		}
	})
}

func (s *Server) serveOp(r *http.Request, op string, kind opKind, fn handlerFunc) (int, any, error) {
	if kind == cloudOp || kind == adminOp {
		if !s.authorized(r) {
			return 0, nil, api.Errorf(api.CodeUnauthorized, "a valid bearer token is required")
		}
	}
	if kind != adminOp {
		if err := s.gate.admit(r, op, kind != metadataOp); err != nil {
			return 0, nil, err
		}
	}
	return fn(r)
}

func (s *Server) authorized(r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.Token)) == 1
}

var codeStatus = map[api.ErrorCode]int{
	api.CodeInvalid:      http.StatusBadRequest,
	api.CodeUnauthorized: http.StatusUnauthorized,
	api.CodeNotFound:     http.StatusNotFound,
	api.CodeConflict:     http.StatusConflict,
	api.CodeExhausted:    http.StatusInsufficientStorage,
	api.CodeThrottled:    http.StatusTooManyRequests,
	api.CodeUnavailable:  http.StatusServiceUnavailable,
	api.CodeInternal:     http.StatusInternalServerError,
}

// writeError answers with the error body and returns the status written.
func writeError(w http.ResponseWriter, err error) int {
	var e *api.Error
	if !errors.As(err, &e) {
		e = api.Errorf(api.CodeInternal, "%v", err)
	}
	status := e.Status
	if status == 0 {
		status = codeStatus[e.Code]
	}
	if status == 0 {
		status = http.StatusInternalServerError
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(e.RetryAfter.Seconds()))))
	}
	writeBody(w, status, api.ErrorBody{Error: e})
	return status
}

func writeBody(w http.ResponseWriter, status int, body any) {
	if raw, ok := body.(rawBody); ok {
		w.Header().Set("Content-Type", raw.contentType)
		w.WriteHeader(status)
		_, _ = w.Write(raw.data)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if body != nil {
		_ = json.NewEncoder(w).Encode(body)
	}
}

// maxBody bounds a request body.
const maxBody = 1 << 20

// decode reads a JSON request body strictly: unknown fields, trailing data
// and bodies over 1 MiB are refused.
func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return api.Errorf(api.CodeInvalid, "request body is larger than %d bytes", maxBody)
		}
		return api.Errorf(api.CodeInvalid, "malformed request body: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return api.Errorf(api.CodeInvalid, "malformed request body: data after the JSON value")
	}
	return nil
}

func invalid(format string, args ...any) error {
	return api.Errorf(api.CodeInvalid, format, args...)
}

func notFound(kind, name string) error {
	return api.Errorf(api.CodeNotFound, "%s %q not found", kind, name)
}

func conflict(format string, args ...any) error {
	return api.Errorf(api.CodeConflict, format, args...)
}
