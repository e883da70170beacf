package provider

import (
	"context"
	"errors"
	"testing"

	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/cloud/local/api"
)

// callDelta runs f and returns the cloud calls it made, by operation.
func (e *env) callDelta(t *testing.T, f func()) map[string]int64 {
	t.Helper()
	before, err := e.cloud.Client.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	f()
	after, err := e.cloud.Client.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for op, n := range after.Calls {
		if d := n - before.Calls[op]; d != 0 && op != "GetStats" {
			out[op] = d
		}
	}
	return out
}

func wantCalls(t *testing.T, what string, got map[string]int64, op string) {
	t.Helper()
	if len(got) != 1 || got[op] != 1 {
		t.Errorf("%s made cloud calls %v; want exactly one %s", what, got, op)
	}
}

func TestDirectLookupMetadata(t *testing.T) {
	e := setup(t, "instanceLookup: direct")
	ctx := context.Background()
	in := e.create(t, "node-a", cluster)
	e.create(t, "node-other", "c2")

	var md *cloudprovider.InstanceMetadata
	var err error
	calls := e.callDelta(t, func() { md, err = e.provider.InstanceMetadata(ctx, node("node-a", "")) })
	if err != nil {
		t.Fatal(err)
	}
	wantCalls(t, "metadata by node name", calls, "ListInstances")
	if md.ProviderID != "local://"+in.ID || md.Zone != in.Zone || md.Region != in.Region || md.InstanceType != in.InstanceType ||
		md.AdditionalLabels[ClusterLabel] != cluster || len(md.NodeAddresses) != len(in.Addresses) {
		t.Fatalf("metadata by name: %+v", md)
	}

	// Every call is its own cloud call: nothing is cached.
	for range 3 {
		var byID *cloudprovider.InstanceMetadata
		calls = e.callDelta(t, func() { byID, err = e.provider.InstanceMetadata(ctx, node("whatever", md.ProviderID)) })
		if err != nil || byID.ProviderID != md.ProviderID || byID.Zone != in.Zone || byID.InstanceType != in.InstanceType {
			t.Fatalf("metadata by providerID: %+v, %v", byID, err)
		}
		wantCalls(t, "metadata by providerID", calls, "GetInstance")
	}

	if _, err := e.provider.InstanceMetadata(ctx, node("nobody", "")); !errors.Is(err, cloudprovider.InstanceNotFound) {
		t.Fatalf("unknown node: %v", err)
	}
	if _, err := e.provider.InstanceMetadata(ctx, node("ghost", "local://i-doesnotexist")); !errors.Is(err, cloudprovider.InstanceNotFound) {
		t.Fatalf("unknown providerID: %v", err)
	}
	if _, err := e.provider.InstanceMetadata(ctx, node("x", "aws:///i-1")); err == nil {
		t.Fatal("a foreign providerID was accepted")
	}
	// Instances of other clusters are invisible.
	if _, err := e.provider.InstanceMetadata(ctx, node("node-other", "")); !errors.Is(err, cloudprovider.InstanceNotFound) {
		t.Fatalf("another cluster's instance by name: %v", err)
	}

	// A terminated instance is not found; a live one of its name wins.
	if _, err := e.cloud.Client.TerminateInstance(ctx, in.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.provider.InstanceMetadata(ctx, node("node-a", md.ProviderID)); !errors.Is(err, cloudprovider.InstanceNotFound) {
		t.Fatalf("terminated: %v", err)
	}
	again := e.create(t, "node-a", cluster)
	if md, err := e.provider.InstanceMetadata(ctx, node("node-a", "")); err != nil || md.ProviderID != "local://"+again.ID {
		t.Fatalf("a new instance of a terminated one's name: %+v, %v", md, err)
	}

	// The view is not used.
	if got := e.calls(t, "ListInstances"); got != 4 {
		t.Fatalf("%d ListInstances calls, want 4 (one per lookup by name)", got)
	}
}

func TestDirectLookupInstanceIDPolicy(t *testing.T) {
	e := setup(t, "instanceLookup: direct", "nodeNamePolicy: InstanceID")
	ctx := context.Background()
	in := e.create(t, "node-a", cluster)
	other := e.create(t, "node-b", "c2")

	var md *cloudprovider.InstanceMetadata
	var err error
	calls := e.callDelta(t, func() { md, err = e.provider.InstanceMetadata(ctx, node(in.ID, "")) })
	if err != nil || md.ProviderID != "local://"+in.ID {
		t.Fatalf("by instance id as node name: %+v, %v", md, err)
	}
	wantCalls(t, "metadata by node name (InstanceID policy)", calls, "GetInstance")
	if _, err := e.provider.InstanceMetadata(ctx, node(other.ID, "")); !errors.Is(err, cloudprovider.InstanceNotFound) {
		t.Fatalf("another cluster's instance: %v", err)
	}
	// Neither a missing nor another cluster's instance makes a Node without
	// providerID gone.
	for _, name := range []string{"i-doesnotexist", other.ID} {
		if ok, err := e.provider.InstanceExists(ctx, node(name, "")); err == nil {
			t.Errorf("node %s without providerID judged: exists %v", name, ok)
		}
	}
}

func TestDirectLookupLifecycle(t *testing.T) {
	e := setup(t, "instanceLookup: direct")
	ctx := context.Background()
	in := e.create(t, "node-a", cluster)
	n := node("node-a", "local://"+in.ID)

	var ok bool
	var err error
	calls := e.callDelta(t, func() { ok, err = e.provider.InstanceExists(ctx, n) })
	if !ok || err != nil {
		t.Fatalf("running: exists %v, %v", ok, err)
	}
	wantCalls(t, "InstanceExists", calls, "GetInstance")

	if _, err := e.cloud.Client.StopInstance(ctx, in.ID); err != nil {
		t.Fatal(err)
	}
	var down bool
	calls = e.callDelta(t, func() { down, err = e.provider.InstanceShutdown(ctx, n) })
	if !down || err != nil {
		t.Fatalf("stopped: shutdown %v, %v", down, err)
	}
	wantCalls(t, "InstanceShutdown", calls, "GetInstance")

	// An outage is an error, never "gone".
	if err := e.cloud.Client.SetFaults(ctx, api.Faults{ErrorRate: 1}); err != nil {
		t.Fatal(err)
	}
	for _, nd := range []*struct {
		name, providerID string
	}{{"node-a", n.Spec.ProviderID}, {"node-a", ""}, {"ghost", "local://i-doesnotexist"}} {
		if ok, err := e.provider.InstanceExists(ctx, node(nd.name, nd.providerID)); err == nil {
			t.Fatalf("during an outage, node %s %q: exists %v with no error", nd.name, nd.providerID, ok)
		}
		if _, err := e.provider.InstanceMetadata(ctx, node(nd.name, nd.providerID)); err == nil || errors.Is(err, cloudprovider.InstanceNotFound) {
			t.Fatalf("during an outage, node %s %q: metadata error %v; want an error other than InstanceNotFound", nd.name, nd.providerID, err)
		}
	}
	if err := e.cloud.Client.ClearFaults(ctx); err != nil {
		t.Fatal(err)
	}

	if _, err := e.cloud.Client.TerminateInstance(ctx, in.ID); err != nil {
		t.Fatal(err)
	}
	calls = e.callDelta(t, func() { ok, err = e.provider.InstanceExists(ctx, n) })
	if ok || err != nil {
		t.Fatalf("terminated: exists %v, %v", ok, err)
	}
	wantCalls(t, "InstanceExists of a terminated instance", calls, "GetInstance")
	calls = e.callDelta(t, func() { ok, err = e.provider.InstanceExists(ctx, node("ghost", "local://i-doesnotexist")) })
	if ok || err != nil {
		t.Fatalf("never existed: exists %v, %v", ok, err)
	}
	wantCalls(t, "InstanceExists of an unknown id", calls, "GetInstance")
	// A Node without providerID whose name matches nothing is not "gone".
	if _, err := e.provider.InstanceExists(ctx, node("stranger", "")); err == nil {
		t.Fatal("a Node with no providerID and no instance was judged")
	}
	// A Node whose instance is another cluster's is left alone.
	other := e.create(t, "node-b", "c2")
	calls = e.callDelta(t, func() { ok, err = e.provider.InstanceExists(ctx, node("node-b", "local://"+other.ID)) })
	if !ok || err != nil {
		t.Fatalf("another cluster's instance: exists %v, %v", ok, err)
	}
	wantCalls(t, "InstanceExists of another cluster's instance", calls, "GetInstance")
	if _, err := e.provider.InstanceMetadata(ctx, node("node-b", "local://"+other.ID)); !errors.Is(err, cloudprovider.InstanceNotFound) {
		t.Fatalf("another cluster's instance's metadata: %v", err)
	}
}

func TestViewLookupStaysDefault(t *testing.T) {
	e := setup(t)
	if _, ok := e.provider.lookup.(viewLookup); !ok || e.provider.Config().InstanceLookup != InstanceLookupView {
		t.Fatalf("default lookup %T, config %q", e.provider.lookup, e.provider.Config().InstanceLookup)
	}
}
