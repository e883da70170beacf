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

// endpoint is a toy endpoint made of the pieces, as the backends' are.
type endpoint struct {
	Base[int]
	Outage
	Pages
	short Table[int, bool]
	known map[int]bool
}

func (e *endpoint) Start() error {
	return e.Servers.Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if e.Out.Load() {
			HangUp(w)
			return
		}
		e.Before.Run(1)
		if f := e.Counter.Call(&e.Faults, "list", 1); f != nil {
			w.WriteHeader(f.Status)
			return
		}
		_, _ = fmt.Fprintf(w, "short=%v", e.short.Get(1))
	}))
}

func (e *endpoint) check(id int) error {
	if !e.known[id] {
		return fmt.Errorf("toy: no instance %d", id)
	}
	return nil
}

func (e *endpoint) serveInstance(id int, w http.ResponseWriter, _ *http.Request) {
	_, _ = fmt.Fprintf(w, "instance %d", id)
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestBase(t *testing.T) {
	e := Started(t, &endpoint{known: map[int]bool{7: true}}, nil)
	api := "http://" + e.Servers.Addr()

	// Fail replaces the method's faults; Faults.Clear drops them.
	e.Fail("list", 5, 500)
	e.Fail("list", 1, 503)
	if st, _ := get(t, api); st != 503 {
		t.Fatalf("after Fail twice: %d, want the second Fail's 503", st)
	}
	if st, body := get(t, api); st != 200 || body != "short=false" {
		t.Fatalf("after the fault was used up: %d %q", st, body)
	}
	e.Fail("list", 100, 502)
	e.Faults.Clear("list")
	e.short.Set(1, true)
	if st, body := get(t, api); st != 200 || body != "short=true" {
		t.Fatalf("after Faults.Clear: %d %q", st, body)
	}
	if n := e.Calls("list"); n != 3 {
		t.Fatalf("Calls = %d, want 3 (failed calls count)", n)
	}

	// BeforePage runs before each page; nil clears it.
	pages := 0
	e.BeforePage(func(page int) { pages += page })
	get(t, api)
	e.BeforePage(nil)
	get(t, api)
	if pages != 1 {
		t.Fatalf("the page hook ran for %d pages, want 1", pages)
	}

	// SetOutage: the toy hangs up while on.
	e.SetOutage(true)
	if st, _ := get(t, api); st != 0 {
		t.Fatalf("in an outage the API answered %d", st)
	}
	e.SetOutage(false)
	if st, _ := get(t, api); st != 200 {
		t.Fatalf("after the outage: %d", st)
	}

	// URL: once per key, after the check; errors name the endpoint.
	u, err := e.Servers.URL("toy", 7, e.check, e.serveInstance)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := e.Servers.URL("toy", 7, e.check, e.serveInstance)
	if !strings.HasPrefix(u, "http://127.0.0.1:") || again != u {
		t.Fatalf("URL %q, again %q", u, again)
	}
	if _, body := get(t, u); body != "instance 7" {
		t.Fatalf("the instance's server answered %q", body)
	}
	if _, err := e.Servers.URL("toy", 8, e.check, e.serveInstance); err == nil || err.Error() != "toy: no instance 8" {
		t.Fatalf("URL of an unknown key: %v", err)
	}
	if _, err := e.Servers.URL("toy", 8, nil, e.serveInstance); err != nil {
		t.Fatalf("URL without a check: %v", err)
	}

	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if st, _ := get(t, u); st != 0 {
		t.Fatal("an instance server answers after Close")
	}
	if _, err := e.Servers.URL("toy", 9, nil, e.serveInstance); !errors.Is(err, ErrClosed) || !strings.HasPrefix(err.Error(), "toy: ") {
		t.Fatalf("URL after Close: %v", err)
	}
}

func TestStartedFailsOnMakeError(t *testing.T) {
	ft := &fatalTB{TB: t}
	func() {
		defer func() { _ = recover() }()
		Started(ft, &endpoint{}, errors.New("bad options"))
	}()
	if !strings.Contains(ft.msg, "bad options") {
		t.Fatalf("Started with an error: %q, want the test failed with it", ft.msg)
	}
}

// fatalTB records Fatal and stops the caller (by a panic the test
// recovers), as testing.T stops its goroutine.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatal(args ...any) {
	f.msg = fmt.Sprint(args...)
	panic("fatal")
}

func TestTable(t *testing.T) {
	var tb Table[int, int]
	if tb.Get(1) != 0 {
		t.Fatal("an empty table holds a value")
	}
	tb.Set(1, 503)
	tb.Set(2, 500)
	tb.Set(2, 0)
	if tb.Get(1) != 503 || tb.Get(2) != 0 || len(tb.m) != 1 {
		t.Fatalf("table %v", tb.m)
	}
}

func TestUnserved(t *testing.T) {
	for _, c := range []struct {
		running bool
		status  int
		want    int // 0: hung up; -1: not answered
	}{{false, 0, 0}, {false, 500, 0}, {true, 503, 503}, {true, 0, -1}} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !Unserved(w, c.running, c.status) {
				w.WriteHeader(299)
			}
		}))
		st, body := get(t, srv.URL)
		srv.Close()
		switch {
		case c.want == -1 && st != 299:
			t.Errorf("running, no fault: answered %d, want the caller's answer", st)
		case c.want == 0 && st != 0:
			t.Errorf("not running (fault %d): answered %d, want nothing", c.status, st)
		case c.want > 0 && (st != c.want || body != "injected fault\n"):
			t.Errorf("fault %d: answered %d %q", c.status, st, body)
		}
	}
}

func TestDefaults(t *testing.T) {
	if Positive(0, 5) != 5 || Positive(-1, 5) != 5 || Positive(3, 5) != 3 || Positive(time.Duration(0), time.Hour) != time.Hour {
		t.Fatal("Positive")
	}
	if AtMost(0, 50) != 50 || AtMost(-3, 50) != 50 || AtMost(20, 50) != 20 || AtMost(50, 50) != 50 || AtMost(51, 50) != 50 {
		t.Fatal("AtMost")
	}
	fixed := func() time.Time { return time.Unix(42, 0) }
	if Clock(nil) == nil || !Clock(fixed)().Equal(time.Unix(42, 0)) {
		t.Fatal("Clock")
	}
}
