// Package linklocal is the node agent's client of a cloud's instance
// metadata service: the HTTP service a machine asks about itself at a
// link-local address (169.254.169.254 on most clouds). The node parts of
// the backends (cloud/<name>/agentid) share it; what is a cloud's own (its
// paths, headers, tokens, retries, fallbacks) stays in its package.
//
// What every such client here does: the configured address is checked
// (ParseURL: plain http unless a cloud allows https, a host, no userinfo,
// no query or fragment, no path unless a cloud allows one); requests go
// straight to it, never through a proxy, and no redirect is followed (the
// service does not redirect, and following one would send the request,
// with its headers, elsewhere); each request is bounded in time and its
// answer in size; an answer other than 200 is an error (StatusError) that
// names the path and the status, never the query, a header or the body;
// JSON errors name an offset, a field or a type, never the document's text
// (documents may hold user data and secrets).
//
// It imports nothing beyond the standard library: mooring-agent links it.
package linklocal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// DefaultURL is the metadata service's address on most clouds (AWS, Azure,
// DigitalOcean, Linode, OCI, OpenStack; Hetzner and GCE serve it there
// too, under a path of their own), the one their node identities read
// unless the agent config names another. (Linode's also answers at
// fd00:a9fe:a9fe::1.)
const DefaultURL = "http://169.254.169.254"

// Defaults of Options.
const (
	// DefaultTimeout bounds one request: connecting, the answer's headers
	// and reading its body.
	DefaultTimeout = 10 * time.Second
	// DefaultMaxBody bounds one answer.
	DefaultMaxBody = 1 << 20
	// dialTimeout bounds connecting: the service is on the machine's own
	// link, and answers at once or not at all.
	dialTimeout = 2 * time.Second
)

// URLRule relaxes ParseURL for a cloud whose service needs it.
type URLRule func(*urlRules)

type urlRules struct{ https, path bool }

// AllowHTTPS accepts https as well as http (AWS's and Azure's metadataURL
// always took either).
func AllowHTTPS() URLRule { return func(r *urlRules) { r.https = true } }

// AllowPath accepts a path: the service's base under the host (Hetzner's
// /hetzner/v1/metadata, a test's per-machine prefix).
func AllowPath() URLRule { return func(r *urlRules) { r.path = true } }

// ParseURL checks a metadataURL from the agent's config and returns the
// base the client's paths are appended to: scheme://host[:port], and with
// AllowPath the path, without a trailing slash. It refuses any scheme but
// http (and https with AllowHTTPS), a URL without a host, with userinfo,
// with a query or a fragment (even an empty one), and a path other than
// "/" unless AllowPath.
func ParseURL(raw string, rules ...URLRule) (string, error) {
	var r urlRules
	for _, rule := range rules {
		rule(&r)
	}
	want := "http://host[:port]"
	if r.https {
		want = "http(s)://host[:port]"
	}
	if r.path {
		want += "[/path]"
	}
	if !r.https {
		want += " (the metadata service speaks plain http)"
	}
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("metadataURL %q: want %s: %s", raw, want, why)
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return bad("not a URL")
	case u.Scheme != "http" && !(r.https && u.Scheme == "https"):
		return bad("another scheme")
	case u.Host == "" || u.Hostname() == "":
		return bad("no host")
	case u.User != nil:
		return bad("it has userinfo")
	case strings.ContainsAny(raw, "?#"):
		return bad("it has a query or a fragment")
	case !r.path && u.Path != "" && u.Path != "/":
		return bad("it has a path")
	}
	base := u.Scheme + "://" + u.Host
	if r.path {
		base += strings.TrimRight(u.EscapedPath(), "/")
	}
	return base, nil
}

// BaseURL is ParseURL of the configured metadataURL, or def (a cloud's
// own address, not checked) when none is configured.
func BaseURL(configured, def string, rules ...URLRule) (string, error) {
	if configured == "" {
		return def, nil
	}
	return ParseURL(configured, rules...)
}

// ErrUnreachable wraps the error of a request that got no HTTP answer
// (refused, timed out, the connection closed).
var ErrUnreachable = errors.New("no answer")

// ErrTooLarge wraps the error of an answer larger than its bound.
var ErrTooLarge = errors.New("answer too large")

// StatusError is an answer other than 200 OK.
type StatusError struct {
	// Prefix and Path name the request as the client's errors do.
	Prefix, Path string
	Code         int
	// Body is the start of the answer's body, for a cloud whose service
	// explains its errors there (Azure's IMDS); Error never shows it.
	Body []byte
}

func (e *StatusError) Error() string { return fmt.Sprintf("%s %s: HTTP %d", e.Prefix, e.Path, e.Code) }

// maxErrorBody bounds StatusError.Body.
const maxErrorBody = 512

// IsNotFound reports whether err is a 404 answer.
func IsNotFound(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == http.StatusNotFound
}

// NewHTTPClient is the HTTP client every metadata request here goes
// through, for a cloud that reads its service with a library of its own
// (GCE's, Hetzner's) as well: no proxy, connecting bounded to 2s, a
// request (headers and body) to timeout (0 is DefaultTimeout), no redirect
// followed (a 3xx is the answer), and each answer's body to maxBody bytes
// (0 is DefaultMaxBody; reading past it fails with ErrTooLarge).
func NewHTTPClient(timeout time.Duration, maxBody int64) *http.Client {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if maxBody <= 0 {
		maxBody = DefaultMaxBody
	}
	tr := &http.Transport{
		Proxy:                 nil, // a proxy would answer for another machine
		DialContext:           (&net.Dialer{Timeout: dialTimeout}).DialContext,
		ResponseHeaderTimeout: timeout,
	}
	return &http.Client{
		Timeout:       timeout,
		Transport:     boundedTransport{next: tr, max: maxBody},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// boundedTransport bounds every answer's body.
type boundedTransport struct {
	next http.RoundTripper
	max  int64
}

func (t boundedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err == nil && resp.Body != nil {
		resp.Body = &boundedBody{ReadCloser: resp.Body, left: t.max}
	}
	return resp, err
}

// boundedBody fails with ErrTooLarge once more than left bytes came.
type boundedBody struct {
	io.ReadCloser
	left int64
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, ErrTooLarge
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.ReadCloser.Read(p)
	if int64(n) > b.left {
		n, b.left = int(b.left), -1
		return n, ErrTooLarge
	}
	b.left -= int64(n)
	return n, err
}

// Options configure a Client.
type Options struct {
	// Prefix starts every error, before the path: "<name>: metadata"
	// ("metadata" alone when empty).
	Prefix string
	// Header is sent with every request (Azure's Metadata: true, OCI's
	// Authorization: Bearer Oracle).
	Header http.Header
	// Timeout bounds one request (0 is DefaultTimeout); MaxBody one answer
	// (0 is DefaultMaxBody).
	Timeout time.Duration
	MaxBody int64
}

// Client reads one metadata service.
type Client struct {
	base string
	o    Options
	hc   *http.Client
}

// New is a client of the service at base: ParseURL's result, or a
// cloud's default address.
func New(base string, o Options) *Client {
	if o.Prefix == "" {
		o.Prefix = "metadata"
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxBody <= 0 {
		o.MaxBody = DefaultMaxBody
	}
	return &Client{base: strings.TrimRight(base, "/"), o: o, hc: NewHTTPClient(o.Timeout, o.MaxBody)}
}

// Open is the client a backend's node identity reads its metadata with:
// New on BaseURL(configured, def, rules...), where configured is the
// agent config's metadataURL and def the cloud's own address. A bad
// metadataURL is an error that starts with the backend's name; an empty
// o.Prefix is "<backend>: metadata".
func Open(backend, configured, def string, o Options, rules ...URLRule) (*Client, error) {
	base, err := BaseURL(configured, def, rules...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", backend, err)
	}
	if o.Prefix == "" {
		o.Prefix = backend + ": metadata"
	}
	return New(base, o), nil
}

// Base is the service's base URL.
func (c *Client) Base() string { return c.base }

// Request is one request to the service.
type Request struct {
	// Method is GET when empty.
	Method string
	// Path is appended to the base; it starts with "/". Errors name it.
	Path string
	// Query is sent, and never named in an error (Azure's nonce, GCE's
	// audience).
	Query url.Values
	// Header is sent with the client's own, and replaces a header of the
	// same name there (a token, which no error names).
	Header http.Header
	// MaxBody bounds this answer below the client's (0 is the client's).
	MaxBody int64
}

// Get reads a path's answer.
func (c *Client) Get(ctx context.Context, path string) ([]byte, error) {
	return c.Do(ctx, Request{Path: path})
}

// GetJSON decodes a path's answer into v (DecodeJSON).
func (c *Client) GetJSON(ctx context.Context, path string, v any) error {
	return c.DoJSON(ctx, Request{Path: path}, v)
}

// DoJSON sends r and decodes its answer into v (DecodeJSON).
func (c *Client) DoJSON(ctx context.Context, r Request, v any) error {
	data, err := c.Do(ctx, r)
	if err != nil {
		return err
	}
	return DecodeJSON(data, c.o.Prefix+" "+r.Path, v)
}

// Do sends r and returns the body of a 200 answer. Its errors start with
// the client's prefix and r.Path, and wrap ErrUnreachable (no answer),
// *StatusError (another status) or ErrTooLarge (an answer over the bound).
func (c *Client) Do(ctx context.Context, r Request) ([]byte, error) {
	limit := c.o.MaxBody
	if r.MaxBody > 0 && r.MaxBody < limit {
		limit = r.MaxBody
	}
	method := r.Method
	if method == "" {
		method = http.MethodGet
	}
	target := c.base + r.Path
	if len(r.Query) > 0 {
		target += "?" + r.Query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, target, nil)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", c.o.Prefix, r.Path, unwrapURL(err))
	}
	for _, h := range []http.Header{c.o.Header, r.Header} {
		for k, vs := range h {
			req.Header[http.CanonicalHeaderKey(k)] = slices.Clone(vs) // the request's over the client's
		}
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %w", c.o.Prefix, r.Path, ErrUnreachable, unwrapURL(err))
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if resp.StatusCode != http.StatusOK {
		return nil, &StatusError{Prefix: c.o.Prefix, Path: r.Path, Code: resp.StatusCode, Body: data[:min(len(data), maxErrorBody)]}
	}
	if err == nil && int64(len(data)) > limit {
		err = ErrTooLarge
	}
	switch {
	case errors.Is(err, ErrTooLarge):
		return nil, fmt.Errorf("%s %s: %w (over %d bytes)", c.o.Prefix, r.Path, ErrTooLarge, limit)
	case err != nil:
		return nil, fmt.Errorf("%s %s: %w", c.o.Prefix, r.Path, unwrapURL(err))
	}
	return data, nil
}

// unwrapURL drops a *url.Error's wrapping, which repeats the request's
// URL with its query.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// DecodeJSON decodes a metadata document (one JSON value) into v. Its
// errors start with what and name an offset, a field or a type, never the
// document's text; an error of v's own UnmarshalJSON is kept.
func DecodeJSON(data []byte, what string, v any) error {
	err := json.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return fmt.Errorf("%s is not JSON (at byte %d)", what, syn.Offset)
	}
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) {
		if typ.Field == "" {
			return fmt.Errorf("%s: the document is not a %s", what, typ.Type)
		}
		return fmt.Errorf("%s: field %s is not a %s", what, typ.Field, typ.Type)
	}
	return fmt.Errorf("%s: %w", what, err)
}
