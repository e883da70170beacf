package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mooring-dev/mooring/cloud/azure"
	"github.com/mooring-dev/mooring/cloud/azure/azuretest"
	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// Azure's face of testCloudLB (TestSignedClouds/Azure): the cluster's
// Standard load balancer at azuretest, a frontend per Service on a public
// IP, the pool of the nodes' NICs, Allow rules in the nodes' security
// group, which the data plane honours.

// azureLBSecurityGroup is the nodes' security group of the face.
const azureLBSecurityGroup = "e2e-nodes-nsg"

// azureLBHold is an annotation mooring refuses (unknown under the
// azure- prefix): the legacy Service carries it until its load balancer is
// made for its UID.
const azureLBHold = azure.AnnotationPrefix + "held-for-the-test"

// azureLBOptions adds the face's flags and cloud config lines to opts.
func azureLBOptions(opts joinOptions) joinOptions {
	opts.CCMArgs = append(opts.CCMArgs, "--load-balancer-node-batch="+lbNodeBatch.String())
	opts.CCMConfig += "securityGroupName: " + azureLBSecurityGroup + "\n"
	return opts
}

// azureLB is the face over az, its security group made. The legacy load
// balancer of cloud-provider-azure has a frontend named by its Service's
// UID, which exists only once the Service does: its public IP is made
// first (named by azure-pip-name, as a user names one), the Service
// created held back by an annotation mooring refuses, the frontend, rule,
// probe and pool membership then made for its UID (floating IP on, as
// cloud-provider-azure writes them) and the annotation dropped; mooring
// adopts it by its name, keeping the address.
func azureLB(t *testing.T, az *harness.AzureCloud, c *testbed.Cluster) *lbFace {
	az.PutSecurityGroup("", azureLBSecurityGroup)
	list := func() []conformance.LB {
		addrs := map[string]string{}
		for _, p := range az.PublicIPs() {
			addrs[strings.ToLower(p["id"].(string))] = fmt.Sprint(p["properties"].(map[string]any)["ipAddress"])
		}
		var out []conformance.LB
		for _, l := range az.LoadBalancers() {
			props := l["properties"].(map[string]any)
			members := map[string]int{}
			for _, p := range azList(props["backendAddressPools"]) {
				members[strings.ToLower(p["id"].(string))] = len(azList(p["properties"].(map[string]any)["backendIPConfigurations"]))
			}
			for _, f := range azList(props["frontendIPConfigurations"]) {
				fp := f["properties"].(map[string]any)
				lb := conformance.LB{ID: f["id"].(string), Name: f["name"].(string)}
				if pip, ok := fp["publicIPAddress"].(map[string]any); ok {
					lb.IP = addrs[strings.ToLower(pip["id"].(string))]
				}
				for _, r := range azList(props["loadBalancingRules"]) {
					rp := r["properties"].(map[string]any)
					if strings.EqualFold(rp["frontendIPConfiguration"].(map[string]any)["id"].(string), lb.ID) {
						lb.Ports = append(lb.Ports, int32(rp["frontendPort"].(float64)))
						lb.Targets = members[strings.ToLower(rp["backendAddressPool"].(map[string]any)["id"].(string))]
					}
				}
				slices.Sort(lb.Ports)
				out = append(out, lb)
			}
		}
		return out
	}
	return &lbFace{
		list: list,
		legacy: func(t *testing.T, name string, port, nodePort int32, _ []*corev1.Node) (conformance.LB, map[string]string) {
			pipName := "legacy-pip"
			pipID, addr, err := az.PutPublicIP("", pipName, nil)
			if err != nil {
				t.Fatal(err)
			}
			go azureLegacy(t, az, c, name, pipID, port, nodePort)
			return conformance.LB{Name: name, IP: addr}, map[string]string{azure.AnnotationPIPName: pipName, azureLBHold: "true"}
		},
		annotations: map[string]string{azure.AnnotationIdleTimeout: "10"},
		applied: func(_ *testing.T, id string) bool {
			for _, l := range az.LoadBalancers() {
				n := 0
				for _, r := range azList(l["properties"].(map[string]any)["loadBalancingRules"]) {
					rp := r["properties"].(map[string]any)
					if strings.EqualFold(rp["frontendIPConfiguration"].(map[string]any)["id"].(string), id) {
						if rp["idleTimeoutInMinutes"] != 10.0 {
							return false
						}
						n++
					}
				}
				if n > 0 {
					return true
				}
			}
			return false
		},
		updates: func() int {
			n := 0
			for _, m := range []string{"PutLoadBalancer", "PutNIC", "PutSecurityGroup", "PutPublicIP", "DeleteLoadBalancer", "DeletePublicIP"} {
				n += az.Calls(m)
			}
			return n
		},
		// Azure's pool members are NIC IP configurations: a NIC write each.
		perBatch: 2,
	}
}

func azList(v any) []map[string]any {
	var out []map[string]any
	l, _ := v.([]any)
	for _, it := range l {
		if m, ok := it.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// azureLegacy waits for the Service name, makes the frontend
// cloud-provider-azure made for its UID on the cluster's load balancer
// kubernetes (the load balancer too, if mooring has not made it) and
// drops the annotation that held mooring back.
func azureLegacy(t *testing.T, az *harness.AzureCloud, c *testbed.Cluster, name, pipID string, port, nodePort int32) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var svc *corev1.Service
	for ctx.Err() == nil {
		s, err := c.Client.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			svc = s
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if svc == nil {
		t.Errorf("no Service %s to make the legacy load balancer for", name)
		return
	}
	fe := ("a" + strings.ReplaceAll(string(svc.UID), "-", ""))[:32]
	lbID := az.ResourceID("", azuretest.TypeLoadBalancer, "kubernetes")
	rule := fmt.Sprintf("%s-TCP-%d", fe, port)
	frontend := map[string]any{"id": lbID + "/frontendIPConfigurations/" + fe, "name": fe, "properties": map[string]any{"publicIPAddress": map[string]any{"id": pipID}}}
	probe := map[string]any{"id": lbID + "/probes/" + rule, "name": rule, "properties": map[string]any{"protocol": "Tcp", "port": nodePort, "intervalInSeconds": 5, "numberOfProbes": 2}}
	lbRule := map[string]any{"id": lbID + "/loadBalancingRules/" + rule, "name": rule, "properties": map[string]any{
		"frontendIPConfiguration": map[string]any{"id": lbID + "/frontendIPConfigurations/" + fe},
		"backendAddressPool":      map[string]any{"id": lbID + "/backendAddressPools/kubernetes"},
		"probe":                   map[string]any{"id": lbID + "/probes/" + rule},
		"protocol":                "Tcp", "frontendPort": port, "backendPort": port, "enableFloatingIP": true, "idleTimeoutInMinutes": 4}}
	// The cluster's load balancer as mooring left it, with the legacy
	// frontend added (out of band, as cloud-provider-azure wrote it).
	if !az.ARMMutate(lbID, func(body map[string]any) {
		props := body["properties"].(map[string]any)
		props["frontendIPConfigurations"] = append(props["frontendIPConfigurations"].([]any), frontend)
		props["probes"] = append(props["probes"].([]any), probe)
		props["loadBalancingRules"] = append(props["loadBalancingRules"].([]any), lbRule)
	}) {
		t.Errorf("no load balancer kubernetes to add the legacy frontend to")
		return
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, azureLBHold)
	if _, err := c.Client.CoreV1().Services("default").Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Error(err)
	}
}
