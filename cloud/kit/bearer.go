package kit

import (
	"net/http"
	"time"
)

// Bearer is an http.RoundTripper that authenticates every request with the
// token Token gives (Authorization: Bearer), asked for again before each
// request, so that a rotated token file is used from the next request on.
// A request whose token cannot be read fails and is not sent.
type Bearer struct {
	Token func() (string, error)
	// Next sends the request; nil is http.DefaultTransport.
	Next http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (b *Bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	tok, err := b.Token()
	if err != nil {
		if r.Body != nil {
			_ = r.Body.Close() // a RoundTripper closes the body, even on errors
		}
		return nil, err
	}
	r = r.Clone(r.Context()) // a RoundTripper does not change the caller's request
	r.Header.Set("Authorization", "Bearer "+tok)
	next := b.Next
	if next == nil {
		next = http.DefaultTransport
	}
	return next.RoundTrip(r)
}

// BearerClient is an HTTP client whose requests carry the token token
// gives (Bearer) and take at most timeout each. It reads the token once,
// so that a provider without one fails at start, not at its first call.
func BearerClient(timeout time.Duration, token func() (string, error)) (*http.Client, error) {
	if _, err := token(); err != nil {
		return nil, err
	}
	return &http.Client{Timeout: timeout, Transport: &Bearer{Token: token}}, nil
}

// OrBearer is hc when a caller gave one (a client that authenticates the
// requests itself, as a backend's NewWithHTTPClient takes), else
// BearerClient(timeout, token).
func OrBearer(hc *http.Client, timeout time.Duration, token func() (string, error)) (*http.Client, error) {
	if hc != nil {
		return hc, nil
	}
	return BearerClient(timeout, token)
}
