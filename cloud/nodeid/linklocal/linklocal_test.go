package linklocal

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		raw   string
		rules []URLRule
		want  string
	}{
		{"http://169.254.169.254", nil, "http://169.254.169.254"},
		{"http://169.254.169.254/", nil, "http://169.254.169.254"},
		{"http://127.0.0.1:8169", nil, "http://127.0.0.1:8169"},
		{"http://[fd00:a9fe:a9fe::1]:80/", nil, "http://[fd00:a9fe:a9fe::1]:80"},
		{"http://169.254.169.254/hetzner/v1/metadata/", []URLRule{AllowPath()}, "http://169.254.169.254/hetzner/v1/metadata"},
		{"https://127.0.0.1:4443/vm/1", []URLRule{AllowHTTPS(), AllowPath()}, "https://127.0.0.1:4443/vm/1"},
		{"http://127.0.0.1:4443", []URLRule{AllowHTTPS()}, "http://127.0.0.1:4443"},
	} {
		got, err := ParseURL(tc.raw, tc.rules...)
		if err != nil || got != tc.want {
			t.Errorf("ParseURL(%q) = %q, %v; want %q", tc.raw, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		raw   string
		rules []URLRule
		why   string
	}{
		{"", nil, "another scheme"},
		{"169.254.169.254", nil, "another scheme"},
		{"https://169.254.169.254", nil, "another scheme"},
		{"ftp://169.254.169.254", []URLRule{AllowHTTPS()}, "another scheme"},
		{"http://", nil, "no host"},
		{"http://:80", nil, "no host"},
		{"http:169.254.169.254", nil, "no host"},
		{"http://u:p@169.254.169.254", nil, "userinfo"},
		{"http://u@169.254.169.254/x", []URLRule{AllowPath()}, "userinfo"},
		{"http://169.254.169.254/?x=1", nil, "query"},
		{"http://169.254.169.254/?", []URLRule{AllowPath()}, "query"},
		{"http://169.254.169.254/#", nil, "fragment"},
		{"http://169.254.169.254/#x", []URLRule{AllowPath()}, "fragment"},
		{"http://169.254.169.254/metadata/v1.json", nil, "path"},
		{"http://169.254.169.254:port", nil, "not a URL"},
		{"http://169.254.169.254/\x00", nil, "not a URL"},
	} {
		_, err := ParseURL(tc.raw, tc.rules...)
		if err == nil || !strings.Contains(err.Error(), tc.why) || !strings.Contains(err.Error(), "want http") {
			t.Errorf("ParseURL(%q): %v, want an error saying %q", tc.raw, err, tc.why)
		}
	}
	if _, err := ParseURL("https://x"); err == nil || !strings.Contains(err.Error(), "plain http") {
		t.Errorf("https without AllowHTTPS: %v", err)
	}
	if b, err := BaseURL("", DefaultURL); err != nil || b != DefaultURL {
		t.Errorf("BaseURL without a configured URL: %q, %v", b, err)
	}
	if b, err := BaseURL("http://127.0.0.1:8/x/", DefaultURL, AllowPath()); err != nil || b != "http://127.0.0.1:8/x" {
		t.Errorf("BaseURL of a configured URL: %q, %v", b, err)
	}
	if _, err := BaseURL("http://127.0.0.1:8/x", DefaultURL); err == nil {
		t.Error("BaseURL: a configured URL is not checked")
	}
}

// service is a metadata service on loopback that counts its requests.
func service(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h(w, r)
	}))
	t.Cleanup(s.Close)
	return s, &n
}

func TestGetHeadersAndQuery(t *testing.T) {
	s, _ := service(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Metadata") != "true" || r.Header.Get("Metadata-Token") != "tok":
			w.WriteHeader(http.StatusUnauthorized)
		case r.Method == http.MethodPut && r.URL.Path == "/token":
			_, _ = io.WriteString(w, "tok")
		case r.URL.Path == "/doc" && r.URL.Query().Get("api-version") == "1":
			_, _ = io.WriteString(w, `{"id": 7, "name": "n"}`)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	})
	c := New(s.URL+"/", Options{Prefix: "x: metadata", Header: http.Header{"Metadata": {"true"}}})
	if c.Base() != s.URL {
		t.Errorf("Base %q, want %q", c.Base(), s.URL)
	}
	tok := http.Header{"Metadata-Token": {"tok"}}
	if b, err := c.Do(context.Background(), Request{Method: http.MethodPut, Path: "/token", Header: tok}); err != nil || string(b) != "tok" {
		t.Fatalf("PUT: %q, %v", b, err)
	}
	var doc struct {
		ID   int    `json:"id"`
		Name string `json:"name"`
	}
	if err := c.DoJSON(context.Background(), Request{Path: "/doc", Query: url.Values{"api-version": {"1"}}, Header: tok}, &doc); err != nil || doc.ID != 7 || doc.Name != "n" {
		t.Fatalf("GET: %+v, %v", doc, err)
	}
	_, err := c.Get(context.Background(), "/doc")
	var se *StatusError
	if !errors.As(err, &se) || se.Code != http.StatusUnauthorized || err.Error() != "x: metadata /doc: HTTP 401" {
		t.Fatalf("without the token: %v", err)
	}
	_, err = c.Do(context.Background(), Request{Path: "/nothing", Header: tok})
	if !IsNotFound(err) || IsNotFound(se) {
		t.Fatalf("404: %v", err)
	}
	// The request's header replaces the client's of the same name.
	_, err = c.Do(context.Background(), Request{Path: "/doc", Query: url.Values{"api-version": {"1"}},
		Header: http.Header{"Metadata-Token": {"tok"}, "metadata": {"false"}}})
	if !errors.As(err, &se) || se.Code != http.StatusUnauthorized {
		t.Fatalf("Metadata: false: %v", err)
	}
}

// TestErrorsNameNoSecret: an error names the path and the status, never
// the query, a header's value or the body.
func TestErrorsNameNoSecret(t *testing.T) {
	s, _ := service(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, "body-secret")
	})
	c := New(s.URL, Options{})
	_, err := c.Do(context.Background(), Request{Path: "/p", Query: url.Values{"nonce": {"query-secret"}}, Header: http.Header{"Metadata-Token": {"header-secret"}}})
	var se *StatusError
	if !errors.As(err, &se) || string(se.Body) != "body-secret" || err.Error() != "metadata /p: HTTP 403" {
		t.Fatalf("got %v", err)
	}
	// Unreachable: the dial error, not the URL with its query.
	s.Close()
	_, err = c.Do(context.Background(), Request{Path: "/p", Query: url.Values{"nonce": {"query-secret"}}})
	if !errors.Is(err, ErrUnreachable) || strings.Contains(err.Error(), "query-secret") || !strings.HasPrefix(err.Error(), "metadata /p: no answer") {
		t.Fatalf("unreachable: %v", err)
	}
}

func TestBodyBound(t *testing.T) {
	s, _ := service(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, strings.Repeat("a", 100))
	})
	for _, tc := range []struct {
		client, request int64
		ok              bool
	}{{100, 0, true}, {99, 0, false}, {1 << 20, 100, true}, {1 << 20, 99, false}, {99, 200, false}} {
		_, err := New(s.URL, Options{MaxBody: tc.client}).Do(context.Background(), Request{Path: "/", MaxBody: tc.request})
		if tc.ok != (err == nil) || (!tc.ok && !errors.Is(err, ErrTooLarge)) {
			t.Errorf("bounds %d/%d: %v", tc.client, tc.request, err)
		}
	}
	// A body that never ends is cut off at the bound, not read to the
	// timeout.
	endless, _ := service(t, func(w http.ResponseWriter, r *http.Request) {
		buf := []byte(strings.Repeat("b", 4096))
		for i := 0; i < 1<<12; i++ {
			if _, err := w.Write(buf); err != nil {
				return
			}
		}
	})
	start := time.Now()
	if _, err := New(endless.URL, Options{MaxBody: 1 << 16}).Get(context.Background(), "/"); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "over 65536 bytes") {
		t.Fatalf("endless: %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Error("the endless body was read on")
	}
	// A library reading through NewHTTPClient gets ErrTooLarge too.
	resp, err := NewHTTPClient(0, 99).Get(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if b, err := io.ReadAll(resp.Body); !errors.Is(err, ErrTooLarge) || len(b) != 99 {
		t.Fatalf("library read %d bytes, %v", len(b), err)
	}
	resp2, err := NewHTTPClient(0, 100).Get(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	if b, err := io.ReadAll(resp2.Body); err != nil || len(b) != 100 {
		t.Fatalf("exactly the bound: %d bytes, %v", len(b), err)
	}
}

// TestNoRedirect: a redirect, to another host or the same one, is an
// answer (an error), never followed: the request and its headers stay
// with the service.
func TestNoRedirect(t *testing.T) {
	elsewhere, hits := service(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, `{}`) })
	s, _ := service(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/same" {
			http.Redirect(w, r, "/other", http.StatusFound)
			return
		}
		http.Redirect(w, r, elsewhere.URL+"/steal", http.StatusTemporaryRedirect)
	})
	c := New(s.URL, Options{Header: http.Header{"Authorization": {"Bearer Oracle"}}})
	for _, p := range []string{"/away", "/same"} {
		var v map[string]any
		err := c.GetJSON(context.Background(), p, &v)
		var se *StatusError
		if !errors.As(err, &se) || (se.Code != http.StatusFound && se.Code != http.StatusTemporaryRedirect) {
			t.Errorf("%s: %v", p, err)
		}
	}
	resp, err := NewHTTPClient(0, 0).Get(s.URL + "/away")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTemporaryRedirect || hits.Load() != 0 {
		t.Fatalf("library client: %s, %d requests elsewhere", resp.Status, hits.Load())
	}
}

// TestNoProxy: the transport takes no proxy, from the environment or
// elsewhere. (Go never proxies a loopback address, so a test service on
// loopback could not tell; the transport is read instead.)
func TestNoProxy(t *testing.T) {
	for _, hc := range []*http.Client{NewHTTPClient(0, 0), New(DefaultURL, Options{}).hc} {
		bt, ok := hc.Transport.(boundedTransport)
		if !ok {
			t.Fatalf("transport %T", hc.Transport)
		}
		tr, ok := bt.next.(*http.Transport)
		if !ok || tr.Proxy != nil || tr.DialContext == nil || tr.ResponseHeaderTimeout != DefaultTimeout || hc.Timeout != DefaultTimeout {
			t.Fatalf("transport %+v", bt.next)
		}
	}
}

func TestTimeout(t *testing.T) {
	release := make(chan struct{})
	s, _ := service(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	start := time.Now()
	_, err := New(s.URL, Options{Timeout: 200 * time.Millisecond}).Get(context.Background(), "/slow")
	if !errors.Is(err, ErrUnreachable) || time.Since(start) > 5*time.Second {
		t.Fatalf("after %s: %v", time.Since(start), err)
	}
}

func TestDecodeJSON(t *testing.T) {
	type doc struct {
		ID   int `json:"id"`
		Nics []struct {
			IP string `json:"ip"`
		} `json:"nics"`
	}
	for _, tc := range []struct{ data, want string }{
		{`admin_pass=do-not-show`, "what is not JSON (at byte 1)"},
		{`{"id": "do-not-show"}`, "what: field id is not a int"},
		{`{"nics": [{"ip": 1234567}]}`, "what: field nics.ip is not a string"},
		{`["do-not-show"]`, "what: the document is not a linklocal.doc"},
		{`{"id": 1} {"id": 2}`, "what is not JSON"},
		{``, "what is not JSON"},
	} {
		var d doc
		err := DecodeJSON([]byte(tc.data), "what", &d)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "do-not-show") || strings.Contains(err.Error(), "1234567") {
			t.Errorf("%s: %v, want %q", tc.data, err, tc.want)
		}
	}
	// An error of the value's own decoder is kept.
	var c custom
	if err := DecodeJSON([]byte(`"x"`), "what", &c); err == nil || err.Error() != "what: not custom" {
		t.Errorf("custom: %v", err)
	}
}

type custom struct{}

func (*custom) UnmarshalJSON([]byte) error { return errors.New("not custom") }

func TestOpen(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusNotFound)
	}))
	defer srv.Close()
	c, err := Open("cloudy", srv.URL, DefaultURL, Options{})
	if err != nil || c.Base() != srv.URL {
		t.Fatalf("Open(%s): %v %v", srv.URL, c, err)
	}
	// The prefix names the backend when none is given.
	if _, err := c.Get(context.Background(), "/x"); err == nil || !strings.HasPrefix(err.Error(), "cloudy: metadata /x") {
		t.Fatalf("an error of the default prefix: %v", err)
	}
	if c, err := Open("cloudy", "", DefaultURL, Options{Prefix: "cloudy: IMDS"}); err != nil || c.Base() != DefaultURL || c.o.Prefix != "cloudy: IMDS" {
		t.Fatalf("the default address: %+v %v", c, err)
	}
	// The rules apply; a refusal names the backend.
	if c, err := Open("cloudy", "https://127.0.0.1:1/vm", DefaultURL, Options{}, AllowHTTPS(), AllowPath()); err != nil || c.Base() != "https://127.0.0.1:1/vm" {
		t.Fatalf("with rules: %+v %v", c, err)
	}
	if _, err := Open("cloudy", "https://127.0.0.1:1", DefaultURL, Options{}); err == nil || !strings.HasPrefix(err.Error(), "cloudy: ") {
		t.Fatalf("https without the rule: %v", err)
	}
}
