package oci_test

// The test bed of security rules (an ocitest endpoint with an LB and a
// node subnet, their lists and a backend NSG) and its helpers; the tests
// of what every mode shares: failing closed, bad input, RuleMode.

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/oracle/oci-go-sdk/v65/common"
	"github.com/oracle/oci-go-sdk/v65/core"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mooring-dev/mooring/cloud/oci"
	"github.com/mooring-dev/mooring/cloud/oci/ocitest"
)

// networkClient is the SDK's Virtual Network client over ep, signing with
// its API key, without retries (as NewWithClients sets it).
func networkClient(t *testing.T, ep *ocitest.Cloud) *core.VirtualNetworkClient {
	t.Helper()
	path, err := ep.WriteAPIConfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p, err := common.ConfigurationProviderFromFileWithProfile(path, "DEFAULT", "")
	if err != nil {
		t.Fatal(err)
	}
	nc, err := core.NewVirtualNetworkClientWithConfigurationProvider(p)
	if err != nil {
		t.Fatal(err)
	}
	nc.Host = ep.Endpoint()
	noRetry := common.NoRetryPolicy()
	nc.SetCustomClientConfiguration(common.CustomClientConfiguration{RetryPolicy: &noRetry})
	return &nc
}

// ruleBed is an endpoint with an LB subnet and a node subnet, each with a
// security list holding a rule of the user's, and a backend NSG with a
// rule of the user's and one of another Service's.
type ruleBed struct {
	ep                 *ocitest.Cloud
	rules              *oci.SecurityRules
	lbSubnet, nodeSub  ocitest.Subnet
	lbList, nodeList   string
	backend            string
	services           []*v1.Service
	userIn             core.IngressSecurityRule
	userOut            core.EgressSecurityRule
	userNSG, othersNSG core.SecurityRule
}

func tcpIn(src string, port int) core.IngressSecurityRule {
	return core.IngressSecurityRule{Source: common.String(src), Protocol: common.String("6"), IsStateless: common.Bool(false),
		TcpOptions: &core.TcpOptions{DestinationPortRange: &core.PortRange{Min: common.Int(port), Max: common.Int(port)}}}
}

func newRuleBed(t *testing.T) *ruleBed {
	t.Helper()
	b := &ruleBed{ep: ocitest.NewStarted(t, ocitest.Options{})}
	b.userIn = tcpIn("127.0.0.0/8", 22)
	b.userOut = core.EgressSecurityRule{Destination: common.String("127.0.0.0/8"), Protocol: common.String("all"), IsStateless: common.Bool(false)}
	b.lbList = b.ep.PutSecurityList(ocitest.SecurityList{DisplayName: "lb", Ingress: []core.IngressSecurityRule{b.userIn},
		Egress: []core.EgressSecurityRule{b.userOut}}).ID
	b.nodeList = b.ep.PutSecurityList(ocitest.SecurityList{DisplayName: "nodes", Ingress: []core.IngressSecurityRule{b.userIn}}).ID
	b.lbSubnet = b.ep.PutSubnet(ocitest.Subnet{CIDR: "127.85.1.0/24", SecurityLists: []string{b.lbList}})
	b.nodeSub = b.ep.PutSubnet(ocitest.Subnet{CIDR: "127.85.2.0/24", VcnID: b.lbSubnet.VcnID, SecurityLists: []string{b.nodeList}})
	b.userNSG = core.SecurityRule{Direction: core.SecurityRuleDirectionIngress, Protocol: common.String("6"), Source: common.String("127.0.0.0/8"),
		SourceType: core.SecurityRuleSourceTypeCidrBlock, Description: common.String("ssh"),
		TcpOptions: &core.TcpOptions{DestinationPortRange: &core.PortRange{Min: common.Int(22), Max: common.Int(22)}}}
	b.othersNSG = b.userNSG
	b.othersNSG.Description = common.String("service-uid-other")
	b.othersNSG.TcpOptions = &core.TcpOptions{DestinationPortRange: &core.PortRange{Min: common.Int(30999), Max: common.Int(30999)}}
	b.backend = b.ep.PutNSG(ocitest.NSG{DisplayName: "workers", VcnID: b.lbSubnet.VcnID, FreeformTags: map[string]string{"team": "a"},
		Rules: []core.SecurityRule{b.userNSG, b.othersNSG}}).ID
	b.rules = oci.NewSecurityRules(networkClient(t, b.ep), func(context.Context) ([]*v1.Service, error) { return b.services, nil })
	return b
}

// lbService is a LoadBalancer Service of a port and policy, as the lister
// answers it.
func lbService(uid string, port int32, local bool, healthPort int32) *v1.Service {
	s := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "svc-" + uid, UID: types.UID(uid)},
		Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, Ports: []v1.ServicePort{{Port: port, Protocol: v1.ProtocolTCP}},
			ExternalTrafficPolicy: v1.ServiceExternalTrafficPolicyCluster}}
	if local {
		s.Spec.ExternalTrafficPolicy, s.Spec.HealthCheckNodePort = v1.ServiceExternalTrafficPolicyLocal, healthPort
	}
	return s
}

func (b *ruleBed) ruleSet(mode string) oci.RuleSet {
	return oci.RuleSet{UID: "uid-1", Mode: mode, Namespace: "default", Name: "web", Compartment: b.ep.Compartment(),
		LBSubnets: []string{b.lbSubnet.ID}, NodeSubnets: []string{b.nodeSub.ID}, SourceCIDRs: []string{"127.85.200.0/24"},
		Ports: []oci.RulePort{{Listener: 80, NodePort: 30080, Protocol: "TCP"}}, HealthCheckPort: 10256}
}

// keys are a list's TCP rules as peer:port, and "other" for any other
// rule.
func inKeys(rules []core.IngressSecurityRule) []string {
	var out []string
	for _, r := range rules {
		if r.TcpOptions == nil || r.TcpOptions.DestinationPortRange == nil {
			out = append(out, "other:"+*r.Source)
			continue
		}
		out = append(out, fmt.Sprintf("%s:%d", *r.Source, *r.TcpOptions.DestinationPortRange.Min))
	}
	slices.Sort(out)
	return out
}

func outKeys(rules []core.EgressSecurityRule) []string {
	var out []string
	for _, r := range rules {
		if r.TcpOptions == nil || r.TcpOptions.DestinationPortRange == nil {
			out = append(out, "other:"+*r.Destination)
			continue
		}
		out = append(out, fmt.Sprintf("%s:%d", *r.Destination, *r.TcpOptions.DestinationPortRange.Min))
	}
	slices.Sort(out)
	return out
}

func (b *ruleBed) list(t *testing.T, id string) (in, out []string) {
	t.Helper()
	l, ok := b.ep.SecurityList(id)
	if !ok {
		t.Fatalf("no security list %s", id)
	}
	return inKeys(l.Ingress), outKeys(l.Egress)
}

func (b *ruleBed) wantList(t *testing.T, id string, in, out []string) {
	t.Helper()
	slices.Sort(in)
	slices.Sort(out)
	gotIn, gotOut := b.list(t, id)
	if !slices.Equal(gotIn, in) || !slices.Equal(gotOut, out) {
		t.Errorf("list %s holds\n  ingress %v\n  egress  %v\nwant\n  ingress %v\n  egress  %v", id, gotIn, gotOut, in, out)
	}
}

func TestSecurityRulesFailClosed(t *testing.T) {
	b := newRuleBed(t)
	ctx := context.Background()
	rs := b.ruleSet(oci.RuleModeAll)
	if _, err := b.rules.Ensure(ctx, rs); err != nil {
		t.Fatal(err)
	}
	lbIn, lbOut := b.list(t, b.lbList)
	nodeIn, nodeOut := b.list(t, b.nodeList)
	// An outage of each call in turn: an error, and no rule lost.
	for _, m := range []string{"GetSubnet", "GetSecurityList", "UpdateSecurityList"} {
		for _, status := range []int{http.StatusInternalServerError, http.StatusTooManyRequests} {
			b.ep.Fail(m, 100, status)
			changed := rs
			changed.Ports = []oci.RulePort{{Listener: 81, NodePort: 30082, Protocol: "TCP"}}
			changed.HeldPorts = rs.Ports
			if _, err := b.rules.Ensure(ctx, changed); err == nil {
				t.Errorf("Ensure with %s failing %d: no error", m, status)
			}
			if err := b.rules.Remove(ctx, rs); err == nil {
				t.Errorf("Remove with %s failing %d: no error", m, status)
			}
			b.ep.Fail(m, 0, 0)
			b.wantList(t, b.lbList, lbIn, lbOut)
			b.wantList(t, b.nodeList, nodeIn, nodeOut)
		}
	}
	// A node subnet that is not there: an error before anything is
	// written (the LB's egress to it would otherwise be dropped).
	bad := rs
	bad.NodeSubnets = []string{b.nodeSub.ID, "ocid1.subnet.oc1.iad.gone"}
	puts := b.ep.Calls("UpdateSecurityList")
	if _, err := b.rules.Ensure(ctx, bad); err == nil || !strings.Contains(err.Error(), "ocid1.subnet.oc1.iad.gone") {
		t.Errorf("Ensure with a missing node subnet: %v", err)
	}
	if n := b.ep.Calls("UpdateSecurityList") - puts; n != 0 {
		t.Errorf("%d writes after a read failed", n)
	}
}

func TestSecurityRulesRefuseBadInput(t *testing.T) {
	b := newRuleBed(t)
	ctx := context.Background()
	for name, f := range map[string]func(*oci.RuleSet){
		"udp":        func(rs *oci.RuleSet) { rs.Ports[0].Protocol = "UDP" },
		"mode":       func(rs *oci.RuleSet) { rs.Mode = "Some" },
		"uid":        func(rs *oci.RuleSet) { rs.UID = "" },
		"source":     func(rs *oci.RuleSet) { rs.SourceCIDRs = []string{"127.85.0.0/33"} },
		"no subnets": func(rs *oci.RuleSet) { rs.NodeSubnets = nil },
	} {
		rs := b.ruleSet(oci.RuleModeAll)
		rs.Ports = slices.Clone(rs.Ports)
		f(&rs)
		if _, err := b.rules.Ensure(ctx, rs); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if n := b.ep.Calls("GetSubnet") + b.ep.Calls("UpdateSecurityList"); n != 0 {
		t.Errorf("%d calls for bad input", n)
	}
	// Mode None: UDP is fine, and nothing is read or written.
	rs := b.ruleSet(oci.RuleModeNone)
	rs.Ports[0].Protocol = "UDP"
	if _, err := b.rules.Ensure(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if err := b.rules.Remove(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if n := b.ep.Calls("GetSubnet"); n != 0 {
		t.Errorf("mode None made %d calls", n)
	}
}

func TestRuleMode(t *testing.T) {
	for _, c := range []struct {
		ann     map[string]string
		lbType  string
		want    string
		wantErr bool
	}{
		{nil, "lb", oci.RuleModeAll, false},
		{nil, "nlb", oci.RuleModeNone, false},
		{map[string]string{oci.AnnotationRuleMode: "sl-all"}, "nlb", oci.RuleModeAll, false},
		{map[string]string{oci.AnnotationRuleMode: "SL-Frontend"}, "lb", oci.RuleModeFrontend, false},
		{map[string]string{oci.AnnotationRuleMode: "nsg"}, "lb", oci.RuleModeNSG, false},
		{map[string]string{oci.AnnotationRuleMode: "None"}, "lb", oci.RuleModeNone, false},
		{map[string]string{oci.AnnotationRuleMode: "none"}, "lb", "", true},
		{map[string]string{oci.AnnotationRuleMode: "All"}, "lb", "", true},
		{map[string]string{oci.AnnotationRuleMode: "NSG", oci.AnnotationLBListMode: "None"}, "lb", oci.RuleModeNSG, false},
		{map[string]string{oci.AnnotationLBListMode: "Frontend"}, "lb", oci.RuleModeFrontend, false},
		{map[string]string{oci.AnnotationLBListMode: "None"}, "lb", oci.RuleModeNone, false},
		{map[string]string{oci.AnnotationLBListMode: "all"}, "lb", "", true},
		{map[string]string{oci.AnnotationLBListMode: "NSG"}, "lb", "", true},
		{map[string]string{oci.AnnotationNLBListMode: "All"}, "nlb", oci.RuleModeAll, false},
		{map[string]string{oci.AnnotationNLBListMode: "Bogus"}, "nlb", "", true},
		// The other type's annotation is not read.
		{map[string]string{oci.AnnotationNLBListMode: "All"}, "lb", oci.RuleModeAll, false},
		{map[string]string{oci.AnnotationLBListMode: "All"}, "nlb", oci.RuleModeNone, false},
	} {
		got, err := oci.RuleModeOf(c.ann, c.lbType)
		if got != c.want || (err != nil) != c.wantErr {
			t.Errorf("RuleModeOf(%v, %s) = %q, %v; want %q (error %v)", c.ann, c.lbType, got, err, c.want, c.wantErr)
		}
	}
	if m, err := oci.RuleMode("", "NLB"); m != oci.RuleModeNone || err != nil {
		t.Errorf("RuleMode(\"\", NLB) = %q, %v", m, err)
	}
	if _, err := oci.RuleMode("Everything", "lb"); err == nil {
		t.Error("RuleMode of an unknown value: no error")
	}
	ids, err := oci.BackendNSGsOf(map[string]string{oci.AnnotationBackendNSGs: "ocid1.networksecuritygroup.oc1.iad.a, ocid1.networksecuritygroup.oc1.iad.a,ocid1.networksecuritygroup.oc1.iad.b"})
	if err != nil || len(ids) != 2 {
		t.Errorf("BackendNSGsOf: %v, %v", ids, err)
	}
	for _, bad := range []string{"ocid1.networksecuritygroup.oc1.iad.a,,", "sg-123"} {
		if _, err := oci.BackendNSGsOf(map[string]string{oci.AnnotationBackendNSGs: bad}); err == nil {
			t.Errorf("BackendNSGsOf(%q): no error", bad)
		}
	}
	if got := oci.NSGDisplayName("ns", strings.Repeat("n", 300), "u"); len(got) != 255 {
		t.Errorf("NSGDisplayName: %d characters, want 255", len(got))
	}
}
