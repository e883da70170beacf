package cloudtest

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// Send sends the method and header it is given and returns the answer's
// status and whole body.
func TestSend(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
		_, _ = w.Write([]byte(r.Method + " " + r.URL.Path + " " + r.Header.Get("X-Test")))
	}))
	t.Cleanup(srv.Close)
	resp, body := Send(t, http.MethodPut, srv.URL+"/p", map[string]string{"X-Test": "yes"})
	if resp.StatusCode != http.StatusTeapot || string(body) != "PUT /p yes" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
}

func TestServeNameAndAsk(t *testing.T) {
	ln := ServeName(t, "127.0.0.1:0", "web-1")
	if got := Ask(t, ln.Addr().String(), 5*time.Second); got != "web-1" {
		t.Fatalf("Ask = %q, want web-1", got)
	}
}
