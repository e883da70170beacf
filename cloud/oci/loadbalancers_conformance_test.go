package oci_test

import (
	"fmt"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/cloud/oci/ocitest"
)

// The bed's load balancer half (conformance.LBBed), through the
// endpoint's own record.

// The subnets of the bed's load balancers and nodes, each with a
// security list of its own: the LB's default rule mode, All, writes both.
const (
	lbSubnet   = "ocid1.subnet.oc1.iad.aaaaaaaalbsubnet"
	nodeSubnet = "ocid1.subnet.oc1.iad.aaaaaaaanodesubnet"
	lbNetwork  = "loadBalancer:\n  subnet1: " + lbSubnet + "\n  nodeSubnets: [" + nodeSubnet + "]\n"
)

// putLBNetwork makes the subnets lbNetwork names.
func putLBNetwork(ep *ocitest.Cloud) {
	lbList := ep.PutSecurityList(ocitest.SecurityList{DisplayName: "lb"})
	nodeList := ep.PutSecurityList(ocitest.SecurityList{DisplayName: "nodes"})
	ep.PutSubnet(ocitest.Subnet{ID: lbSubnet, CIDR: "127.85.0.0/16", SecurityLists: []string{lbList.ID}})
	ep.PutSubnet(ocitest.Subnet{ID: nodeSubnet, CIDR: "127.0.91.0/24", SecurityLists: []string{nodeList.ID}})
}

// lbCalls are the endpoint's methods of each LB call: every write of
// either API (and its work request) counts as lb-update.
var lbCalls = map[conformance.Call][]string{
	conformance.LBList:   {ocitest.MethodListLB, ocitest.MethodListNLB},
	conformance.LBGet:    {ocitest.MethodGetLB, ocitest.MethodGetNLB},
	conformance.LBCreate: {ocitest.MethodCreateLB, ocitest.MethodCreateNLB},
	conformance.LBUpdate: {ocitest.MethodUpdateLB, ocitest.MethodUpdateLBShape, ocitest.MethodUpdateLBNSGs, ocitest.MethodCreateLBSet,
		ocitest.MethodUpdateLBSet, ocitest.MethodDeleteLBSet, ocitest.MethodCreateLBListen, ocitest.MethodUpdateLBListen,
		ocitest.MethodDeleteLBListen, ocitest.MethodCreateLBCert, ocitest.MethodUpdateNLB, ocitest.MethodUpdateNLBNSGs,
		ocitest.MethodCreateNLBSet, ocitest.MethodUpdateNLBSet, ocitest.MethodDeleteNLBSet, ocitest.MethodCreateNLBListen,
		ocitest.MethodUpdateNLBListen, ocitest.MethodDeleteNLBListen},
	conformance.LBDelete: {ocitest.MethodDeleteLB, ocitest.MethodDeleteNLB},
}

func asLB(b ocitest.Balancer) conformance.LB {
	out := conformance.LB{ID: b.ID, Name: b.DisplayName, IP: b.IP}
	targets := map[string]bool{}
	for _, l := range b.Listeners {
		out.Ports = append(out.Ports, int32(l.Port))
		for _, be := range b.BackendSets[l.BackendSet].Backends {
			targets[be.IP] = true
		}
	}
	out.Targets = len(targets)
	slices.Sort(out.Ports)
	return out
}

func (b *ociBed) LBs(t testing.TB) []conformance.LB {
	var out []conformance.LB
	for _, l := range b.ep.Balancers() {
		out = append(out, asLB(l))
	}
	return out
}

func (b *ociBed) putLB(t testing.TB, l ocitest.Balancer) conformance.LB {
	t.Helper()
	l, err := b.ep.PutBalancer(l)
	if err != nil {
		t.Fatal(err)
	}
	return asLB(l)
}

// MadeByCloudCCM is the LB oci-cloud-controller-manager makes for svc
// without annotations (its display name the Service's UID, a TCP-<port>
// listener and backend set per port, kube-proxy's health check, the
// nodes' InternalIPs at the node port), with no tag of mooring's.
func (b *ociBed) MadeByCloudCCM(t testing.TB, svc *v1.Service, nodes []*v1.Node) conformance.LB {
	t.Helper()
	return b.putLB(t, ccmBalancer(svc, nodes))
}

func ccmBalancer(svc *v1.Service, nodes []*v1.Node) ocitest.Balancer {
	l := ocitest.Balancer{Kind: ocitest.KindLB, DisplayName: string(svc.UID), Shape: "flexible", FlexMin: 10, FlexMax: 100,
		Subnets: []string{lbSubnet}, Listeners: map[string]ocitest.Listener{}, BackendSets: map[string]ocitest.BackendSet{}}
	for _, p := range svc.Spec.Ports {
		name := fmt.Sprintf("TCP-%d", p.Port)
		set := ocitest.BackendSet{Name: name, Policy: "ROUND_ROBIN", Check: ocitest.HealthCheck{Protocol: "HTTP", Path: "/healthz", Port: 10256,
			ReturnCode: 200, Retries: 3, TimeoutMs: 3000, Interval: 10000}}
		for _, n := range nodes {
			for _, a := range n.Status.Addresses {
				if a.Type == v1.NodeInternalIP {
					set.Backends = append(set.Backends, ocitest.Backend{IP: a.Address, Port: int(p.NodePort), Weight: 1})
				}
			}
		}
		l.BackendSets[name] = set
		l.Listeners[name] = ocitest.Listener{Name: name, Protocol: "TCP", BackendSet: name, Port: int(p.Port)}
	}
	return l
}

func (b *ociBed) MadeForOtherCluster(t testing.TB, svc *v1.Service) conformance.LB {
	t.Helper()
	l := ccmBalancer(svc, nil)
	l.FreeformTags = map[string]string{"mooring/cluster": "c2", "mooring/service-uid": "0000-other"}
	return b.putLB(t, l)
}

// Tamper drops a backend of the load balancer's first backend set out of
// band.
func (b *ociBed) Tamper(t testing.TB, lb conformance.LB) {
	t.Helper()
	l, ok := b.ep.Balancer(lb.ID)
	if !ok {
		t.Fatalf("no load balancer %s", lb.ID)
	}
	for name, set := range l.BackendSets {
		set.Backends = set.Backends[1:]
		l.BackendSets[name] = set
		break
	}
	b.putLB(t, l)
}

// Settle finishes the work requests that run.
func (b *ociBed) Settle(testing.TB) { b.ep.Settle() }

// TargetAddress: backends are the nodes' InternalIPs (their private
// IPs), where a stand-in for kube-proxy's healthz (port 10256, 200 on
// /healthz: the load balancers' health check) listens too.
func (b *ociBed) TargetAddress(m conformance.Made) string {
	if b.healthz == nil {
		b.healthz = map[string]bool{}
	}
	if !b.healthz[m.InternalIP] {
		b.healthz[m.InternalIP] = true
		serveHealthz(b.t, net.JoinHostPort(m.InternalIP, "10256"))
	}
	return m.InternalIP
}

// serveHealthz answers 200 on /healthz at addr, as kube-proxy does on a
// node, until the test ends.
func serveHealthz(t testing.TB, addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, `{"healthy": true}`)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
}
