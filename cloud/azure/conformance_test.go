package azure_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooring-dev/mooring/cloud/azure"
	"github.com/mooring-dev/mooring/cloud/azure/agentid"
	"github.com/mooring-dev/mooring/cloud/azure/azuretest"
	"github.com/mooring-dev/mooring/cloud/cloudtest"
	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/view"
)

// Azure's provider keeps the kit's promises (cloud/cloudtest/conformance),
// over azuretest behind a proxy of the bed's (armBed) that fails ARM's
// calls and runs the page hook.
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Backend{Name: "azure", Zones: true, Routes: true, Evidence: []string{agentid.EvidenceType},
		LoadBalancer: true, LBAnnotationPrefixes: []string{azure.AnnotationPrefix}, // loadbalancers_conformance_test.go
		BadProviderIDs: []string{"azure://", "azure:///subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachines",
			"azure:///subscriptions/s/resourceGroups/g/providers/Microsoft.Network/networkInterfaces/n",
			"azure:///subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachineScaleSets/ss/virtualMachines",
			"azure://subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachines/n"},
		New: newARMBed,
		Config: func(t *testing.T, b conformance.Bed) string {
			ab := b.(*armBed)
			for _, kv := range ab.c.IdentityEnv() {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			return fmt.Sprintf("subscriptionID: %s\nresourceGroup: %s\nclusterID: %s\narmEndpoint: %s\nminRefreshInterval: 1ms\n",
				ab.c.Subscription(), ab.c.ResourceGroup(), cluster, ab.proxy.URL)
		},
	})
}

// armBed is azuretest with the provider's ARM calls through a proxy that
// fails them as told (the endpoint itself answers every call) and runs
// the page hook before each page of the resource group's VM list.
type armBed struct {
	c        *azuretest.Cloud
	p        *azure.Cloud
	proxy    *httptest.Server
	pageSize int
	pages    cloudtest.Hook[int]

	mu   sync.Mutex
	fail conformance.Failure

	routes armRoutes // conformance_routes_test.go
}

func newARMBed(t *testing.T, o conformance.Options) conformance.Bed {
	b := &armBed{c: azuretest.Started(t, azuretest.Options{PageSize: o.PageSize}), pageSize: max(o.PageSize, 2)}
	if o.PageSize <= 0 {
		b.pageSize = 2 // azuretest's default
	}
	target, err := url.Parse(b.c.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	b.proxy = httptest.NewServer(b.handler(httputil.NewSingleHostReverseProxy(target)))
	t.Cleanup(b.proxy.Close)
	cfg := azure.Config{SubscriptionID: b.c.Subscription(), ResourceGroup: b.c.ResourceGroup(), ClusterID: cluster, ARMEndpoint: b.proxy.URL,
		ViewConfig: kit.ViewConfig{MinRefreshInterval: metav1.Duration{Duration: time.Millisecond}}}
	if o.Routes {
		b.routeTable(&cfg) // conformance_routes_test.go
	}
	b.lbSetup(&cfg) // loadbalancers_conformance_test.go
	if b.p, err = azure.NewWithCredential(cfg, b.c.Credential()); err != nil {
		t.Fatal(err)
	}
	return b
}

// handler answers as the failure set says, or passes the call on (its
// Host kept: ARM's nextLinks lead back through the proxy).
func (b *armBed) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := strings.ToLower(r.URL.Path)
		if strings.HasSuffix(p, "/resourcegroups/"+strings.ToLower(b.c.ResourceGroup())+"/providers/microsoft.compute/virtualmachines") {
			skip, _ := strconv.Atoi(r.URL.Query().Get("$skiptoken"))
			b.pages.Run(skip/b.pageSize + 1)
		}
		if b.failRouteCall(w, r) { // conformance_routes_test.go
			return
		}
		b.mu.Lock()
		f := b.fail
		b.mu.Unlock()
		if f == conformance.GetFails {
			// Only the gets of one VM, scale set or scale-set VM: a
			// resource's own path ends in its name, after the type's.
			f = ""
			if parts := strings.Split(strings.Trim(p, "/"), "/"); len(parts) >= 8 && len(parts)%2 == 0 {
				f = conformance.Outage
			}
		}
		// The SDK's clients retry 429 and 5xx (three times, backing off
		// from 800ms unless the answer says when): the answers ask again
		// after a millisecond, so the suite runs in seconds.
		switch f {
		case conformance.Outage, conformance.Throttled:
			status, code := http.StatusServiceUnavailable, "ServiceUnavailable"
			if f == conformance.Throttled {
				status, code = http.StatusTooManyRequests, "TooManyRequests"
			}
			w.Header().Set("x-ms-retry-after-ms", "1")
			cloudtest.WriteJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": "failed by the bed"}})
			return
		case conformance.Unauthorized:
			r.Header.Set("Authorization", "Bearer not-the-token")
		}
		next.ServeHTTP(w, r)
	})
}

func (b *armBed) Provider() conformance.Provider { return b.p }

func (b *armBed) Make(t testing.TB, s conformance.Spec) conformance.Made {
	tg := tags()
	if s.Foreign {
		tg = map[string]string{azure.ClusterTagPrefix + "other": "owned"}
	}
	vm := b.c.Put(azuretest.VM{Name: s.Name, PrivateIP: s.Addr("127.0.85"), PublicIP: s.Addr("127.0.86"),
		Tags: tg, Created: s.Created})
	r := agentid.Resource{Subscription: b.c.Subscription(), ResourceGroup: b.c.ResourceGroup(), Name: vm.Name}
	b.routes.made(vm.PrivateIP, strings.ToLower(vm.VMID))
	return conformance.Made{Spec: s, ProviderID: r.ProviderID(), ID: strings.ToLower(vm.VMID), NodeName: agentid.NodeName(r, ""),
		InternalIP: vm.PrivateIP}
}

func (b *armBed) Delete(t testing.TB, m conformance.Made) {
	b.c.Delete(m.ID)
	b.routes.gone(m.InternalIP)
}

// SetState: deallocated is stopped, starting pending; Azure has no power
// state that is gone (a VM being deleted is, by its provisioning state,
// which azuretest does not model).
func (b *armBed) SetState(t testing.TB, m conformance.Made, s view.State) bool {
	power := map[view.State]string{view.StateStopped: "deallocated", view.StatePending: "starting"}[s]
	if power == "" {
		return false
	}
	b.c.SetPower(m.ID, power)
	return true
}

// Fail: an outage is ARM's 503; throttled ARM's 429; unauthorized sends a
// token ARM did not issue; GetFails answers 503 to the gets of one
// resource alone.
func (b *armBed) Fail(t testing.TB, f conformance.Failure) func() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fail = f
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.fail = ""
	}
}

func (b *armBed) Calls(c conformance.Call) int {
	if n, ok := b.lbCalls(c); ok { // loadbalancers_conformance_test.go
		return n
	}
	switch c {
	case conformance.List:
		return b.c.Calls("ListVMs")
	case conformance.RouteList:
		return b.c.Calls("GetRouteTable")
	case conformance.RouteCreate, conformance.RouteDelete:
		return b.c.Calls("PutRouteTable")
	}
	return b.c.Calls("GetVM")
}

func (b *armBed) BeforePage(f func(page int)) { b.pages.Set(f) }

// A list of one page is one call; one that changes between its pages at
// every listing is an error after three listings (the conformance suite
// checks that a list is whole or an error).
func TestListChangesAtEveryAttempt(t *testing.T) {
	b := newARMBed(t, conformance.Options{PageSize: 2}).(*armBed)
	for i := range 5 {
		b.Make(t, conformance.Spec{Name: fmt.Sprintf("node-%d", i), N: 10 + i})
	}
	n := 0
	b.BeforePage(func(page int) {
		if page == 2 {
			n++
			b.Make(t, conformance.Spec{Name: fmt.Sprintf("churn-%d", n), N: 40 + n})
		}
	})
	if _, err := b.p.InstanceView().List(context.Background(), 0); err == nil || !strings.Contains(err.Error(), "changed") {
		t.Fatalf("a list changing at every listing: %v", err)
	}
	if n != 3 {
		t.Errorf("%d listings, want 3", n)
	}
	one := newARMBed(t, conformance.Options{PageSize: 10}).(*armBed)
	one.Make(t, conformance.Spec{Name: "one", N: 1})
	if all, err := one.p.InstanceView().List(context.Background(), 0); err != nil || len(all) != 1 || one.c.Calls("ListVMs") != 1 {
		t.Errorf("one page: %d instances, %v, %d calls", len(all), err, one.c.Calls("ListVMs"))
	}
}
