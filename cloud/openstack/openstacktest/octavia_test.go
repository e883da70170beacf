package openstacktest

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// do sends a JSON request with the token and returns the status and body.
func do(t *testing.T, method, url, tok, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("X-Auth-Token", tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(data, &out)
	return resp.StatusCode, out
}

func fullCreate(name string, port int, member string) string {
	return fmt.Sprintf(`{"loadbalancer": {"name": %q, "vip_subnet_id": %q, "tags": ["t1"], "listeners": [{"protocol": "TCP", "protocol_port": %d,
		"default_pool": {"name": "pool_%s", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN",
		"members": [{"address": %q, "protocol_port": 31000}],
		"healthmonitor": {"type": "TCP", "delay": 1, "timeout": 1, "max_retries": 1}}}]}}`, name, DefaultSubnetID, port, name, member)
}

// Octavia's wire: a fully populated create answered PENDING_CREATE with
// its VIP and tree, 409 while pending, ACTIVE once settled with the data
// plane forwarding, strict bodies, filters and pages, the quota, cascade
// delete.
func TestOctaviaWire(t *testing.T) {
	c := NewStarted(t, Options{LB: LBOptions{Quota: 3, PageMax: 2}})
	tok, _, _ := c.newToken()
	base := c.LoadBalancerURL() + "/v2.0/lbaas"

	// The version document, no token needed.
	if code, body := do(t, http.MethodGet, c.LoadBalancerURL()+"/", "", ""); code != 200 || len(body["versions"].([]any)) != 31 {
		t.Fatalf("versions: %d %v", code, body)
	}
	if code, _ := do(t, http.MethodGet, base+"/loadbalancers", "bad", ""); code != http.StatusUnauthorized {
		t.Errorf("a bad token: %d", code)
	}

	// A member that answers its name.
	ln, err := net.Listen("tcp", "127.0.84.250:31000")
	if err != nil {
		t.Skip(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(conn, "member")
			conn.Close()
		}
	}()

	code, body := do(t, http.MethodPost, base+"/loadbalancers", tok, fullCreate("lb1", 8080, "127.0.84.250"))
	lb, _ := body["loadbalancer"].(map[string]any)
	if code != http.StatusCreated || lb["provisioning_status"] != StatusPendingCreate || lb["vip_address"] == "" || lb["vip_port_id"] == "" {
		t.Fatalf("create: %d %v", code, body)
	}
	pools := lb["pools"].([]any)
	if len(pools) != 1 || len(pools[0].(map[string]any)["members"].([]any)) != 1 || pools[0].(map[string]any)["healthmonitor"] == nil {
		t.Errorf("the created tree: %v", lb)
	}
	id := lb["id"].(string)
	if code, body := do(t, http.MethodPut, base+"/loadbalancers/"+id, tok, `{"loadbalancer": {"name": "x"}}`); code != http.StatusConflict ||
		!strings.Contains(fmt.Sprint(body["faultstring"]), "PENDING_CREATE") {
		t.Errorf("a change while pending: %d %v", code, body)
	}
	c.Settle()
	if code, body := do(t, http.MethodGet, base+"/loadbalancers/"+id, tok, ""); code != 200 ||
		body["loadbalancer"].(map[string]any)["provisioning_status"] != StatusActive {
		t.Fatalf("after settling: %d %v", code, body)
	}
	vip := lb["vip_address"].(string)
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", vip+":8080", time.Second)
		if err == nil {
			line := make([]byte, 6)
			_, _ = io.ReadFull(conn, line)
			conn.Close()
			if string(line) == "member" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no traffic through %s:8080: %v", vip, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Strict bodies and Octavia's checks.
	for body, want := range map[string]int{
		`{"loadbalancer": {"vip_subnet_id": "` + DefaultSubnetID + `", "colour": "red"}}`: 400,
		`{"loadbalancer": {"name": "nosubnet"}}`:                                          400,
		`{"loadbalancer": {"vip_subnet_id": "` + DefaultSubnetID + `", "listeners": [{"protocol": "TCP", "protocol_port": 80, "default_pool": {"protocol": "TCP", "lb_algorithm": "ROUND_ROBIN"}}]}}`:              400, // unnamed pool
		`{"loadbalancer": {"vip_subnet_id": "` + DefaultSubnetID + `", "listeners": [{"protocol": "UDP", "protocol_port": 80, "default_pool": {"name": "p", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN"}}]}}`: 400, // protocols
		`{"loadbalancer": {"vip_subnet_id": "` + DefaultSubnetID + `", "listeners": [{"protocol": "TCP", "protocol_port": 80}, {"protocol": "HTTP", "protocol_port": 80}]}}`:                                       409,
	} {
		if code, resp := do(t, http.MethodPost, base+"/loadbalancers", tok, body); code != want {
			t.Errorf("%s: %d %v, want %d", body, code, resp, want)
		}
	}
	// The second and third fill the quota; a fourth is refused.
	for i := 2; i <= 3; i++ {
		if code, _ := do(t, http.MethodPost, base+"/loadbalancers", tok, fullCreate(fmt.Sprintf("lb%d", i), 80, "127.0.84.250")); code != 201 {
			t.Fatalf("lb%d: %d", i, code)
		}
	}
	if code, body := do(t, http.MethodPost, base+"/loadbalancers", tok, fullCreate("lb4", 80, "127.0.84.250")); code != http.StatusForbidden {
		t.Errorf("over quota: %d %v", code, body)
	}
	c.Settle()

	// Pages of two, and filters.
	code, body = do(t, http.MethodGet, base+"/loadbalancers", tok, "")
	links := body["loadbalancers_links"].([]any)
	if code != 200 || len(body["loadbalancers"].([]any)) != 2 || len(links) != 1 {
		t.Fatalf("first page: %d %v", code, body)
	}
	next := links[0].(map[string]any)["href"].(string)
	if code, body := do(t, http.MethodGet, next, tok, ""); code != 200 || len(body["loadbalancers"].([]any)) != 1 {
		t.Errorf("second page: %d %v", code, body)
	}
	for q, want := range map[string]int{"?name=lb2": 1, "?tags=t1": 2, "?tags=t1&limit=10": 2, "?not-tags=t1": 0, "?tags-any=t9,t1&limit=5": 2, "?tags=t1,t9": 0} {
		if code, body := do(t, http.MethodGet, base+"/loadbalancers"+q, tok, ""); code != 200 || len(body["loadbalancers"].([]any)) != want {
			t.Errorf("%s: %d, %d load balancers, want %d", q, code, len(body["loadbalancers"].([]any)), want)
		}
	}
	if code, _ := do(t, http.MethodGet, base+"/loadbalancers?colour=red", tok, ""); code != 400 {
		t.Errorf("an unknown filter: %d", code)
	}
	if code, body := do(t, http.MethodGet, base+"/listeners?loadbalancer_id="+id, tok, ""); code != 200 || len(body["listeners"].([]any)) != 1 {
		t.Errorf("listeners of %s: %d %v", id, code, body)
	}

	// The member batch update replaces members; the data plane follows.
	code, body = do(t, http.MethodGet, base+"/pools?loadbalancer_id="+id, tok, "")
	if code != 200 {
		t.Fatalf("pools of %s: %d %v", id, code, body)
	}
	pool := body["pools"].([]any)[0].(map[string]any)["id"].(string)
	if code, _ := do(t, http.MethodPut, base+"/pools/"+pool+"/members", tok, `{"members": [{"address": "127.0.84.251", "protocol_port": 31000}]}`); code != 202 {
		t.Fatalf("batch update: %d", code)
	}
	if code, _ := do(t, http.MethodPut, base+"/pools/"+pool+"/members", tok, `{"members": []}`); code != 409 {
		t.Errorf("a batch update while pending: %d", code)
	}
	c.Settle()
	if code, body := do(t, http.MethodGet, base+"/pools/"+pool+"/members", tok, ""); code != 200 || len(body["members"].([]any)) != 1 ||
		body["members"].([]any)[0].(map[string]any)["address"] != "127.0.84.251" {
		t.Errorf("members: %d %v", code, body)
	}

	// Delete: children need cascade; then PENDING_DELETE, gone once settled.
	if code, _ := do(t, http.MethodDelete, base+"/loadbalancers/"+id, tok, ""); code != 400 {
		t.Errorf("delete without cascade: %d", code)
	}
	if code, _ := do(t, http.MethodDelete, base+"/loadbalancers/"+id+"?cascade=true", tok, ""); code != 204 {
		t.Errorf("cascade delete: %d", code)
	}
	c.Settle()
	if code, _ := do(t, http.MethodGet, base+"/loadbalancers/"+id, tok, ""); code != 404 {
		t.Errorf("after the delete: %d", code)
	}
}

// Floating IPs: made on the external network, on a VIP port (one each),
// detached by port_id null.
func TestFloatingIPWire(t *testing.T) {
	c := NewStarted(t, Options{LB: LBOptions{FloatingIPQuota: 1}})
	tok, _, _ := c.newToken()
	l, err := c.PutLoadBalancer(LoadBalancer{Name: "lb"})
	if err != nil {
		t.Fatal(err)
	}
	base := c.NetworkURL() + "/v2.0/floatingips"
	for body, want := range map[string]int{
		`{"floatingip": {"floating_network_id": "` + DefaultNetworkID + `"}}`:                                              404,
		`{"floatingip": {"floating_network_id": "` + DefaultFloatingNetworkID + `", "port_id": "nope"}}`:                   404,
		`{"floatingip": {"floating_network_id": "` + DefaultFloatingNetworkID + `", "colour": "red"}}`:                     400,
		`{"floatingip": {"floating_network_id": "` + DefaultFloatingNetworkID + `", "floating_ip_address": "127.84.0.9"}}`: 403,
	} {
		if code, _ := do(t, http.MethodPost, base, tok, body); code != want {
			t.Errorf("%s: %d, want %d", body, code, want)
		}
	}
	code, body := do(t, http.MethodPost, base, tok, `{"floatingip": {"floating_network_id": "`+DefaultFloatingNetworkID+`", "port_id": "`+l.VIPPortID+`"}}`)
	fip, _ := body["floatingip"].(map[string]any)
	if code != 201 || fip["port_id"] != l.VIPPortID || fip["fixed_ip_address"] != l.VIPAddress || fip["status"] != "ACTIVE" {
		t.Fatalf("create: %d %v", code, body)
	}
	if code, _ := do(t, http.MethodPost, base, tok, `{"floatingip": {"floating_network_id": "`+DefaultFloatingNetworkID+`"}}`); code != 409 {
		t.Errorf("over quota: %d", code)
	}
	if code, body := do(t, http.MethodGet, base+"?port_id="+l.VIPPortID, tok, ""); code != 200 || len(body["floatingips"].([]any)) != 1 {
		t.Errorf("by port: %d %v", code, body)
	}
	if code, body := do(t, http.MethodPut, base+"/"+fip["id"].(string), tok, `{"floatingip": {"port_id": null}}`); code != 200 ||
		body["floatingip"].(map[string]any)["port_id"] != nil {
		t.Errorf("detach: %d %v", code, body)
	}
	if code, _ := do(t, http.MethodDelete, base+"/"+fip["id"].(string), tok, ""); code != 204 || len(c.FloatingIPs()) != 0 {
		t.Errorf("delete: %d, left %d", code, len(c.FloatingIPs()))
	}
}
