package cloudtest

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestServers(t *testing.T) {
	var s Servers[int]
	addr, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "api") })); err != nil {
		t.Fatal(err)
	}
	if s.Addr() != addr {
		t.Fatalf("served on %s, listened on %s", s.Addr(), addr)
	}
	get := func(addr string) string {
		t.Helper()
		resp, err := http.Get("http://" + addr)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if got := get(addr); got != "api" {
		t.Fatalf("api answered %q", got)
	}
	h := func(s string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, s) })
	}
	one, err := s.Instance(1, h("one"))
	if err != nil {
		t.Fatal(err)
	}
	again, _ := s.Instance(1, h("other"))
	two, _ := s.Instance(2, h("two"))
	if again != one || two == one || get(one) != "one" || get(two) != "two" {
		t.Fatalf("instance servers %s %s %s", one, again, two)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + one); err == nil {
		t.Fatal("an instance server answers after Close")
	}
	if _, err := s.Instance(3, h("three")); !errors.Is(err, ErrClosed) {
		t.Fatalf("start after Close: %v", err)
	}
	// Listened but never served: Close frees the port.
	var idle Servers[string]
	if _, err := idle.Listen(); err != nil {
		t.Fatal(err)
	}
	if err := idle.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestFaults(t *testing.T) {
	var fs Faults
	fs.Add("list", Fault{Left: 1, Status: 500})
	fs.Add("list", Fault{Page: 2, Left: 2, Status: 503})
	fs.Add("list", Fault{Left: 1, Status: 429})
	var got []int
	for _, page := range []int{2, 1, 1, 2, 1, 2} {
		st := 0
		if f := fs.Take("list", page); f != nil {
			st = f.Status
		}
		got = append(got, st)
	}
	// page 2 takes the first fault (any page), page 1 skips the page-2
	// one for the last, page 2 takes the page-2 ones.
	want := []int{500, 429, 0, 503, 0, 503}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("statuses %v, want %v", got, want)
		}
	}
	fs.Add("get", Fault{Left: 5, Status: 500})
	fs.Set("get", Fault{Left: 1, Status: 404})
	if f := fs.Take("get", 0); f == nil || f.Status != 404 || fs.Take("get", 0) != nil {
		t.Fatalf("Set did not replace: %+v", f)
	}
	fs.Add("get", Fault{Left: 5, Status: 500})
	fs.Add("get", Fault{})
	if fs.Take("get", 0) != nil {
		t.Fatal("a fault with Left 0 did not clear")
	}
	var c Counter
	c.Add("x")
	c.Add("x")
	if c.Get("x") != 2 || c.Get("y") != 0 {
		t.Fatal("counter")
	}
	fs.Add("get", Fault{Page: 3, Left: 1, Status: 502})
	if st := c.Call(&fs, "get", 1).Answer(); st != 0 || c.Get("get") != 1 {
		t.Fatalf("a call without a fault answered %d, counted %d", st, c.Get("get"))
	}
	if st := c.Call(&fs, "get", 3).Answer(); st != 502 || c.Get("get") != 2 {
		t.Fatalf("a call of the faulty page answered %d, counted %d", st, c.Get("get"))
	}
}

func TestBucketAndWindow(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	b := Bucket{Size: 2, Refill: 1}
	taken := 0
	for range 3 {
		if b.Take(now) {
			taken++
		}
	}
	if taken != 2 {
		t.Fatalf("a bucket of 2 gave %d", taken)
	}
	if !b.FullAt(now).Equal(now.Add(2 * time.Second)) {
		t.Fatalf("full at %v", b.FullAt(now))
	}
	now = now.Add(1500 * time.Millisecond)
	first, second := b.Take(now), b.Take(now)
	if !first || second || b.Remaining() != 0 {
		t.Fatal("refill of 1.5 tokens")
	}
	w := Window{Limit: 2, Period: time.Minute}
	if !w.Take(now) || !w.Take(now.Add(time.Second)) || w.Take(now.Add(2*time.Second)) || w.Remaining() != 0 {
		t.Fatal("a window of 2")
	}
	if !w.ResetAt(now).Equal(now.Add(time.Minute)) {
		t.Fatalf("reset at %v", w.ResetAt(now))
	}
	first, second = w.Take(now.Add(time.Minute)), w.Take(now.Add(time.Minute))
	if !first || second {
		t.Fatal("the oldest request left the window: one more")
	}
	rec := httptest.NewRecorder()
	SetRateLimitHeaders(rec.Header(), 5000, 4999, time.Unix(1_700_003_600, 0))
	if rec.Header().Get("RateLimit-Reset") != "1700003600" || rec.Header().Get("RateLimit-Remaining") != "4999" {
		t.Fatalf("headers %v", rec.Header())
	}
}

func TestPage(t *testing.T) {
	for _, tc := range []struct{ total, page, per, from, to, last int }{
		{0, 1, 20, 0, 0, 1}, {45, 1, 20, 0, 20, 3}, {45, 3, 20, 40, 45, 3}, {45, 4, 20, 45, 45, 3}, {40, 2, 20, 20, 40, 2},
	} {
		from, to, last := Page(tc.total, tc.page, tc.per)
		if from != tc.from || to != tc.to || last != tc.last {
			t.Errorf("Page(%d, %d, %d) = %d, %d, %d", tc.total, tc.page, tc.per, from, to, last)
		}
	}
}

func TestHTTPHelpers(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("Authorization", "Bearer tok")
	if !Bearer(r, "tok") || Bearer(r, "other") || Bearer(httptest.NewRequest(http.MethodGet, "/", nil), "") {
		t.Fatal("Bearer")
	}
	rec := httptest.NewRecorder()
	rec.Header().Set("Content-Type", "application/json; charset=utf-8")
	WriteJSON(rec, 201, map[string]int{"a": 1})
	if rec.Code != 201 || rec.Header().Get("Content-Type") != "application/json; charset=utf-8" || rec.Body.String() != "{\"a\":1}\n" {
		t.Fatalf("%d %v %q", rec.Code, rec.Header(), rec.Body)
	}
	MustLoopback("x", true, "", "127.0.0.5")
	MustLoopback("x", false, "::1")
	MustIPv6Loopback("x", "")
	MustIPv6Loopback("x", "::1")
	for _, bad := range []struct {
		v4 bool
		a  string
	}{{true, "::1"}, {false, "10.0.0.1"}, {false, "nope"}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%q (IPv4 only %v) accepted", bad.a, bad.v4)
				}
			}()
			MustLoopback("x", bad.v4, bad.a)
		}()
	}
	for _, bad := range []string{"::2", "127.0.0.1", "::ffff:127.0.0.1"} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "x: IPv6 address") {
					t.Errorf("IPv6 %q: %v", bad, r)
				}
			}()
			MustIPv6Loopback("x", bad)
		}()
	}
}

func TestDecodeStrict(t *testing.T) {
	var v struct {
		A int `json:"a"`
	}
	for _, tc := range []struct {
		body, field string
		ok          bool
	}{
		{`{"a": 1}`, "", true},
		{`{"a": 1, "b": 2}`, "b", false},
		{`{"a": "x"}`, "", false},
		{`{"a":`, "", false},
	} {
		field, err := DecodeStrict(strings.NewReader(tc.body), &v)
		if field != tc.field || (err == nil) != tc.ok {
			t.Errorf("DecodeStrict(%s) = %q, %v; want %q, ok %v", tc.body, field, err, tc.field, tc.ok)
		}
	}
}
