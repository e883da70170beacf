package hetzner

import (
	"fmt"
	"slices"
	"strconv"
	"testing"

	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/cloud/hetzner/hetznertest"
)

// The bed's load balancer half (conformance.LBBed), through the
// endpoint's own record.

// lbCalls are the endpoint's methods of each LB call: every action on a
// load balancer and its PUT count as lb-update.
var lbCalls = map[conformance.Call][]string{conformance.LBList: {"lb-list"}, conformance.LBGet: {"lb-get"},
	conformance.LBCreate: {"lb-create"}, conformance.LBUpdate: {"lb-update"}, conformance.LBDelete: {"lb-delete"}}

func asLB(l hetznertest.LoadBalancer) conformance.LB {
	out := conformance.LB{ID: fmt.Sprint(l.ID), Name: l.Name, IP: l.IPv4, Targets: len(l.Targets)}
	for _, s := range l.Services {
		out.Ports = append(out.Ports, int32(s.ListenPort))
	}
	slices.Sort(out.Ports)
	return out
}

func (b *bed) LBs(t testing.TB) []conformance.LB {
	var out []conformance.LB
	for _, l := range b.hz.LoadBalancers() {
		out = append(out, asLB(l))
	}
	return out
}

func (b *bed) putLB(t testing.TB, l hetznertest.LoadBalancer) conformance.LB {
	t.Helper()
	l, err := b.hz.PutLoadBalancer(l)
	if err != nil {
		t.Fatal(err)
	}
	return asLB(l)
}

// MadeByCloudCCM is the load balancer hcloud-cloud-controller-manager
// makes for svc without annotations (in fsn1, its default type, a tcp
// service per port to the node port with the API's default tcp health
// check, the nodes' servers as public targets), labelled with its
// service-uid label alone.
func (b *bed) MadeByCloudCCM(t testing.TB, svc *v1.Service, nodes []*v1.Node) conformance.LB {
	t.Helper()
	return b.putLB(t, ccmLoadBalancer(t, svc, nodes))
}

func ccmLoadBalancer(t testing.TB, svc *v1.Service, nodes []*v1.Node) hetznertest.LoadBalancer {
	var ports []hetznertest.CCMPort
	for _, p := range svc.Spec.Ports {
		ports = append(ports, hetznertest.CCMPort{Port: int(p.Port), NodePort: int(p.NodePort)})
	}
	var servers []int64
	for _, n := range nodes {
		id, err := ParseProviderID(n.Spec.ProviderID)
		if err != nil {
			t.Fatal(err)
		}
		servers = append(servers, id)
	}
	return hetznertest.CCMLoadBalancer(cloudprovider.DefaultLoadBalancerName(svc), string(svc.UID), ports, servers)
}

func (b *bed) MadeForOtherCluster(t testing.TB, svc *v1.Service) conformance.LB {
	t.Helper()
	return b.putLB(t, hetznertest.LoadBalancer{Name: cloudprovider.DefaultLoadBalancerName(svc), Public: true,
		Labels: map[string]string{"mooring.dev/cluster": "c2", "mooring.dev/service-uid": "0000-other"},
		Services: []hetznertest.LBService{{Protocol: "tcp", ListenPort: 9999, DestinationPort: 9999,
			HealthCheck: hetznertest.LBHealthCheck{Protocol: "tcp", Port: 9999, Interval: 15, Timeout: 10, Retries: 3}}}})
}

// Tamper drops the load balancer's first target out of band.
func (b *bed) Tamper(t testing.TB, lb conformance.LB) {
	t.Helper()
	for _, l := range b.hz.LoadBalancers() {
		if fmt.Sprint(l.ID) == lb.ID {
			l.Targets = l.Targets[1:]
			b.putLB(t, l)
			return
		}
	}
	t.Fatalf("no load balancer %s", lb.ID)
}

// Settle: a Hetzner load balancer has its addresses when it is made.
func (b *bed) Settle(testing.TB) {}

// TargetAddress: without use-private-ip, targets are reached at their
// public IPv4.
func (b *bed) TargetAddress(m conformance.Made) string {
	id, _ := strconv.ParseInt(m.ID, 10, 64)
	s, _ := b.hz.Get(id)
	return s.PublicIPv4
}
