package cloudtest

import (
	"io"
	"net/http"
	"testing"
)

// Send makes a test's request of an endpoint, with header, and returns
// the answer and its body (read and closed), failing the test when the
// request cannot be made or the answer read.
func Send(t testing.TB, method, url string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return Do(t, req)
}

// Do sends a test's request and returns the answer and its body (read
// and closed), failing the test when the answer cannot be read.
func Do(t testing.TB, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}
