package hetzner

import (
	"testing"

	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/cloud/hetzner/hetznertest"
)

// The bed's routes half (conformance.RoutesBed): the configured network's
// routes, read and written in the endpoint's own record.

// routeCalls are the endpoint's methods of each route call: a read of the
// network (GET /networks/{id}), add_route, delete_route.
var routeCalls = map[conformance.Call][]string{conformance.RouteList: {"route-list"},
	conformance.RouteCreate: {"route-create"}, conformance.RouteDelete: {"route-delete"}}

// foreignGateway is an address in the network that no server has.
const foreignGateway = "127.0.85.250"

func (b *bed) network(t testing.TB) hetznertest.Network {
	t.Helper()
	n, ok := b.hz.Network(hetznertest.DefaultNetworkID)
	if !ok {
		t.Fatal("the bed has no network: made without Options.Routes")
	}
	return n
}

// CloudRoutes are the network's routes; a gateway that is a made server's
// address is that server's id.
func (b *bed) CloudRoutes(t testing.TB) []conformance.CloudRoute {
	t.Helper()
	n := b.network(t)
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]conformance.CloudRoute, 0, len(n.Routes))
	for _, r := range n.Routes {
		target := r.Gateway
		if id, ok := b.servers[r.Gateway]; ok {
			if _, live := b.hz.Get(mustInt(t, id)); live {
				target = id
			}
		}
		out = append(out, conformance.CloudRoute{Destination: r.Destination, Target: target})
	}
	return out
}

// AddForeignRoute adds a route via m's address in the network, or via an
// address no server has.
func (b *bed) AddForeignRoute(t testing.TB, dest string, m *conformance.Made) (conformance.CloudRoute, bool) {
	t.Helper()
	gw, target := foreignGateway, foreignGateway
	if m != nil {
		gw, target = m.InternalIP, m.ID
	}
	n := b.network(t)
	n.Routes = append(n.Routes, hetznertest.Route{Destination: dest, Gateway: gw})
	b.hz.PutNetwork(n)
	return conformance.CloudRoute{Destination: dest, Target: target}, true
}

func mustInt(t testing.TB, id string) int64 {
	t.Helper()
	return int64(conformance.Made{ID: id}.IntID(t))
}
