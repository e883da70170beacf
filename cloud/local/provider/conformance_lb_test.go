package provider

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/client"
)

// The bed's load balancer half (conformance.LBBed), through the local
// cloud's own API.

func (b *bed) LBs(t testing.TB) []conformance.LB {
	t.Helper()
	all, err := b.cloud.Client.ListAllLoadBalancers(context.Background(), client.ListOptions{PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var out []conformance.LB
	for _, l := range all {
		lb := conformance.LB{ID: l.Name, Name: l.Name, IP: l.VIP}
		for i, ln := range l.Listeners {
			lb.Ports = append(lb.Ports, int32(ln.Port))
			if i == 0 {
				lb.Targets = len(ln.Backends)
			}
		}
		out = append(out, lb)
	}
	return out
}

func (b *bed) put(t testing.TB, name string, spec api.LoadBalancerSpec) conformance.LB {
	t.Helper()
	if _, err := b.cloud.Client.EnsureLoadBalancer(context.Background(), name, spec); err != nil {
		t.Fatal(err)
	}
	for _, l := range b.LBs(t) {
		if l.Name == name {
			return l
		}
	}
	t.Fatalf("load balancer %s not listed", name)
	return conformance.LB{}
}

// MadeByCloudCCM: the local cloud has no CCM of its own; an untagged load
// balancer of the Service's name stands in.
func (b *bed) MadeByCloudCCM(t testing.TB, svc *v1.Service, nodes []*v1.Node) conformance.LB {
	spec, err := b.provider.DesiredSpec(svc, nodes)
	if err != nil {
		t.Fatal(err)
	}
	spec.Cluster, spec.Tags = "", nil
	return b.put(t, b.provider.GetLoadBalancerName(context.Background(), "", svc), spec)
}

func (b *bed) MadeForOtherCluster(t testing.TB, svc *v1.Service) conformance.LB {
	spec := api.LoadBalancerSpec{Cluster: "c2", Tags: map[string]string{TagServiceUID: "0000-other"},
		Listeners: []api.Listener{{Port: 9999, Protocol: api.TCP, Backends: []api.Backend{}}}}
	return b.put(t, b.provider.GetLoadBalancerName(context.Background(), "", svc), spec)
}

func (b *bed) Tamper(t testing.TB, lb conformance.LB) {
	t.Helper()
	l, err := b.cloud.Client.GetLoadBalancer(context.Background(), lb.Name)
	if err != nil {
		t.Fatal(err)
	}
	l.Listeners[0].Backends = l.Listeners[0].Backends[1:]
	b.put(t, lb.Name, l.LoadBalancerSpec)
}

func (b *bed) Settle(testing.TB) {}

func (b *bed) TargetAddress(m conformance.Made) string { return m.InternalIP }

// lbCalls are the local cloud's operations of each LB call; it makes and
// changes a load balancer with one call (PUT), counted as an update.
var lbCalls = map[conformance.Call]string{conformance.LBList: "ListLoadBalancers", conformance.LBGet: "GetLoadBalancer",
	conformance.LBUpdate: "EnsureLoadBalancer", conformance.LBDelete: "DeleteLoadBalancer"}
