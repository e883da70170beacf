package gce

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	compute "google.golang.org/api/compute/v1"
	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/cloud/gce/gcetest"
)

// The upstream GCE provider's load balancers (loadBalancers: upstream)
// keep the load balancer contract where it applies to a plain
// cloudprovider.LoadBalancer (conformance.Backend.LBUpstream): Lifecycle
// and Failures run; Adopt, OtherCluster, BadInput and Orphan are skipped
// (no cluster tags, unknown annotations ignored).
func TestLoadBalancerConformance(t *testing.T) {
	b := conformance.Backend{Name: ProviderName, LoadBalancer: true, LBUpstream: true,
		New: func(t *testing.T, o conformance.Options) conformance.Bed { return newLBBed(t) }}
	conformance.RunLoadBalancers(t, b)
}

// lbMethods are gcetest's methods of each load balancer call. A GCE
// network load balancer is a target pool (its nodes) with a forwarding
// rule (its address and ports), firewall rules and the nodes' HTTP health
// check: its creation is counted by the target pool's insert, which the
// upstream makes once per load balancer (a port change deletes and makes
// the forwarding rule again, counted as updates), its deletion by the
// pool's delete.
var lbMethods = map[conformance.Call][]string{
	conformance.LBList: {"forwardingRules.list"},
	conformance.LBGet: {"forwardingRules.get", "targetPools.get", "addresses.get", "firewalls.get",
		"httpHealthChecks.get"},
	conformance.LBCreate: {"targetPools.insert"},
	conformance.LBUpdate: {"forwardingRules.insert", "forwardingRules.delete", "targetPools.addInstance",
		"targetPools.removeInstance", "targetPools.update", "addresses.insert", "addresses.delete",
		"firewalls.insert", "firewalls.update", "firewalls.patch", "firewalls.delete",
		"httpHealthChecks.insert", "httpHealthChecks.update", "httpHealthChecks.patch", "httpHealthChecks.delete"},
	conformance.LBDelete: {"targetPools.delete"},
}

// lbBed is the conformance bed with the upstream's load balancers: its
// provider is bed's (upstreamOn), initialized against kubeStub's cluster
// id, and its LoadBalancer records each Service's node ports for
// gcetest's stand-in for kube-proxy (by the load balancer's name).
type lbBed struct {
	*bed
	mu sync.Mutex
	// nodePorts: load balancer name -> Service port -> node port.
	nodePorts map[string]map[int]int
}

const lbRegion = "us-central1"

func newLBBed(t *testing.T) *lbBed {
	b := &lbBed{bed: newBed(t, conformance.Options{Routes: true}), nodePorts: map[string]map[int]int{}}
	b.Endpoint.LB = lbMethods
	b.gc.SetKubeProxy(func(fr *compute.ForwardingRule) map[int]int {
		b.mu.Lock()
		defer b.mu.Unlock()
		return maps.Clone(b.nodePorts[fr.Name])
	})
	// The stub first: cleanups run last first, so the upstream's watch
	// stops before the stub's server closes (which waits for it).
	kube := newKubeStub(t, testUID)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	b.cloud.Initialize(builder{host: kube.srv.URL}, stop)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := b.cloud.upstream.ClusterID.GetID()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the upstream has no cluster id: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return b
}

// Provider is the bed's provider with a LoadBalancer that records node
// ports.
func (b *lbBed) Provider() conformance.Provider {
	return lbProvider{Provider: b.Endpoint.Provider(), bed: b}
}

type lbProvider struct {
	conformance.Provider
	bed *lbBed
}

func (p lbProvider) LoadBalancer() (cloudprovider.LoadBalancer, bool) {
	lb, ok := p.Provider.LoadBalancer()
	if !ok {
		return nil, false
	}
	return recordingLB{LoadBalancer: lb, bed: p.bed}, true
}

// recordingLB records the node ports of each Service it is asked to
// balance.
type recordingLB struct {
	cloudprovider.LoadBalancer
	bed *lbBed
}

func (r recordingLB) record(svc *v1.Service) {
	ports := map[int]int{}
	for _, p := range svc.Spec.Ports {
		ports[int(p.Port)] = int(p.NodePort)
	}
	r.bed.mu.Lock()
	r.bed.nodePorts[cloudprovider.DefaultLoadBalancerName(svc)] = ports
	r.bed.mu.Unlock()
}

func (r recordingLB) EnsureLoadBalancer(ctx context.Context, cluster string, svc *v1.Service, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
	r.record(svc)
	return r.LoadBalancer.EnsureLoadBalancer(ctx, cluster, svc, nodes)
}

func (r recordingLB) UpdateLoadBalancer(ctx context.Context, cluster string, svc *v1.Service, nodes []*v1.Node) error {
	r.record(svc)
	return r.LoadBalancer.UpdateLoadBalancer(ctx, cluster, svc, nodes)
}

// LBs are gcetest's target pools, each with its forwarding rule of the
// same name (the upstream names both after the Service): the pool's id
// (the rule is made again on a port change), the rule's address and
// ports, the pool's instances.
func (b *lbBed) LBs(t testing.TB) []conformance.LB {
	rules := map[string]compute.ForwardingRule{}
	for _, fr := range b.gc.ForwardingRules(gcetest.DefaultProject, lbRegion) {
		rules[fr.Name] = fr
	}
	var out []conformance.LB
	for _, p := range b.gc.TargetPools(gcetest.DefaultProject, lbRegion) {
		l := conformance.LB{ID: fmt.Sprint(p.Id), Name: p.Name, Targets: len(p.Instances)}
		if fr, ok := rules[p.Name]; ok {
			l.IP = fr.IPAddress
			var lo, hi int32
			if _, err := fmt.Sscanf(fr.PortRange, "%d-%d", &lo, &hi); err == nil {
				for port := lo; port <= hi; port++ {
					l.Ports = append(l.Ports, port)
				}
			}
		}
		out = append(out, l)
	}
	return out
}

func (b *lbBed) MadeByCloudCCM(t testing.TB, _ *v1.Service, _ []*v1.Node) conformance.LB {
	t.Fatal("no adoption for the upstream's load balancers (LBUpstream)")
	return conformance.LB{}
}

func (b *lbBed) MadeForOtherCluster(t testing.TB, _ *v1.Service) conformance.LB {
	t.Fatal("no other cluster's load balancers for the upstream's (LBUpstream)")
	return conformance.LB{}
}

// Tamper drops the target pool's first instance, out of band.
func (b *lbBed) Tamper(t testing.TB, l conformance.LB) {
	for _, p := range b.gc.TargetPools(gcetest.DefaultProject, lbRegion) {
		if fmt.Sprint(p.Id) == l.ID {
			p.Instances = p.Instances[1:]
			b.gc.PutTargetPool(gcetest.DefaultProject, lbRegion, p)
			return
		}
	}
	t.Fatalf("no target pool %s", l.ID)
}

// TargetAddress is the instance's internal address, where gcetest's load
// balancers forward.
func (b *lbBed) TargetAddress(m conformance.Made) string { return m.InternalIP }

func (b *lbBed) Settle(testing.TB) { b.gc.Settle() }
