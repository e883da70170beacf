// Package client is the Go client of the local cloud's API (package api) and
// of its instance metadata services. It does not retry: callers choose their
// own backoff, and a *api.Error carries the status and any Retry-After.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/mooring-dev/mooring/cloud/local/api"
)

// Client calls one local cloud's API.
type Client struct {
	base  *url.URL
	token string
	http  *http.Client
}

// New returns a client of the API at baseURL (such as
// "http://127.0.0.1:8780") that authenticates with token. A nil httpClient
// means one with a 30 s timeout.
func New(baseURL, token string, httpClient *http.Client) (*Client, error) {
	u, err := url.Parse(strings.TrimSuffix(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("localcloud client: %q is not an http(s) URL", baseURL)
	}
	if httpClient == nil {
		httpClient = &http.Client{Timeout: 30 * time.Second}
	}
	return &Client{base: u, token: token, http: httpClient}, nil
}

// IsCode reports whether err is an API error of the given code.
func IsCode(err error, code api.ErrorCode) bool {
	var e *api.Error
	return errors.As(err, &e) && e.Code == code
}

// IsNotFound reports whether err says the object does not exist.
func IsNotFound(err error) bool { return IsCode(err, api.CodeNotFound) }

// maxResponse bounds a response body.
const maxResponse = 64 << 20

// do sends one call. in, when not nil, is sent as JSON; out, when not nil,
// receives the JSON answer.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, in, out any) error {
	u := *c.base
	u.Path += path
	u.RawQuery = query.Encode()
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("localcloud: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return fmt.Errorf("localcloud: %s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		return apiError(resp, data)
	}
	if out == nil {
		return nil
	}
	if raw, ok := out.(*[]byte); ok {
		*raw = data
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("localcloud: %s %s: decode answer: %w", method, path, err)
	}
	return nil
}

func apiError(resp *http.Response, data []byte) error {
	var body api.ErrorBody
	e := &api.Error{Code: api.CodeInternal, Message: strings.TrimSpace(string(data))}
	if json.Unmarshal(data, &body) == nil && body.Error != nil {
		e = body.Error
	}
	e.Status = resp.StatusCode
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}

// ListOptions filter and page a list call; zero values mean no filter.
type ListOptions struct {
	Cluster  string
	IDs      []string // instances only
	Names    []string // instances only
	States   []api.InstanceState
	PageSize int
	// PageToken continues from an earlier page's NextPageToken.
	PageToken string
}

func (o ListOptions) query() url.Values {
	q := url.Values{}
	if o.Cluster != "" {
		q.Set("cluster", o.Cluster)
	}
	for _, id := range o.IDs {
		q.Add("id", id)
	}
	for _, n := range o.Names {
		q.Add("name", n)
	}
	for _, s := range o.States {
		q.Add("state", string(s))
	}
	if o.PageSize > 0 {
		q.Set("pageSize", strconv.Itoa(o.PageSize))
	}
	if o.PageToken != "" {
		q.Set("pageToken", o.PageToken)
	}
	return q
}

// listAll follows next-page tokens until the last page.
func listAll[T any](ctx context.Context, opts ListOptions, page func(context.Context, ListOptions) ([]T, string, error)) ([]T, error) {
	var all []T
	for {
		items, next, err := page(ctx, opts)
		if err != nil {
			return nil, err
		}
		all = append(all, items...)
		if next == "" {
			return all, nil
		}
		opts.PageToken = next
	}
}

func esc(s string) string { return url.PathEscape(s) }

const v = "/" + api.Version
