package hetzner

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/hetzner/agentid"
	"github.com/mooring-dev/mooring/cloud/hetzner/hetznertest"
)

// lbWorld is a world with two servers of the cluster (in nbg1) and their
// Nodes, and the provider's load balancers; actions are polled a
// millisecond apart.
type lbWorld struct {
	*world
	lbs   cloud.LoadBalancerInventory
	nodes []*v1.Node
}

func newLBWorld(t *testing.T, opts hetznertest.Options, edit func(*Config)) *lbWorld {
	t.Helper()
	w := newWorld(t, opts, edit,
		hcloud.WithPollOpts(hcloud.PollOpts{BackoffFunc: hcloud.ConstantBackoff(time.Millisecond)}),
		hcloud.WithRetryOpts(hcloud.RetryOpts{BackoffFunc: hcloud.ConstantBackoff(time.Millisecond), MaxRetries: maxRetries}))
	lb, ok := w.cloud.LoadBalancer()
	if !ok {
		t.Fatal("no load balancers")
	}
	lw := &lbWorld{world: w, lbs: lb.(cloud.LoadBalancerInventory)}
	for i := range 2 {
		s := w.hz.Put(hetznertest.Server{Name: fmt.Sprintf("lb-node-%d", i), Location: "nbg1",
			Labels: map[string]string{DefaultClusterLabel: testCluster}, PublicIPv4: fmt.Sprintf("127.0.86.%d", 60+i),
			PrivateNets: []hetznertest.PrivateNet{{Network: hetznertest.DefaultNetworkID, IP: fmt.Sprintf("127.0.85.%d", 60+i)}}})
		n := node(agentid.NodeName(s.Name), agentid.ProviderID(s.ID))
		lw.nodes = append(lw.nodes, n)
	}
	return lw
}

// writes counts the calls that changed load balancers.
func (w *lbWorld) writes() int {
	return w.hz.Calls("lb-create") + w.hz.Calls("lb-update") + w.hz.Calls("lb-delete")
}

func lbSvc(name string, annotations map[string]string, ports ...int32) *v1.Service {
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name), Annotations: annotations},
		Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer}}
	for i, p := range ports {
		svc.Spec.Ports = append(svc.Spec.Ports, v1.ServicePort{Name: fmt.Sprint("p", p), Port: p, Protocol: v1.ProtocolTCP, NodePort: int32(31000 + i)})
	}
	return svc
}

func (w *lbWorld) only(t *testing.T) hetznertest.LoadBalancer {
	t.Helper()
	all := w.hz.LoadBalancers()
	if len(all) != 1 {
		t.Fatalf("load balancers: %+v, want one", all)
	}
	return all[0]
}

// The annotations users of hcloud-cloud-controller-manager set most, as
// the API then holds them; the status as that CCM words it.
func TestLBAnnotations(t *testing.T) {
	ctx := context.Background()
	cert := int64(0)
	// Actions run 20ms each: every change is waited for.
	w := newLBWorld(t, hetznertest.Options{IPv6: true, ActionTime: 20 * time.Millisecond}, func(c *Config) { c.Network = NetworkRef{ID: hetznertest.DefaultNetworkID} })
	cert = w.hz.AddCertificate("web")
	svc := lbSvc("web", map[string]string{
		AnnLocation: "hel1", AnnType: "lb21", AnnAlgorithm: "least_connections",
		AnnProtocol: "https", AnnCertificates: fmt.Sprint(cert), AnnProxyProtocol: "true",
		AnnUsePrivateIP: "true", AnnHealthProtocol: "http", AnnHealthPath: "/healthz", AnnHealthInterval: "5s",
		AnnHealthTimeout: "3s", AnnHealthRetries: "2", AnnNetworkZone: "",
		AnnotationPrefix + "ipv4": "127.0.0.1", // the CCM's read-only annotations are no error
	}, 443)
	st, err := w.lbs.EnsureLoadBalancer(ctx, "k", svc, w.nodes)
	if err != nil {
		t.Fatal(err)
	}
	l := w.only(t)
	if l.Name != "auidweb" || l.Location != "hel1" || l.Type != "lb21" || l.Algorithm != "least_connections" ||
		l.Network != hetznertest.DefaultNetworkID || !l.Public || len(l.Targets) != 2 || !l.Targets[0].UsePrivateIP {
		t.Fatalf("load balancer: %+v", l)
	}
	s := l.Services[0]
	if s.Protocol != "https" || s.ListenPort != 443 || s.DestinationPort != 31000 || !s.ProxyProtocol ||
		!slices.Equal(s.HTTP.Certificates, []int64{cert}) ||
		s.HealthCheck.Protocol != "http" || s.HealthCheck.Port != 31000 || s.HealthCheck.Interval != 5 ||
		s.HealthCheck.Timeout != 3 || s.HealthCheck.Retries != 2 || s.HealthCheck.HTTP.Path != "/healthz" {
		t.Fatalf("service: %+v", s)
	}
	if l.Labels[LabelServiceUID] != "uid-web" || l.Labels["mooring.dev/cluster"] != testCluster || l.Labels["mooring.dev/service-uid"] != "uid-web" {
		t.Errorf("labels: %v", l.Labels)
	}
	// Public IPv4, IPv6 and the private IP, each ipMode Proxy (PROXY
	// protocol, TLS ended at the load balancer).
	var ips []string
	for _, in := range st.Ingress {
		if in.IPMode == nil || *in.IPMode != v1.LoadBalancerIPModeProxy {
			t.Errorf("ingress %+v: want ipMode Proxy", in)
		}
		ips = append(ips, in.IP)
	}
	if want := []string{l.IPv4, "::1", l.PrivateIP}; !slices.Equal(ips, want) {
		t.Errorf("ingress %v, want %v", ips, want)
	}
	// Nothing to write when nothing changed.
	before := w.writes()
	if _, err := w.lbs.EnsureLoadBalancer(ctx, "k", svc, w.nodes); err != nil {
		t.Fatal(err)
	}
	if got := w.writes() - before; got != 0 {
		t.Errorf("writes when nothing changed: %d", got)
	}

	// A hostname in place of the IPs; IPv6 and the private IP left out.
	svc.Annotations[AnnHostname] = "lb.example.com"
	if st, err = w.lbs.EnsureLoadBalancer(ctx, "k", svc, w.nodes); err != nil || len(st.Ingress) != 1 || st.Ingress[0].Hostname != "lb.example.com" || st.Ingress[0].IP != "" {
		t.Fatalf("hostname: %+v, %v", st, err)
	}
	delete(svc.Annotations, AnnHostname)
	svc.Annotations[AnnIPv6Disabled] = "true"
	svc.Annotations[AnnDisablePrivateIngress] = "true"
	if st, err = w.lbs.EnsureLoadBalancer(ctx, "k", svc, w.nodes); err != nil || len(st.Ingress) != 1 || st.Ingress[0].IP != l.IPv4 {
		t.Fatalf("ipv6-disabled, disable-private-ingress: %+v, %v", st, err)
	}
	if got, ok, err := w.lbs.GetLoadBalancer(ctx, "k", svc); err != nil || !ok || len(got.Ingress) != 1 || got.Ingress[0].IP != l.IPv4 {
		t.Errorf("GetLoadBalancer: %+v, %v, %v", got, ok, err)
	}

	// Changing annotations changes the load balancer, with its address:
	// plain tcp, public targets, no public interface.
	for _, k := range []string{AnnProtocol, AnnCertificates, AnnProxyProtocol, AnnHealthProtocol, AnnHealthPath} {
		delete(svc.Annotations, k)
	}
	svc.Annotations[AnnUsePrivateIP] = "false"
	svc.Annotations[AnnType] = "lb31"
	if _, err := w.lbs.EnsureLoadBalancer(ctx, "k", svc, w.nodes); err != nil {
		t.Fatal(err)
	}
	l2 := w.only(t)
	if l2.ID != l.ID || l2.IPv4 != l.IPv4 || l2.Type != "lb31" || l2.Services[0].Protocol != "tcp" || l2.Services[0].HTTP != nil ||
		l2.Targets[0].UsePrivateIP || l2.Services[0].HealthCheck.Protocol != "tcp" {
		t.Fatalf("after the change: %+v", l2)
	}
	svc.Annotations[AnnUsePrivateIP] = "true"
	svc.Annotations[AnnDisablePublicNetwork] = "true"
	delete(svc.Annotations, AnnDisablePrivateIngress)
	st, err = w.lbs.EnsureLoadBalancer(ctx, "k", svc, w.nodes)
	if l3 := w.only(t); err != nil || l3.Public || !l3.Targets[0].UsePrivateIP || len(st.Ingress) != 1 || st.Ingress[0].IP != l3.PrivateIP {
		t.Fatalf("without the public interface: %+v, status %+v, %v", l3, st, err)
	}
	if err := w.lbs.EnsureLoadBalancerDeleted(ctx, "k", svc); err != nil || len(w.hz.LoadBalancers()) != 0 {
		t.Fatalf("delete: %v, left %+v", err, w.hz.LoadBalancers())
	}
}

// A malformed value, an unknown annotation and one of the CCM's that
// mooring does not support are errors naming each, with nothing called
// at all; so are a Service whose clients are limited by address (which
// Hetzner's load balancers cannot do) and use-private-ip without a
// network in the config.
func TestLBBadAnnotations(t *testing.T) {
	w := newLBWorld(t, hetznertest.Options{}, nil)
	ranged := lbSvc("ranged", nil, 80)
	ranged.Spec.LoadBalancerSourceRanges = []string{"10.0.0.0/8"}
	for _, tc := range []struct {
		svc  *v1.Service
		want []string
	}{
		{lbSvc("bad", map[string]string{AnnProxyProtocol: "maybe", AnnotationPrefix + "health-check-intervall": "5s",
			AnnotationPrefix + "http-redirect-http": "true", AnnHealthInterval: "1500ms"}, 80),
			[]string{AnnProxyProtocol, AnnotationPrefix + "health-check-intervall", AnnotationPrefix + "http-redirect-http", AnnHealthInterval}},
		{lbSvc("both", map[string]string{AnnLocation: "fsn1", AnnNetworkZone: "eu-central"}, 80), []string{AnnNetworkZone}},
		{lbSvc("https", map[string]string{AnnProtocol: "https"}, 443), []string{AnnProtocol}},
		{lbSvc("byname", map[string]string{AnnProtocol: "https", AnnCertificates: "my-cert"}, 443), []string{AnnCertificates}},
		{lbSvc("private", map[string]string{AnnUsePrivateIP: "true"}, 80), []string{AnnUsePrivateIP, "network"}},
		{ranged, []string{"loadBalancerSourceRanges"}},
	} {
		_, err := w.lbs.EnsureLoadBalancer(context.Background(), "k", tc.svc, w.nodes)
		for _, want := range tc.want {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v, want an error naming %s", tc.svc.Name, err, want)
			}
		}
	}
	for _, m := range []string{"lb-list", "lb-get", "lb-create", "lb-update", "lb-delete"} {
		if n := w.hz.Calls(m); n != 0 {
			t.Errorf("%s calls: %d, want none", m, n)
		}
	}
}

// A load balancer hcloud-cloud-controller-manager made for a Service (of
// the name its name annotation gives) is adopted: same id and address,
// labelled for the cluster; its location stays where it was made.
func TestLBAdoptsTheCCMs(t *testing.T) {
	ctx := context.Background()
	w := newLBWorld(t, hetznertest.Options{}, nil)
	var servers []int64
	for _, n := range w.nodes {
		id, _ := ParseProviderID(n.Spec.ProviderID)
		servers = append(servers, id)
	}
	svc := lbSvc("legacy", map[string]string{AnnName: "legacy-web", AnnLocation: "hel1"}, 80)
	made := hetznertest.CCMLoadBalancer("legacy-web", "old-uid", []hetznertest.CCMPort{{Port: 80, NodePort: 31000}}, servers)
	made.Location = "fsn1"
	theirs, err := w.hz.PutLoadBalancer(made)
	if err != nil {
		t.Fatal(err)
	}
	st, err := w.lbs.EnsureLoadBalancer(ctx, "k", svc, w.nodes)
	if err != nil {
		t.Fatal(err)
	}
	l := w.only(t)
	if l.ID != theirs.ID || l.IPv4 != theirs.IPv4 || st.Ingress[0].IP != theirs.IPv4 || l.Location != "fsn1" || w.hz.Calls("lb-create") != 0 {
		t.Fatalf("adopted: %+v (status %+v), want %d at %s kept", l, st, theirs.ID, theirs.IPv4)
	}
	if l.Labels[LabelServiceUID] != "uid-legacy" || l.Labels["mooring.dev/cluster"] != testCluster {
		t.Errorf("labels after adoption: %v", l.Labels)
	}
	// Adopting wrote the labels only: the rest was as the Service calls for.
	if got := w.hz.Calls("lb-update"); got != 1 {
		t.Errorf("update calls: %d, want 1 (the labels)", got)
	}
}

// Without a location or network zone, a load balancer is made where its
// first target's server is; without targets the CCM's annotations are
// asked for.
func TestLBLocationFromTheServers(t *testing.T) {
	ctx := context.Background()
	w := newLBWorld(t, hetznertest.Options{}, nil)
	if _, err := w.lbs.EnsureLoadBalancer(ctx, "k", lbSvc("web", nil, 80), w.nodes); err != nil {
		t.Fatal(err)
	}
	if l := w.only(t); l.Location != "nbg1" {
		t.Errorf("location %s, want nbg1 (the servers')", l.Location)
	}
	if _, err := w.lbs.EnsureLoadBalancer(ctx, "k", lbSvc("lonely", nil, 80), nil); err == nil || !strings.Contains(err.Error(), AnnLocation) {
		t.Errorf("no targets, no location: %v", err)
	}
	if _, err := w.lbs.EnsureLoadBalancer(ctx, "k", lbSvc("zoned", map[string]string{AnnNetworkZone: "us-east"}, 80), nil); err != nil {
		t.Fatal(err)
	}
}

// An action that fails is the provider's error; the API's validation
// errors come back with their codes.
func TestLBActionErrors(t *testing.T) {
	ctx := context.Background()
	w := newLBWorld(t, hetznertest.Options{}, nil)
	w.hz.FailAction("create_load_balancer", "resource_unavailable", "no capacity")
	if _, err := w.lbs.EnsureLoadBalancer(ctx, "k", lbSvc("web", nil, 80), w.nodes); err == nil || !strings.Contains(err.Error(), "resource_unavailable") {
		t.Fatalf("failed action: %v", err)
	}
	if n := len(w.hz.LoadBalancers()); n != 0 {
		t.Fatalf("a load balancer whose creation failed is there: %d", n)
	}
	if _, err := w.lbs.EnsureLoadBalancer(ctx, "k", lbSvc("web", map[string]string{AnnType: "lb99"}, 80), w.nodes); err == nil ||
		!hcloud.IsError(unwrapAll(err), hcloud.ErrorCodeInvalidInput) {
		t.Fatalf("an unknown type: %v, want invalid_input", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok || u.Unwrap() == nil {
			return err
		}
		err = u.Unwrap()
	}
}
