package openstacktest

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// token authenticates with raw HTTP, as the Identity API reference shows.
func token(t *testing.T, c *Cloud, body string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Post(c.AuthURL()+"/auth/tokens", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, string(data)
}

func appCred(id, secret string) string {
	return `{"auth": {"identity": {"methods": ["application_credential"], "application_credential": {"id": "` + id + `", "secret": "` + secret + `"}}}}`
}

func get(t *testing.T, url, tok string, headers ...string) (*http.Response, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("X-Auth-Token", tok)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp, body
}

func TestKeystoneAndNovaWire(t *testing.T) {
	now := time.Now()
	c := NewStarted(t, Options{MaxLimit: 2, Now: func() time.Time { return now }})
	id, secret := c.Credential()
	resp, body := token(t, c, appCred(id, secret))
	tok := resp.Header.Get("X-Subject-Token")
	if resp.StatusCode != http.StatusCreated || tok == "" || !strings.Contains(body, `"catalog"`) || !strings.Contains(body, `"expires_at"`) {
		t.Fatalf("auth: %d %q %s", resp.StatusCode, tok, body)
	}
	for _, bad := range []string{appCred(id, "wrong"), appCred("other", secret),
		`{"auth": {"identity": {"methods": ["password"], "password": {"user": {"id": "u", "password": "p"}}}}}`} {
		if resp, _ := token(t, c, bad); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: %d", bad, resp.StatusCode)
		}
	}
	if resp, _ := token(t, c, `{}`); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("empty body: %d", resp.StatusCode)
	}

	for i, name := range []string{"a", "b", "c"} {
		c.Put(Server{Name: name, Tags: []string{"t"}, Created: now.Add(time.Duration(i) * time.Second)})
	}
	c.Put(Server{Name: "untagged", Created: now.Add(time.Minute)})
	list := c.ComputeURL() + "/servers/detail"
	// No token, a bad one: 401.
	if resp, _ := get(t, list, "nope"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("bad token: %d", resp.StatusCode)
	}
	// Microversions: the headers answered, 406 out of range, 400 malformed.
	resp, b := get(t, list+"?tags=t", tok, "OpenStack-API-Version", "compute 2.47")
	if resp.StatusCode != 200 || resp.Header.Get("OpenStack-API-Version") != "compute 2.47" || resp.Header.Get("X-OpenStack-Nova-API-Version") != "2.47" ||
		!strings.Contains(resp.Header.Get("Vary"), "OpenStack-API-Version") {
		t.Fatalf("2.47: %d %v", resp.StatusCode, resp.Header)
	}
	// Newest first by default, a full page has a next link.
	srvs := b["servers"].([]any)
	if len(srvs) != 2 || srvs[0].(map[string]any)["name"] != "c" || b["servers_links"] == nil {
		t.Fatalf("page 1: %v", b)
	}
	if _, ok := srvs[0].(map[string]any)["flavor"].(map[string]any)["original_name"]; !ok {
		t.Fatal("2.47 flavor has no original_name")
	}
	next := b["servers_links"].([]any)[0].(map[string]any)["href"].(string)
	if resp, b := get(t, next, tok, "X-OpenStack-Nova-API-Version", "2.47"); resp.StatusCode != 200 || len(b["servers"].([]any)) != 1 || b["servers_links"] != nil {
		t.Fatalf("page 2: %d %v", resp.StatusCode, b)
	}
	if resp, b := get(t, list, tok, "OpenStack-API-Version", "compute 2.200"); resp.StatusCode != http.StatusNotAcceptable || b["computeFault"] == nil {
		t.Fatalf("2.200: %d %v", resp.StatusCode, b)
	}
	if resp, _ := get(t, list, tok, "OpenStack-API-Version", "compute two"); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("malformed: %d", resp.StatusCode)
	}
	// Before 2.26, tags is an unknown parameter: ignored, not an error;
	// the flavor is {id, links}; no tags field. A limit over max_limit is
	// max_limit.
	resp, b = get(t, list+"?tags=t&limit=10", tok)
	if resp.StatusCode != 200 || len(b["servers"].([]any)) != 2 || resp.Header.Get("X-OpenStack-Nova-API-Version") != "2.1" ||
		b["servers"].([]any)[0].(map[string]any)["name"] != "untagged" {
		t.Fatalf("2.1: %d %v", resp.StatusCode, b)
	}
	first := b["servers"].([]any)[0].(map[string]any)
	if _, ok := first["tags"]; ok || first["flavor"].(map[string]any)["id"] == nil {
		t.Fatalf("2.1 server: %v", first)
	}
	// A marker that is no server: 400 badRequest.
	if resp, b := get(t, list+"?marker=9e5476bd-a4ec-4653-93d6-72c93aa682ba", tok); resp.StatusCode != 400 || b["badRequest"] == nil {
		t.Fatalf("unknown marker: %d %v", resp.StatusCode, b)
	}
	if resp, b := get(t, c.ComputeURL()+"/servers/9e5476bd-a4ec-4653-93d6-72c93aa682ba", tok); resp.StatusCode != 404 || b["itemNotFound"] == nil {
		t.Fatalf("unknown server: %d %v", resp.StatusCode, b)
	}
	// Tokens expire.
	c.ExpireTokens()
	if resp, _ := get(t, list, tok); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("expired token: %d", resp.StatusCode)
	}
	if c.Calls("unauthorized") != 2 || c.Calls("auth") != 5 {
		t.Fatalf("counters: unauthorized %d, auth %d", c.Calls("unauthorized"), c.Calls("auth"))
	}
}

func TestPutRefusesOtherAddresses(t *testing.T) {
	c := New(Options{})
	for _, a := range []string{"10.0.0.1", "192.168.1.1", "8.8.8.8", "2001:db8::1"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s accepted", a)
				}
			}()
			c.Put(Server{Name: "x", Addresses: []Address{{Addr: a}}})
		}()
	}
}
