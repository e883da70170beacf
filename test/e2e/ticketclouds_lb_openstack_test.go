package e2e

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/cloud/openstack"
	"github.com/mooring-dev/mooring/cloud/openstack/openstacktest"
	"github.com/mooring-dev/mooring/test/harness"
)

// openstackLBPending is how long openstacktest's Octavia takes to build
// each change here (real ones take seconds to a minute).
const openstackLBPending = 200 * time.Millisecond

// openstackLB is OpenStack's load balancers as the e2e test reads and
// makes them at openstacktest: Octavia's, each at its floating IP (else
// its VIP).
func openstackLB(osc *harness.OpenStackCloud) *lbFace {
	of := func(l openstacktest.LoadBalancer) conformance.LB {
		out := conformance.LB{ID: l.ID, Name: l.Name, IP: l.VIPAddress}
		for _, f := range osc.FloatingIPs() {
			if f.PortID != "" && f.PortID == l.VIPPortID {
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
	return &lbFace{
		list: func() []conformance.LB { return lbsOf(osc.LoadBalancers(), of) },
		// cloud-provider-openstack's load balancer for default/<name>
		// (cluster kubernetes): a TCP listener, a pool of the nodes' fixed
		// addresses on the node port, no monitor, a floating IP of its
		// words; the Service carries the id and address it wrote.
		legacy: func(t *testing.T, name string, port, nodePort int32, nodes []*corev1.Node) (conformance.LB, map[string]string) {
			lbName := "kube_service_kubernetes_default_" + name
			pool := openstacktest.Pool{Name: "pool_0_" + lbName, Protocol: "TCP", Algorithm: "ROUND_ROBIN"}
			for _, n := range nodes {
				for _, a := range n.Status.Addresses {
					if a.Type == corev1.NodeInternalIP {
						pool.Members = append(pool.Members, openstacktest.Member{Name: n.Name, Address: a.Address, Port: int(nodePort),
							SubnetID: openstacktest.DefaultSubnetID})
					}
				}
			}
			pool.ID, pool.ListenerID = "5e0c1a2b-0000-4000-8000-0000000e2e01", "5e0c1a2b-0000-4000-8000-0000000e2e02"
			l, err := osc.PutLoadBalancer(openstacktest.LoadBalancer{Name: lbName, Tags: []string{lbName},
				Description: "Kubernetes external service default/" + name + " from cluster kubernetes",
				Listeners: []openstacktest.Listener{{ID: pool.ListenerID, Name: "listener_0_" + lbName, Protocol: "TCP", Port: int(port),
					ConnectionLimit: -1, TimeoutClientData: 50000, TimeoutMemberConnect: 5000, TimeoutMemberData: 50000,
					DefaultPoolID: pool.ID, Tags: []string{lbName}}},
				Pools: []openstacktest.Pool{pool}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := osc.PutFloatingIP(openstacktest.FloatingIP{PortID: l.VIPPortID,
				Description: "Floating IP for Kubernetes external service default/" + name + " from cluster kubernetes"}); err != nil {
				t.Fatal(err)
			}
			got := of(l)
			return got, map[string]string{openstack.AnnotationLoadBalancerID: l.ID, openstack.AnnotationLoadBalancerAddress: got.IP}
		},
		// Checked every second, not every 5 s.
		serviceAnnotations: map[string]string{openstack.AnnotationMonitorDelay: "1", openstack.AnnotationMonitorTimeout: "1"},
		annotations:        map[string]string{openstack.AnnotationLBMethod: "LEAST_CONNECTIONS"},
		applied: func(_ *testing.T, id string) bool {
			l, ok := osc.LoadBalancer(id)
			if !ok || len(l.Pools) == 0 {
				return false
			}
			for _, p := range l.Pools {
				if p.Algorithm != "LEAST_CONNECTIONS" {
					return false
				}
			}
			return true
		},
		updates: func() int {
			n := 0
			for _, c := range []string{"lb-create", "lb-update", "lb-delete", "listener-create", "listener-update", "listener-delete",
				"pool-create", "pool-update", "pool-delete", "member-batch", "monitor-create", "monitor-update", "monitor-delete",
				"fip-create", "fip-update", "fip-delete"} {
				n += osc.Calls(c)
			}
			return n
		},
		// Octavia's members are a pool's: one batch update per port (two).
		perBatch: 2,
	}
}
