package e2e

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/cloud/digitalocean"
	"github.com/mooring-dev/mooring/cloud/digitalocean/digitaloceantest"
	"github.com/mooring-dev/mooring/cloud/hetzner"
	"github.com/mooring-dev/mooring/cloud/hetzner/hetznertest"
	"github.com/mooring-dev/mooring/cloud/linode"
	"github.com/mooring-dev/mooring/cloud/linode/linodetest"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// The clouds' load balancers as testCloudLB reads and makes them at their
// endpoints.

// providerNumber is the number after "<scheme>://" in a Node's providerID.
func providerNumber(t *testing.T, n *corev1.Node) int {
	t.Helper()
	_, id, _ := strings.Cut(n.Spec.ProviderID, "://")
	v, err := strconv.Atoi(id)
	if err != nil {
		t.Fatalf("%s: providerID %q", n.Name, n.Spec.ProviderID)
	}
	return v
}

// lbsOf is an endpoint's load balancers as the test reads them.
func lbsOf[T any](all []T, of func(T) conformance.LB) []conformance.LB {
	out := make([]conformance.LB, len(all))
	for i, l := range all {
		out[i] = of(l)
	}
	return out
}

func nodeInternalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

// doLB: DigitalOcean's load balancers; one its CCM made is found by the
// id it wrote on the Service.
func doLB(do *harness.DigitalOceanCloud) *lbFace {
	of := func(l digitaloceantest.LoadBalancer) conformance.LB {
		out := conformance.LB{ID: l.ID, Name: l.Name, IP: l.IP, Targets: len(l.DropletIDs)}
		for _, r := range l.ForwardingRules {
			out.Ports = append(out.Ports, int32(r.EntryPort))
		}
		return out
	}
	return &lbFace{
		list: func() []conformance.LB { return lbsOf(do.LoadBalancers(), of) },
		legacy: func(t *testing.T, name string, port, nodePort int32, nodes []*corev1.Node) (conformance.LB, map[string]string) {
			l := digitaloceantest.LoadBalancer{Name: name, ForwardingRules: []digitaloceantest.ForwardingRule{{
				EntryProtocol: "tcp", EntryPort: int(port), TargetProtocol: "tcp", TargetPort: int(nodePort)}},
				HealthCheck: digitaloceantest.HealthCheck{Protocol: "http", Port: 10256, Path: "/healthz"}}
			for _, n := range nodes {
				l.DropletIDs = append(l.DropletIDs, providerNumber(t, n))
			}
			l, err := do.PutLoadBalancer(l)
			if err != nil {
				t.Fatal(err)
			}
			return of(l), map[string]string{digitalocean.AnnotationLoadBalancerID: l.ID}
		},
		// Healthy after 2 passed checks, DigitalOcean's least, not the
		// default 5: traffic flows 2 check intervals after the build.
		serviceAnnotations: map[string]string{digitalocean.AnnotationHealthCheckHealthy: "2"},
		annotations:        map[string]string{digitalocean.AnnotationSizeUnit: "2"},
		applied: func(_ *testing.T, id string) bool {
			l, ok := do.LoadBalancer(id)
			return ok && l.SizeUnit == 2
		},
		updates: func() int { return do.Calls(digitaloceantest.MethodLBUpdate) },
	}
}

// linodeLB: Linode's NodeBalancers; one its CCM made is found by the
// nodebalancer-id annotation.
func linodeLB(ln *harness.LinodeCloud) *lbFace {
	of := func(n linodetest.NodeBalancer) conformance.LB {
		out := conformance.LB{ID: strconv.Itoa(n.ID), Name: n.Label, IP: n.IPv4, Hostname: n.Hostname}
		for i, cf := range n.Configs {
			out.Ports = append(out.Ports, int32(cf.Port))
			if i == 0 {
				out.Targets = len(cf.Nodes)
			}
		}
		return out
	}
	return &lbFace{
		list: func() []conformance.LB { return lbsOf(ln.NodeBalancers(), of) },
		legacy: func(t *testing.T, name string, port, nodePort int32, nodes []*corev1.Node) (conformance.LB, map[string]string) {
			cf := linodetest.NBConfig{Port: int(port), Protocol: "tcp", Algorithm: "roundrobin", Check: "connection",
				CheckInterval: 5, CheckTimeout: 3, CheckAttempts: 2, CheckPassive: true}
			for _, n := range nodes {
				cf.Nodes = append(cf.Nodes, linodetest.NBNode{Address: fmt.Sprintf("%s:%d", nodeInternalIP(n), nodePort),
					Label: n.Name, Weight: 100, Mode: "accept"})
			}
			n := ln.PutNodeBalancer(linodetest.NodeBalancer{Label: "ccm-" + name, Tags: []string{"kubernetes"}, Configs: []linodetest.NBConfig{cf}})
			return of(n), map[string]string{linode.AnnNodeBalancerID: strconv.Itoa(n.ID)}
		},
		annotations: map[string]string{linode.AnnThrottle: "5"},
		applied: func(_ *testing.T, id string) bool {
			v, _ := strconv.Atoi(id)
			n, ok := ln.NodeBalancer(v)
			return ok && n.Throttle == 5
		},
		updates: func() int { return ln.Calls(linodetest.MethodLBUpdate) },
		// A NodeBalancer's nodes change with their config: one rebuild per
		// port (two by then).
		perBatch: 2,
	}
}

// hetznerLB: Hetzner's load balancers; one its CCM made is found by the
// name annotation.
func hetznerLB(hz *harness.HetznerCloud) *lbFace {
	of := func(l hetznertest.LoadBalancer) conformance.LB {
		out := conformance.LB{ID: strconv.FormatInt(l.ID, 10), Name: l.Name, IP: l.IPv4, Targets: len(l.Targets)}
		for _, s := range l.Services {
			out.Ports = append(out.Ports, int32(s.ListenPort))
		}
		return out
	}
	return &lbFace{
		list: func() []conformance.LB { return lbsOf(hz.LoadBalancers(), of) },
		legacy: func(t *testing.T, name string, port, nodePort int32, nodes []*corev1.Node) (conformance.LB, map[string]string) {
			var servers []int64
			for _, n := range nodes {
				servers = append(servers, int64(providerNumber(t, n)))
			}
			l, err := hz.PutLoadBalancer(hetznertest.CCMLoadBalancer(name, "d7f0c5a2-0000-4000-8000-00000000e2e0",
				[]hetznertest.CCMPort{{Port: int(port), NodePort: int(nodePort)}}, servers))
			if err != nil {
				t.Fatal(err)
			}
			return of(l), map[string]string{hetzner.AnnName: name}
		},
		// Checked every second, not every 15 s: a check that failed before
		// the stand-in listened would hold traffic back that long.
		serviceAnnotations: map[string]string{hetzner.AnnHealthInterval: "1s", hetzner.AnnHealthTimeout: "1s"},
		annotations:        map[string]string{hetzner.AnnAlgorithm: "least_connections"},
		applied: func(_ *testing.T, id string) bool {
			v, _ := strconv.ParseInt(id, 10, 64)
			l, ok := hz.LoadBalancer(v)
			return ok && l.Algorithm == "least_connections"
		},
		updates: func() int { return hz.Calls("lb-create") + hz.Calls("lb-update") + hz.Calls("lb-delete") },
		// A target is added or removed with an action each.
		perBatch: 2,
	}
}

// hetznerCCMArgs run mooring-ccm's route controller on Hetzner's face,
// the Nodes' pod ranges in hetznerClusterCIDR: data in the network's
// route table, an address given to nothing.
var hetznerCCMArgs = []string{"--configure-cloud-routes=true", "--cluster-cidr=" + hetznerClusterCIDR,
	"--route-reconciliation-period=2s"}

const hetznerClusterCIDR = "10.244.0.0/16"

// hetznerRoutes gives each Node a pod range and waits for mooring-ccm's
// route controller to route it in the servers' network via the Node's
// server, and for the Node's NetworkUnavailable condition to clear; a
// route via a server of no cluster stays.
func hetznerRoutes(ctx context.Context, t *testing.T, c *testbed.Cluster, hz *harness.HetznerCloud, names []string) {
	t.Helper()
	start := time.Now()
	want := map[string]string{"10.99.0.0/24": "127.0.85.250"} // another's, to be left alone
	netw, ok := hz.Network(harness.HetznerNetwork)
	if !ok {
		t.Fatalf("no network %d", harness.HetznerNetwork)
	}
	netw.Routes = append(netw.Routes, hetznertest.Route{Destination: "10.99.0.0/24", Gateway: "127.0.85.250"})
	hz.PutNetwork(netw)
	for i, name := range names {
		cidr := fmt.Sprintf("10.244.%d.0/24", i+1)
		patch := fmt.Sprintf(`{"spec":{"podCIDR":%q,"podCIDRs":[%q]}}`, cidr, cidr)
		if _, err := c.Client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		srv, _ := hz.Server(name)
		want[cidr] = srv.PrivateNets[0].IP
	}
	harness.WaitUntil(ctx, t, "a route per Node's pod range via its server", func() (bool, error) {
		n, _ := hz.Network(harness.HetznerNetwork)
		got := map[string]string{}
		for _, r := range n.Routes {
			got[r.Destination] = r.Gateway
		}
		return maps.Equal(got, want), nil
	})
	waitNetworkAvailable(ctx, t, c, names)
	t.Logf("%d pod ranges routed in network %d via their servers in %v (route-create calls %d); another gateway's route left",
		len(names), harness.HetznerNetwork, time.Since(start).Round(time.Millisecond), hz.Calls("route-create"))
}

// waitNetworkAvailable waits until the route controller has cleared the
// NetworkUnavailable condition of each Node of names (it does once the
// Node's pod range is routed).
func waitNetworkAvailable(ctx context.Context, t *testing.T, c *testbed.Cluster, names []string) {
	t.Helper()
	harness.WaitUntil(ctx, t, "the Nodes' NetworkUnavailable to clear", func() (bool, error) {
		for _, name := range names {
			node, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			cleared := false
			for _, cond := range node.Status.Conditions {
				if cond.Type == corev1.NodeNetworkUnavailable && cond.Status == corev1.ConditionFalse {
					cleared = true
				}
			}
			if !cleared {
				return false, nil
			}
		}
		return true, nil
	})
}
