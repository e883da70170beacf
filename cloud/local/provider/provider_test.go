package provider

import (
	"context"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/localtest"
	"github.com/mooring-dev/mooring/cloud/local/server"
)

const cluster = "c1"

type env struct {
	cloud    *localtest.Cloud
	provider *Cloud
}

// setup starts a local cloud and a provider of it; extra lines are added to
// the provider's cloud config.
func setup(t *testing.T, extra ...string) *env {
	t.Helper()
	lc := localtest.Start(t, func(c *server.Config) { c.BootDelay = 0 })
	cfg, err := ParseConfig(strings.NewReader(fmt.Sprintf(
		"endpoint: %s\ntokenFile: %s\ncluster: %s\nminRefreshInterval: 1ms\n", lc.URL, lc.TokenFile, cluster) +
		strings.Join(extra, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &env{cloud: lc, provider: p}
}

func (e *env) create(t *testing.T, name, clusterTag string) *api.Instance {
	t.Helper()
	in, err := e.cloud.Client.CreateInstance(context.Background(), api.CreateInstanceRequest{Name: name, Cluster: clusterTag})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func (e *env) calls(t *testing.T, op string) int64 {
	t.Helper()
	st, err := e.cloud.Client.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.Calls[op]
}

func node(name, providerID string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NodeSpec{ProviderID: providerID}}
}

func TestParseConfig(t *testing.T) {
	bad := map[string]string{
		"unknown field":  "endpoint: http://x\ntokenFile: /t\ncluster: c\nbogus: 1\n",
		"no endpoint":    "tokenFile: /t\ncluster: c\n",
		"no cluster":     "endpoint: http://x\ntokenFile: /t\n",
		"bad policy":     "endpoint: http://x\ntokenFile: /t\ncluster: c\nnodeNamePolicy: Hostname\n",
		"negative age":   "endpoint: http://x\ntokenFile: /t\ncluster: c\ninstanceMaxAge: -1s\n",
		"not a duration": "endpoint: http://x\ntokenFile: /t\ncluster: c\ninstanceMaxAge: soon\n",
		"bad lookup":     "endpoint: http://x\ntokenFile: /t\ncluster: c\ninstanceLookup: cached\n",
		"negative limit": "endpoint: http://x\ntokenFile: /t\ncluster: c\napiRateLimit: -1\n",
		"negative burst": "endpoint: http://x\ntokenFile: /t\ncluster: c\napiRateLimit: 5\napiRateBurst: -2\n",
	}
	for name, text := range bad {
		if _, err := ParseConfig(strings.NewReader(text)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	c, err := ParseConfig(strings.NewReader("endpoint: http://x\ntokenFile: /t\ncluster: c\n"))
	if err != nil || c.NodeNamePolicy != "InstanceName" || c.InstanceMaxAge.Duration != DefaultInstanceMaxAge ||
		c.InstanceLookup != InstanceLookupView || c.APIRateLimit != 0 || c.APIRateBurst != 0 {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
	_, err = ParseConfig(strings.NewReader("endpoint: http://x\ntokenFile: /t\ncluster: c\ninstanceLookup: cached\n"))
	if err == nil || !strings.Contains(err.Error(), "view") || !strings.Contains(err.Error(), "direct") {
		t.Fatalf("an unknown instanceLookup: %v; want an error naming view and direct", err)
	}
	for text, want := range map[string]int{"apiRateLimit: 0.5": 1, "apiRateLimit: 7.9": 7, "apiRateLimit: 5\napiRateBurst: 20": 20} {
		c, err := ParseConfig(strings.NewReader("endpoint: http://x\ntokenFile: /t\ncluster: c\n" + text + "\n"))
		if err != nil || c.APIRateBurst != want {
			t.Errorf("%q: burst %d, %v; want %d", text, c.APIRateBurst, err, want)
		}
	}
}

// The local cloud's metadata: zone, region, type, the cluster label, the
// addresses in their order (the conformance suite asserts the rest).
func TestInstanceMetadata(t *testing.T) {
	e := setup(t)
	in := e.create(t, "node-a", cluster)
	ctx := context.Background()
	md, err := e.provider.InstanceMetadata(ctx, node("node-a", ""))
	if err != nil {
		t.Fatal(err)
	}
	if md.ProviderID != "local://"+in.ID || md.Zone != in.Zone || md.Region != in.Region || md.InstanceType != in.InstanceType ||
		md.AdditionalLabels[ClusterLabel] != cluster {
		t.Fatalf("metadata: %+v", md)
	}
	var types []string
	for _, a := range md.NodeAddresses {
		types = append(types, string(a.Type))
	}
	if got := strings.Join(types, ","); got != "InternalIP,ExternalIP,InternalDNS,Hostname" {
		t.Fatalf("address order: %s", got)
	}
	byID, err := e.provider.InstanceMetadata(ctx, node("whatever", md.ProviderID))
	if err != nil || byID.ProviderID != md.ProviderID {
		t.Fatalf("by providerID: %+v, %v", byID, err)
	}
}

func TestManyNodesCostOneList(t *testing.T) {
	e := setup(t)
	const n = 100
	for i := range n {
		e.create(t, fmt.Sprintf("node-%03d", i), cluster)
	}
	ctx := context.Background()
	before := e.calls(t, "ListInstances")
	for i := range n {
		if _, err := e.provider.InstanceMetadata(ctx, node(fmt.Sprintf("node-%03d", i), "")); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.calls(t, "ListInstances") - before; got != 1 {
		t.Fatalf("%d node inits made %d List calls, want 1", n, got)
	}
	if got := e.calls(t, "GetInstance"); got != 0 {
		t.Fatalf("%d GetInstance calls, want 0", got)
	}
}

func TestRoutes(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	in := e.create(t, "node-a", cluster)
	r := &cloudprovider.Route{TargetNode: types.NodeName("node-a"), DestinationCIDR: "10.244.1.0/24"}
	if err := e.provider.CreateRoute(ctx, cluster, "hint", r); err != nil {
		t.Fatal(err)
	}
	if err := e.provider.CreateRoute(ctx, cluster, "hint", r); err != nil {
		t.Fatalf("a retried create: %v", err)
	}
	routes, err := e.provider.ListRoutes(ctx, cluster)
	if err != nil || len(routes) != 1 || routes[0].TargetNode != "node-a" || routes[0].DestinationCIDR != "10.244.1.0/24" || routes[0].Blackhole {
		t.Fatalf("routes: %+v, %v", routes, err)
	}
	if _, err := e.cloud.Client.TerminateInstance(ctx, in.ID); err != nil {
		t.Fatal(err)
	}
	e.provider.view.Invalidate()
	routes, _ = e.provider.ListRoutes(ctx, cluster)
	if !routes[0].Blackhole {
		t.Fatal("a route to a terminated instance is not a blackhole")
	}
	if err := e.provider.DeleteRoute(ctx, cluster, routes[0]); err != nil {
		t.Fatal(err)
	}
	if err := e.provider.DeleteRoute(ctx, cluster, routes[0]); err != nil {
		t.Fatalf("deleting twice: %v", err)
	}
}

func lbService(nodePort int32) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "0b5c6a0e-1111-2222-3333-444455556666"},
		Spec: v1.ServiceSpec{
			Type:  v1.ServiceTypeLoadBalancer,
			Ports: []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP, NodePort: nodePort}},
		},
	}
}

func TestDesiredSpec(t *testing.T) {
	e := setup(t)
	local := lbService(30080)
	local.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	local.Spec.HealthCheckNodePort = 32000
	local.Spec.LoadBalancerSourceRanges = []string{"127.0.0.0/8"}
	local.Spec.Ports = append(local.Spec.Ports, v1.ServicePort{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP, NodePort: 30053})
	spec, err := e.provider.DesiredSpec(local, nil)
	if err != nil {
		t.Fatal(err)
	}
	hc := spec.Listeners[0].HealthCheck
	if hc == nil || hc.Protocol != api.HTTP || hc.Port != 32000 || hc.Path != "/healthz" {
		t.Fatalf("ETP Local health check: %+v", hc)
	}
	if len(spec.SourceRanges) != 1 || spec.SourceRanges[0] != "127.0.0.0/8" {
		t.Fatalf("source ranges: %v", spec.SourceRanges)
	}

	cluster := lbService(30080)
	cluster.Spec.Ports = append(cluster.Spec.Ports, v1.ServicePort{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP, NodePort: 30053})
	spec, err = e.provider.DesiredSpec(cluster, nil)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Listeners[0].Protocol != api.UDP || spec.Listeners[0].HealthCheck != nil {
		t.Fatalf("a UDP port without a check port must go unchecked: %+v", spec.Listeners[0])
	}
	if hc := spec.Listeners[1].HealthCheck; hc == nil || hc.Protocol != api.TCP || hc.Port != 0 {
		t.Fatalf("ETP Cluster TCP check: %+v", hc)
	}

	for name, mutate := range map[string]func(*v1.Service){
		"SCTP":          func(s *v1.Service) { s.Spec.Ports[0].Protocol = v1.ProtocolSCTP },
		"no node port":  func(s *v1.Service) { s.Spec.Ports[0].NodePort = 0 },
		"bad check":     func(s *v1.Service) { s.Annotations = map[string]string{AnnotationHealthCheckProtocol: "ICMP"} },
		"bad interval":  func(s *v1.Service) { s.Annotations = map[string]string{AnnotationHealthCheckInterval: "0"} },
		"bad range":     func(s *v1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"nonsense"} },
		"no ports":      func(s *v1.Service) { s.Spec.Ports = nil },
		"bad hc port":   func(s *v1.Service) { s.Annotations = map[string]string{AnnotationHealthCheckPort: "99999"} },
		"http on a udp": func(s *v1.Service) { s.Spec.Ports[0].Protocol = "QUIC" },
	} {
		s := lbService(30080)
		mutate(s)
		if _, err := e.provider.DesiredSpec(s, nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
