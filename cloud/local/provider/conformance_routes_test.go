package provider

import (
	"context"
	"fmt"
	"testing"

	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/client"
)

// The bed's routes half (conformance.RoutesBed), through the local cloud's
// own API. The local cloud's route table holds every cluster's routes, each
// to an instance: a route that is not the cluster's is another cluster's.

func (b *bed) CloudRoutes(t testing.TB) []conformance.CloudRoute {
	t.Helper()
	all, err := b.cloud.Client.ListAllRoutes(context.Background(), client.ListOptions{PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]conformance.CloudRoute, 0, len(all))
	for _, r := range all {
		out = append(out, conformance.CloudRoute{Destination: r.DestinationCIDR, Target: r.InstanceID})
	}
	return out
}

// AddForeignRoute adds another cluster's route to its instance m; the local
// cloud has no route via anything but an instance.
func (b *bed) AddForeignRoute(t testing.TB, dest string, m *conformance.Made) (conformance.CloudRoute, bool) {
	t.Helper()
	if m == nil {
		return conformance.CloudRoute{}, false
	}
	b.mu.Lock()
	b.foreign++
	name := fmt.Sprintf("foreign-%d", b.foreign)
	b.mu.Unlock()
	r, err := b.cloud.Client.CreateRoute(context.Background(), api.Route{Name: name, Cluster: "c2", DestinationCIDR: dest, InstanceID: m.ID})
	if err != nil {
		t.Fatal(err)
	}
	return conformance.CloudRoute{Destination: r.DestinationCIDR, Target: r.InstanceID}, true
}

// routeOps are the local cloud's operations of each route call.
var routeOps = map[conformance.Call]string{conformance.RouteList: "ListRoutes", conformance.RouteCreate: "CreateRoute",
	conformance.RouteDelete: "DeleteRoute", conformance.List: "ListInstances"}

func (b *bed) FailCall(t testing.TB, c conformance.Call) func() {
	t.Helper()
	op, ok := routeOps[c]
	if !ok {
		return nil
	}
	ctx := context.Background()
	if err := b.cloud.Client.SetFaults(ctx, api.Faults{Operations: map[string]api.OperationFault{op: {ErrorRate: 1}}}); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := b.cloud.Client.ClearFaults(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
