package azure_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/azure"
	"github.com/mooring-dev/mooring/cloud/azure/agentid"
	"github.com/mooring-dev/mooring/cloud/azure/azuretest"
	"github.com/mooring-dev/mooring/cloud/cloudtest"
	"github.com/mooring-dev/mooring/cloud/kit"
)

// lbWorld is azuretest with two VMs and their Nodes, the provider's load
// balancers over a proxy whose hook sees every ARM request first.
type lbWorld struct {
	c     *azuretest.Cloud
	lbs   cloud.LoadBalancerInventory
	nodes []*v1.Node

	mu   sync.Mutex
	hook func(r *http.Request)
}

func newLBWorld(t *testing.T, o azuretest.Options, edit func(*azure.Config)) *lbWorld {
	t.Helper()
	w := &lbWorld{c: azuretest.Started(t, o)}
	target, _ := url.Parse(w.c.Endpoint())
	rp := httputil.NewSingleHostReverseProxy(target)
	proxy := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.mu.Lock()
		h := w.hook
		w.mu.Unlock()
		if h != nil {
			h(r)
		}
		rp.ServeHTTP(rw, r)
	}))
	t.Cleanup(proxy.Close)
	w.c.PutSecurityGroup("", bedSecurityGroup)
	cfg := azure.Config{SubscriptionID: w.c.Subscription(), ResourceGroup: w.c.ResourceGroup(), ClusterID: cluster, ARMEndpoint: proxy.URL,
		SecurityGroupName: bedSecurityGroup, VnetName: bedVnet, SubnetName: bedSubnet,
		ViewConfig: kit.ViewConfig{MinRefreshInterval: metav1.Duration{Duration: time.Millisecond}}}
	if edit != nil {
		edit(&cfg)
	}
	p, err := azure.NewWithCredential(cfg, w.c.Credential())
	if err != nil {
		t.Fatal(err)
	}
	lb, ok := p.LoadBalancer()
	if !ok {
		t.Fatal("no load balancers")
	}
	w.lbs = lb.(cloud.LoadBalancerInventory)
	for i := range 2 {
		vm := w.c.Put(azuretest.VM{Name: fmt.Sprintf("lb-%d", i), PrivateIP: fmt.Sprintf("127.0.84.%d", 10+i), Tags: tags()})
		r := agentid.Resource{Subscription: w.c.Subscription(), ResourceGroup: w.c.ResourceGroup(), Name: vm.Name}
		w.nodes = append(w.nodes, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: vm.Name}, Spec: v1.NodeSpec{ProviderID: r.ProviderID()},
			Status: v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: vm.PrivateIP}}}})
	}
	return w
}

func (w *lbWorld) setHook(f func(r *http.Request)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hook = f
}

func lbSvc(name string, ports ...int32) *v1.Service {
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: uuid.NewUUID()},
		Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer}}
	for i, p := range ports {
		svc.Spec.Ports = append(svc.Spec.Ports, v1.ServicePort{Name: fmt.Sprint("p", p), Port: p, Protocol: v1.ProtocolTCP, NodePort: 30100 + int32(i)})
	}
	return svc
}

// ensure is EnsureLoadBalancer until Azure has built it (Settle between).
func (w *lbWorld) ensure(t *testing.T, svc *v1.Service) *v1.LoadBalancerStatus {
	t.Helper()
	for try := 0; ; try++ {
		st, err := w.lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, w.nodes)
		if cloud.IsPending(err) && try < 5 {
			w.c.Settle()
			continue
		}
		if err != nil {
			t.Fatalf("EnsureLoadBalancer(%s): %v", svc.Name, err)
		}
		return st
	}
}

func (w *lbWorld) lb(t *testing.T, name string) map[string]any {
	t.Helper()
	for _, l := range w.c.LoadBalancers() {
		if l["name"] == name {
			return l
		}
	}
	t.Fatalf("no load balancer %s", name)
	return nil
}

func frontendOf(svc *v1.Service) string {
	return ("a" + strings.ReplaceAll(string(svc.UID), "-", ""))[:32]
}

// TestLBWireFormat: what the provider writes is Azure's model in
// cloud-provider-azure's names: load balancer kubernetes of SKU Standard,
// frontend a<uid> on public IP kubernetes-a<uid> (tagged as the upstream
// tags it), a probe and a rule per port named <frontend>-TCP-<port> to the
// node port without floating IP, the pool kubernetes of both nodes' NIC
// IP configurations, and an Allow rule from Internet to the address at
// priority 500; the status carries the public IP's address.
func TestLBWireFormat(t *testing.T) {
	w := newLBWorld(t, azuretest.Options{}, nil)
	svc := lbSvc("web", 80)
	st := w.ensure(t, svc)
	fe := frontendOf(svc)
	l := w.lb(t, "kubernetes")
	if sku := jsonMap(l["sku"])["name"]; sku != "Standard" {
		t.Errorf("sku %v", sku)
	}
	props := jsonMap(l["properties"])
	fes := jsonList(props["frontendIPConfigurations"])
	if len(fes) != 1 || fes[0]["name"] != fe {
		t.Fatalf("frontends %v, want %s", fes, fe)
	}
	pipID := jsonStr(jsonMap(jsonMap(fes[0]["properties"])["publicIPAddress"])["id"])
	if !strings.HasSuffix(pipID, "/publicIPAddresses/kubernetes-"+fe) {
		t.Errorf("public IP %s", pipID)
	}
	var pip map[string]any
	for _, p := range w.c.PublicIPs() {
		if p["id"] == pipID {
			pip = p
		}
	}
	if tg := jsonMap(pip["tags"]); tg["k8s-azure-service"] != "default/web" || tg["k8s-azure-cluster-name"] != "kubernetes" {
		t.Errorf("public IP tags %v", tg)
	}
	addr := jsonStr(jsonMap(pip["properties"])["ipAddress"])
	if len(st.Ingress) != 1 || st.Ingress[0].IP != addr || !strings.HasPrefix(addr, "127.87.") {
		t.Errorf("status %+v, want the public IP's address %s", st, addr)
	}
	rules := jsonList(props["loadBalancingRules"])
	if len(rules) != 1 || rules[0]["name"] != fe+"-TCP-80" {
		t.Fatalf("rules %v", rules)
	}
	rp := jsonMap(rules[0]["properties"])
	if rp["protocol"] != "Tcp" || rp["frontendPort"] != 80.0 || rp["backendPort"] != 30100.0 || rp["enableFloatingIP"] != false || rp["idleTimeoutInMinutes"] != 4.0 {
		t.Errorf("rule %v", rp)
	}
	probes := jsonList(props["probes"])
	if len(probes) != 1 || probes[0]["name"] != fe+"-TCP-80" {
		t.Fatalf("probes %v", probes)
	}
	if pp := jsonMap(probes[0]["properties"]); pp["protocol"] != "Tcp" || pp["port"] != 30100.0 || pp["intervalInSeconds"] != 5.0 || pp["probeThreshold"] != 2.0 {
		t.Errorf("probe %v", pp)
	}
	pools := jsonList(props["backendAddressPools"])
	if len(pools) != 1 || pools[0]["name"] != "kubernetes" || len(jsonList(jsonMap(pools[0]["properties"])["backendIPConfigurations"])) != 2 {
		t.Errorf("pools %v", pools)
	}
	nsg, _ := w.c.SecurityGroup(w.c.ResourceID("", azuretest.TypeSecurityGroup, bedSecurityGroup))
	sr := jsonList(jsonMap(nsg["properties"])["securityRules"])
	if len(sr) != 1 || sr[0]["name"] != fe+"-TCP-80" {
		t.Fatalf("security rules %v", sr)
	}
	if p := jsonMap(sr[0]["properties"]); p["sourceAddressPrefix"] != "Internet" || p["destinationAddressPrefix"] != addr ||
		p["destinationPortRange"] != "80" || p["priority"] != 500.0 || p["access"] != "Allow" || p["direction"] != "Inbound" {
		t.Errorf("security rule %v", p)
	}
	// A second Service shares the load balancer and its pool; deleting
	// the first leaves the second's share alone; deleting the last
	// deletes the load balancer, and each public IP made for them.
	other := lbSvc("api", 443)
	w.ensure(t, other)
	if n := len(jsonList(jsonMap(w.lb(t, "kubernetes")["properties"])["frontendIPConfigurations"])); n != 2 {
		t.Fatalf("frontends: %d, want 2", n)
	}
	for i, s := range []*v1.Service{svc, other} {
		if err := w.lbs.EnsureLoadBalancerDeleted(context.Background(), "kubernetes", s); err != nil {
			t.Fatal(err)
		}
		w.c.Settle()
		if n := len(w.c.LoadBalancers()); n != 1-i {
			t.Errorf("after deleting %s: %d load balancers", s.Name, n)
		}
	}
	if n := len(w.c.PublicIPs()); n != 0 {
		t.Errorf("public IPs left: %d", n)
	}
	nsg, _ = w.c.SecurityGroup(w.c.ResourceID("", azuretest.TypeSecurityGroup, bedSecurityGroup))
	if sr := jsonList(jsonMap(nsg["properties"])["securityRules"]); len(sr) != 0 {
		t.Errorf("security rules left: %v", sr)
	}
}

// TestLBETagRace: a load balancer changed between the provider's read and
// its write is refused 412 (If-Match); the provider reads it again and
// writes its change over the other one, which stays.
func TestLBETagRace(t *testing.T) {
	w := newLBWorld(t, azuretest.Options{}, nil)
	w.ensure(t, lbSvc("first", 80))
	lbID := w.c.ResourceID("", azuretest.TypeLoadBalancer, "kubernetes")
	var once sync.Once
	var ifMatch []string
	w.setHook(func(r *http.Request) {
		if r.Method != http.MethodPut || !strings.HasSuffix(r.URL.Path, "/loadBalancers/kubernetes") {
			return
		}
		ifMatch = append(ifMatch, r.Header.Get("If-Match"))
		once.Do(func() {
			w.c.ARMMutate(lbID, func(body map[string]any) { body["tags"].(map[string]any)["someone"] = "else" })
		})
	})
	puts := w.c.Calls("PutLoadBalancer")
	w.ensure(t, lbSvc("second", 81))
	if got := w.c.Calls("PutLoadBalancer") - puts; got != 2 || len(ifMatch) != 2 || ifMatch[0] == "" || ifMatch[0] == ifMatch[1] {
		t.Errorf("writes %d with If-Match %q; want 2, the second under the new etag", got, ifMatch)
	}
	l := w.lb(t, "kubernetes")
	if jsonMap(l["tags"])["someone"] != "else" || len(jsonList(jsonMap(l["properties"])["frontendIPConfigurations"])) != 2 {
		t.Errorf("after the race: %v", l)
	}
}

// TestLBThrottledAndBusy: a write answered 429 with Retry-After is made
// again after it (the SDK's retry); a load balancer still being
// provisioned for another Service is not written: the Service's is
// pending until it is built.
func TestLBThrottledAndBusy(t *testing.T) {
	w := newLBWorld(t, azuretest.Options{ProvisionTime: time.Hour}, nil)
	w.c.Fail("PutLoadBalancer", 1, http.StatusTooManyRequests)
	start := time.Now()
	_, err := w.lbs.EnsureLoadBalancer(context.Background(), "kubernetes", lbSvc("web", 80), w.nodes)
	if !cloud.IsPending(err) || w.c.Calls("PutLoadBalancer") != 2 || w.c.Calls("Throttled") != 1 || time.Since(start) < time.Second {
		t.Fatalf("after a 429: %v, %d writes, %v", err, w.c.Calls("PutLoadBalancer"), time.Since(start))
	}
	_, err = w.lbs.EnsureLoadBalancer(context.Background(), "kubernetes", lbSvc("api", 81), w.nodes)
	if !cloud.IsPending(err) || w.c.Calls("PutLoadBalancer") != 2 {
		t.Errorf("a second Service while the load balancer is Updating: %v, %d writes; want pending, none", err, w.c.Calls("PutLoadBalancer"))
	}
	w.c.Settle()
	w.ensure(t, lbSvc("api", 81))
}

// TestLBErrorBody: ARM's error body (code and message) reaches the
// caller; nothing is left half-written that the next sync would not
// finish.
func TestLBErrorBody(t *testing.T) {
	w := newLBWorld(t, azuretest.Options{}, nil)
	w.c.FailCode("PutLoadBalancer", 1, http.StatusBadRequest, "InvalidResourceReference")
	svc := lbSvc("web", 80)
	if _, err := w.lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, w.nodes); err == nil || !strings.Contains(err.Error(), "InvalidResourceReference") {
		t.Fatalf("EnsureLoadBalancer: %v, want ARM's error code", err)
	}
	w.ensure(t, svc)
}

// TestLBInternal: an internal Service gets a frontend on the config's
// subnet (its address given by Azure) of load balancer kubernetes-internal,
// its security rule from anywhere (*); the internal-subnet annotation names
// another subnet and the frontend's name carries it.
func TestLBInternal(t *testing.T) {
	w := newLBWorld(t, azuretest.Options{}, nil)
	svc := lbSvc("inside", 80)
	svc.Annotations = map[string]string{azure.AnnotationInternal: "true", azure.AnnotationInternalSubnet: "services"}
	st := w.ensure(t, svc)
	l := w.lb(t, "kubernetes-internal")
	fes := jsonList(jsonMap(l["properties"])["frontendIPConfigurations"])
	if len(fes) != 1 || fes[0]["name"] != frontendOf(svc)+"-services" {
		t.Fatalf("frontends %v", fes)
	}
	fp := jsonMap(fes[0]["properties"])
	if !strings.HasSuffix(jsonStr(jsonMap(fp["subnet"])["id"]), "/virtualNetworks/"+bedVnet+"/subnets/services") ||
		len(st.Ingress) != 1 || st.Ingress[0].IP != fp["privateIPAddress"] {
		t.Errorf("frontend %v, status %+v", fp, st)
	}
	if n := len(w.c.PublicIPs()); n != 0 {
		t.Errorf("public IPs: %d, want none", n)
	}
}

// TestLBBadInput: each bad annotation value is an error naming it, with
// nothing written.
func TestLBBadInput(t *testing.T) {
	w := newLBWorld(t, azuretest.Options{}, func(c *azure.Config) { c.VnetName, c.SubnetName = "", "" })
	for name, val := range map[string]string{
		azure.AnnotationProbeProtocol:     "Udp",
		azure.AnnotationProbeInterval:     "3",
		azure.AnnotationProbeNumOfProbe:   "1",
		azure.AnnotationIdleTimeout:       "101",
		azure.AnnotationDisableFloatingIP: "false",
		azure.AnnotationPIPName:           "bad/name",
		azure.AnnotationInternal:          "true", // no subnet configured
		azure.AnnotationPrefix + "load-balancer-enable-high-availability-ports": "true",
	} {
		svc := lbSvc("bad", 80)
		svc.Annotations = map[string]string{name: val}
		if _, err := w.lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, w.nodes); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %q: %v, want an error naming it", name, val, err)
		}
	}
	if n := w.c.Calls("PutLoadBalancer") + w.c.Calls("PutPublicIP"); n != 0 {
		t.Errorf("writes: %d", n)
	}
}

// TestLBConfig: the load balancer fields' defaults and bad values.
func TestLBConfig(t *testing.T) {
	base := "subscriptionID: 3f2c1a5e-0b7d-4c1e-9a8f-5d6e7f801234\nresourceGroup: rg\nclusterID: c1\n"
	cfg, err := azure.ParseConfig(strings.NewReader(base))
	if err != nil || cfg.LoadBalancerName != "kubernetes" {
		t.Fatalf("defaults: %+v, %v", cfg.LoadBalancerName, err)
	}
	for _, bad := range []string{"loadBalancerName: a/b\n", "vnetName: v\n", "securityGroupName: -x\n", "loadBalancerResourceGroup: 'a.'\n",
		"loadBalancerName: " + strings.Repeat("x", 72) + "\n"} {
		if _, err := azure.ParseConfig(strings.NewReader(base + bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestLBHeldAsDesired: what Azure holds after a write reads back as what
// the Service calls for (no write at every sync): an idle timeout of 4
// (Azure's default), a UDP-only Service with an idle timeout (TCP rules
// only have one), an Http probe with a path, externalTrafficPolicy Local
// (probed at the health check node port), source ranges.
func TestLBHeldAsDesired(t *testing.T) {
	w := newLBWorld(t, azuretest.Options{}, nil)
	ctx := context.Background()
	idle := lbSvc("idle", 80)
	idle.Annotations = map[string]string{azure.AnnotationIdleTimeout: "4"}
	udp := lbSvc("udp", 53)
	udp.Spec.Ports[0].Protocol = v1.ProtocolUDP
	udp.Annotations = map[string]string{azure.AnnotationIdleTimeout: "10"}
	httpProbe := lbSvc("http", 80)
	httpProbe.Annotations = map[string]string{azure.AnnotationProbeProtocol: "Http", azure.AnnotationProbeRequestPath: "/ready",
		azure.AnnotationProbeInterval: "7", azure.AnnotationProbeNumOfProbe: "3"}
	local := lbSvc("local", 80)
	local.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	local.Spec.HealthCheckNodePort = 32000
	ranged := lbSvc("ranged", 80)
	ranged.Spec.LoadBalancerSourceRanges = []string{"10.0.0.0/8", "192.168.1.0/24"}
	for _, svc := range []*v1.Service{idle, udp, httpProbe, local, ranged} {
		w.ensure(t, svc)
	}
	owned, err := w.lbs.ListOwnedLoadBalancers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, svc := range []*v1.Service{idle, udp, httpProbe, local, ranged} {
		fp, err := w.lbs.DesiredFingerprint(ctx, svc, w.nodes)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, o := range owned {
			if o.UID == string(svc.UID) {
				found = true
				if o.Fingerprint != fp {
					t.Errorf("%s: held differs from desired", svc.Name)
				}
			}
		}
		if !found {
			t.Errorf("%s: not listed", svc.Name)
		}
	}
	for _, p := range jsonList(jsonMap(w.lb(t, "kubernetes")["properties"])["probes"]) {
		pp := jsonMap(p["properties"])
		switch {
		case strings.HasPrefix(jsonStr(p["name"]), frontendOf(local)):
			if pp["protocol"] != "Http" || pp["port"] != 32000.0 || pp["requestPath"] != "/healthz" {
				t.Errorf("Local's probe %v", pp)
			}
		case strings.HasPrefix(jsonStr(p["name"]), frontendOf(httpProbe)):
			if pp["protocol"] != "Http" || pp["requestPath"] != "/ready" || pp["intervalInSeconds"] != 7.0 || pp["probeThreshold"] != 3.0 {
				t.Errorf("Http probe %v", pp)
			}
		}
	}
}

// TestLBUDPWithoutProbe: a UDP port's rule has no probe, as
// cloud-provider-azure writes it (every member gets the traffic).
func TestLBUDPWithoutProbe(t *testing.T) {
	w := newLBWorld(t, azuretest.Options{}, nil)
	udp := lbSvc("dns", 53)
	udp.Spec.Ports[0].Protocol = v1.ProtocolUDP
	w.ensure(t, udp)
	props := jsonMap(w.lb(t, "kubernetes")["properties"])
	rules := jsonList(props["loadBalancingRules"])
	if len(rules) != 1 || jsonMap(rules[0]["properties"])["probe"] != nil || len(jsonList(props["probes"])) != 0 {
		t.Errorf("rules %v, probes %v; want one rule without a probe", rules, props["probes"])
	}
}

// firstLine is the first line read through addr ("" when none comes).
func firstLine(addr string) string {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return ""
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	line, _ := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimSpace(line)
}

// TestLBSourceRanges: the Service's source ranges become its security
// rule's sources, and azuretest's data plane lets only them through: a
// client on 127.0.0.1 reaches a node while the ranges hold it, and not
// once they are 10.0.0.0/8 alone.
func TestLBSourceRanges(t *testing.T) {
	w := newLBWorld(t, azuretest.Options{}, nil)
	svc := lbSvc("ranged", 80)
	svc.Spec.LoadBalancerSourceRanges = []string{"127.0.0.0/8"}
	for _, n := range w.nodes {
		cloudtest.ServeName(t, net.JoinHostPort(n.Status.Addresses[0].Address, "30100"), n.Name)
	}
	st := w.ensure(t, svc)
	addr := net.JoinHostPort(st.Ingress[0].IP, "80")
	reached := func() bool {
		for range 50 {
			if line := firstLine(addr); strings.HasPrefix(line, "lb-") {
				return true
			}
			time.Sleep(100 * time.Millisecond)
		}
		return false
	}
	if !reached() {
		t.Fatal("no traffic from inside the source ranges")
	}
	svc.Spec.LoadBalancerSourceRanges = []string{"10.0.0.0/8"}
	w.ensure(t, svc)
	nsg, _ := w.c.SecurityGroup(w.c.ResourceID("", azuretest.TypeSecurityGroup, bedSecurityGroup))
	if sr := jsonList(jsonMap(nsg["properties"])["securityRules"]); len(sr) != 1 || jsonMap(sr[0]["properties"])["sourceAddressPrefix"] != "10.0.0.0/8" {
		t.Fatalf("security rules %v", sr)
	}
	if line := firstLine(addr); line != "" {
		t.Errorf("a client outside the source ranges got %q", line)
	}
}

// TestLBPublicIPStillInUse: a public IP whose frontend just went is
// refused deletion while Azure finishes the load balancer's update; it is
// deleted again, not left behind.
func TestLBPublicIPStillInUse(t *testing.T) {
	defer azure.SetPIPDeleteWait(azure.SetPIPDeleteWait(10 * time.Millisecond))
	w := newLBWorld(t, azuretest.Options{}, nil)
	svc := lbSvc("web", 80)
	w.ensure(t, svc)
	w.c.FailCode("DeletePublicIP", 2, http.StatusBadRequest, "PublicIPAddressCannotBeDeleted")
	if err := w.lbs.EnsureLoadBalancerDeleted(context.Background(), "kubernetes", svc); err != nil {
		t.Fatal(err)
	}
	if n := len(w.c.PublicIPs()); n != 0 || w.c.Calls("DeletePublicIP") != 3 {
		t.Errorf("public IPs left: %d after %d deletions", n, w.c.Calls("DeletePublicIP"))
	}
}

// TestLBPublicIPRenamed: a Service given another public IP by name moves
// its frontend there, keeping nothing of the one made for it.
func TestLBPublicIPRenamed(t *testing.T) {
	w := newLBWorld(t, azuretest.Options{}, nil)
	svc := lbSvc("web", 80)
	w.ensure(t, svc)
	_, addr, err := w.c.PutPublicIP("", "reserved", nil)
	if err != nil {
		t.Fatal(err)
	}
	svc.Annotations = map[string]string{azure.AnnotationPIPName: "reserved"}
	if st := w.ensure(t, svc); st.Ingress[0].IP != addr {
		t.Errorf("status %+v, want the reserved address %s", st, addr)
	}
	if pips := w.c.PublicIPs(); len(pips) != 1 || pips[0]["name"] != "reserved" {
		t.Errorf("public IPs %v, want the reserved one alone", pips)
	}
	if err := w.lbs.EnsureLoadBalancerDeleted(context.Background(), "kubernetes", svc); err != nil {
		t.Fatal(err)
	}
	if pips := w.c.PublicIPs(); len(pips) != 1 {
		t.Errorf("the reserved public IP (not made for the Service) was deleted: %v", pips)
	}
}
