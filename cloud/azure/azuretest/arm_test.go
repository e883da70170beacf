package azuretest

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

func armDo(t *testing.T, c *Cloud, method, url, body string, header ...string) (*http.Response, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, raw := cloudtest.Do(t, req)
	var out map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, raw)
		}
	}
	return resp, out
}

func errCode(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

// TestARMLongRunning: a PUT is answered 201 with the body Updating and an
// Azure-AsyncOperation URL that says InProgress until the operation is
// done; a stale If-Match is 412; a write while one runs is 429
// AnotherOperationInProgress with Retry-After; a DELETE is 202 with
// Location, 204 once gone; an injected 429 carries Retry-After.
func TestARMLongRunning(t *testing.T) {
	c := Started(t, Options{ProvisionTime: time.Hour})
	c.Register(ARMKind{Type: "Microsoft.Network/things", Op: "Thing"})
	url := c.armURL(c.ResourceID("", "Microsoft.Network/things", "t1"))
	resp, body := armDo(t, c, http.MethodPut, url, `{"properties":{"x":1}}`)
	op := resp.Header.Get("Azure-AsyncOperation")
	if resp.StatusCode != http.StatusCreated || op == "" || body["properties"].(map[string]any)["provisioningState"] != "Updating" {
		t.Fatalf("PUT: %d %v %v", resp.StatusCode, resp.Header, body)
	}
	etag := body["etag"].(string)
	if _, st := armDo(t, c, http.MethodGet, op, ""); st["status"] != "InProgress" {
		t.Fatalf("operation: %v", st)
	}
	if resp, b := armDo(t, c, http.MethodPut, url, `{"properties":{}}`); resp.StatusCode != 429 || errCode(b) != "AnotherOperationInProgress" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("PUT while running: %d %v", resp.StatusCode, b)
	}
	c.Settle()
	if _, st := armDo(t, c, http.MethodGet, op, ""); st["status"] != "Succeeded" {
		t.Fatalf("operation: %v", st)
	}
	if _, b := armDo(t, c, http.MethodGet, url, ""); b["properties"].(map[string]any)["provisioningState"] != "Succeeded" || b["etag"] != etag {
		t.Fatalf("GET: %v", b)
	}
	if resp, b := armDo(t, c, http.MethodPut, url, `{"properties":{}}`, "If-Match", `W/"stale"`); resp.StatusCode != 412 || errCode(b) != "PreconditionFailed" {
		t.Fatalf("stale If-Match: %d %v", resp.StatusCode, b)
	}
	if resp, _ := armDo(t, c, http.MethodPut, url, `{"properties":{}}`, "If-Match", etag); resp.StatusCode != http.StatusOK {
		t.Fatalf("If-Match: %d", resp.StatusCode)
	}
	c.Settle()
	if resp, b := armDo(t, c, http.MethodPut, url, `{"bogus":1}`); resp.StatusCode != 400 || errCode(b) != "InvalidRequestFormat" {
		t.Fatalf("unknown field: %d %v", resp.StatusCode, b)
	}
	c.Fail("PutThing", 1, http.StatusTooManyRequests)
	if resp, b := armDo(t, c, http.MethodPut, url, `{}`); resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" || errCode(b) != "TooManyRequests" {
		t.Fatalf("injected 429: %d %v %v", resp.StatusCode, resp.Header, b)
	}
	resp, _ = armDo(t, c, http.MethodDelete, url, "")
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusAccepted || loc == "" || resp.Header.Get("Azure-AsyncOperation") == "" {
		t.Fatalf("DELETE: %d %v", resp.StatusCode, resp.Header)
	}
	if resp, _ := armDo(t, c, http.MethodGet, loc, ""); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("Location while deleting: %d", resp.StatusCode)
	}
	c.Settle()
	if resp, _ := armDo(t, c, http.MethodGet, loc, ""); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("Location after delete: %d", resp.StatusCode)
	}
	if resp, b := armDo(t, c, http.MethodGet, url, ""); resp.StatusCode != 404 || errCode(b) != "ResourceNotFound" {
		t.Fatalf("GET deleted: %d %v", resp.StatusCode, b)
	}
	if resp, _ := armDo(t, c, http.MethodDelete, url, ""); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE of none: %d", resp.StatusCode)
	}
	if c.Calls("PutThing") != 6 || c.Calls("Throttled") != 1 {
		t.Fatalf("calls: %d puts, %d throttled", c.Calls("PutThing"), c.Calls("Throttled"))
	}
}
