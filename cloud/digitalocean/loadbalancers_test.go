package digitalocean

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/digitalocean/agentid"
	"github.com/mooring-dev/mooring/cloud/digitalocean/digitaloceantest"
)

// lbWorld is a world with two droplets and their Nodes (region label
// fra1's droplets are in).
func lbWorld(t *testing.T) (*world, []*v1.Node) {
	t.Helper()
	w := newWorld(t, digitaloceantest.Options{}, nil)
	var nodes []*v1.Node
	for i, name := range []string{"web-1", "web-2"} {
		d := w.do.Put(digitaloceantest.Droplet{Name: name, Region: "fra1", PrivateIP: "127.0.83." + string(rune('1'+i)),
			Tags: []string{testTag}})
		nodes = append(nodes, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{regionLabel: "fra1"}},
			Spec: v1.NodeSpec{ProviderID: agentid.ProviderID(d.ID)}})
	}
	return w, nodes
}

func lbSvc(annotations map[string]string, ports ...v1.ServicePort) *v1.Service {
	if ports == nil {
		ports = []v1.ServicePort{{Name: "http", Port: 80, NodePort: 30080, Protocol: v1.ProtocolTCP}}
	}
	return &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: types.UID("2b7e1c8a-0d4f-4e63-9a55-9f1c3b2a7d10"),
		Annotations: annotations}, Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, Ports: ports}}
}

func (w *world) writes() int {
	return w.do.Calls(digitaloceantest.MethodLBCreate) + w.do.Calls(digitaloceantest.MethodLBUpdate) +
		w.do.Calls(digitaloceantest.MethodLBDelete)
}

// ensure is EnsureLoadBalancer, settling the endpoint's new load
// balancers once while it is pending.
func (w *world) ensure(t *testing.T, svc *v1.Service, nodes []*v1.Node) *v1.LoadBalancerStatus {
	t.Helper()
	lbs, _ := w.cloud.LoadBalancer()
	st, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, nodes)
	if cloud.IsPending(err) {
		if err := w.do.SettleLoadBalancers(); err != nil {
			t.Fatal(err)
		}
		st, err = lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, nodes)
	}
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// DigitalOcean's CCM's annotations make the load balancer they make
// there: rules by protocol (TLS ended with the certificate), the
// overridden health check, PROXY protocol (ipMode Proxy), size, idle
// timeout, sticky sessions, redirect, the firewall from
// loadBalancerSourceRanges and the deny rules; in the nodes' region,
// tagged for the cluster and the Service. A new load balancer is pending
// (no address) until DigitalOcean has built it.
func TestLBAnnotations(t *testing.T) {
	w, nodes := lbWorld(t)
	w.do.AddCertificate("cert-7")
	svc := lbSvc(map[string]string{
		AnnotationProtocol: "http", AnnotationTLSPorts: "443", AnnotationCertificateID: "cert-7",
		AnnotationRedirectHTTPToHTTPS: "true", AnnotationEnableProxyProtocol: "true", AnnotationSizeUnit: "2",
		AnnotationHTTPIdleTimeout: "120", AnnotationOverrideHealthCheck: "", AnnotationHealthCheckPath: "/ready",
		AnnotationHealthCheckPort: "80", AnnotationHealthCheckInterval: "10", AnnotationStickySessionsType: "cookies",
		AnnotationStickyCookieName: "srv", AnnotationStickyCookieTTL: "300", AnnotationDenyRules: "ip:127.0.0.9",
		AnnotationAllowRules: "cidr:127.5.0.0/16", // loadBalancerSourceRanges win
		AnnotationAlgorithm:  "least_connections", AnnotationType: "REGIONAL",
	}, v1.ServicePort{Name: "http", Port: 80, NodePort: 30080}, v1.ServicePort{Name: "https", Port: 443, NodePort: 30443})
	svc.Spec.LoadBalancerSourceRanges = []string{"127.0.0.0/8"}
	lbs, _ := w.cloud.LoadBalancer()
	if _, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, nodes); !cloud.IsPending(err) {
		t.Fatalf("a new load balancer: %v, want pending", err)
	}
	if err := lbs.UpdateLoadBalancer(context.Background(), "kubernetes", svc, nodes); err != nil {
		t.Errorf("UpdateLoadBalancer while it is built: %v", err)
	}
	st := w.ensure(t, svc, nodes)
	all := w.do.LoadBalancers()
	if len(all) != 1 {
		t.Fatalf("load balancers: %d", len(all))
	}
	l := all[0]
	if len(st.Ingress) != 1 || st.Ingress[0].IP != l.IP || st.Ingress[0].IPMode == nil || *st.Ingress[0].IPMode != v1.LoadBalancerIPModeProxy {
		t.Errorf("status %+v, want %s with ipMode Proxy", st, l.IP)
	}
	want := []digitaloceantest.ForwardingRule{
		{EntryProtocol: "http", EntryPort: 80, TargetProtocol: "http", TargetPort: 30080},
		{EntryProtocol: "https", EntryPort: 443, TargetProtocol: "http", TargetPort: 30443, CertificateID: "cert-7"},
	}
	if !reflect.DeepEqual(l.ForwardingRules, want) {
		t.Errorf("rules %+v, want %+v", l.ForwardingRules, want)
	}
	hc := digitaloceantest.HealthCheck{Protocol: "http", Port: 30080, Path: "/ready", CheckIntervalSeconds: 10,
		ResponseTimeoutSeconds: 5, HealthyThreshold: 5, UnhealthyThreshold: 3, ProxyProtocol: true}
	if l.HealthCheck != hc {
		t.Errorf("health check %+v, want %+v", l.HealthCheck, hc)
	}
	if l.Name != "a2b7e1c8a0d4f4e639a559f1c3b2a7d1" || l.Region != "fra1" || l.SizeUnit != 2 || l.HTTPIdleTimeoutSeconds != 120 ||
		!l.Redirect || !l.ProxyProtocol || l.StickySessions != (digitaloceantest.StickySessions{Type: "cookies", CookieName: "srv", CookieTTLSeconds: 300}) ||
		!slices.Equal(l.Firewall.Allow, []string{"cidr:127.0.0.0/8"}) || !slices.Equal(l.Firewall.Deny, []string{"ip:127.0.0.9"}) ||
		len(l.DropletIDs) != 2 {
		t.Errorf("the load balancer: %+v", l)
	}
	tags := []string{testTag, "mooring:cluster:" + testCluster, "mooring:service:shop:web", "mooring:uid:" + string(svc.UID)}
	if !slices.Equal(l.Tags, tags) {
		t.Errorf("tags %v, want %v", l.Tags, tags)
	}
	writes := w.writes()
	w.ensure(t, svc, nodes)
	if w.writes() != writes {
		t.Error("a load balancer that does what is called for was written again")
	}
}

// Without annotations, the load balancer is DigitalOcean's CCM's default:
// tcp rules, kube-proxy's healthz checked over http (the health check
// node port for policy Local), ipMode VIP.
func TestLBDefaults(t *testing.T) {
	w, nodes := lbWorld(t)
	svc := lbSvc(nil)
	st := w.ensure(t, svc, nodes)
	l := w.do.LoadBalancers()[0]
	if st.Ingress[0].IPMode == nil || *st.Ingress[0].IPMode != v1.LoadBalancerIPModeVIP {
		t.Errorf("status %+v, want ipMode VIP", st)
	}
	if hc := l.HealthCheck; hc.Protocol != "http" || hc.Port != kubeProxyHealthPort || hc.Path != "/healthz" || hc.CheckIntervalSeconds != 3 {
		t.Errorf("health check %+v", hc)
	}
	svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	svc.Spec.HealthCheckNodePort = 32000
	w.ensure(t, svc, nodes)
	if hc := w.do.LoadBalancers()[0].HealthCheck; hc.Port != 32000 || hc.Path != "/healthz" {
		t.Errorf("policy Local: health check %+v, want the health check node port", hc)
	}
}

// A malformed annotation, or one of DigitalOcean's CCM's that mooring
// does not support, is an error naming it, and nothing is called.
func TestLBBadAnnotations(t *testing.T) {
	w, nodes := lbWorld(t)
	lbs, _ := w.cloud.LoadBalancer()
	for ann, val := range map[string]string{
		AnnotationProtocol:                   "ftp",
		AnnotationSizeUnit:                   "0",
		AnnotationHTTPIdleTimeout:            "5",
		AnnotationTLSPorts:                   "80", // no certificate nor passthrough
		AnnotationHealthCheckPort:            "81",
		AnnotationAllowRules:                 "1.2.3.4",
		AnnotationType:                       "REGIONAL_NETWORK",
		AnnotationRedirectHTTPToHTTPS:        "yes",
		AnnotationHTTP3Port:                  "80", // no certificate
		AnnotationHostname:                   "web_1.example.com",
		AnnotationPrefix + "size-slug":       "lb-small",
		AnnotationPrefixGA + "disown":        "true",
		AnnotationPrefix + "helthcheck-path": "/",
	} {
		svc := lbSvc(map[string]string{ann: val})
		if ann == AnnotationHealthCheckPort {
			// Read only with the override, as DigitalOcean's CCM does.
			svc.Annotations[AnnotationOverrideHealthCheck] = "true"
		}
		_, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, nodes)
		if err == nil || !strings.Contains(err.Error(), ann) {
			t.Errorf("%s=%s: %v, want an error naming it", ann, val, err)
		}
	}
	for _, m := range []string{digitaloceantest.MethodLBList, digitaloceantest.MethodLBGet, digitaloceantest.MethodLBCreate,
		digitaloceantest.MethodLBUpdate, digitaloceantest.MethodLBDelete} {
		if n := w.do.Calls(m); n != 0 {
			t.Errorf("%s calls: %d, want none", m, n)
		}
	}
}

// A load balancer DigitalOcean's CCM made is found by the name it gives
// (its name annotation here; the Service has no id annotation) and
// adopted: its id and IP kept, tagged for the cluster, its other tags
// kept.
func TestLBAdoptByName(t *testing.T) {
	w, nodes := lbWorld(t)
	svc := lbSvc(map[string]string{AnnotationName: "shop-web"})
	theirs, err := w.do.PutLoadBalancer(digitaloceantest.LoadBalancer{Name: "shop-web", Region: "fra1", Tags: []string{"k8s:doks-1"},
		ForwardingRules: []digitaloceantest.ForwardingRule{{EntryProtocol: "tcp", EntryPort: 80, TargetProtocol: "tcp", TargetPort: 30080}}})
	if err != nil {
		t.Fatal(err)
	}
	st := w.ensure(t, svc, nodes)
	all := w.do.LoadBalancers()
	if len(all) != 1 || all[0].ID != theirs.ID || all[0].IP != theirs.IP || st.Ingress[0].IP != theirs.IP {
		t.Fatalf("after adoption: %+v, status %+v; want %s at %s", all, st, theirs.ID, theirs.IP)
	}
	if w.do.Calls(digitaloceantest.MethodLBCreate) != 0 || !slices.Contains(all[0].Tags, "k8s:doks-1") ||
		!slices.Contains(all[0].Tags, "mooring:uid:"+string(svc.UID)) || len(all[0].DropletIDs) != 2 {
		t.Errorf("adopted: %+v", all[0])
	}
}

// The hostname annotation makes the status that hostname alone, as
// DigitalOcean's CCM does; the load balancer is the same.
func TestLBHostname(t *testing.T) {
	w, nodes := lbWorld(t)
	svc := lbSvc(map[string]string{AnnotationHostname: "Web.Example.com"})
	st := w.ensure(t, svc, nodes)
	if len(st.Ingress) != 1 || st.Ingress[0].Hostname != "web.example.com" || st.Ingress[0].IP != "" {
		t.Errorf("status %+v, want the hostname alone", st.Ingress)
	}
	lbs, _ := w.cloud.LoadBalancer()
	if got, ok, err := lbs.GetLoadBalancer(context.Background(), "kubernetes", svc); err != nil || !ok || !reflect.DeepEqual(got, st) {
		t.Errorf("GetLoadBalancer: %+v, %v, %v", got, ok, err)
	}
}

// The cluster's load balancers are listed page after page (pageSize per
// page), and one of another cluster is not the cluster's.
func TestLBListPages(t *testing.T) {
	w := newWorld(t, digitaloceantest.Options{}, func(c *Config) { c.PageSize = 2 })
	for i := range 5 {
		tags := []string{"mooring:cluster:" + testCluster, "mooring:uid:uid-" + string(rune('a'+i))}
		if i == 4 {
			tags = []string{"mooring:cluster:c2", "mooring:uid:uid-e"}
		}
		if _, err := w.do.PutLoadBalancer(digitaloceantest.LoadBalancer{Name: "lb-" + string(rune('a'+i)), Tags: tags,
			ForwardingRules: []digitaloceantest.ForwardingRule{{EntryProtocol: "tcp", EntryPort: 80, TargetProtocol: "tcp", TargetPort: 30080}}}); err != nil {
			t.Fatal(err)
		}
	}
	lbs, _ := w.cloud.LoadBalancer()
	owned, err := lbs.(cloud.LoadBalancerInventory).ListOwnedLoadBalancers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(owned) != 4 || w.do.Calls(digitaloceantest.MethodLBList) != 3 {
		t.Errorf("owned %d in %d calls, want 4 in 3", len(owned), w.do.Calls(digitaloceantest.MethodLBList))
	}
}

// A load balancer DigitalOcean failed to build (errored) is an error, not
// a load balancer still being built.
func TestLBErrored(t *testing.T) {
	w, nodes := lbWorld(t)
	svc := lbSvc(nil)
	w.ensure(t, svc, nodes)
	id := w.do.LoadBalancers()[0].ID
	if err := w.do.UpdateLoadBalancer(id, func(l *digitaloceantest.LoadBalancer) { l.Status = digitaloceantest.LBStatusErrored }); err != nil {
		t.Fatal(err)
	}
	lbs, _ := w.cloud.LoadBalancer()
	_, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, nodes)
	if err == nil || cloud.IsPending(err) || !strings.Contains(err.Error(), "errored") {
		t.Errorf("an errored load balancer: %v, want an error saying so", err)
	}
}
