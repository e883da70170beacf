package cloudtest

import (
	"net/http"
	"strconv"
	"time"
)

// Bucket is a token bucket: it holds at most Size tokens, Refill come back
// each second, and each request takes one. It starts full at its first
// use. Its methods are not safe for concurrent use: the endpoint's lock
// guards it.
type Bucket struct {
	Size   float64
	Refill float64 // tokens a second

	tokens float64
	at     time.Time
	begun  bool
}

// refill brings the tokens up to now.
func (b *Bucket) refill(now time.Time) {
	if !b.begun {
		b.tokens, b.at, b.begun = b.Size, now, true
		return
	}
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(b.Size, b.tokens+d.Seconds()*b.Refill)
		b.at = now
	}
}

// Take takes a token at now; false when there is none.
func (b *Bucket) Take(now time.Time) bool {
	b.refill(now)
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// Remaining is how many whole tokens are left.
func (b *Bucket) Remaining() int { return int(b.tokens) }

// FullAt is when the bucket is full again, refilling from now.
func (b *Bucket) FullAt(now time.Time) time.Time {
	if b.Refill <= 0 {
		return now
	}
	return now.Add(time.Duration((b.Size - b.tokens) / b.Refill * float64(time.Second)))
}

// Window is a sliding window rate limit: at most Limit requests in any
// Period. The zero Period is an hour. Its methods are not safe for
// concurrent use: the endpoint's lock guards it.
type Window struct {
	Limit  int
	Period time.Duration

	at []time.Time // the requests of the last Period, oldest first
}

// Take counts a request at now; false (not counted) when the window is
// full.
func (w *Window) Take(now time.Time) bool {
	period := w.period()
	cut := 0
	for cut < len(w.at) && now.Sub(w.at[cut]) >= period {
		cut++
	}
	w.at = w.at[cut:]
	if len(w.at) >= w.Limit {
		return false
	}
	w.at = append(w.at, now)
	return true
}

// Remaining is how many requests the window has room for.
func (w *Window) Remaining() int { return w.Limit - len(w.at) }

// ResetAt is when the oldest request leaves the window (now plus a Period
// when there is none).
func (w *Window) ResetAt(now time.Time) time.Time {
	if len(w.at) == 0 {
		return now.Add(w.period())
	}
	return w.at[0].Add(w.period())
}

func (w *Window) period() time.Duration {
	if w.Period <= 0 {
		return time.Hour
	}
	return w.Period
}

// SetRateLimitHeaders writes the RateLimit-Limit, RateLimit-Remaining and
// RateLimit-Reset (Unix seconds) headers that DigitalOcean's and Hetzner's
// APIs answer with.
func SetRateLimitHeaders(h http.Header, limit, remaining int, reset time.Time) {
	h.Set("RateLimit-Limit", strconv.Itoa(limit))
	h.Set("RateLimit-Remaining", strconv.Itoa(remaining))
	h.Set("RateLimit-Reset", strconv.FormatInt(reset.Unix(), 10))
}
