package oci_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oracle/oci-go-sdk/v65/common"
	"github.com/oracle/oci-go-sdk/v65/core"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/oci"
	"github.com/mooring-dev/mooring/cloud/oci/agentid"
	"github.com/mooring-dev/mooring/cloud/oci/ocitest"
)

// The security rules as the provider's load balancers drive them: a
// Service through cloudprovider.LoadBalancer, the endpoint's subnets,
// lists and NSGs checked after each step.

type rulesRig struct {
	ep         *ocitest.Cloud
	lbs        cloudprovider.LoadBalancer
	kube       *fake.Clientset
	nodes      []*v1.Node
	lbList     string
	nodeList   string
	backendNSG string
}

func newRulesRig(t *testing.T, opts ocitest.Options) *rulesRig {
	t.Helper()
	ep, c := setup(t, opts, lbNetwork)
	putLBNetwork(ep)
	r := &rulesRig{ep: ep, kube: fake.NewClientset()}
	c.SetKubeClient(r.kube)
	r.lbs, _ = c.LoadBalancer()
	r.lbList, r.nodeList = subnetList(t, ep, lbSubnet), subnetList(t, ep, nodeSubnet)
	// A backend NSG with a rule of the user's.
	r.backendNSG = ep.PutNSG(ocitest.NSG{DisplayName: "workers", Rules: []core.SecurityRule{{Direction: core.SecurityRuleDirectionIngress,
		Protocol: common.String("6"), Source: common.String("127.0.0.0/8"), SourceType: core.SecurityRuleSourceTypeCidrBlock,
		Description: common.String("ssh"), TcpOptions: &core.TcpOptions{DestinationPortRange: &core.PortRange{Min: common.Int(22), Max: common.Int(22)}}}}}).ID
	// The endpoint refuses to delete an NSG a load balancer holds.
	ep.NSGInUse(func(id string) bool {
		for _, b := range ep.Balancers() {
			if slices.Contains(b.NSGs, id) {
				return true
			}
		}
		return false
	})
	for i := range 2 {
		in := ep.Put(ocitest.Instance{DisplayName: fmt.Sprintf("srn-%d", i), PrivateIP: fmt.Sprintf("127.0.91.%d", 70+i), FreeformTags: tagged(cluster)})
		r.nodes = append(r.nodes, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: in.DisplayName}, Spec: v1.NodeSpec{ProviderID: agentid.ProviderID(in.ID)},
			Status: v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: in.PrivateIP}}}})
	}
	return r
}

// subnetList is the one security list of a subnet the bed made.
func subnetList(t *testing.T, ep *ocitest.Cloud, subnet string) string {
	t.Helper()
	nc := networkClient(t, ep)
	s, err := nc.GetSubnet(context.Background(), core.GetSubnetRequest{SubnetId: common.String(subnet)})
	if err != nil || len(s.SecurityListIds) != 1 {
		t.Fatalf("subnet %s: %v, %v", subnet, s.SecurityListIds, err)
	}
	return s.SecurityListIds[0]
}

func (r *rulesRig) service(name string, ann map[string]string, port, nodePort int32) *v1.Service {
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID("uid-" + name), Annotations: ann},
		Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: v1.ServiceExternalTrafficPolicyCluster,
			Ports: []v1.ServicePort{{Name: "http", Port: port, Protocol: v1.ProtocolTCP, NodePort: nodePort}}}}
	return svc
}

// put stores svc where the provider's lister sees it.
func (r *rulesRig) put(t *testing.T, svc *v1.Service) {
	t.Helper()
	ctx := context.Background()
	if _, err := r.kube.CoreV1().Services(svc.Namespace).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		if _, err := r.kube.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func (r *rulesRig) ensure(t *testing.T, svc *v1.Service) {
	t.Helper()
	for range 10 {
		_, err := r.lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, r.nodes)
		if cloud.IsPending(err) {
			r.ep.Settle()
			continue
		}
		if err != nil {
			t.Fatalf("EnsureLoadBalancer: %v", err)
		}
		return
	}
	t.Fatal("still pending")
}

func (r *rulesRig) delete(t *testing.T, svc *v1.Service) {
	t.Helper()
	for range 10 {
		err := r.lbs.EnsureLoadBalancerDeleted(context.Background(), "kubernetes", svc)
		if cloud.IsPending(err) {
			r.ep.Settle()
			continue
		}
		if err != nil {
			t.Fatalf("EnsureLoadBalancerDeleted: %v", err)
		}
		return
	}
	t.Fatal("still pending")
}

func (r *rulesRig) wantList(t *testing.T, id string, in, out []string) {
	t.Helper()
	l, ok := r.ep.SecurityList(id)
	if !ok {
		t.Fatalf("no list %s", id)
	}
	slices.Sort(in)
	slices.Sort(out)
	if got, gotOut := inKeys(l.Ingress), outKeys(l.Egress); !slices.Equal(got, in) || !slices.Equal(gotOut, out) {
		t.Errorf("list %s holds\n  ingress %v\n  egress  %v\nwant\n  ingress %v\n  egress  %v", id, got, gotOut, in, out)
	}
}

// A Service in mode NSG, end to end: its frontend NSG made, named and
// tagged as OCI's CCM does and attached to its load balancer, the rules
// in it and the backend NSG, changed with its port, gone with it (the
// frontend NSG after the load balancer); the security lists untouched.
func TestLoadBalancerNSGModeJoined(t *testing.T) {
	r := newRulesRig(t, ocitest.Options{})
	svc := r.service("web", map[string]string{oci.AnnotationRuleMode: "NSG", oci.AnnotationBackendNSGs: r.backendNSG}, 80, 30080)
	r.put(t, svc)
	r.ensure(t, svc)
	bals := r.ep.Balancers()
	if len(bals) != 1 {
		t.Fatalf("%d load balancers", len(bals))
	}
	var front string
	for id, n := range r.ep.NSGs() {
		if n.DisplayName == "shop/web/uid-web/nsg" {
			front = id
			if n.FreeformTags["CreatedBy"] != "CCM" || n.FreeformTags["ServiceUid"] != "uid-web" {
				t.Errorf("frontend NSG tags %v", n.FreeformTags)
			}
		}
	}
	if front == "" || !slices.Contains(bals[0].NSGs, front) {
		t.Fatalf("frontend NSG %q, the load balancer's NSGs %v", front, bals[0].NSGs)
	}
	const desc = "service-uid-uid-web"
	fn, _ := r.ep.NSG(front)
	if got, want := nsgKeys(fn), []string{"EGRESS:" + r.backendNSG + ":10256:" + desc, "EGRESS:" + r.backendNSG + ":30080:" + desc,
		"INGRESS:0.0.0.0/0:80:" + desc}; !slices.Equal(got, sorted(want)) {
		t.Errorf("frontend rules %v, want %v", got, want)
	}
	bn, _ := r.ep.NSG(r.backendNSG)
	if got, want := nsgKeys(bn), []string{"INGRESS:" + front + ":10256:" + desc, "INGRESS:" + front + ":30080:" + desc,
		"INGRESS:127.0.0.0/8:22:ssh"}; !slices.Equal(got, sorted(want)) {
		t.Errorf("backend rules %v, want %v", got, want)
	}
	r.wantList(t, r.lbList, nil, nil)
	r.wantList(t, r.nodeList, nil, nil)

	// The port and node port change, and a source range is set.
	svc.Spec.Ports[0].Port, svc.Spec.Ports[0].NodePort = 8080, 30081
	svc.Spec.LoadBalancerSourceRanges = []string{"127.85.200.0/24"}
	r.put(t, svc)
	r.ensure(t, svc)
	fn, _ = r.ep.NSG(front)
	if got, want := nsgKeys(fn), []string{"EGRESS:" + r.backendNSG + ":10256:" + desc, "EGRESS:" + r.backendNSG + ":30081:" + desc,
		"INGRESS:127.85.200.0/24:8080:" + desc}; !slices.Equal(got, sorted(want)) {
		t.Errorf("frontend rules after the change %v, want %v", got, want)
	}
	bn, _ = r.ep.NSG(r.backendNSG)
	if got, want := nsgKeys(bn), []string{"INGRESS:" + front + ":10256:" + desc, "INGRESS:" + front + ":30081:" + desc,
		"INGRESS:127.0.0.0/8:22:ssh"}; !slices.Equal(got, sorted(want)) {
		t.Errorf("backend rules after the change %v, want %v", got, want)
	}

	// Deleted: the load balancer, then its frontend NSG; the backend NSG
	// keeps the user's rule only.
	r.delete(t, svc)
	if n := len(r.ep.Balancers()); n != 0 {
		t.Errorf("%d load balancers left", n)
	}
	if _, ok := r.ep.NSG(front); ok {
		t.Error("the frontend NSG is left")
	}
	bn, _ = r.ep.NSG(r.backendNSG)
	if got := nsgKeys(bn); !slices.Equal(got, []string{"INGRESS:127.0.0.0/8:22:ssh"}) {
		t.Errorf("backend rules after the delete %v", got)
	}
}

// Two Services in the LB's default mode, All, end to end: the rules of
// each in the LB and node subnets' lists; the first deleted while the
// second (also policy Cluster) still checks kube-proxy's port: the
// health check rules stay until the second goes too. The work requests
// finish at once, so that a load balancer is built by the time its
// create returns (the kit asks nothing more of it then: its rules must
// be made all the same).
func TestLoadBalancerListModeJoined(t *testing.T) {
	r := newRulesRig(t, ocitest.Options{WorkRequestTime: time.Nanosecond})
	a := r.service("a", nil, 80, 30080)
	b := r.service("b", nil, 443, 30443)
	for _, svc := range []*v1.Service{a, b} {
		r.put(t, svc)
		r.ensure(t, svc)
	}
	const lbNet, nodeNet = "127.85.0.0/16", "127.0.91.0/24"
	r.wantList(t, r.lbList, []string{"0.0.0.0/0:80", "0.0.0.0/0:443"}, []string{nodeNet + ":30080", nodeNet + ":30443", nodeNet + ":10256"})
	r.wantList(t, r.nodeList, []string{lbNet + ":30080", lbNet + ":30443", lbNet + ":10256"}, nil)

	// a goes (deleted in the cluster first, as the service controller
	// sees it).
	now := metav1.Now()
	a.DeletionTimestamp = &now
	r.put(t, a)
	r.delete(t, a)
	r.wantList(t, r.lbList, []string{"0.0.0.0/0:443"}, []string{nodeNet + ":30443", nodeNet + ":10256"})
	r.wantList(t, r.nodeList, []string{lbNet + ":30443", lbNet + ":10256"}, nil)

	if err := r.kube.CoreV1().Services("shop").Delete(context.Background(), "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := r.kube.CoreV1().Services("shop").Delete(context.Background(), "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r.delete(t, b)
	r.wantList(t, r.lbList, nil, nil)
	r.wantList(t, r.nodeList, nil, nil)
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// An NLB with a UDP port in a mode that manages rules: refused before
// anything is made, as OCI's CCM refuses it ("only None for UDP").
func TestLoadBalancerUDPNeedsModeNone(t *testing.T) {
	r := newRulesRig(t, ocitest.Options{})
	svc := r.service("dns", map[string]string{oci.AnnType: "nlb", oci.AnnotationNLBListMode: "All"}, 53, 30053)
	svc.Spec.Ports[0].Protocol = v1.ProtocolUDP
	_, err := r.lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, r.nodes)
	if err == nil || !strings.Contains(err.Error(), "UDP port needs mode None") {
		t.Fatalf("EnsureLoadBalancer: %v", err)
	}
	if n := len(r.ep.Balancers()); n != 0 || r.ep.Calls("UpdateSecurityList") != 0 {
		t.Errorf("%d load balancers made, %d lists written", n, r.ep.Calls("UpdateSecurityList"))
	}
	// With None it is made, and nothing of the network is touched.
	svc.Annotations[oci.AnnotationNLBListMode] = "None"
	r.ensure(t, svc)
	if n := len(r.ep.Balancers()); n != 1 || r.ep.Calls("GetSecurityList")+r.ep.Calls("UpdateSecurityList") != 0 {
		t.Errorf("%d load balancers, %d list calls", n, r.ep.Calls("GetSecurityList")+r.ep.Calls("UpdateSecurityList"))
	}
}

func TestRuleSetHeldUDPPortIgnored(t *testing.T) {
	// A port that was UDP (mode None then) and is TCP now in mode
	// Frontend: the held UDP port is no error and owns no rule.
	b := newRuleBed(t)
	rs := b.ruleSet(oci.RuleModeFrontend)
	rs.HeldPorts = []oci.RulePort{{Listener: 22, NodePort: 30022, Protocol: "UDP"}}
	if _, err := b.rules.Ensure(context.Background(), rs); err != nil {
		t.Fatal(err)
	}
	b.wantList(t, b.lbList, []string{"127.0.0.0/8:22", "127.85.200.0/24:80"}, []string{"other:127.0.0.0/8"})
}

// A load balancer OCI's CCM made in mode NSG, adopted: its frontend NSG
// (found by OCI's CCM's name and tags) and the rules of its description
// are mooring's as they are: nothing made, added or removed.
func TestLoadBalancerNSGModeAdoptedJoined(t *testing.T) {
	r := newRulesRig(t, ocitest.Options{})
	svc := r.service("old", map[string]string{oci.AnnotationRuleMode: "nsg", oci.AnnotationBackendNSGs: r.backendNSG}, 80, 30080)
	r.put(t, svc)
	const desc = "service-uid-uid-old"
	rule := func(dir core.SecurityRuleDirectionEnum, peer string, nsg bool, port int) core.SecurityRule {
		out := core.SecurityRule{Direction: dir, Protocol: common.String("6"), Description: common.String(desc), IsStateless: common.Bool(false),
			TcpOptions: &core.TcpOptions{DestinationPortRange: &core.PortRange{Min: common.Int(port), Max: common.Int(port)}}}
		typ := "CIDR_BLOCK"
		if nsg {
			typ = "NETWORK_SECURITY_GROUP"
		}
		if dir == core.SecurityRuleDirectionIngress {
			out.Source, out.SourceType = common.String(peer), core.SecurityRuleSourceTypeEnum(typ)
		} else {
			out.Destination, out.DestinationType = common.String(peer), core.SecurityRuleDestinationTypeEnum(typ)
		}
		return out
	}
	front := r.ep.PutNSG(ocitest.NSG{DisplayName: "shop/old/uid-old/nsg", FreeformTags: map[string]string{"CreatedBy": "CCM", "ServiceUid": "uid-old"},
		Rules: []core.SecurityRule{rule(core.SecurityRuleDirectionIngress, "0.0.0.0/0", false, 80),
			rule(core.SecurityRuleDirectionEgress, r.backendNSG, true, 30080), rule(core.SecurityRuleDirectionEgress, r.backendNSG, true, 10256)}}).ID
	backend, _ := r.ep.NSG(r.backendNSG)
	backend.FreeformTags = map[string]string{"ManagedBy": "CCM"}
	backend.Rules = append(backend.Rules, rule(core.SecurityRuleDirectionIngress, front, true, 30080), rule(core.SecurityRuleDirectionIngress, front, true, 10256))
	r.ep.PutNSG(backend)
	before := map[string][]string{}
	for id, n := range r.ep.NSGs() {
		before[id] = nsgKeys(n)
	}
	made := ccmBalancer(svc, r.nodes)
	made.NSGs = []string{front}
	made, err := r.ep.PutBalancer(made)
	if err != nil {
		t.Fatal(err)
	}
	r.ensure(t, svc)
	got, _ := r.ep.Balancer(made.ID)
	if !slices.Equal(got.NSGs, []string{front}) || got.FreeformTags["mooring/service-uid"] != "uid-old" {
		t.Errorf("adopted load balancer: NSGs %v, tags %v", got.NSGs, got.FreeformTags)
	}
	for _, m := range []string{"CreateNetworkSecurityGroup", "AddNetworkSecurityGroupSecurityRules", "RemoveNetworkSecurityGroupSecurityRules",
		"DeleteNetworkSecurityGroup", "UpdateSecurityList"} {
		if n := r.ep.Calls(m); n != 0 {
			t.Errorf("%s called %d times adopting", m, n)
		}
	}
	for id, n := range r.ep.NSGs() {
		if !slices.Equal(nsgKeys(n), before[id]) {
			t.Errorf("NSG %s: %v, was %v", id, nsgKeys(n), before[id])
		}
	}
}

// A load balancer OCI's CCM made in mode All, adopted: the rules it wrote
// in the lists are the ones mooring would write, so no list is written.
func TestLoadBalancerListModeAdoptedJoined(t *testing.T) {
	r := newRulesRig(t, ocitest.Options{})
	svc := r.service("old", nil, 80, 30080)
	r.put(t, svc)
	const lbNet, nodeNet = "127.85.0.0/16", "127.0.91.0/24"
	if err := r.ep.EditSecurityList(r.lbList, func(l *ocitest.SecurityList) {
		l.Ingress = append(l.Ingress, tcpIn("0.0.0.0/0", 80))
		for _, p := range []int{30080, 10256} {
			l.Egress = append(l.Egress, core.EgressSecurityRule{Destination: common.String(nodeNet), Protocol: common.String("6"), IsStateless: common.Bool(false),
				TcpOptions: &core.TcpOptions{DestinationPortRange: &core.PortRange{Min: common.Int(p), Max: common.Int(p)}}})
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := r.ep.EditSecurityList(r.nodeList, func(l *ocitest.SecurityList) {
		l.Ingress = append(l.Ingress, tcpIn(lbNet, 30080), tcpIn(lbNet, 10256))
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ep.PutBalancer(ccmBalancer(svc, r.nodes)); err != nil {
		t.Fatal(err)
	}
	r.ensure(t, svc)
	if n := r.ep.Calls("UpdateSecurityList"); n != 0 {
		t.Errorf("%d lists written adopting", n)
	}
	r.wantList(t, r.lbList, []string{"0.0.0.0/0:80"}, []string{nodeNet + ":30080", nodeNet + ":10256"})
	r.wantList(t, r.nodeList, []string{lbNet + ":30080", lbNet + ":10256"}, nil)
}
