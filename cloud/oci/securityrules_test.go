package oci_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

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

func TestSecurityListsModeAll(t *testing.T) {
	b := newRuleBed(t)
	ctx := context.Background()
	rs := b.ruleSet(oci.RuleModeAll)
	if nsg, err := b.rules.Ensure(ctx, rs); err != nil || nsg != "" {
		t.Fatalf("Ensure: %q, %v", nsg, err)
	}
	lb, nodes := "127.85.1.0/24", "127.85.2.0/24"
	b.wantList(t, b.lbList, []string{"127.0.0.0/8:22", "127.85.200.0/24:80"}, []string{"other:127.0.0.0/8", nodes + ":30080", nodes + ":10256"})
	b.wantList(t, b.nodeList, []string{"127.0.0.0/8:22", lb + ":30080", lb + ":10256"}, nil)
	l, _ := b.ep.SecurityList(b.lbList)
	for _, r := range l.Ingress {
		if *r.Protocol != "6" || r.IsStateless == nil || *r.IsStateless {
			t.Errorf("rule %+v: want stateful TCP (protocol 6)", r)
		}
	}

	// Again: nothing to write.
	puts := b.ep.Calls("UpdateSecurityList")
	if _, err := b.rules.Ensure(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if n := b.ep.Calls("UpdateSecurityList") - puts; n != 0 {
		t.Errorf("an unchanged Service wrote %d lists", n)
	}

	// A port, node port and source change, the load balancer holding the
	// old ones: the old rules go, the user's stay.
	held := rs.Ports
	rs.Ports = []oci.RulePort{{Listener: 8080, NodePort: 30081, Protocol: "TCP"}}
	rs.HeldPorts, rs.HeldHealthCheckPort = held, 10256
	rs.SourceCIDRs = []string{"127.85.201.0/24", "127.85.202.0/24"}
	if _, err := b.rules.Ensure(ctx, rs); err != nil {
		t.Fatal(err)
	}
	b.wantList(t, b.lbList, []string{"127.0.0.0/8:22", "127.85.201.0/24:8080", "127.85.202.0/24:8080"},
		[]string{"other:127.0.0.0/8", nodes + ":30081", nodes + ":10256"})
	b.wantList(t, b.nodeList, []string{"127.0.0.0/8:22", lb + ":30081", lb + ":10256"}, nil)

	// Removed while another Service of policy Cluster uses the health
	// check port and another port 8080: those rules stay.
	b.services = []*v1.Service{lbService("uid-1", 8080, false, 0), lbService("uid-2", 8080, false, 0)}
	rs.HeldPorts = nil
	if err := b.rules.Remove(ctx, rs); err != nil {
		t.Fatal(err)
	}
	b.wantList(t, b.lbList, []string{"127.0.0.0/8:22", "127.85.201.0/24:8080", "127.85.202.0/24:8080"},
		[]string{"other:127.0.0.0/8", nodes + ":10256"})
	b.wantList(t, b.nodeList, []string{"127.0.0.0/8:22", lb + ":10256"}, nil)

	// The other Service gone (or of policy Local): everything of this
	// one goes; the user's rules stay.
	b.services = []*v1.Service{lbService("uid-3", 443, true, 31000)}
	if err := b.rules.Remove(ctx, rs); err != nil {
		t.Fatal(err)
	}
	b.wantList(t, b.lbList, []string{"127.0.0.0/8:22"}, []string{"other:127.0.0.0/8"})
	b.wantList(t, b.nodeList, []string{"127.0.0.0/8:22"}, nil)
}

func TestSecurityListsSharedRulesKeptWithoutServices(t *testing.T) {
	b := newRuleBed(t)
	ctx := context.Background()
	rs := b.ruleSet(oci.RuleModeAll)
	if _, err := b.rules.Ensure(ctx, rs); err != nil {
		t.Fatal(err)
	}
	// The lister fails: the listener port's and the health check port's
	// rules may be another Service's, so they stay; the node port's go.
	b.rules.SetServices(func(context.Context) ([]*v1.Service, error) { return nil, errors.New("apiserver down") })
	if err := b.rules.Remove(ctx, rs); err != nil {
		t.Fatal(err)
	}
	b.wantList(t, b.lbList, []string{"127.0.0.0/8:22", "127.85.200.0/24:80"}, []string{"other:127.0.0.0/8", "127.85.2.0/24:10256"})
	b.wantList(t, b.nodeList, []string{"127.0.0.0/8:22", "127.85.1.0/24:10256"}, nil)
}

func TestSecurityListsModeFrontend(t *testing.T) {
	b := newRuleBed(t)
	ctx := context.Background()
	rs := b.ruleSet(oci.RuleModeFrontend)
	if _, err := b.rules.Ensure(ctx, rs); err != nil {
		t.Fatal(err)
	}
	b.wantList(t, b.lbList, []string{"127.0.0.0/8:22", "127.85.200.0/24:80"}, []string{"other:127.0.0.0/8"})
	b.wantList(t, b.nodeList, []string{"127.0.0.0/8:22"}, nil)
	// The port and the source change; the node subnets' list and the LB
	// subnets' egress stay as they are.
	rs.HeldPorts, rs.Ports = rs.Ports, []oci.RulePort{{Listener: 8443, NodePort: 30443, Protocol: "TCP"}}
	rs.SourceCIDRs = []string{"127.85.201.0/24"}
	if _, err := b.rules.Ensure(ctx, rs); err != nil {
		t.Fatal(err)
	}
	b.wantList(t, b.lbList, []string{"127.0.0.0/8:22", "127.85.201.0/24:8443"}, []string{"other:127.0.0.0/8"})
	b.wantList(t, b.nodeList, []string{"127.0.0.0/8:22"}, nil)
	rs.HeldPorts = nil
	if err := b.rules.Remove(ctx, rs); err != nil {
		t.Fatal(err)
	}
	b.wantList(t, b.lbList, []string{"127.0.0.0/8:22"}, []string{"other:127.0.0.0/8"})
}

func TestSecurityListsOneListForBoth(t *testing.T) {
	// The LB and the nodes in subnets of one security list, the oldest of
	// two: every rule goes into it, written once.
	b := newRuleBed(t)
	ctx := context.Background()
	old, _ := b.ep.SecurityList(b.lbList)
	newer := b.ep.PutSecurityList(ocitest.SecurityList{DisplayName: "newer", Created: old.Created.Add(time.Second)}).ID
	sub := b.ep.PutSubnet(ocitest.Subnet{CIDR: "127.85.3.0/24", VcnID: b.lbSubnet.VcnID, SecurityLists: []string{newer, b.lbList}})
	rs := b.ruleSet(oci.RuleModeAll)
	rs.LBSubnets, rs.NodeSubnets = []string{b.lbSubnet.ID}, []string{sub.ID}
	puts := b.ep.Calls("UpdateSecurityList")
	if _, err := b.rules.Ensure(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if n := b.ep.Calls("UpdateSecurityList") - puts; n != 1 {
		t.Errorf("%d writes, want 1", n)
	}
	b.wantList(t, b.lbList, []string{"127.0.0.0/8:22", "127.85.200.0/24:80", "127.85.1.0/24:30080", "127.85.1.0/24:10256"},
		[]string{"other:127.0.0.0/8", "127.85.3.0/24:30080", "127.85.3.0/24:10256"})
	b.wantList(t, newer, nil, nil)
}

func TestSecurityListNoEtagMatchRetried(t *testing.T) {
	b := newRuleBed(t)
	ctx := context.Background()
	// Another writer adds a rule between mooring's read and write, once:
	// the write is refused (412), done again on the list as it is, and
	// the other writer's rule stays.
	once := true
	b.ep.BeforeSecurityListUpdate(func(id string) {
		if id == b.lbList && once {
			once = false
			_ = b.ep.EditSecurityList(id, func(l *ocitest.SecurityList) { l.Ingress = append(l.Ingress, tcpIn("127.0.0.0/8", 443)) })
		}
	})
	rs := b.ruleSet(oci.RuleModeFrontend)
	puts := b.ep.Calls("UpdateSecurityList")
	if _, err := b.rules.Ensure(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if n := b.ep.Calls("UpdateSecurityList") - puts; n != 2 {
		t.Errorf("%d writes, want 2 (one refused)", n)
	}
	b.wantList(t, b.lbList, []string{"127.0.0.0/8:22", "127.0.0.0/8:443", "127.85.200.0/24:80"}, []string{"other:127.0.0.0/8"})

	// A writer that always wins: an error after a few attempts, the list
	// as that writer left it.
	b.ep.BeforeSecurityListUpdate(func(id string) {
		_ = b.ep.EditSecurityList(id, func(l *ocitest.SecurityList) { l.DisplayName += "+" })
	})
	rs.SourceCIDRs = []string{"127.85.203.0/24"}
	_, err := b.rules.Ensure(ctx, rs)
	if se, ok := common.IsServiceError(errors.Unwrap(err)); !ok || se.GetHTTPStatusCode() != http.StatusPreconditionFailed || se.GetCode() != "NoEtagMatch" {
		t.Fatalf("Ensure against a writer that always wins: %v, want 412 NoEtagMatch", err)
	}
	b.wantList(t, b.lbList, []string{"127.0.0.0/8:22", "127.0.0.0/8:443", "127.85.200.0/24:80"}, []string{"other:127.0.0.0/8"})
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
