package oci_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

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

// lbRig is a provider over ocitest with the bed's subnets, and two nodes.
type lbRig struct {
	ep    *ocitest.Cloud
	c     *oci.Cloud
	lbs   cloudprovider.LoadBalancer
	nodes []*v1.Node
}

func newLBRig(t *testing.T) *lbRig {
	t.Helper()
	ep, c := setup(t, ocitest.Options{}, lbNetwork+"  workRequestWait: 300ms\n")
	putLBNetwork(ep)
	ep.HoldWorkRequests(true)
	lbs, _ := c.LoadBalancer()
	r := &lbRig{ep: ep, c: c, lbs: lbs}
	for i := range 2 {
		in := ep.Put(ocitest.Instance{DisplayName: fmt.Sprintf("lbn-%d", i), PrivateIP: fmt.Sprintf("127.0.91.%d", 60+i), FreeformTags: tagged(cluster)})
		r.nodes = append(r.nodes, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: in.DisplayName}, Spec: v1.NodeSpec{ProviderID: agentid.ProviderID(in.ID)},
			Status: v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: in.PrivateIP}}}})
	}
	return r
}

func lbSvc(name string, ann map[string]string, ports ...v1.ServicePort) *v1.Service {
	if len(ports) == 0 {
		ports = []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP, NodePort: 30080}}
	}
	return &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID("uid-" + name), Annotations: ann},
		Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, Ports: ports}}
}

// ensure is EnsureLoadBalancer until built (settling the work requests
// between); it returns the status.
func (r *lbRig) ensure(t *testing.T, svc *v1.Service) *v1.LoadBalancerStatus {
	t.Helper()
	for try := 0; try < 6; try++ {
		st, err := r.lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, r.nodes)
		if cloud.IsPending(err) {
			r.ep.Settle()
			continue
		}
		if err != nil {
			t.Fatalf("EnsureLoadBalancer: %v", err)
		}
		return st
	}
	t.Fatal("still pending")
	return nil
}

func (r *lbRig) only(t *testing.T) ocitest.Balancer {
	t.Helper()
	all := r.ep.Balancers()
	if len(all) != 1 {
		t.Fatalf("load balancers: %d, want 1", len(all))
	}
	return all[0]
}

const none = "None"

// An NLB as its annotations say: its name, subnet, NSGs, policy, source
// preservation with policy Local (and kube-proxy's health check node
// port), PPv2, TCP and UDP on one port in one listener.
func TestNLBFromAnnotations(t *testing.T) {
	r := newLBRig(t)
	svc := lbSvc("dns", map[string]string{oci.AnnType: "NLB", oci.AnnotationRuleMode: none,
		oci.AnnNLBSubnet: "ocid1.subnet.oc1.iad.aaaaaaaaothersubnet", oci.AnnNLBNSGs: "ocid1.networksecuritygroup.oc1.iad.a, ocid1.networksecuritygroup.oc1.iad.b",
		oci.AnnNLBPolicy: "THREE_TUPLE", oci.AnnNLBPPv2: "true", oci.AnnNLBInternal: "true"},
		v1.ServicePort{Name: "tcp", Port: 53, Protocol: v1.ProtocolTCP, NodePort: 30053}, v1.ServicePort{Name: "udp", Port: 53, Protocol: v1.ProtocolUDP, NodePort: 30053})
	svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	svc.Spec.HealthCheckNodePort = 31000
	st := r.ensure(t, svc)
	b := r.only(t)
	if b.Kind != ocitest.KindNLB || b.DisplayName != "shop/dns/uid-dns" || !b.Private || b.Subnets[0] != "ocid1.subnet.oc1.iad.aaaaaaaaothersubnet" || len(b.NSGs) != 2 {
		t.Errorf("NLB: %+v", b)
	}
	l, ok := b.Listeners["TCP_AND_UDP-53"]
	set := b.BackendSets["TCP_AND_UDP-53"]
	if !ok || l.Protocol != "TCP_AND_UDP" || !l.PPv2 || set.Policy != "THREE_TUPLE" || !set.PreserveSource || len(set.Backends) != 2 ||
		set.Check.Port != 31000 || set.Check.Path != "/healthz" || set.Backends[0].TargetID == "" {
		t.Errorf("listener %+v, backend set %+v", l, set)
	}
	if b.FreeformTags["mooring/cluster"] != cluster || b.FreeformTags["mooring/service-uid"] != "uid-dns" || !strings.HasPrefix(b.FreeformTags["mooring/rules"], "None-") {
		t.Errorf("tags: %v", b.FreeformTags)
	}
	if len(st.Ingress) != 1 || st.Ingress[0].IP != b.IP {
		t.Errorf("status %+v, want %s", st, b.IP)
	}
	// Unchanged: no write.
	before := len(r.ep.WorkRequests())
	r.ensure(t, svc)
	if n := len(r.ep.WorkRequests()) - before; n != 0 {
		t.Errorf("work requests for an unchanged NLB: %d", n)
	}
	// Deleting waits for its work request, then is done.
	err := r.lbs.EnsureLoadBalancerDeleted(context.Background(), "kubernetes", svc)
	if !cloud.IsPending(err) {
		t.Errorf("delete while its work request runs: %v, want a PendingError", err)
	}
	r.ep.Settle()
	if err := r.lbs.EnsureLoadBalancerDeleted(context.Background(), "kubernetes", svc); err != nil {
		t.Fatal(err)
	}
	if n := len(r.ep.Balancers()); n != 0 {
		t.Errorf("left: %d", n)
	}
}

// An LB as its annotations say: flexible shape and bandwidth, internal
// (its first subnet alone), policy, health check, HTTP listeners (the
// backend set keeps its TCP name), idle timeout and PROXY protocol (ipMode
// Proxy).
func TestLBFromAnnotations(t *testing.T) {
	r := newLBRig(t)
	svc := lbSvc("web", map[string]string{oci.AnnotationRuleMode: none, oci.AnnLBShape: "Flexible", oci.AnnLBFlexMin: "20", oci.AnnLBFlexMax: "200",
		oci.AnnLBInternal: "true", oci.AnnLBSubnet2: "ocid1.subnet.oc1.iad.aaaaaaaasecond", oci.AnnPolicy: "IP_HASH", oci.AnnLBRetries: "5",
		oci.AnnLBInterval: "3000", oci.AnnLBProtocol: "http", oci.AnnLBIdleTimeout: "120", oci.AnnLBProxyProtocol: "2"})
	st := r.ensure(t, svc)
	b := r.only(t)
	if b.Kind != ocitest.KindLB || b.DisplayName != "uid-web" || b.Shape != "flexible" || b.FlexMin != 20 || b.FlexMax != 200 || !b.Private ||
		len(b.Subnets) != 1 || b.Subnets[0] != lbSubnet {
		t.Errorf("LB: %+v", b)
	}
	l, set := b.Listeners["HTTP-80"], b.BackendSets["TCP-80"]
	if l.BackendSet != "TCP-80" || l.Protocol != "HTTP" || l.IdleTimeout != 120 || l.ProxyProtocol != 2 || set.Policy != "IP_HASH" ||
		set.Check.Retries != 5 || set.Check.Interval != 3000 || set.Check.Port != 10256 || len(set.Backends) != 2 {
		t.Errorf("listener %+v, backend set %+v", l, set)
	}
	if st.Ingress[0].IPMode == nil || *st.Ingress[0].IPMode != v1.LoadBalancerIPModeProxy {
		t.Errorf("status %+v: want ipMode Proxy (PROXY protocol)", st.Ingress)
	}
	// A change of bandwidth is one shape update, the address kept.
	svc.Annotations[oci.AnnLBFlexMax] = "300"
	r.ensure(t, svc)
	if got := r.only(t); got.FlexMax != 300 || got.IP != b.IP || got.ID != b.ID {
		t.Errorf("after the bandwidth change: %+v", got)
	}
}

// Bad input: an error naming each annotation at fault, nothing written.
func TestLBBadAnnotations(t *testing.T) {
	r := newLBRig(t)
	for name, ann := range map[string]map[string]string{
		oci.AnnType:                         {oci.AnnType: "alb"},
		oci.AnnLBShape:                      {oci.AnnLBShape: "5Mbps"},
		oci.AnnLBFlexMin:                    {oci.AnnLBFlexMin: "5"},
		oci.AnnLBInternal:                   {oci.AnnLBInternal: "maybe"},
		oci.AnnPolicy:                       {oci.AnnPolicy: "RANDOM"},
		oci.AnnLBInterval:                   {oci.AnnLBInterval: "10"},
		oci.AnnNSGs:                         {oci.AnnNSGs: "sg-1"},
		oci.AnnIPMode:                       {oci.AnnIPMode: "direct"},
		oci.AnnotationRuleMode:              {oci.AnnotationRuleMode: "firewall"},
		oci.AnnLBPrefix + "no-such-setting": {oci.AnnLBPrefix + "no-such-setting": "1"},
		oci.AnnNLBPreserveSource:            {oci.AnnType: "nlb", oci.AnnNLBPreserveSource: "true", oci.AnnotationRuleMode: none},
		oci.AnnLBSSLPorts:                   {oci.AnnLBSSLPorts: "443", oci.AnnotationRuleMode: none},
		"UDP":                               {oci.AnnotationRuleMode: none, "udp": ""},
	} {
		svc := lbSvc("bad", ann)
		if _, ok := ann["udp"]; ok {
			delete(svc.Annotations, "udp")
			svc.Spec.Ports[0].Protocol = v1.ProtocolUDP
		}
		if _, err := r.lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, r.nodes); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v, want an error naming it", name, err)
		}
	}
	if n := len(r.ep.WorkRequests()); n != 0 || r.ep.Calls(ocitest.MethodCreateLB) != 0 || r.ep.Calls(ocitest.MethodCreateNLB) != 0 {
		t.Errorf("writes: %d work requests", n)
	}
}

// While the work request runs the Service waits (a PendingError); a
// work request that FAILED is an error; a 409 (a work request of another
// runs on it) is a wait, not an error.
func TestLBWorkRequests(t *testing.T) {
	r := newLBRig(t)
	ctx := context.Background()
	svc := lbSvc("slow", map[string]string{oci.AnnotationRuleMode: none})
	if _, err := r.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, r.nodes); !cloud.IsPending(err) {
		t.Fatalf("while creating: %v, want a PendingError", err)
	}
	if _, err := r.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, r.nodes); !cloud.IsPending(err) || r.ep.Calls(ocitest.MethodCreateLB) != 1 {
		t.Fatalf("asked again while creating: %v (creates %d), want a PendingError and one create", err, r.ep.Calls(ocitest.MethodCreateLB))
	}
	r.ensure(t, svc)
	// A change while another work request runs on it: 409, a wait.
	busy := lbSvc("slow", map[string]string{oci.AnnotationRuleMode: none})
	busy.Spec.Ports[0].NodePort = 30081
	holdOne(t, r)
	if _, err := r.lbs.EnsureLoadBalancer(ctx, "kubernetes", busy, r.nodes); !cloud.IsPending(err) {
		t.Errorf("a change while a work request runs: %v, want a PendingError", err)
	}
	r.ep.Settle()
	r.ensure(t, busy)
	if got := r.only(t).BackendSets["TCP-80"].Backends[0].Port; got != 30081 {
		t.Errorf("node port %d, want 30081", got)
	}
	// A create whose work request fails: the LB is FAILED, an error.
	r.ep.FailWorkRequests(1)
	bad := lbSvc("broken", map[string]string{oci.AnnotationRuleMode: none})
	_, err := r.lbs.EnsureLoadBalancer(ctx, "kubernetes", bad, r.nodes)
	r.ep.Settle()
	if err == nil || cloud.IsPending(err) {
		_, err = r.lbs.EnsureLoadBalancer(ctx, "kubernetes", bad, r.nodes)
	}
	if err == nil || cloud.IsPending(err) || !strings.Contains(err.Error(), "FAILED") {
		t.Errorf("a failed create: %v, want an error saying FAILED", err)
	}
}

// holdOne starts a work request on the rig's only load balancer, held.
func holdOne(t *testing.T, r *lbRig) {
	t.Helper()
	b := r.only(t)
	// The endpoint's own update, as another client's: its work request
	// is held until Settle.
	if err := r.ep.StartWorkRequest(b.ID); err != nil {
		t.Fatal(err)
	}
}

// An LB that OCI's CCM made is adopted: its id and address kept, mooring's
// tags added, nothing made.
func TestLBAdoption(t *testing.T) {
	r := newLBRig(t)
	svc := lbSvc("old", map[string]string{oci.AnnotationRuleMode: none})
	made, err := r.ep.PutBalancer(ccmBalancer(svc, r.nodes))
	if err != nil {
		t.Fatal(err)
	}
	st := r.ensure(t, svc)
	got := r.only(t)
	if got.ID != made.ID || got.IP != made.IP || st.Ingress[0].IP != made.IP || r.ep.Calls(ocitest.MethodCreateLB) != 0 ||
		got.FreeformTags["mooring/service-uid"] != "uid-old" {
		t.Errorf("adopted: %+v (status %+v), want %s at %s kept and tagged", got, st, made.ID, made.IP)
	}
}

// TLS from a Secret: ssl-ports' listeners end TLS with the certificate of
// tls-secret, sent in the create.
func TestLBTLSSecret(t *testing.T) {
	r := newLBRig(t)
	cert, key := selfSigned(t)
	kc := fake.NewSimpleClientset(&v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-tls"}, Type: v1.SecretTypeTLS,
		Data: map[string][]byte{v1.TLSCertKey: cert, v1.TLSPrivateKeyKey: key}})
	r.c.SetKubeClient(kc)
	svc := lbSvc("secure", map[string]string{oci.AnnotationRuleMode: none, oci.AnnLBSSLPorts: "443", oci.AnnLBTLSSecret: "web-tls"},
		v1.ServicePort{Name: "https", Port: 443, Protocol: v1.ProtocolTCP, NodePort: 30443})
	r.ensure(t, svc)
	b := r.only(t)
	if b.Listeners["TCP-443"].Certificate != "web-tls" || b.Certificates["web-tls"] == "" {
		t.Errorf("listener %+v, certificates %v", b.Listeners["TCP-443"], len(b.Certificates))
	}
	missing := lbSvc("nosecret", map[string]string{oci.AnnotationRuleMode: none, oci.AnnLBSSLPorts: "443", oci.AnnLBTLSSecret: "absent"})
	if _, err := r.lbs.EnsureLoadBalancer(context.Background(), "kubernetes", missing, r.nodes); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("a missing Secret: %v", err)
	}
}

func selfSigned(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "web.example"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"web.example"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
}

// A load balancer deleted by hand is made again: the Service's UID, its
// create's opc-retry-token, was spent on the first (OCI answers 409
// InvalidatedRetryToken), so the second create goes with a new token.
func TestLBMadeAgainAfterDeletedByHand(t *testing.T) {
	r := newLBRig(t)
	for _, typ := range []string{oci.TypeLB, oci.TypeNLB} {
		svc := lbSvc("again-"+typ, map[string]string{oci.AnnType: typ, oci.AnnotationRuleMode: none})
		r.ensure(t, svc)
		first := r.only(t)
		r.ep.DeleteBalancer(first.ID)
		r.ensure(t, svc)
		if again := r.only(t); again.ID == first.ID || again.DisplayName != first.DisplayName {
			t.Errorf("%s: made again as %+v, want a new one of the same name", typ, again)
		}
		r.ep.DeleteBalancer(r.only(t).ID)
	}
}

// The loadBalancer block is checked with the rest of the config.
func TestLBConfigErrors(t *testing.T) {
	base := "tenancy: ocid1.tenancy.oc1..aaaa\ncompartments: [ocid1.compartment.oc1..aaaa]\nregion: us-ashburn-1\nclusterID: c\nconfigFile: /c\n"
	_, err := oci.ParseConfig(strings.NewReader(base + "loadBalancer:\n  compartment: ocid1.compartment.oc1..other\n  subnet1: subnet-1\n" +
		"  subnet2: ocid1.subnet.oc1.iad.b\n  nodeSubnets: [ocid1.vcn.oc1.iad.c]\n  namePrefix: 'a b'\n  workRequestWait: -1s\n" +
		"networkLoadBalancerEndpoint: ftp://nlb\n"))
	for _, want := range []string{"loadBalancer.compartment", `subnet "subnet-1"`, `subnet "ocid1.vcn.oc1.iad.c"`, "namePrefix", "workRequestWait",
		"networkLoadBalancerEndpoint"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want an error naming %s: %v", want, err)
		}
	}
	cfg, err := oci.ParseConfig(strings.NewReader(base + "loadBalancer:\n  subnet1: ocid1.subnet.oc1.iad.a\n"))
	if err != nil || cfg.LoadBalancer.Compartment != "ocid1.compartment.oc1..aaaa" || cfg.LoadBalancer.WorkRequestWait.Duration != oci.DefaultWorkRequestWait {
		t.Errorf("defaults: %+v, %v", cfg.LoadBalancer, err)
	}
}
