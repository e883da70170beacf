package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	compute "google.golang.org/api/compute/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/cloud/gce/gcetest"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// gceLBUpstreamLines are added to the upstream block of mooring-ccm's
// config (gceUpstreamConfig): the upstream provider's operations read every
// 50 ms (gcetest ends them at once; the upstream's own second a read would
// make a load balancer take ten).
const gceLBUpstreamLines = "  operationPollInterval: 50ms\n"

// gceLB is GCE's face of testCloudLB: the upstream provider's external
// load balancers, each a target pool of the nodes' instances and the
// forwarding rule to it (both named for the Service; the rule is written
// anew for a change of ports, its address kept). The data plane
// delivers a rule's port to the Service's node port there (kube-proxy's
// part on GCE, whose load balancers pass packets through with their own
// address and port), the Service found by the name the upstream writes in
// the rule's description. No load balancer of the GCE CCM is adopted here:
// the upstream is that CCM's code, finding a Service's by its UID.
func gceLB(t *testing.T, gce *harness.GCECloud, c *testbed.Cluster) *lbFace {
	gce.SetKubeProxy(func(rule *compute.ForwardingRule) map[int]int {
		var d map[string]string
		if json.Unmarshal([]byte(rule.Description), &d) != nil {
			return nil
		}
		ns, name, ok := strings.Cut(d["kubernetes.io/service-name"], "/")
		if !ok {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		svc, err := c.Client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Logf("the data plane's kube-proxy: Service %s/%s: %v", ns, name, err)
			return nil
		}
		out := map[int]int{}
		for _, p := range svc.Spec.Ports {
			if string(p.Protocol) == rule.IPProtocol {
				out[int(p.Port)] = int(p.NodePort)
			}
		}
		return out
	})
	region := strings.TrimSuffix(gcetest.DefaultZone, "-a")
	// A load balancer is a target pool and the forwarding rule to it: the
	// pool stays while the upstream deletes the rule and makes it anew for
	// a change of ports (the rule's address stays too).
	of := func(tp compute.TargetPool, rules []compute.ForwardingRule) conformance.LB {
		out := conformance.LB{ID: tp.Name, Name: tp.Name, Targets: len(tp.Instances)}
		for _, fr := range rules {
			if fr.Target != tp.SelfLink {
				continue
			}
			out.IP = fr.IPAddress
			lo, hi, _ := strings.Cut(fr.PortRange, "-")
			a, _ := strconv.Atoi(lo)
			b, err := strconv.Atoi(hi)
			if err != nil {
				b = a
			}
			for p := a; p > 0 && p <= b; p++ {
				out.Ports = append(out.Ports, int32(p))
			}
		}
		return out
	}
	tier := "cloud.google.com/network-tier"
	return &lbFace{
		list: func() []conformance.LB {
			rules := gce.ForwardingRules(gcetest.DefaultProject, region)
			var out []conformance.LB
			for _, tp := range gce.TargetPools(gcetest.DefaultProject, region) {
				out = append(out, of(tp, rules))
			}
			return out
		},
		// The tier the rule already has (Premium, GCE's default): a change
		// of tier makes the upstream delete the rule and its address.
		annotations: map[string]string{tier: "Premium"},
		applied: func(_ *testing.T, id string) bool {
			rules := gce.ForwardingRules(gcetest.DefaultProject, region)
			i := slices.IndexFunc(rules, func(fr compute.ForwardingRule) bool { return fr.Name == id })
			return i >= 0 && rules[i].NetworkTier == "PREMIUM"
		},
		// A node leaving or coming is one removeInstance or addInstance of
		// the target pool per sync; the stock service controller (the
		// upstream's load balancers are no cloud.LoadBalancerInventory)
		// may sync a batch of two label changes twice.
		updates:  func() int { return gce.Calls("targetPools.addInstance") + gce.Calls("targetPools.removeInstance") },
		perBatch: 2,
	}
}
