package linode

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/linode/agentid"
	"github.com/mooring-dev/mooring/cloud/linode/linodetest"
)

// lbWorld is a world with two Linodes and their Nodes (InternalIP their
// private address, region label eu-central).
func lbWorld(t *testing.T) (*world, cloud.LoadBalancerInventory, []*v1.Node) {
	t.Helper()
	w := newWorld(t, linodetest.Options{}, nil)
	var nodes []*v1.Node
	for i := 1; i <= 2; i++ {
		in := w.add("lb-"+strconv.Itoa(i), 40+i)
		n := node(agentid.NodeName(in.Label), agentid.ProviderID(in.ID))
		n.Labels = map[string]string{v1.LabelTopologyRegion: "eu-central"}
		n.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: in.PrivateIP}, {Type: v1.NodeExternalIP, Address: in.PublicIP}}
		nodes = append(nodes, n)
	}
	lb, ok := w.cloud.LoadBalancer()
	if !ok {
		t.Fatal("no load balancers")
	}
	return w, lb.(cloud.LoadBalancerInventory), nodes
}

func lbSvc(annotations map[string]string, ports ...v1.ServicePort) *v1.Service {
	if len(ports) == 0 {
		ports = []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP, NodePort: 30080}}
	}
	return &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: types.UID("0b1c6d1e-6a43-4f0e-9d5c-1f2e3d4c5b6a"),
		Annotations: annotations}, Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, Ports: ports}}
}

func lbCalls(w *world) int {
	n := 0
	for _, m := range []string{linodetest.MethodLBList, linodetest.MethodLBGet, linodetest.MethodLBCreate, linodetest.MethodLBUpdate, linodetest.MethodLBDelete,
		linodetest.MethodFWGet, linodetest.MethodFWUpdate} {
		n += w.ln.Calls(m)
	}
	return n
}

func lbWrites(w *world) int {
	return w.ln.Calls(linodetest.MethodLBCreate) + w.ln.Calls(linodetest.MethodLBUpdate) + w.ln.Calls(linodetest.MethodLBDelete) +
		w.ln.Calls(linodetest.MethodFWUpdate)
}

// The annotations of Linode's CCM make the NodeBalancer they make there:
// its throttle, tags, type and region (the nodes'), per port its
// protocol (the default, a port's own), PROXY protocol, algorithm,
// stickiness, health check, and the nodes' private addresses at the node
// port; the status has its address and hostname, ipMode Proxy for PROXY
// protocol. Ensured again, nothing is written.
func TestLBAnnotations(t *testing.T) {
	w, lbs, nodes := lbWorld(t)
	p := AnnotationPrefix
	svc := lbSvc(map[string]string{
		p + "default-protocol": "http", p + "check-type": "http", p + "check-path": "/healthz", p + "check-interval": "10",
		p + "check-timeout": "4", p + "check-attempts": "3", p + "check-passive": "false", p + "throttle": "7",
		p + "tags": "team-a, env-prod", p + "default-algorithm": "leastconn", p + "udp-check-port": "8053",
		p + "nodebalancer-type": "premium", p + "port-443": `{"protocol": "tcp", "proxy-protocol": "v2", "algorithm": "source"}`,
	},
		v1.ServicePort{Name: "http", Port: 80, Protocol: v1.ProtocolTCP, NodePort: 30080},
		v1.ServicePort{Name: "https", Port: 443, Protocol: v1.ProtocolTCP, NodePort: 30443},
		v1.ServicePort{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP, NodePort: 30053})
	st, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, nodes)
	if err != nil {
		t.Fatal(err)
	}
	all := w.ln.NodeBalancers()
	if len(all) != 1 {
		t.Fatalf("NodeBalancers: %+v", all)
	}
	nb := all[0]
	tags := slices.Clone(nb.Tags)
	slices.Sort(tags)
	wantTags := []string{"env-prod", "mooring:cluster:" + testCluster, "mooring:service:shop:web", "mooring:uid:" + string(svc.UID), "team-a"}
	if nb.Throttle != 7 || nb.Type != "premium" || nb.Region != "eu-central" || !slices.Equal(tags, wantTags) ||
		nb.Label != lbs.GetLoadBalancerName(context.Background(), "", svc) || !strings.HasPrefix(nb.Label, "ccm-") || len(nb.Label) != 16 {
		t.Fatalf("NodeBalancer %+v; tags want %v", nb, wantTags)
	}
	byPort := map[int]linodetest.NBConfig{}
	for _, cf := range nb.Configs {
		byPort[cf.Port] = cf
	}
	nodesAt := func(port int) []string {
		var out []string
		for _, n := range byPort[port].Nodes {
			out = append(out, n.Address+" "+n.Label+" "+n.Mode)
		}
		slices.Sort(out)
		return out
	}
	for _, tc := range []struct {
		port                                   int
		protocol, proxy, algorithm, stickiness string
		passive                                bool
		nodes                                  []string
	}{
		{80, "http", "none", "leastconn", "table", false, []string{"127.0.97.41:30080 lb-1 accept", "127.0.97.42:30080 lb-2 accept"}},
		{443, "tcp", "v2", "source", "none", false, []string{"127.0.97.41:30443 lb-1 accept", "127.0.97.42:30443 lb-2 accept"}},
		{53, "udp", "none", "leastconn", "session", false, []string{"127.0.97.41:30053 lb-1 ", "127.0.97.42:30053 lb-2 "}},
	} {
		cf := byPort[tc.port]
		if cf.Protocol != tc.protocol || cf.ProxyProtocol != tc.proxy || cf.Algorithm != tc.algorithm || cf.Stickiness != tc.stickiness ||
			cf.Check != "http" || cf.CheckPath != "/healthz" || cf.CheckInterval != 10 || cf.CheckTimeout != 4 || cf.CheckAttempts != 3 ||
			cf.CheckPassive != tc.passive || !slices.Equal(nodesAt(tc.port), tc.nodes) {
			t.Errorf("port %d: %+v, nodes %v; want %+v", tc.port, cf, nodesAt(tc.port), tc)
		}
	}
	if byPort[53].UDPCheckPort != 8053 {
		t.Errorf("udp check port %d", byPort[53].UDPCheckPort)
	}
	if len(st.Ingress) != 1 || st.Ingress[0].IP != nb.IPv4 || st.Ingress[0].Hostname != nb.Hostname || st.Ingress[0].IPMode == nil ||
		*st.Ingress[0].IPMode != v1.LoadBalancerIPModeProxy {
		t.Errorf("status %+v, want %s and %s, ipMode Proxy", st.Ingress, nb.IPv4, nb.Hostname)
	}
	writes := lbWrites(w)
	if _, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, nodes); err != nil {
		t.Fatal(err)
	}
	if got := lbWrites(w) - writes; got != 0 {
		t.Errorf("writes when nothing changed: %d", got)
	}
	owned, err := lbs.ListOwnedLoadBalancers(context.Background())
	if err != nil || len(owned) != 1 {
		t.Fatalf("owned: %+v, %v", owned, err)
	}
	if fp, _ := lbs.DesiredFingerprint(context.Background(), svc, nodes); fp != owned[0].Fingerprint || owned[0].Namespace != "shop" || owned[0].Service != "web" {
		t.Errorf("listed %+v, its fingerprint not the desired %s", owned[0], fp)
	}
	// hostname-only-ingress: the status has the hostname alone, with no
	// write (it is the Service's choice, not the NodeBalancer's).
	svc.Annotations[p+"hostname-only-ingress"] = "true"
	writes = lbWrites(w)
	st, err = lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, nodes)
	if err != nil || len(st.Ingress) != 1 || st.Ingress[0].IP != "" || st.Ingress[0].Hostname != nb.Hostname {
		t.Fatalf("hostname-only: %+v, %v", st, err)
	}
	if got := lbWrites(w) - writes; got != 0 {
		t.Errorf("writes for hostname-only-ingress: %d, want 0", got)
	}
	if got, ok, err := lbs.GetLoadBalancer(context.Background(), "kubernetes", svc); err != nil || !ok || got.Ingress[0].IP != "" {
		t.Fatalf("GetLoadBalancer hostname-only: %+v, %v, %v", got, ok, err)
	}
	if after, _ := w.ln.NodeBalancer(nb.ID); after.IPv4 != nb.IPv4 {
		t.Errorf("the address changed: %s, was %s", after.IPv4, nb.IPv4)
	}
}

// A malformed annotation, one of Linode's CCM's that mooring does not
// support, an unknown one under the prefix, or a setting NodeBalancers
// cannot do is an error naming it, and the API is not called.
func TestLBBadInput(t *testing.T) {
	w, lbs, nodes := lbWorld(t)
	p := AnnotationPrefix
	udp := v1.ServicePort{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP, NodePort: 30053}
	for _, tc := range []struct {
		name  string
		ann   map[string]string
		ports []v1.ServicePort
		want  string
	}{
		{"throttle 21", map[string]string{p + "throttle": "21"}, nil, p + "throttle"},
		{"check type", map[string]string{p + "check-type": "tcp"}, nil, p + "check-type"},
		{"check path", map[string]string{p + "check-type": "http", p + "check-path": "healthz"}, nil, p + "check-path"},
		{"http_body without a body", map[string]string{p + "check-type": "http_body"}, nil, p + "check-body"},
		{"timeout not below interval", map[string]string{p + "check-interval": "5", p + "check-timeout": "5"}, nil, p + "check-timeout"},
		{"attempts 0", map[string]string{p + "check-attempts": "0"}, nil, p + "check-attempts"},
		{"passive maybe", map[string]string{p + "check-passive": "maybe"}, nil, p + "check-passive"},
		{"port JSON", map[string]string{p + "port-80": `{"protocol": "tcp"`}, nil, p + "port-80"},
		{"port field unknown", map[string]string{p + "port-80": `{"protocl": "tcp"}`}, nil, p + "port-80"},
		{"port of no Service port", map[string]string{p + "port-81": `{"protocol": "tcp"}`}, nil, p + "port-81"},
		{"https without a Secret", map[string]string{p + "default-protocol": "https"}, nil, p + "port-80"},
		{"a Secret on tcp", map[string]string{p + "port-80": `{"protocol": "tcp", "tls-secret-name": "cert"}`}, nil, p + "port-80"},
		{"a Secret's name", map[string]string{p + "port-80": `{"protocol": "https", "tls-secret-name": "No_Name"}`}, nil, p + "port-80"},
		{"PROXY protocol on http", map[string]string{p + "default-protocol": "http", p + "default-proxy-protocol": "v2"}, nil, p + "default-proxy-protocol"},
		{"PROXY protocol v3", map[string]string{p + "default-proxy-protocol": "v3"}, nil, p + "default-proxy-protocol"},
		{"udp on a TCP port", map[string]string{p + "port-80": `{"protocol": "udp"}`}, nil, p + "port-80"},
		{"source on udp", map[string]string{p + "default-algorithm": "source"}, []v1.ServicePort{udp}, p + "default-algorithm"},
		{"short tag", map[string]string{p + "tags": "ok-tag,x"}, nil, p + "tags"},
		{"our tag", map[string]string{p + "tags": "mooring:cluster:other"}, nil, p + "tags"},
		{"type", map[string]string{p + "nodebalancer-type": "huge"}, nil, p + "nodebalancer-type"},
		{"id", map[string]string{p + "nodebalancer-id": "abc"}, nil, p + "nodebalancer-id"},
		{"firewall-id", map[string]string{p + "firewall-id": "fw1"}, nil, p + "firewall-id"},
		{"firewall-id 0", map[string]string{p + "firewall-id": "0"}, nil, p + "firewall-id"},
		{"firewall-acl", map[string]string{p + "firewall-acl": `{"allowList": {"ipv4": ["192.0.2.0/24"]}}`}, nil, p + "firewall-acl"},
		{"preserve maybe", map[string]string{p + "preserve": "maybe"}, nil, p + "preserve"},
		{"VPC backends without vpcNames", map[string]string{p + "backend-vpc-name": "vpc"}, nil, p + "backend-vpc-name"},
		{"VPC frontends", map[string]string{p + "frontend-vpc-name": "vpc"}, nil, "VPC frontends"},
		{"reserved address", map[string]string{p + "reserved-ipv4": "192.0.2.1"}, nil, p + "reserved-ipv4"},
		{"unknown", map[string]string{p + "frobnicate": "1"}, nil, p + "frobnicate"},
		{"SCTP", nil, []v1.ServicePort{{Port: 80, Protocol: v1.ProtocolSCTP, NodePort: 30080}}, "SCTP"},
		{"TCP and UDP on one port", nil, []v1.ServicePort{{Name: "a", Port: 53, Protocol: v1.ProtocolTCP, NodePort: 30053},
			{Name: "b", Port: 53, Protocol: v1.ProtocolUDP, NodePort: 30054}}, "port 53 is both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := lbSvc(tc.ann, tc.ports...)
			if _, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, nodes); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("EnsureLoadBalancer: %v, want an error naming %s", err, tc.want)
			}
		})
	}
	svc := lbSvc(nil)
	svc.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24"}
	if _, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, nodes); err == nil || !strings.Contains(err.Error(), "loadBalancerSourceRanges") {
		t.Errorf("source ranges: %v, want an error naming them", err)
	}
	if n := lbCalls(w); n != 0 || len(w.ln.NodeBalancers()) != 0 {
		t.Errorf("NodeBalancer API calls: %d, NodeBalancers %d; want none", n, len(w.ln.NodeBalancers()))
	}
}

// A NodeBalancer Linode's CCM made is adopted, by the nodebalancer-id
// annotation or by the address in the Service's status (as Linode's CCM
// finds it): the same id and address, now tagged for the cluster, its
// configs what the Service calls for; no NodeBalancer is made.
func TestLBAdopt(t *testing.T) {
	for _, by := range []string{"id", "ip", "hostname"} {
		t.Run(by, func(t *testing.T) {
			w, lbs, nodes := lbWorld(t)
			svc := lbSvc(map[string]string{})
			made := w.ln.PutNodeBalancer(ccmNodeBalancer(svc, nodes[:1]))
			switch by {
			case "id":
				svc.Annotations[AnnNodeBalancerID] = strconv.Itoa(made.ID)
			case "ip":
				svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: made.IPv4, Hostname: made.Hostname}}
			case "hostname":
				svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{Hostname: made.Hostname}}
			}
			st, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, nodes)
			if err != nil {
				t.Fatal(err)
			}
			all := w.ln.NodeBalancers()
			if len(all) != 1 || all[0].ID != made.ID || all[0].IPv4 != made.IPv4 || all[0].Label != made.Label ||
				w.ln.Calls(linodetest.MethodLBCreate) != 0 {
				t.Fatalf("after adoption: %+v, want NodeBalancer %d at %s kept", all, made.ID, made.IPv4)
			}
			if st.Ingress[0].IP != made.IPv4 || !slices.Contains(all[0].Tags, "mooring:uid:"+string(svc.UID)) ||
				len(all[0].Configs[0].Nodes) != 2 {
				t.Fatalf("status %+v, NodeBalancer %+v", st, all[0])
			}
			// Found again by the status's address: a GET of the id seen, no list.
			lists := w.ln.Calls(linodetest.MethodLBList)
			if _, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, nodes); err != nil {
				t.Fatal(err)
			}
			if got := w.ln.Calls(linodetest.MethodLBList) - lists; got != 0 {
				t.Errorf("lists to find it again: %d, want 0", got)
			}
			if owned, err := lbs.ListOwnedLoadBalancers(context.Background()); err != nil || len(owned) != 1 {
				t.Fatalf("owned %+v, %v", owned, err)
			}
			if err := lbs.EnsureLoadBalancerDeleted(context.Background(), "kubernetes", svc); err != nil || len(w.ln.NodeBalancers()) != 0 {
				t.Fatalf("delete: %v, left %d", err, len(w.ln.NodeBalancers()))
			}
		})
	}
}

// A Service whose nodebalancer-id names no NodeBalancer gets none made
// (as with Linode's CCM): an error naming the annotation.
func TestLBNamedIDMissing(t *testing.T) {
	w, lbs, nodes := lbWorld(t)
	svc := lbSvc(map[string]string{AnnNodeBalancerID: "4242"})
	if _, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, nodes); err == nil || !strings.Contains(err.Error(), AnnNodeBalancerID) {
		t.Fatalf("EnsureLoadBalancer: %v, want an error naming %s", err, AnnNodeBalancerID)
	}
	if n := len(w.ln.NodeBalancers()); n != 0 || w.ln.Calls(linodetest.MethodLBCreate) != 0 {
		t.Fatalf("NodeBalancers: %d, want none made", n)
	}
}

// preserve: the NodeBalancer stays when its Service goes, without
// mooring's tags (so the drift pass leaves it alone), and a Service that
// names it by nodebalancer-id adopts it, its address kept.
func TestLBPreserve(t *testing.T) {
	w, lbs, nodes := lbWorld(t)
	ctx := context.Background()
	svc := lbSvc(map[string]string{AnnPreserve: "true", AnnTags: "team-a"})
	st, err := lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, nodes)
	if err != nil {
		t.Fatal(err)
	}
	if err := lbs.EnsureLoadBalancerDeleted(ctx, "kubernetes", svc); err != nil {
		t.Fatal(err)
	}
	all := w.ln.NodeBalancers()
	if len(all) != 1 || all[0].IPv4 != st.Ingress[0].IP || !slices.Equal(all[0].Tags, []string{"team-a"}) ||
		w.ln.Calls(linodetest.MethodLBDelete) != 0 {
		t.Fatalf("after the Service went: %+v, want the NodeBalancer kept with only the tag team-a", all)
	}
	if owned, err := lbs.ListOwnedLoadBalancers(ctx); err != nil || len(owned) != 0 {
		t.Fatalf("owned after the Service went: %+v, %v; want none", owned, err)
	}
	again := lbSvc(map[string]string{AnnNodeBalancerID: strconv.Itoa(all[0].ID)})
	again.UID = "5b0c7a52-2d7c-4a4e-9a55-0e6c1c1d2e3f"
	st2, err := lbs.EnsureLoadBalancer(ctx, "kubernetes", again, nodes)
	if err != nil || st2.Ingress[0].IP != st.Ingress[0].IP || len(w.ln.NodeBalancers()) != 1 {
		t.Fatalf("adopted by id: %+v, %v", st2, err)
	}
	// Without preserve, deleting the Service deletes it.
	if err := lbs.EnsureLoadBalancerDeleted(ctx, "kubernetes", again); err != nil || len(w.ln.NodeBalancers()) != 0 {
		t.Fatalf("deleted: %v, left %d", err, len(w.ln.NodeBalancers()))
	}
}

// Building NodeBalancers for n new Services costs calls in proportion to
// n: each is found through the index (one list), not a List that reads
// every NodeBalancer's configs (n² reads in all; BenchmarkLBFanoutLinode
// took 61 s for 10 so).
func TestLBBuildsInLinearCalls(t *testing.T) {
	w, lbs, nodes := lbWorld(t)
	const n = 8
	for i := range n {
		svc := lbSvc(nil)
		svc.Name = "web-" + strconv.Itoa(i)
		svc.UID = types.UID("0b1c6d1e-6a43-4f0e-9d5c-00000000000" + strconv.Itoa(i))
		if _, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, nodes); err != nil {
			t.Fatal(err)
		}
	}
	if got := lbCalls(w); got > 4*n {
		t.Errorf("%d NodeBalancers built with %d calls, want at most %d (lists %d, gets %d)", n, got, 4*n,
			w.ln.Calls(linodetest.MethodLBList), w.ln.Calls(linodetest.MethodLBGet))
	}
}
