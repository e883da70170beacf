package azure_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/mooring-dev/mooring/cloud/azure"
	"github.com/mooring-dev/mooring/cloud/azure/azuretest"
	"github.com/mooring-dev/mooring/cloud/cloudtest"
	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
)

// The routes' face of the bed (conformance.RoutesBed): a route table of
// azuretest's, named in the provider's config, read and written by the
// bed through the endpoint's own accessors.

// bedRouteTable is the conformance bed's route table.
const bedRouteTable = "mooring-routes"

// gatewayHop is a next hop no VM has (a virtual appliance of an
// administrator's).
const gatewayHop = "127.0.85.250"

// armRoutes is the bed's record of routes: the table and which VM holds
// which private IP, and the calls failing.
type armRoutes struct {
	mu      sync.Mutex
	table   string // the table's id; "" without routes
	vms     map[string]string
	failing map[conformance.Call]bool
}

func (a *armRoutes) made(ip, id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.vms == nil {
		a.vms = map[string]string{}
	}
	a.vms[ip] = id
}

func (a *armRoutes) gone(ip string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.vms, ip)
}

// routeTable makes the bed's route table and names it in cfg.
func (b *armBed) routeTable(cfg *azure.Config) {
	b.c.RouteTables()
	b.routes.table = b.c.PutRouteTable("", bedRouteTable)
	cfg.RouteTableName = bedRouteTable
}

func (b *armBed) CloudRoutes(t testing.TB) []conformance.CloudRoute {
	rs, ok := b.c.TableRoutes(b.routes.table)
	if !ok {
		t.Fatalf("no route table %s", b.routes.table)
	}
	b.routes.mu.Lock()
	defer b.routes.mu.Unlock()
	var out []conformance.CloudRoute
	for _, rt := range rs {
		target := rt.NextHopType
		if rt.NextHopType == "VirtualAppliance" {
			target = rt.NextHopIPAddress
			if id, ok := b.routes.vms[rt.NextHopIPAddress]; ok {
				target = id
			}
		}
		out = append(out, conformance.CloudRoute{Destination: rt.AddressPrefix, Target: target})
	}
	return out
}

// AddForeignRoute adds a route as an administrator would: via another
// cluster's VM (a virtual appliance at its private IP), or, without one,
// via an appliance no VM is (in the cluster's range) or the internet.
func (b *armBed) AddForeignRoute(t testing.TB, dest string, m *conformance.Made) (conformance.CloudRoute, bool) {
	p := netip.MustParsePrefix(dest)
	rt := azuretest.Route{Name: "admin-" + strings.NewReplacer(".", "-", "/", "-").Replace(dest), AddressPrefix: dest,
		NextHopType: "VirtualAppliance", NextHopIPAddress: gatewayHop}
	cr := conformance.CloudRoute{Destination: dest, Target: gatewayHop}
	switch {
	case m != nil:
		rt.NextHopIPAddress, cr.Target = m.InternalIP, m.ID
	case !netip.MustParsePrefix(conformance.ClusterCIDR).Overlaps(p):
		rt.NextHopType, rt.NextHopIPAddress, cr.Target = "Internet", "", "Internet"
	}
	if !b.c.AddRoute(b.routes.table, rt) {
		t.Fatalf("no route table %s", b.routes.table)
	}
	return cr, true
}

// FailCall fails the VM list alone (List), or the table's writes that add
// a route (RouteCreate) or remove one (RouteDelete), with ARM's 500.
func (b *armBed) FailCall(t testing.TB, c conformance.Call) func() {
	switch c {
	case conformance.List, conformance.RouteCreate, conformance.RouteDelete:
	default:
		return nil
	}
	b.routes.mu.Lock()
	if b.routes.failing == nil {
		b.routes.failing = map[conformance.Call]bool{}
	}
	b.routes.failing[c] = true
	b.routes.mu.Unlock()
	return func() {
		b.routes.mu.Lock()
		defer b.routes.mu.Unlock()
		delete(b.routes.failing, c)
	}
}

// failRouteCall answers a call FailCall fails; it reports whether it did.
func (b *armBed) failRouteCall(w http.ResponseWriter, r *http.Request) bool {
	b.routes.mu.Lock()
	failing := len(b.routes.failing) > 0
	list, create, del := b.routes.failing[conformance.List], b.routes.failing[conformance.RouteCreate], b.routes.failing[conformance.RouteDelete]
	table := strings.ToLower(b.routes.table)
	b.routes.mu.Unlock()
	if !failing {
		return false
	}
	p := strings.ToLower(r.URL.Path)
	fail := false
	switch {
	case list && r.Method == http.MethodGet && strings.HasSuffix(p, "/providers/microsoft.compute/virtualmachines"):
		fail = true
	case (create || del) && r.Method == http.MethodPut && p == table:
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return false
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		var sent struct {
			Properties struct {
				Routes []struct {
					Name string `json:"name"`
				} `json:"routes"`
			} `json:"properties"`
		}
		_ = json.Unmarshal(body, &sent)
		now, _ := b.c.TableRoutes(b.routes.table)
		names := map[string]bool{}
		for _, rt := range sent.Properties.Routes {
			names[strings.ToLower(rt.Name)] = true
		}
		kept := 0
		for _, rt := range now {
			if names[strings.ToLower(rt.Name)] {
				kept++
			}
		}
		fail = create && len(names) > kept || del && kept < len(now)
	}
	if fail {
		w.Header().Set("x-ms-retry-after-ms", "1") // the SDK's retries ask again at once
		cloudtest.WriteJSON(w, http.StatusInternalServerError, map[string]any{"error": map[string]string{"code": "InternalServerError",
			"message": "failed by the bed"}})
	}
	return fail
}
