package openstack

import (
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/cloud/openstack/openstacktest"
)

// The bed's load balancer half (conformance.LBBed), through the
// endpoint's own record.

func init() {
	// Octavia's builds here take milliseconds (LBOptions.PendingFor): look
	// as often.
	activePoll, activePollMax = 2*time.Millisecond, 20*time.Millisecond
}

// lbPending is how long the endpoint's load balancers stay PENDING_* in
// the provider's tests.
const lbPending = 10 * time.Millisecond

// lbCalls are the endpoint's methods of each LB call: every call that
// changes a load balancer's parts or floating IP counts as lb-update.
var lbCalls = map[conformance.Call][]string{conformance.LBList: {"lb-list"}, conformance.LBGet: {"lb-get"},
	conformance.LBCreate: {"lb-create"},
	conformance.LBUpdate: {"lb-update", "listener-create", "listener-update", "listener-delete", "pool-create", "pool-update", "pool-delete",
		"member-batch", "monitor-create", "monitor-update", "monitor-delete", "fip-create", "fip-update"},
	conformance.LBDelete: {"lb-delete", "fip-delete"}}

// lbConfig is the provider's load balancer config against the endpoint.
func lbConfig(c *Config) {
	c.LoadBalancer.SubnetID = openstacktest.DefaultSubnetID
	c.LoadBalancer.FloatingNetworkID = openstacktest.DefaultFloatingNetworkID
}

// asLB is a load balancer as the suite sees it: its address is its
// floating IP's, else its VIP.
func (b *bed) asLB(l openstacktest.LoadBalancer) conformance.LB {
	out := conformance.LB{ID: l.ID, Name: l.Name, IP: l.VIPAddress}
	for _, f := range b.os.FloatingIPs() {
		if f.PortID == l.VIPPortID {
			out.IP = f.Address
		}
	}
	for _, ln := range l.Listeners {
		out.Ports = append(out.Ports, int32(ln.Port))
	}
	slices.Sort(out.Ports)
	if len(l.Pools) > 0 {
		out.Targets = len(l.Pools[0].Members)
	}
	return out
}

func (b *bed) LBs(t testing.TB) []conformance.LB {
	var out []conformance.LB
	for _, l := range b.os.LoadBalancers() {
		out = append(out, b.asLB(l))
	}
	return out
}

// MadeByCloudCCM is the load balancer cloud-provider-openstack makes for
// svc by default: its name (cluster kubernetes) as name and tag, a TCP
// listener per port with a ROUND_ROBIN pool of the nodes on the node port
// and no monitor (create-monitor is off by default), a floating IP of its
// words on the VIP port.
func (b *bed) MadeByCloudCCM(t testing.TB, svc *v1.Service, nodes []*v1.Node) conformance.LB {
	t.Helper()
	return b.putLB(t, occmLoadBalancer(svc, nodes), true)
}

// occmLoadBalancer is the load balancer cloud-provider-openstack makes for
// svc and nodes.
func occmLoadBalancer(svc *v1.Service, nodes []*v1.Node) openstacktest.LoadBalancer {
	name := "kube_service_kubernetes_" + svc.Namespace + "_" + svc.Name
	l := openstacktest.LoadBalancer{Name: name, Tags: []string{name},
		Description: "Kubernetes external service " + svc.Namespace + "/" + svc.Name + " from cluster kubernetes"}
	for i, p := range svc.Spec.Ports {
		ln := openstacktest.Listener{ID: fmtID(i, 1), Name: fmtName("listener", i, name), Protocol: string(p.Protocol), Port: int(p.Port),
			ConnectionLimit: -1, TimeoutClientData: 50000, TimeoutMemberConnect: 5000, TimeoutMemberData: 50000, Tags: []string{name},
			DefaultPoolID: fmtID(i, 2)}
		pool := openstacktest.Pool{ID: fmtID(i, 2), Name: fmtName("pool", i, name), Protocol: string(p.Protocol), Algorithm: "ROUND_ROBIN", ListenerID: ln.ID}
		for _, n := range nodes {
			for _, a := range n.Status.Addresses {
				if a.Type == v1.NodeInternalIP {
					pool.Members = append(pool.Members, openstacktest.Member{Name: n.Name, Address: a.Address, Port: int(p.NodePort),
						SubnetID: openstacktest.DefaultSubnetID})
					break
				}
			}
		}
		l.Listeners = append(l.Listeners, ln)
		l.Pools = append(l.Pools, pool)
	}
	return l
}

func fmtID(i, kind int) string {
	return "0000000" + string(rune('0'+kind)) + "-0000-4000-8000-00000000000" + string(rune('0'+i))
}

func fmtName(kind string, i int, name string) string {
	return kind + "_" + string(rune('0'+i)) + "_" + name
}

// putLB puts l (ACTIVE) with, when fip, a floating IP of the upstream
// CCM's words on its VIP port.
func (b *bed) putLB(t testing.TB, l openstacktest.LoadBalancer, fip bool) conformance.LB {
	t.Helper()
	l, err := b.os.PutLoadBalancer(l)
	if err != nil {
		t.Fatal(err)
	}
	if fip {
		if _, err := b.os.PutFloatingIP(openstacktest.FloatingIP{PortID: l.VIPPortID,
			Description: fipDescription + " " + l.Description[len("Kubernetes external service "):]}); err != nil {
			t.Fatal(err)
		}
	}
	return b.asLB(l)
}

func (b *bed) MadeForOtherCluster(t testing.TB, svc *v1.Service) conformance.LB {
	t.Helper()
	name := "kube_service_kubernetes_" + svc.Namespace + "_" + svc.Name
	return b.putLB(t, openstacktest.LoadBalancer{Name: name, Tags: []string{name, "mooring:cluster:c2", "mooring:uid:0000-other"},
		Listeners: []openstacktest.Listener{{Name: "listener_0_" + name, Protocol: "TCP", Port: 9999, ConnectionLimit: -1}}}, false)
}

// Tamper drops the first member of the load balancer's first pool out of
// band.
func (b *bed) Tamper(t testing.TB, lb conformance.LB) {
	t.Helper()
	l, ok := b.os.LoadBalancer(lb.ID)
	if !ok || len(l.Pools) == 0 || len(l.Pools[0].Members) == 0 {
		t.Fatalf("no load balancer %s with members", lb.ID)
	}
	l.Pools[0].Members = l.Pools[0].Members[1:]
	if _, err := b.os.PutLoadBalancer(l); err != nil {
		t.Fatal(err)
	}
}

// Settle ends Octavia's pending builds now.
func (b *bed) Settle(testing.TB) { b.os.Settle() }

// TargetAddress: members are the nodes' fixed addresses.
func (b *bed) TargetAddress(m conformance.Made) string { return m.InternalIP }
