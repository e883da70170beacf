package azure_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/mooring-dev/mooring/cloud/azure"
	"github.com/mooring-dev/mooring/cloud/azure/agentid"
	"github.com/mooring-dev/mooring/cloud/azure/azuretest"
	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
)

// The bed's load balancer half (conformance.LBBed), through azuretest's
// own record: each frontend of the cluster's load balancers is one
// load balancer of the suite.

// Names of the bed's network.
const (
	bedSecurityGroup = "mooring-nodes-nsg"
	bedVnet          = "mooring-vnet"
	bedSubnet        = "nodes"
)

// lbSetup gives the provider's config the bed's security group (made
// empty, as an installer makes it) and subnet.
func (b *armBed) lbSetup(cfg *azure.Config) {
	b.c.PutSecurityGroup("", bedSecurityGroup)
	cfg.SecurityGroupName, cfg.VnetName, cfg.SubnetName = bedSecurityGroup, bedVnet, bedSubnet
}

// lbCalls counts the bed's load balancer calls: reads of the load
// balancers; every write of a load balancer, public IP, security group or
// NIC's pools is an update (a load balancer is made and changed by one
// PUT: creates are -1); deletions of load balancers and public IPs.
func (b *armBed) lbCalls(c conformance.Call) (int, bool) {
	switch c {
	case conformance.LBList, conformance.LBGet:
		return b.c.Calls("GetLoadBalancer"), true
	case conformance.LBCreate:
		return -1, true
	case conformance.LBUpdate:
		return b.c.Calls("PutLoadBalancer") + b.c.Calls("PutPublicIP") + b.c.Calls("PutSecurityGroup") + b.c.Calls("PutNIC"), true
	case conformance.LBDelete:
		return b.c.Calls("DeleteLoadBalancer") + b.c.Calls("DeletePublicIP"), true
	}
	return 0, false
}

func jsonMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func jsonList(v any) []map[string]any {
	var out []map[string]any
	l, _ := v.([]any)
	for _, it := range l {
		if m, ok := it.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

func jsonStr(v any) string { s, _ := v.(string); return s }

func LBsOf(c *azuretest.Cloud) []conformance.LB {
	addrs := map[string]string{}
	for _, p := range c.PublicIPs() {
		addrs[strings.ToLower(jsonStr(p["id"]))] = jsonStr(jsonMap(p["properties"])["ipAddress"])
	}
	var out []conformance.LB
	for _, l := range c.LoadBalancers() {
		props := jsonMap(l["properties"])
		members := map[string]int{}
		for _, p := range jsonList(props["backendAddressPools"]) {
			members[strings.ToLower(jsonStr(p["id"]))] = len(jsonList(jsonMap(p["properties"])["backendIPConfigurations"]))
		}
		for _, f := range jsonList(props["frontendIPConfigurations"]) {
			fp := jsonMap(f["properties"])
			lb := conformance.LB{ID: jsonStr(f["id"]), Name: jsonStr(f["name"]), IP: jsonStr(fp["privateIPAddress"])}
			if pip := jsonStr(jsonMap(fp["publicIPAddress"])["id"]); pip != "" {
				lb.IP = addrs[strings.ToLower(pip)]
			}
			for _, r := range jsonList(props["loadBalancingRules"]) {
				rp := jsonMap(r["properties"])
				if !strings.EqualFold(jsonStr(jsonMap(rp["frontendIPConfiguration"])["id"]), lb.ID) {
					continue
				}
				lb.Ports = append(lb.Ports, int32(rp["frontendPort"].(float64)))
				lb.Targets = members[strings.ToLower(jsonStr(jsonMap(rp["backendAddressPool"])["id"]))]
			}
			slices.Sort(lb.Ports)
			out = append(out, lb)
		}
	}
	return out
}

func (b *armBed) LBs(t testing.TB) []conformance.LB { return LBsOf(b.c) }

// find is the bed's LB of frontend id.
func (b *armBed) find(t testing.TB, id string) conformance.LB {
	t.Helper()
	for _, l := range b.LBs(t) {
		if strings.EqualFold(l.ID, id) {
			return l
		}
	}
	t.Fatalf("no frontend %s", id)
	return conformance.LB{}
}

// MadeByCloudCCM is what cloud-provider-azure makes for svc by default:
// the public IP kubernetes-<frontend> tagged with the Service and the
// cluster's name, on load balancer kubernetes a frontend of its name, a
// probe and a rule per port named <frontend>-<PROTOCOL>-<port> (floating
// IP on: the rule's backend port is the Service's port), the pool
// kubernetes of the nodes' NICs.
func (b *armBed) MadeByCloudCCM(t testing.TB, svc *v1.Service, nodes []*v1.Node) conformance.LB {
	t.Helper()
	fe := "a" + strings.ReplaceAll(string(svc.UID), "-", "")
	fe = fe[:min(len(fe), 32)]
	pipID, _, err := b.c.PutPublicIP("", "kubernetes-"+fe, map[string]string{"k8s-azure-service": svc.Namespace + "/" + svc.Name, "k8s-azure-cluster-name": "kubernetes"})
	if err != nil {
		t.Fatal(err)
	}
	lbID := b.c.ResourceID("", azuretest.TypeLoadBalancer, "kubernetes")
	var probes, rules []any
	for _, p := range svc.Spec.Ports {
		name := fmt.Sprintf("%s-%s-%d", fe, p.Protocol, p.Port)
		probes = append(probes, map[string]any{"name": name, "properties": map[string]any{"protocol": "Tcp", "port": p.NodePort, "intervalInSeconds": 5, "numberOfProbes": 2}})
		rules = append(rules, map[string]any{"name": name, "properties": map[string]any{
			"frontendIPConfiguration": map[string]any{"id": lbID + "/frontendIPConfigurations/" + fe},
			"backendAddressPool":      map[string]any{"id": lbID + "/backendAddressPools/kubernetes"},
			"probe":                   map[string]any{"id": lbID + "/probes/" + name},
			"protocol":                "Tcp", "frontendPort": p.Port, "backendPort": p.Port, "enableFloatingIP": true, "idleTimeoutInMinutes": 4}})
	}
	err = b.c.PutLoadBalancer("", "kubernetes", map[string]any{"sku": map[string]any{"name": "Standard"}, "location": b.c.Location(),
		"properties": map[string]any{
			"frontendIPConfigurations": []any{map[string]any{"name": fe, "properties": map[string]any{"publicIPAddress": map[string]any{"id": pipID}}}},
			"backendAddressPools":      []any{map[string]any{"name": "kubernetes"}},
			"probes":                   probes, "loadBalancingRules": rules}})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		r, err := agentid.ParseProviderID(n.Spec.ProviderID)
		if err != nil {
			t.Fatal(err)
		}
		vm, ok := b.c.VMByName(r.Name)
		if !ok {
			t.Fatalf("no VM %s", r.Name)
		}
		b.c.SetNICPools(vm.VMID, lbID+"/backendAddressPools/kubernetes")
	}
	return b.find(t, lbID+"/frontendIPConfigurations/"+fe)
}

// MadeForOtherCluster: a frontend of svc's name on the load balancer,
// tagged for a Service of cluster c2.
func (b *armBed) MadeForOtherCluster(t testing.TB, svc *v1.Service) conformance.LB {
	t.Helper()
	fe := "a" + strings.ReplaceAll(string(svc.UID), "-", "")
	fe = fe[:min(len(fe), 32)]
	pipID, _, err := b.c.PutPublicIP("", "kubernetes-"+fe, nil)
	if err != nil {
		t.Fatal(err)
	}
	lbID := b.c.ResourceID("", azuretest.TypeLoadBalancer, "kubernetes")
	err = b.c.PutLoadBalancer("", "kubernetes", map[string]any{"sku": map[string]any{"name": "Standard"}, "location": b.c.Location(),
		"tags": map[string]any{"mooring-owner_" + fe: "cluster=c2,uid=0000-other,service=default/" + svc.Name},
		"properties": map[string]any{
			"frontendIPConfigurations": []any{map[string]any{"name": fe, "properties": map[string]any{"publicIPAddress": map[string]any{"id": pipID}}}},
			"backendAddressPools":      []any{map[string]any{"name": "kubernetes"}},
			"loadBalancingRules": []any{map[string]any{"name": fe + "-TCP-9999", "properties": map[string]any{
				"frontendIPConfiguration": map[string]any{"id": lbID + "/frontendIPConfigurations/" + fe},
				"backendAddressPool":      map[string]any{"id": lbID + "/backendAddressPools/kubernetes"},
				"protocol":                "Tcp", "frontendPort": 9999, "backendPort": 9999}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return b.find(t, lbID+"/frontendIPConfigurations/"+fe)
}

// Tamper moves the backend port of the frontend's first rule.
func (b *armBed) Tamper(t testing.TB, lb conformance.LB) {
	t.Helper()
	lbID := lb.ID[:strings.Index(strings.ToLower(lb.ID), "/frontendipconfigurations/")]
	if !b.c.ARMMutate(lbID, func(body map[string]any) {
		for _, r := range jsonList(jsonMap(body["properties"])["loadBalancingRules"]) {
			rp := jsonMap(r["properties"])
			if strings.EqualFold(jsonStr(jsonMap(rp["frontendIPConfiguration"])["id"]), lb.ID) {
				rp["backendPort"] = rp["backendPort"].(float64) + 1
				return
			}
		}
	}) {
		t.Fatalf("no load balancer %s", lbID)
	}
}

// Settle ends ARM's running operations.
func (b *armBed) Settle(testing.TB) { b.c.Settle() }

// TargetAddress: pool members are the NICs' private addresses.
func (b *armBed) TargetAddress(m conformance.Made) string { return m.InternalIP }
