package kit

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// closeCounter is a request body that counts its Close calls.
type closeCounter struct {
	io.Reader
	closed int
}

func (c *closeCounter) Close() error { c.closed++; return nil }

// The token is asked for before every request (a rotated token is used
// from the next request on); the caller's request is left as it was; a
// token that cannot be read fails the request unsent, its body closed.
func TestBearer(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Authorization"))
	}))
	defer srv.Close()
	token, fail := "one", error(nil)
	hc, err := BearerClient(5*time.Second, func() (string, error) { return token, fail })
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"one", "two"} {
		token = tok
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if req.Header.Get("Authorization") != "" {
			t.Errorf("the caller's request was changed: %v", req.Header)
		}
	}
	if strings.Join(got, ",") != "Bearer one,Bearer two" {
		t.Errorf("Authorization headers %q, want the token of each moment", got)
	}
	fail = errors.New("token file gone")
	body := &closeCounter{Reader: strings.NewReader("x")}
	req, _ := http.NewRequest(http.MethodPost, srv.URL, body)
	if _, err := hc.Do(req); !errors.Is(err, fail) {
		t.Errorf("no token: %v", err)
	}
	if len(got) != 2 || body.closed == 0 {
		t.Errorf("no token: %d requests sent (want 2), body closed %d times", len(got), body.closed)
	}
	if hc.Timeout != 5*time.Second {
		t.Errorf("timeout %v", hc.Timeout)
	}
}

// BearerClient reads the token once: no token fails at start.
func TestBearerClientNeedsToken(t *testing.T) {
	if _, err := BearerClient(time.Second, func() (string, error) { return "", errors.New("unset") }); err == nil {
		t.Fatal("a client without a token")
	}
}

func TestOrBearer(t *testing.T) {
	mine := &http.Client{}
	asked := 0
	token := func() (string, error) { asked++; return "t", nil }
	if hc, err := OrBearer(mine, time.Second, token); hc != mine || err != nil || asked != 0 {
		t.Fatalf("a caller's client: %v, %v, the token read %d times", hc, err, asked)
	}
	hc, err := OrBearer(nil, time.Second, token)
	if err != nil || hc.Timeout != time.Second || asked != 1 {
		t.Fatalf("no client: %+v, %v, the token read %d times", hc, err, asked)
	}
	if _, ok := hc.Transport.(*Bearer); !ok {
		t.Fatalf("transport %T", hc.Transport)
	}
	if _, err := OrBearer(nil, time.Second, func() (string, error) { return "", errors.New("no token") }); err == nil {
		t.Fatal("no token, no error")
	}
}
