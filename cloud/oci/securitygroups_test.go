package oci_test

// Tests of mode NSG: the frontend NSG and the backend NSGs' rules.

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/oracle/oci-go-sdk/v65/common"
	"github.com/oracle/oci-go-sdk/v65/core"

	"github.com/mooring-dev/mooring/cloud/oci"
	"github.com/mooring-dev/mooring/cloud/oci/ocitest"
)

// nsgKeys are an NSG's rules as direction:peer:port:description.
func nsgKeys(n ocitest.NSG) []string {
	var out []string
	for _, r := range n.Rules {
		peer := r.Source
		if r.Direction == core.SecurityRuleDirectionEgress {
			peer = r.Destination
		}
		out = append(out, fmt.Sprintf("%s:%s:%d:%s", r.Direction, *peer, *r.TcpOptions.DestinationPortRange.Min, *r.Description))
	}
	slices.Sort(out)
	return out
}

func (b *ruleBed) wantNSG(t *testing.T, id string, want ...string) {
	t.Helper()
	n, ok := b.ep.NSG(id)
	if !ok {
		t.Fatalf("no NSG %s", id)
	}
	slices.Sort(want)
	if got := nsgKeys(n); !slices.Equal(got, want) {
		t.Errorf("NSG %s holds\n  %v\nwant\n  %v", id, got, want)
	}
}

func TestNSGMode(t *testing.T) {
	b := newRuleBed(t)
	ctx := context.Background()
	rs := b.ruleSet(oci.RuleModeNSG)
	rs.BackendNSGs = []string{b.backend}
	lists := func() [][]string {
		a, bb := b.list(t, b.lbList)
		c, d := b.list(t, b.nodeList)
		return [][]string{a, bb, c, d}
	}
	before := lists()
	front, err := b.rules.Ensure(ctx, rs)
	if err != nil {
		t.Fatal(err)
	}
	n, ok := b.ep.NSG(front)
	if !ok {
		t.Fatalf("no frontend NSG %q", front)
	}
	if n.DisplayName != "default/web/uid-1/nsg" || n.VcnID != b.lbSubnet.VcnID || n.Compartment != b.ep.Compartment() ||
		len(n.FreeformTags) != 2 || n.FreeformTags["CreatedBy"] != "CCM" || n.FreeformTags["ServiceUid"] != "uid-1" {
		t.Errorf("frontend NSG %+v: want OCI's CCM's name and tags", n)
	}
	const desc = "service-uid-uid-1"
	b.wantNSG(t, front, "INGRESS:127.85.200.0/24:80:"+desc, "EGRESS:"+b.backend+":30080:"+desc, "EGRESS:"+b.backend+":10256:"+desc)
	b.wantNSG(t, b.backend, "INGRESS:127.0.0.0/8:22:ssh", "INGRESS:127.0.0.0/8:30999:service-uid-other",
		"INGRESS:"+front+":30080:"+desc, "INGRESS:"+front+":10256:"+desc)
	if bn, _ := b.ep.NSG(b.backend); bn.FreeformTags["ManagedBy"] != "CCM" || bn.FreeformTags["team"] != "a" {
		t.Errorf("backend NSG's tags %v: want ManagedBy=CCM beside the others", bn.FreeformTags)
	}
	if !slices.EqualFunc(lists(), before, slices.Equal) {
		t.Error("mode NSG changed security lists")
	}

	// Again, not knowing the frontend NSG (as after a create that failed):
	// the same one is found, nothing is added.
	adds := b.ep.Calls("AddNetworkSecurityGroupSecurityRules")
	again, err := b.rules.Ensure(ctx, rs)
	if err != nil || again != front {
		t.Fatalf("Ensure again: %q, %v; want %s", again, err, front)
	}
	if n := b.ep.Calls("AddNetworkSecurityGroupSecurityRules") - adds; n != 0 || b.ep.Calls("CreateNetworkSecurityGroup") != 1 {
		t.Errorf("Ensure again: %d adds, %d creates", n, b.ep.Calls("CreateNetworkSecurityGroup"))
	}

	// Ports, sources and the health check port change.
	rs.FrontendNSG = front
	rs.Ports = []oci.RulePort{{Listener: 443, NodePort: 30443, Protocol: "TCP"}, {Listener: 80, NodePort: 30080, Protocol: "TCP"}}
	rs.SourceCIDRs = []string{"127.85.201.0/24"}
	rs.HealthCheckPort = 31111
	if _, err := b.rules.Ensure(ctx, rs); err != nil {
		t.Fatal(err)
	}
	b.wantNSG(t, front, "INGRESS:127.85.201.0/24:80:"+desc, "INGRESS:127.85.201.0/24:443:"+desc,
		"EGRESS:"+b.backend+":30080:"+desc, "EGRESS:"+b.backend+":30443:"+desc, "EGRESS:"+b.backend+":31111:"+desc)
	b.wantNSG(t, b.backend, "INGRESS:127.0.0.0/8:22:ssh", "INGRESS:127.0.0.0/8:30999:service-uid-other",
		"INGRESS:"+front+":30080:"+desc, "INGRESS:"+front+":30443:"+desc, "INGRESS:"+front+":31111:"+desc)

	// An NSG passed as the frontend that is not the Service's: refused.
	other := rs
	other.FrontendNSG = b.backend
	if _, err := b.rules.Ensure(ctx, other); err == nil {
		t.Error("Ensure with another NSG as the frontend: no error")
	}

	// Outages: an error, nothing removed.
	for _, m := range []string{"ListNetworkSecurityGroupSecurityRules", "AddNetworkSecurityGroupSecurityRules", "GetNetworkSecurityGroup"} {
		b.ep.Fail(m, 100, http.StatusInternalServerError)
		changed := rs
		changed.Ports = []oci.RulePort{{Listener: 8443, NodePort: 30444, Protocol: "TCP"}}
		if _, err := b.rules.Ensure(ctx, changed); err == nil {
			t.Errorf("Ensure with %s failing: no error", m)
		}
		b.ep.Fail(m, 0, 0)
	}
	b.wantNSG(t, b.backend, "INGRESS:127.0.0.0/8:22:ssh", "INGRESS:127.0.0.0/8:30999:service-uid-other",
		"INGRESS:"+front+":30080:"+desc, "INGRESS:"+front+":30443:"+desc, "INGRESS:"+front+":31111:"+desc)

	// Removed: its rules and its frontend NSG go; the user's and the other
	// Service's rules stay.
	b.ep.Fail("DeleteNetworkSecurityGroup", 1, http.StatusInternalServerError)
	if err := b.rules.Remove(ctx, rs); err == nil {
		t.Error("Remove with the NSG's delete failing: no error")
	}
	if err := b.rules.Remove(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.ep.NSG(front); ok {
		t.Error("the frontend NSG is still there")
	}
	b.wantNSG(t, b.backend, "INGRESS:127.0.0.0/8:22:ssh", "INGRESS:127.0.0.0/8:30999:service-uid-other")
	// Removing again finds nothing to do.
	if err := b.rules.Remove(ctx, rs); err != nil {
		t.Fatal(err)
	}
}

func TestNSGModePreserveSourceAndBatches(t *testing.T) {
	b := newRuleBed(t)
	ctx := context.Background()
	rs := b.ruleSet(oci.RuleModeNSG)
	rs.BackendNSGs = []string{b.backend}
	rs.PreserveSource = true
	for i := range 14 {
		rs.Ports = append(rs.Ports, oci.RulePort{Listener: int32(1000 + i), NodePort: int32(31000 + i), Protocol: "TCP"})
	}
	rs.SourceCIDRs = []string{"127.85.200.0/24", "127.85.201.0/24"}
	front, err := b.rules.Ensure(ctx, rs)
	if err != nil {
		t.Fatal(err)
	}
	// 15 ports: 30 frontend ingress, 16 egress (15 node ports + health);
	// backend: 16 from the frontend, 30 from the sources: in batches of
	// at most 25.
	fn, _ := b.ep.NSG(front)
	bn, _ := b.ep.NSG(b.backend)
	if len(fn.Rules) != 46 || len(bn.Rules) != 2+46 {
		t.Errorf("frontend %d rules, backend %d; want 46 and 48", len(fn.Rules), len(bn.Rules))
	}
	if n := b.ep.Calls("AddNetworkSecurityGroupSecurityRules"); n != 4 {
		t.Errorf("%d adds, want 4 (2 batches per NSG)", n)
	}
	if err := b.rules.Remove(ctx, rs); err != nil {
		t.Fatal(err)
	}
	b.wantNSG(t, b.backend, "INGRESS:127.0.0.0/8:22:ssh", "INGRESS:127.0.0.0/8:30999:service-uid-other")
}

func TestNSGModeBackendsFoundByTag(t *testing.T) {
	b := newRuleBed(t)
	ctx := context.Background()
	second := b.ep.PutNSG(ocitest.NSG{DisplayName: "workers-2", VcnID: b.lbSubnet.VcnID, Rules: []core.SecurityRule{b.userNSG}}).ID
	untagged := b.ep.PutNSG(ocitest.NSG{DisplayName: "elsewhere", VcnID: b.lbSubnet.VcnID}).ID
	rs := b.ruleSet(oci.RuleModeNSG)
	rs.BackendNSGs = []string{b.backend, second}
	front, err := b.rules.Ensure(ctx, rs)
	if err != nil {
		t.Fatal(err)
	}
	const desc = "service-uid-uid-1"
	b.wantNSG(t, second, "INGRESS:127.0.0.0/8:22:ssh", "INGRESS:"+front+":30080:"+desc, "INGRESS:"+front+":10256:"+desc)
	// A rule of the Service's description in an NSG mooring never tagged
	// (a user's copy): not the Service's to manage.
	b.ep.PutNSG(ocitest.NSG{ID: untagged, DisplayName: "elsewhere", VcnID: b.lbSubnet.VcnID, Rules: []core.SecurityRule{{
		Direction: core.SecurityRuleDirectionIngress, Protocol: common.String("6"), Source: common.String(front),
		SourceType: core.SecurityRuleSourceTypeNetworkSecurityGroup, Description: common.String(desc), TcpOptions: &core.TcpOptions{
			DestinationPortRange: &core.PortRange{Min: common.Int(30080), Max: common.Int(30080)}}}}})

	// The annotation drops the second NSG: its rules of the Service go
	// (it is tagged ManagedBy=CCM in the load balancer's VCN).
	rs.BackendNSGs = []string{b.backend}
	rs.FrontendNSG = front
	if _, err := b.rules.Ensure(ctx, rs); err != nil {
		t.Fatal(err)
	}
	b.wantNSG(t, second, "INGRESS:127.0.0.0/8:22:ssh")
	b.wantNSG(t, b.backend, "INGRESS:127.0.0.0/8:22:ssh", "INGRESS:127.0.0.0/8:30999:service-uid-other",
		"INGRESS:"+front+":30080:"+desc, "INGRESS:"+front+":10256:"+desc)

	// Removed knowing the load balancer only (no backend NSGs named, as a
	// delete of a load balancer whose Service is gone): the tagged
	// backend NSG's rules of the Service go all the same.
	held := oci.RuleSet{UID: rs.UID, Mode: oci.RuleModeNSG, Namespace: "default", Name: "web", Compartment: rs.Compartment,
		LBSubnets: rs.LBSubnets, FrontendNSG: front}
	if err := b.rules.Remove(ctx, held); err != nil {
		t.Fatal(err)
	}
	b.wantNSG(t, b.backend, "INGRESS:127.0.0.0/8:22:ssh", "INGRESS:127.0.0.0/8:30999:service-uid-other")
	if _, ok := b.ep.NSG(front); ok {
		t.Error("the frontend NSG is still there")
	}
	if n, _ := b.ep.NSG(untagged); len(n.Rules) != 1 {
		t.Errorf("an NSG never tagged lost its rules: %+v", n.Rules)
	}
}
