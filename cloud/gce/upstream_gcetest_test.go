package gce

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	compute "google.golang.org/api/compute/v1"
	"google.golang.org/api/option"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	cloudprovider "k8s.io/cloud-provider"
	upstreamgce "k8s.io/cloud-provider-gcp/providers/gce"

	"github.com/mooring-dev/mooring/cloud/gce/agentid"
	"github.com/mooring-dev/mooring/cloud/gce/gcetest"
)

// kubeStub is the little of a kube-apiserver the upstream provider uses:
// the ConfigMap kube-system/ingress-uid (list and a watch that stays
// open), Events (accepted) and Services' patches (its internal load
// balancers' finalizer, echoed back). It counts what it was asked.
type kubeStub struct {
	srv *httptest.Server
	uid string
	mu  sync.Mutex
	// patches: Service namespace/name -> its patches' bodies.
	patches map[string][]string
}

func newKubeStub(t *testing.T, uid string) *kubeStub {
	k := &kubeStub{uid: uid, patches: map[string][]string{}}
	k.srv = httptest.NewServer(http.HandlerFunc(k.serve))
	t.Cleanup(k.srv.Close)
	return k
}

func (k *kubeStub) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	body, _ := io.ReadAll(r.Body)
	switch p := r.URL.Path; {
	case p == "/api/v1/namespaces/kube-system/configmaps" && r.URL.Query().Get("watch") == "true":
		w.WriteHeader(http.StatusOK)
		if r.URL.Query().Get("sendInitialEvents") == "true" {
			// client-go's streaming list: the object, then the bookmark
			// that ends the initial events.
			enc := json.NewEncoder(w)
			_ = enc.Encode(map[string]any{"type": "ADDED", "object": k.configMap()})
			_ = enc.Encode(map[string]any{"type": "BOOKMARK", "object": map[string]any{"kind": "ConfigMap", "apiVersion": "v1",
				"metadata": map[string]any{"resourceVersion": "7", "annotations": map[string]string{"k8s.io/initial-events-end": "true"}}}})
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	case p == "/api/v1/namespaces/kube-system/configmaps" && r.Method == http.MethodPost:
		// The upstream creates the ConfigMap when its watch has not shown
		// it yet; it exists.
		w.WriteHeader(http.StatusConflict)
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"AlreadyExists","code":409,"message":"configmaps \"ingress-uid\" already exists"}`)
	case p == "/api/v1/namespaces/kube-system/configmaps":
		_ = json.NewEncoder(w).Encode(v1.ConfigMapList{TypeMeta: metav1.TypeMeta{Kind: "ConfigMapList", APIVersion: "v1"},
			ListMeta: metav1.ListMeta{ResourceVersion: "7"}, Items: []v1.ConfigMap{k.configMap()}})
	case strings.HasSuffix(p, "/events") && r.Method == http.MethodPost:
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	case strings.Contains(p, "/services/") && r.Method == http.MethodPatch:
		parts := strings.Split(p, "/") // /api/v1/namespaces/NS/services/NAME
		ns, name := parts[4], parts[6]
		k.mu.Lock()
		k.patches[ns+"/"+name] = append(k.patches[ns+"/"+name], string(body))
		k.mu.Unlock()
		svc := v1.Service{TypeMeta: metav1.TypeMeta{Kind: "Service", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		_ = json.NewEncoder(w).Encode(svc)
	default:
		http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`, http.StatusNotFound)
	}
}

// configMap is the cluster id's ConfigMap.
func (k *kubeStub) configMap() v1.ConfigMap {
	return v1.ConfigMap{TypeMeta: metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: upstreamgce.UIDConfigMapName, Namespace: upstreamgce.UIDNamespace, ResourceVersion: "7"},
		Data:       map[string]string{upstreamgce.UIDCluster: k.uid, upstreamgce.UIDProvider: k.uid}}
}

// builder hands the upstream a client of the stub
// (cloudprovider.ControllerClientBuilder).
type builder struct{ host string }

func (b builder) Config(string) (*restclient.Config, error) {
	return &restclient.Config{Host: b.host}, nil
}
func (b builder) ConfigOrDie(string) *restclient.Config { return &restclient.Config{Host: b.host} }
func (b builder) Client(string) (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(&restclient.Config{Host: b.host})
}
func (b builder) ClientOrDie(n string) kubernetes.Interface {
	c, err := b.Client(n)
	if err != nil {
		panic(err)
	}
	return c
}

// lbWorld is a provider with the upstream's load balancers over gcetest,
// its operations polled every 10 ms, and nodes whose node ports answer
// with the node's name.
type lbWorld struct {
	gc    *gcetest.Cloud
	cloud *Cloud
	kube  *kubeStub
	nodes []*v1.Node
	// nodePorts: a Service port -> its node port, for the stand-in for
	// kube-proxy.
	mu        sync.Mutex
	nodePorts map[int]int
}

const testUID = "5a1e2b3c4d5e6f70"

func newLBWorld(t *testing.T, nodes int, edit func(*Config)) *lbWorld {
	t.Helper()
	fakeADC(t)
	gc := gcetest.NewStarted(t, gcetest.Options{OperationDelay: 20 * time.Millisecond})
	cfg := Config{Projects: []string{gcetest.DefaultProject}, ClusterID: testCluster, ComputeEndpoint: gc.Endpoint(),
		WithoutAuthentication: true, CertsURL: gc.CertsURL(), LoadBalancers: LoadBalancersUpstream,
		Upstream: &UpstreamConfig{Zone: gcetest.DefaultZone, NodeTags: []string{"mooring-node"}, Subnetwork: "default"}}
	if edit != nil {
		edit(&cfg)
	}
	svc, err := compute.NewService(context.Background(), option.WithEndpoint(gc.Endpoint()), option.WithoutAuthentication())
	if err != nil {
		t.Fatal(err)
	}
	c, err := newCloud(cfg, svc, nil, upstreamOptions{opPoll: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	w := &lbWorld{gc: gc, cloud: c, kube: newKubeStub(t, testUID), nodePorts: map[int]int{}}
	gc.SetKubeProxy(func(*compute.ForwardingRule) map[int]int {
		w.mu.Lock()
		defer w.mu.Unlock()
		return maps.Clone(w.nodePorts)
	})
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	c.Initialize(builder{host: w.kube.srv.URL}, stop)
	for i := range nodes {
		w.addNode(t, i)
	}
	return w
}

func (w *lbWorld) addNode(t *testing.T, i int) *v1.Node {
	in := w.gc.Put(gcetest.Instance{Name: fmt.Sprintf("lbnode-%d", i), InternalIP: fmt.Sprintf("127.0.79.%d", 60+i),
		Labels: map[string]string{DefaultClusterLabel: testCluster}})
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: in.Name, Labels: map[string]string{v1.LabelTopologyZone: in.Zone}},
		Spec: v1.NodeSpec{ProviderID: agentid.ProviderID(in.Project, in.Zone, in.Name)},
		Status: v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: in.InternalIP}},
			Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}}}
	w.nodes = append(w.nodes, n)
	return n
}

// serveNodePort makes every node answer its name on port (the stand-in
// for kube-proxy's node port) and maps svcPort to it.
func (w *lbWorld) serveNodePort(t *testing.T, svcPort, port int) {
	t.Helper()
	for _, n := range w.nodes {
		l, err := net.Listen("tcp", net.JoinHostPort(n.Status.Addresses[0].Address, fmt.Sprint(port)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		name := n.Name
		go func() {
			for {
				conn, err := l.Accept()
				if err != nil {
					return
				}
				_, _ = io.WriteString(conn, name+"\n")
				conn.Close()
			}
		}()
	}
	w.mu.Lock()
	w.nodePorts[svcPort] = port
	w.mu.Unlock()
}

// reached dials ip:port until every name of want has answered.
func reached(t *testing.T, ip string, port int, want ...string) {
	t.Helper()
	seen := map[string]bool{}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(ip, fmt.Sprint(port)), time.Second)
		if err == nil {
			b, _ := io.ReadAll(conn)
			conn.Close()
			seen[strings.TrimSpace(string(b))] = true
		}
		all := true
		for _, n := range want {
			all = all && seen[n]
		}
		if all {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("traffic to %s:%d reached %v, want %v", ip, port, seen, want)
}

func lbService(name string, ports ...int32) *v1.Service {
	h := fnv.New64a()
	_, _ = io.WriteString(h, name)
	uid := types.UID(fmt.Sprintf("c0ffee00-0000-4000-8000-%012x", h.Sum64()&(1<<48-1)))
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: uid},
		Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, SessionAffinity: v1.ServiceAffinityNone}}
	for _, p := range ports {
		svc.Spec.Ports = append(svc.Spec.Ports, v1.ServicePort{Name: fmt.Sprint("p", p), Port: p, Protocol: v1.ProtocolTCP, NodePort: 30000 + p})
	}
	return svc
}

// ensure is EnsureLoadBalancer once the upstream has read its cluster id.
func (w *lbWorld) ensure(t *testing.T, svc *v1.Service) *v1.LoadBalancerStatus {
	t.Helper()
	lbs, ok := w.cloud.LoadBalancer()
	if !ok {
		t.Fatal("no LoadBalancer with loadBalancers: upstream")
	}
	for try := 0; ; try++ {
		st, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, w.nodes)
		if err != nil && (strings.Contains(err.Error(), "ClusterID is not ready") || strings.Contains(err.Error(), "already exists")) && try < 100 {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatalf("EnsureLoadBalancer(%s): %v", svc.Name, err)
		}
		return st
	}
}

// left is every networking resource gcetest holds, by collection.
func (w *lbWorld) left() map[string][]string {
	p, r := gcetest.DefaultProject, "us-central1"
	out := map[string][]string{}
	for _, x := range w.gc.ForwardingRules(p, r) {
		out["forwardingRules"] = append(out["forwardingRules"], x.Name)
	}
	for _, x := range w.gc.TargetPools(p, r) {
		out["targetPools"] = append(out["targetPools"], x.Name)
	}
	for _, x := range w.gc.Addresses(p, r) {
		out["addresses"] = append(out["addresses"], x.Name)
	}
	for _, x := range w.gc.Firewalls(p) {
		out["firewalls"] = append(out["firewalls"], x.Name)
	}
	for _, x := range w.gc.HTTPHealthChecks(p) {
		out["httpHealthChecks"] = append(out["httpHealthChecks"], x.Name)
	}
	return out
}

// The upstream's external load balancer over gcetest: made (a static
// address reserved, then released to the forwarding rule, firewall rules
// for the ports and the nodes' health check on the node tags, a target
// pool of the nodes' instances with the cluster's node health check, the
// forwarding rule last), carrying traffic to every node, a node leaving
// it (removeInstance), and deleted with nothing left.
func TestUpstreamExternalLoadBalancer(t *testing.T) {
	w := newLBWorld(t, 3, nil)
	w.serveNodePort(t, 80, 30080)
	svc := lbService("web", 80)
	st := w.ensure(t, svc)
	if len(st.Ingress) != 1 || !gcetest.DataPlanePrefix.Contains(netip.MustParseAddr(st.Ingress[0].IP)) {
		t.Fatalf("status %+v, want an address of %s", st, gcetest.DataPlanePrefix)
	}
	ip := st.Ingress[0].IP
	name := cloudprovider.DefaultLoadBalancerName(svc)
	rules := w.gc.ForwardingRules(gcetest.DefaultProject, "us-central1")
	if len(rules) != 1 || rules[0].Name != name || rules[0].IPAddress != ip || rules[0].PortRange != "80-80" || rules[0].LoadBalancingScheme != "EXTERNAL" {
		t.Fatalf("forwarding rules %+v", rules)
	}
	pools := w.gc.TargetPools(gcetest.DefaultProject, "us-central1")
	if len(pools) != 1 || len(pools[0].Instances) != 3 || len(pools[0].HealthChecks) != 1 ||
		!strings.HasSuffix(pools[0].HealthChecks[0], "/httpHealthChecks/k8s-"+testUID+"-node") {
		t.Fatalf("target pools %+v", pools)
	}
	fws := w.gc.Firewalls(gcetest.DefaultProject)
	if len(fws) != 2 {
		t.Fatalf("firewalls %+v, want the load balancer's and the node health check's", fws)
	}
	for _, fw := range fws {
		if len(fw.TargetTags) != 1 || fw.TargetTags[0] != "mooring-node" {
			t.Errorf("firewall %s targets %v, want the node tags", fw.Name, fw.TargetTags)
		}
	}
	reached(t, ip, 80, "lbnode-0", "lbnode-1", "lbnode-2")

	// The address stays the rule's: released as static, it is ephemeral.
	if a := w.gc.Addresses(gcetest.DefaultProject, "us-central1"); len(a) != 0 {
		t.Errorf("addresses after the load balancer was made: %+v", a)
	}

	lbs, _ := w.cloud.LoadBalancer()
	before := w.gc.Calls("targetPools.removeInstance")
	w.nodes = w.nodes[:2]
	if err := lbs.UpdateLoadBalancer(context.Background(), "kubernetes", svc, w.nodes); err != nil {
		t.Fatal(err)
	}
	if n := w.gc.Calls("targetPools.removeInstance") - before; n != 1 {
		t.Errorf("%d removeInstance calls for a node leaving, want 1", n)
	}
	w.gc.Settle()
	if pools := w.gc.TargetPools(gcetest.DefaultProject, "us-central1"); len(pools[0].Instances) != 2 {
		t.Fatalf("target pool after a node left: %v", pools[0].Instances)
	}
	reached(t, ip, 80, "lbnode-0", "lbnode-1")

	if st, exists, err := lbs.GetLoadBalancer(context.Background(), "kubernetes", svc); err != nil || !exists || st.Ingress[0].IP != ip {
		t.Fatalf("GetLoadBalancer: %+v, %v, %v", st, exists, err)
	}
	if err := lbs.EnsureLoadBalancerDeleted(context.Background(), "kubernetes", svc); err != nil {
		t.Fatal(err)
	}
	if left := w.left(); len(left) != 0 {
		t.Fatalf("left after the deletion: %v", left)
	}
	if conn, err := net.DialTimeout("tcp", net.JoinHostPort(ip, "80"), 200*time.Millisecond); err == nil {
		conn.Close()
		t.Fatal("the deleted load balancer's address still answers")
	}
}

// A write the Compute API refuses is the upstream's error, and a write
// whose operation ends in error too: the upstream waits for each
// operation and reports its error; a second Ensure then makes it.
func TestUpstreamLoadBalancerErrors(t *testing.T) {
	w := newLBWorld(t, 1, nil)
	lbs, _ := w.cloud.LoadBalancer()
	svc := lbService("err", 80)
	w.ensure(t, lbService("warm", 81)) // the cluster id read, one load balancer made

	w.gc.SetQuota("forwardingRules", 1)
	_, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, w.nodes)
	if err == nil || !strings.Contains(err.Error(), "quotaExceeded") && !strings.Contains(err.Error(), "Quota") {
		t.Fatalf("EnsureLoadBalancer beyond the quota: %v", err)
	}
	w.gc.SetQuota("forwardingRules", 0)

	w.gc.FailOperations("forwardingRules.insert", 1, 0, "")
	if err := w.ensureErr(svc); err == nil || !strings.Contains(err.Error(), "QUOTA_EXCEEDED") {
		t.Fatalf("EnsureLoadBalancer with the forwarding rule's operation failing: %v", err)
	}
	w.gc.Fail("forwardingRules.get", 1, http.StatusTooManyRequests)
	if err := w.ensureErr(svc); err == nil || !strings.Contains(err.Error(), "429") {
		t.Fatalf("EnsureLoadBalancer rate limited: %v", err)
	}
	if err := w.ensureErr(svc); err != nil {
		t.Fatalf("EnsureLoadBalancer after the failures: %v", err)
	}
	if got := len(w.gc.ForwardingRules(gcetest.DefaultProject, "us-central1")); got != 2 {
		t.Fatalf("%d forwarding rules, want 2", got)
	}
}

func (w *lbWorld) ensureErr(svc *v1.Service) error {
	lbs, _ := w.cloud.LoadBalancer()
	_, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, w.nodes)
	return err
}

// The upstream's internal load balancer (networking.gke.io/load-balancer-
// type: Internal) over gcetest: an instance group of the nodes per zone,
// a health check, a regional backend service, an INTERNAL forwarding rule
// on the subnetwork carrying traffic to the nodes; its finalizer is put on
// the Service; deleted with nothing left.
func TestUpstreamInternalLoadBalancer(t *testing.T) {
	w := newLBWorld(t, 2, nil)
	w.serveNodePort(t, 8443, 31443)
	svc := lbService("ilb", 8443)
	svc.Annotations = map[string]string{"networking.gke.io/load-balancer-type": "Internal"}
	st := w.ensure(t, svc)
	ip := st.Ingress[0].IP
	rules := w.gc.ForwardingRules(gcetest.DefaultProject, "us-central1")
	if len(rules) != 1 || rules[0].LoadBalancingScheme != "INTERNAL" || rules[0].BackendService == "" ||
		!strings.HasSuffix(rules[0].Subnetwork, "/subnetworks/default") || rules[0].IPAddress != ip {
		t.Fatalf("forwarding rules %+v", rules)
	}
	reached(t, ip, 8443, "lbnode-0", "lbnode-1")
	w.kube.mu.Lock()
	patches := len(w.kube.patches["default/ilb"])
	w.kube.mu.Unlock()
	if patches == 0 {
		t.Error("the upstream put no finalizer on the Service")
	}
	lbs, _ := w.cloud.LoadBalancer()
	if err := lbs.EnsureLoadBalancerDeleted(context.Background(), "kubernetes", svc); err != nil {
		t.Fatal(err)
	}
	if left := w.left(); len(left) != 0 {
		t.Fatalf("left after the deletion: %v", left)
	}
	if gs := w.gc.InstanceGroups(gcetest.DefaultProject, gcetest.DefaultZone); len(gs) != 0 {
		t.Errorf("instance groups left: %d", len(gs))
	}
}

// Without loadBalancers: upstream there is neither LoadBalancer nor
// Routes, and Initialize and SetInformers do nothing.
func TestNoUpstream(t *testing.T) {
	w := newWorld(t, gcetest.Options{}, nil)
	if _, ok := w.cloud.LoadBalancer(); ok {
		t.Error("LoadBalancer without loadBalancers: upstream")
	}
	if _, ok := w.cloud.Routes(); ok {
		t.Error("Routes without loadBalancers: upstream")
	}
	w.cloud.Initialize(nil, nil)
	w.cloud.SetInformers(nil)
	if w.cloud.Config().LoadBalancers != LoadBalancersNone {
		t.Errorf("loadBalancers defaults to %q", w.cloud.Config().LoadBalancers)
	}
}

// fakeADC gives the process Application Default Credentials that are never
// used: the upstream's CreateGCECloud builds a TPU API client with ADC
// alone (no option), whatever token source it is given, and fails without
// them. The file is an authorized user's, which makes no call until a
// token is asked for.
func fakeADC(t *testing.T) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "adc.json")
	if err := os.WriteFile(path, []byte(`{"type":"authorized_user","client_id":"gcetest","client_secret":"gcetest","refresh_token":"gcetest"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", path)
}
