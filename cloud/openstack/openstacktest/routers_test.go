package openstacktest

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

func put(t *testing.T, url, tok, body string, headers ...string) (*http.Response, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, url, strings.NewReader(body))
	req.Header.Set("X-Auth-Token", tok)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp, out
}

func neutronType(body map[string]any) string {
	e, _ := body["NeutronError"].(map[string]any)
	s, _ := e["type"].(string)
	return s
}

// Neutron's routers on the wire: the version document, extensions, the
// router, the atomic calls, and Neutron's refusals.
func TestRoutersWire(t *testing.T) {
	c := NewStarted(t, Options{MaxRoutes: 2})
	id, secret := c.Credential()
	resp, _ := token(t, c, appCred(id, secret))
	tok := resp.Header.Get("X-Subject-Token")
	sn := c.PutSubnet(Subnet{CIDR: "127.0.87.0/24"})
	rt := c.PutRouter(Router{Name: "r", Subnets: []string{sn.ID}})
	base := c.NetworkURL() + "/v2.0/routers/" + rt.ID

	if resp, body := get(t, c.NetworkURL()+"/", ""); resp.StatusCode != http.StatusOK || body["versions"] == nil {
		t.Fatalf("version document: %d %v", resp.StatusCode, body)
	}
	if resp, _ := get(t, base, "bad-token"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a bad token: %d", resp.StatusCode)
	}
	resp, body := get(t, c.NetworkURL()+"/v2.0/extensions", tok)
	if resp.StatusCode != http.StatusOK || !strings.Contains(toJSON(body), `"extraroute-atomic"`) {
		t.Fatalf("extensions: %d %v", resp.StatusCode, body)
	}
	if resp, body := get(t, c.NetworkURL()+"/v2.0/routers/"+sn.ID, tok); resp.StatusCode != http.StatusNotFound || neutronType(body) != "RouterNotFound" {
		t.Fatalf("an unknown router: %d %v", resp.StatusCode, body)
	}
	for _, tc := range []struct {
		path, body, typ string
		status          int
	}{
		{"/add_extraroutes", `{"router":{"routes":[{"destination":"10.244.1.0/24","nexthop":"127.0.87.10"}]}}`, "", 200},
		{"/add_extraroutes", `{"router":{"routes":[{"destination":"10.244.1.0/24","nexthop":"127.0.87.10"}]}}`, "", 200}, // again: idempotent
		{"/add_extraroutes", `{"router":{"routes":[{"destination":"10.244.2.0/24","nexthop":"127.0.88.10"}]}}`, "InvalidRoutes", 400},
		{"/add_extraroutes", `{"router":{"routes":[{"destination":"10.244.2.0/24","nexthop":"127.0.87.1"}]}}`, "InvalidRoutes", 400},
		{"/add_extraroutes", `{"router":{"routes":[{"destination":"10.244.2.1/24","nexthop":"127.0.87.11"}]}}`, "InvalidInput", 400},
		{"/add_extraroutes", `{"router":{"routes":[{"destination":"10.244.2.0/24","nexthop":"127.0.87.11","weight":1}]}}`, "HTTPBadRequest", 400},
		{"/add_extraroutes", `{"router":{}}`, "HTTPBadRequest", 400},
		{"/add_extraroutes", `{"router":{"routes":[{"destination":"10.244.2.0/24","nexthop":"127.0.87.11"}]}}`, "", 200},
		{"/add_extraroutes", `{"router":{"routes":[{"destination":"10.244.3.0/24","nexthop":"127.0.87.12"}]}}`, "RoutesExhausted", 400},
		{"/remove_extraroutes", `{"router":{"routes":[{"destination":"10.244.3.0/24","nexthop":"127.0.87.12"}]}}`, "", 200}, // absent: no error
		{"/remove_extraroutes", `{"router":{"routes":[{"destination":"10.244.2.0/24","nexthop":"127.0.87.11"}]}}`, "", 200},
	} {
		resp, body := put(t, base+tc.path, tok, tc.body)
		if resp.StatusCode != tc.status || neutronType(body) != tc.typ {
			t.Errorf("%s %s: %d %v, want %d %s", tc.path, tc.body, resp.StatusCode, body, tc.status, tc.typ)
		}
	}
	got, _ := c.Router(rt.ID)
	if len(got.Routes) != 1 || got.Routes[0] != (Route{"10.244.1.0/24", "127.0.87.10"}) {
		t.Fatalf("routes %v", got.Routes)
	}
	// The whole set, under If-Match: a stale revision is 412.
	whole := `{"router":{"routes":[]}}`
	if resp, body := put(t, base, tok, whole, "If-Match", "revision_number=1"); resp.StatusCode != http.StatusPreconditionFailed {
		t.Fatalf("a stale revision: %d %v", resp.StatusCode, body)
	}
	resp, body = put(t, base, tok, whole, "If-Match", "revision_number=5")
	if got, _ := c.Router(rt.ID); resp.StatusCode != http.StatusOK || len(got.Routes) != 0 || got.Revision != 6 {
		t.Fatalf("the whole set: %d %v; router %+v", resp.StatusCode, body, got)
	}

	old := NewStarted(t, Options{NoAtomicExtraRoutes: true})
	id, secret = old.Credential()
	resp, _ = token(t, old, appCred(id, secret))
	tok = resp.Header.Get("X-Subject-Token")
	rt = old.PutRouter(Router{})
	if _, body := get(t, old.NetworkURL()+"/v2.0/extensions", tok); strings.Contains(toJSON(body), `"extraroute-atomic"`) {
		t.Fatal("extraroute-atomic listed with NoAtomicExtraRoutes")
	}
	if resp, _ := put(t, old.NetworkURL()+"/v2.0/routers/"+rt.ID+"/add_extraroutes", tok, `{"router":{"routes":[]}}`); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("add_extraroutes without the extension: %d", resp.StatusCode)
	}
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// The servers' ports: listed by device and address, their allowed address
// pairs written under If-Match, Neutron's refusals.
func TestPortsWire(t *testing.T) {
	c := NewStarted(t, Options{})
	id, secret := c.Credential()
	resp, _ := token(t, c, appCred(id, secret))
	tok := resp.Header.Get("X-Subject-Token")
	c.PutSubnet(Subnet{CIDR: "127.0.87.0/24"})
	s := c.Put(Server{Name: "web-1", Addresses: []Address{{Addr: "127.0.87.10"}, {Addr: "127.0.99.10", Floating: true}}})
	c.Put(Server{Name: "off-subnet", Addresses: []Address{{Addr: "127.0.88.10"}}})
	resp, body := get(t, c.NetworkURL()+"/v2.0/ports?device_id="+s.ID+"&fixed_ips=ip_address%3D127.0.87.10", tok)
	list, _ := body["ports"].([]any)
	if resp.StatusCode != http.StatusOK || len(list) != 1 {
		t.Fatalf("ports: %d %v", resp.StatusCode, body)
	}
	if _, body := get(t, c.NetworkURL()+"/v2.0/ports", tok); len(body["ports"].([]any)) != 1 {
		t.Fatalf("every port: %v (a port per fixed address in a subnet)", body)
	}
	if resp, _ := get(t, c.NetworkURL()+"/v2.0/ports?name=x", tok); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("an unmodelled filter: %d", resp.StatusCode)
	}
	port := list[0].(map[string]any)
	url := c.NetworkURL() + "/v2.0/ports/" + port["id"].(string)
	for _, tc := range []struct {
		body, ifMatch string
		status        int
	}{
		{`{"port":{"allowed_address_pairs":[{"ip_address":"10.244.1.0/24"}]}}`, "revision_number=0", 200},
		{`{"port":{"allowed_address_pairs":[]}}`, "revision_number=0", 412},
		{`{"port":{"allowed_address_pairs":[{"ip_address":"not-an-ip"}]}}`, "", 400},
		{`{"port":{"allowed_address_pairs":[{"ip_address":"10.244.1.0/24"},{"ip_address":"10.244.1.0/24"}]}}`, "", 400},
		{`{"port":{"name":"x"}}`, "", 400},
	} {
		h := []string{}
		if tc.ifMatch != "" {
			h = []string{"If-Match", tc.ifMatch}
		}
		if resp, body := put(t, url, tok, tc.body, h...); resp.StatusCode != tc.status {
			t.Errorf("%s: %d %v, want %d", tc.body, resp.StatusCode, body, tc.status)
		}
	}
	if p := c.Ports()[0]; !slices.Equal(p.AllowedAddressPairs, []string{"10.244.1.0/24"}) || p.Revision != 1 {
		t.Fatalf("port %+v", p)
	}
	c.SetPortSecurity(s.ID, "127.0.87.10", false)
	if resp, body := put(t, url, tok, `{"port":{"allowed_address_pairs":[{"ip_address":"10.244.2.0/24"}]}}`); resp.StatusCode != http.StatusConflict {
		t.Fatalf("pairs without port security: %d %v", resp.StatusCode, body)
	}
}
