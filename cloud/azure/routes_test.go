package azure_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/cloud/azure"
	"github.com/mooring-dev/mooring/cloud/azure/agentid"
	"github.com/mooring-dev/mooring/cloud/azure/azuretest"
)

// statusRecorder keeps the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// Routes created at once are gathered into few writes of the table, each
// under If-Match of the ETag read: a route an administrator adds between a
// read and the write (the first PUT) makes ARM answer 412, the table is
// read again, and the administrator's route stays. The table is in
// another resource group (routeTableResourceGroup) and each write is a
// long-running operation (provisioningState Updating for a while).
func TestRoutesBatchedUnderETag(t *testing.T) {
	c := azuretest.Started(t, azuretest.Options{ProvisionTime: 100 * time.Millisecond})
	c.RouteTables()
	table := c.PutRouteTable("net-rg", "kubenet-rt")
	const n = 6
	var vms []azuretest.VM
	for i := range n {
		vms = append(vms, c.Put(azuretest.VM{Name: fmt.Sprintf("node-%d", i), PrivateIP: fmt.Sprintf("127.0.87.%d", 10+i), Tags: tags()}))
	}
	target, _ := url.Parse(c.Endpoint())
	rp := httputil.NewSingleHostReverseProxy(target)
	var mu sync.Mutex
	var puts []int
	meddled := false
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		isPut := r.Method == http.MethodPut && strings.EqualFold(r.URL.Path, table)
		mu.Lock()
		if isPut && !meddled {
			meddled = true
			c.AddRoute(table, azuretest.Route{Name: "admin", AddressPrefix: "10.244.250.0/24", NextHopType: "VirtualAppliance",
				NextHopIPAddress: "127.0.87.250"})
		}
		mu.Unlock()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		rp.ServeHTTP(rec, r)
		if isPut {
			mu.Lock()
			puts = append(puts, rec.status)
			mu.Unlock()
		}
	}))
	t.Cleanup(proxy.Close)
	p, err := azure.NewWithCredential(azure.Config{SubscriptionID: c.Subscription(), ResourceGroup: c.ResourceGroup(), ClusterID: cluster,
		ARMEndpoint: proxy.URL, RouteTableName: "kubenet-rt", RouteTableResourceGroup: "net-rg"}, c.Credential())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SetClusterCIDRs("10.244.0.0/16"); err != nil {
		t.Fatal(err)
	}
	routes, ok := p.Routes()
	if !ok {
		t.Fatal("no routes with a routeTableName")
	}
	ctx := context.Background()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, vm := range vms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node := agentid.NodeName(agentid.Resource{Subscription: c.Subscription(), ResourceGroup: c.ResourceGroup(), Name: vm.Name}, "")
			errs[i] = routes.CreateRoute(ctx, "kubernetes", "", &cloudprovider.Route{TargetNode: types.NodeName(node),
				DestinationCIDR: fmt.Sprintf("10.244.%d.0/24", i)})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("CreateRoute %d: %v", i, err)
		}
	}
	got, _ := c.TableRoutes(table)
	if len(got) != n+1 {
		t.Fatalf("the table holds %+v, want %d routes and the administrator's", got, n)
	}
	byPrefix := map[string]azuretest.Route{}
	for _, rt := range got {
		byPrefix[rt.AddressPrefix] = rt
	}
	for i, vm := range vms {
		rt := byPrefix[fmt.Sprintf("10.244.%d.0/24", i)]
		want := fmt.Sprintf("node-%d____10244%d024", i, i)
		if rt.NextHopType != "VirtualAppliance" || rt.NextHopIPAddress != vm.PrivateIP || rt.Name != want {
			t.Errorf("route of node-%d: %+v, want %s via VirtualAppliance %s", i, rt, want, vm.PrivateIP)
		}
	}
	if byPrefix["10.244.250.0/24"].Name != "admin" {
		t.Errorf("the administrator's route is gone: %+v", got)
	}
	mu.Lock()
	t.Logf("PUT statuses: %v", puts)
	if len(puts) == 0 || puts[0] != http.StatusPreconditionFailed {
		t.Errorf("the first write, after the table changed: %v, want 412 first", puts)
	}
	if len(puts) > 4 {
		t.Errorf("%d writes of the table for %d routes asked for at once: not gathered", len(puts), n)
	}
	mu.Unlock()
	listed, err := routes.ListRoutes(ctx, "kubernetes")
	if err != nil || len(listed) != n {
		t.Fatalf("ListRoutes: %d routes, %v; want %d (not the administrator's)", len(listed), err, n)
	}
	if c.Running() != 0 {
		t.Errorf("%d operations still running after the calls returned", c.Running())
	}
}

// A route table that is not there is an error naming the config's fields;
// without routeTableName the provider has no routes; bad values are
// refused.
func TestRoutesConfig(t *testing.T) {
	c := start(t)
	c.RouteTables()
	p := providerWith(t, c, azure.Config{RouteTableName: "missing"})
	routes, ok := p.Routes()
	if !ok {
		t.Fatal("no routes with a routeTableName")
	}
	_, err := routes.ListRoutes(context.Background(), "kubernetes")
	if err == nil || !strings.Contains(err.Error(), "routeTableName") || !strings.Contains(err.Error(), "not found") {
		t.Errorf("ListRoutes of a missing table: %v", err)
	}
	if _, ok := providerWith(t, c, azure.Config{}).Routes(); ok {
		t.Error("routes without a routeTableName")
	}
	base := fmt.Sprintf("subscriptionID: %s\nresourceGroup: rg\nclusterID: c1\n", c.Subscription())
	for _, bad := range []string{"routeTableName: -rt\n", "routeTableName: rt.\n", "routeTableName: " + strings.Repeat("r", 81) + "\n",
		"routeTableResourceGroup: net\n", "routeTableName: rt\nrouteTableResourceGroup: 'bad rg'\n"} {
		if _, err := azure.ParseConfig(strings.NewReader(base + bad)); err == nil || !strings.Contains(err.Error(), "routeTable") {
			t.Errorf("config with %q: %v", bad, err)
		}
	}
	cfg, err := azure.ParseConfig(strings.NewReader(base + "routeTableName: kubenet_rt\nrouteTableResourceGroup: net-rg\n"))
	if err != nil || cfg.RouteTableName != "kubenet_rt" || cfg.RouteTableResourceGroup != "net-rg" {
		t.Errorf("good config: %+v, %v", cfg, err)
	}
}
