package azuretest

import (
	"net/http"
	"testing"
	"time"
)

// TestRouteTablesWire: a route table's PUT is checked as the network
// resource provider checks routes (names, CIDRs, next hop types, a next
// hop address only for VirtualAppliance, one route a prefix), answered as a
// long-running operation (201 Updating with Azure-AsyncOperation, then
// Succeeded) with ARM's ids and etags on its routes; a missing table is
// 404 ResourceNotFound, a stale If-Match 412.
func TestRouteTablesWire(t *testing.T) {
	c := Started(t, Options{ProvisionTime: time.Hour})
	c.RouteTables()
	id := c.ResourceID("", RouteTableType, "rt")
	url := c.armURL(id)
	if resp, b := armDo(t, c, http.MethodGet, url, ""); resp.StatusCode != http.StatusNotFound || errCode(b) != "ResourceNotFound" {
		t.Fatalf("GET of a missing table: %d %v", resp.StatusCode, b)
	}
	for body, code := range map[string]string{
		`{"properties":{"routes":[{"name":"-a","properties":{"addressPrefix":"10.0.0.0/24","nextHopType":"None"}}]}}`:                                                                               "InvalidResourceName",
		`{"properties":{"routes":[{"name":"a","properties":{"addressPrefix":"10.0.0.1/24","nextHopType":"None"}}]}}`:                                                                                "InvalidRouteAddressPrefix",
		`{"properties":{"routes":[{"name":"a","properties":{"addressPrefix":"10.0.0.0/24","nextHopType":"Elsewhere"}}]}}`:                                                                           "InvalidRequestFormat",
		`{"properties":{"routes":[{"name":"a","properties":{"addressPrefix":"10.0.0.0/24","nextHopType":"VirtualAppliance"}}]}}`:                                                                    "InvalidNextHopIpAddress",
		`{"properties":{"routes":[{"name":"a","properties":{"addressPrefix":"10.0.0.0/24","nextHopType":"Internet","nextHopIpAddress":"10.1.0.4"}}]}}`:                                              "NextHopIpAddressNotAllowed",
		`{"properties":{"routes":[{"name":"a","properties":{"addressPrefix":"10.0.0.0/24","nextHopType":"None","color":"red"}}]}}`:                                                                  "InvalidRequestFormat",
		`{"properties":{"routes":[{"name":"a","properties":{"addressPrefix":"10.0.0.0/24","nextHopType":"None"}},{"name":"A","properties":{"addressPrefix":"10.0.1.0/24","nextHopType":"None"}}]}}`: "InvalidRequestFormat",
		`{"properties":{"routes":[{"name":"a","properties":{"addressPrefix":"10.0.0.0/24","nextHopType":"None"}},{"name":"b","properties":{"addressPrefix":"10.0.0.0/24","nextHopType":"None"}}]}}`: "InvalidRoute",
	} {
		if resp, b := armDo(t, c, http.MethodPut, url, body); resp.StatusCode != http.StatusBadRequest || errCode(b) != code {
			t.Errorf("PUT %s: %d %v, want 400 %s", body, resp.StatusCode, b, code)
		}
	}
	resp, b := armDo(t, c, http.MethodPut, url,
		`{"location":"westeurope","properties":{"routes":[{"name":"n1____102441024","properties":{"addressPrefix":"10.244.1.0/24","nextHopType":"VirtualAppliance","nextHopIpAddress":"127.0.87.1"}}]}}`)
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Azure-AsyncOperation") == "" || c.routeTableState(id) != "Updating" {
		t.Fatalf("PUT: %d %v %v", resp.StatusCode, resp.Header, b)
	}
	route := b["properties"].(map[string]any)["routes"].([]any)[0].(map[string]any)
	if route["id"] != id+"/routes/n1____102441024" || route["etag"] == nil || route["properties"].(map[string]any)["provisioningState"] != "Updating" {
		t.Errorf("route as answered: %v", route)
	}
	c.Settle()
	if c.routeTableState(id) != "Succeeded" {
		t.Errorf("after the operation: %s", c.routeTableState(id))
	}
	if resp, b := armDo(t, c, http.MethodPut, url, `{"properties":{"routes":[]}}`, "If-Match", `W/"stale"`); resp.StatusCode != http.StatusPreconditionFailed {
		t.Errorf("stale If-Match: %d %v", resp.StatusCode, b)
	}
	if rs, _ := c.TableRoutes(id); len(rs) != 1 || rs[0].NextHopIPAddress != "127.0.87.1" {
		t.Errorf("routes: %+v", rs)
	}
}
