package azure_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/mooring-dev/mooring/cloud/azure"
	"github.com/mooring-dev/mooring/cloud/azure/azuretest"
)

// callLog is an SDK transport that holds every ARM call for delay and
// records when each kind of list was in flight.
type callLog struct {
	delay time.Duration

	mu       sync.Mutex
	inFlight int
	most     int
	first    map[string]time.Time // a kind's first call began
	last     map[string]time.Time // a kind's last call ended
}

// kind names an ARM list by its path (its nextLink pages keep the path).
func kind(r *http.Request) string {
	p := strings.ToLower(r.URL.Path)
	if _, set, ok := strings.Cut(p, "/virtualmachinescalesets/"); ok {
		// A scale set's own lists: its VMs, NICs and public addresses.
		_, what, _ := strings.Cut(set, "/")
		return "scale set " + strings.TrimPrefix(what, "microsoft.network/")
	}
	switch {
	case strings.HasSuffix(p, "/microsoft.compute/virtualmachines") && r.URL.Query().Get("statusOnly") == "true":
		return "statuses"
	case strings.HasSuffix(p, "/microsoft.compute/virtualmachines"):
		return "vms"
	case strings.HasSuffix(p, "/networkinterfaces"):
		return "nics"
	case strings.HasSuffix(p, "/publicipaddresses"):
		return "ips"
	case strings.HasSuffix(p, "/virtualmachinescalesets"):
		return "scalesets"
	}
	return "other"
}

func (l *callLog) Do(r *http.Request) (*http.Response, error) {
	k := kind(r)
	l.mu.Lock()
	l.inFlight++
	l.most = max(l.most, l.inFlight)
	if _, ok := l.first[k]; !ok {
		l.first[k] = time.Now()
	}
	l.mu.Unlock()
	time.Sleep(l.delay)
	resp, err := http.DefaultClient.Do(r)
	l.mu.Lock()
	l.inFlight--
	l.last[k] = time.Now()
	l.mu.Unlock()
	return resp, err
}

// TestListSideBySide: one List of the fleet makes its independent ARM lists
// side by side, and still lists what VMs refer to (power states, NICs,
// public addresses) only after the VM list has ended, so that every VM it
// returns has its NIC and addresses in the later lists.
func TestListSideBySide(t *testing.T) {
	c := azuretest.Started(t, azuretest.Options{PageSize: 2})
	for i, name := range []string{"node-a", "node-b", "node-c", "node-d", "node-e"} {
		c.Put(azuretest.VM{Name: name, PrivateIP: fmt.Sprintf("127.0.82.%d", 10+i), Tags: tags()})
	}
	c.PutScaleSet("pool", tags())
	c.Put(azuretest.VM{ScaleSet: "pool", InstanceID: "0", PrivateIP: "127.0.82.20"})

	log := &callLog{delay: 30 * time.Millisecond, first: map[string]time.Time{}, last: map[string]time.Time{}}
	cfg := azure.Config{SubscriptionID: c.Subscription(), ResourceGroup: c.ResourceGroup(), ClusterID: cluster, ARMEndpoint: c.Endpoint()}
	opts := azure.ClientOptions(cfg)
	opts.Transport = log
	opts.Retry = policy.RetryOptions{MaxRetries: -1}
	clients, err := azure.NewClients(c.Subscription(), c.Credential(), opts)
	if err != nil {
		t.Fatal(err)
	}
	src := azure.Source{Clients: clients, Subscription: c.Subscription(), ResourceGroup: c.ResourceGroup(), ClusterID: cluster}
	all, err := src.ListInstances(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 6 {
		t.Fatalf("listed %d instances, want 6: %+v", len(all), all)
	}
	for _, in := range all {
		if len(in.Addresses) == 0 {
			t.Errorf("%s has no addresses", in.Name)
		}
	}
	for _, k := range []string{"statuses", "nics", "ips"} {
		if log.first[k].Before(log.last["vms"]) {
			t.Errorf("the %s list began before the VM list ended", k)
		}
	}
	for _, k := range []string{"scale set networkinterfaces", "scale set publicipaddresses"} {
		if log.first[k].IsZero() || log.first[k].Before(log.last["scale set virtualmachines"]) {
			t.Errorf("the %s list did not begin after the scale set's VM list ended (calls began: %v)", k, log.first)
		}
	}
	// statuses, NICs and public addresses together, beside the scale sets'.
	if log.most < 3 {
		t.Errorf("at most %d ARM calls were in flight at once, want the independent lists side by side (3 or more)", log.most)
	}
}
