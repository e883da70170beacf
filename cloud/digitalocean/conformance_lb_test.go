package digitalocean

import (
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/cloud/digitalocean/digitaloceantest"
)

// The bed's load balancer half (conformance.LBBed), over the endpoint's
// own store of load balancers.

// lbCalls are the endpoint's load balancer methods of each call.
var lbCalls = map[conformance.Call][]string{conformance.LBList: {digitaloceantest.MethodLBList},
	conformance.LBGet: {digitaloceantest.MethodLBGet}, conformance.LBCreate: {digitaloceantest.MethodLBCreate},
	conformance.LBUpdate: {digitaloceantest.MethodLBUpdate}, conformance.LBDelete: {digitaloceantest.MethodLBDelete}}

func (b *bed) LBs(t testing.TB) []conformance.LB {
	var out []conformance.LB
	for _, l := range b.do.LoadBalancers() {
		out = append(out, asLB(l))
	}
	return out
}

func asLB(l digitaloceantest.LoadBalancer) conformance.LB {
	c := conformance.LB{ID: l.ID, Name: l.Name, IP: l.IP, Targets: len(l.DropletIDs)}
	for _, r := range l.ForwardingRules {
		c.Ports = append(c.Ports, int32(r.EntryPort))
	}
	slices.Sort(c.Ports)
	return c
}

func (b *bed) put(t testing.TB, l digitaloceantest.LoadBalancer) conformance.LB {
	t.Helper()
	l, err := b.do.PutLoadBalancer(l)
	if err != nil {
		t.Fatal(err)
	}
	return asLB(l)
}

// MadeByCloudCCM makes the load balancer DigitalOcean's CCM makes for a
// Service of policy Cluster without annotations: Kubernetes' default
// name, a tcp rule per port to its node port, kube-proxy's healthz
// checked over http, no tags of mooring's; and writes its id on the
// Service, as that CCM does.
func (b *bed) MadeByCloudCCM(t testing.TB, svc *v1.Service, nodes []*v1.Node) conformance.LB {
	t.Helper()
	l := digitaloceantest.LoadBalancer{Name: cloudprovider.DefaultLoadBalancerName(svc),
		HealthCheck: digitaloceantest.HealthCheck{Protocol: "http", Port: kubeProxyHealthPort, Path: "/healthz",
			CheckIntervalSeconds: 3, ResponseTimeoutSeconds: 5, UnhealthyThreshold: 3, HealthyThreshold: 5},
		Firewall: digitaloceantest.Firewall{Allow: []string{}, Deny: []string{}}}
	for _, p := range svc.Spec.Ports {
		l.ForwardingRules = append(l.ForwardingRules, digitaloceantest.ForwardingRule{EntryProtocol: "tcp",
			EntryPort: int(p.Port), TargetProtocol: "tcp", TargetPort: int(p.NodePort)})
	}
	for _, n := range nodes {
		id, err := ParseProviderID(n.Spec.ProviderID)
		if err != nil {
			t.Fatal(err)
		}
		l.DropletIDs = append(l.DropletIDs, id)
	}
	made := b.put(t, l)
	if svc.Annotations == nil {
		svc.Annotations = map[string]string{}
	}
	svc.Annotations[AnnotationLoadBalancerID] = made.ID
	return made
}

func (b *bed) MadeForOtherCluster(t testing.TB, svc *v1.Service) conformance.LB {
	t.Helper()
	return b.put(t, digitaloceantest.LoadBalancer{Name: lbName(svc),
		Tags:            []string{"k8s:c2", "mooring:cluster:c2", "mooring:uid:0000-other"},
		ForwardingRules: []digitaloceantest.ForwardingRule{{EntryProtocol: "tcp", EntryPort: 9999, TargetProtocol: "tcp", TargetPort: 30999}}})
}

// Tamper takes the first droplet out of the load balancer.
func (b *bed) Tamper(t testing.TB, lb conformance.LB) {
	t.Helper()
	if err := b.do.UpdateLoadBalancer(lb.ID, func(l *digitaloceantest.LoadBalancer) { l.DropletIDs = l.DropletIDs[1:] }); err != nil {
		t.Fatal(err)
	}
}

func (b *bed) Settle(t testing.TB) {
	t.Helper()
	if err := b.do.SettleLoadBalancers(); err != nil {
		t.Fatal(err)
	}
}

// TargetAddress is the droplet's private address, where DigitalOcean's
// load balancers reach it; there a stand-in for kube-proxy's healthz
// answers the load balancer's default health check (http on port 10256).
func (b *bed) TargetAddress(m conformance.Made) string {
	b.healthzOnce(m.InternalIP)
	return m.InternalIP
}

// healthz serves kube-proxy's /healthz at addr:10256 until the bed ends.
type healthz struct {
	mu   sync.Mutex
	addr map[string]bool
	srv  []*http.Server
}

func (b *bed) healthzOnce(addr string) {
	b.hz.mu.Lock()
	defer b.hz.mu.Unlock()
	if b.hz.addr == nil {
		b.hz.addr = map[string]bool{}
		b.cleanup(func() {
			b.hz.mu.Lock()
			defer b.hz.mu.Unlock()
			for _, s := range b.hz.srv {
				_ = s.Close()
			}
		})
	}
	if b.hz.addr[addr] {
		return
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(kubeProxyHealthPort)))
	if err != nil {
		panic(fmt.Sprintf("the stand-in for kube-proxy's healthz: %v", err))
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, `{"lastUpdated": "", "currentTime": ""}`)
	})}
	go func() { _ = srv.Serve(ln) }()
	b.hz.addr[addr] = true
	b.hz.srv = append(b.hz.srv, srv)
}
