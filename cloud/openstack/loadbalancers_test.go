package openstack

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/openstack/openstacktest"
)

// Service load balancers through gophercloud against openstacktest's
// Octavia and Neutron.

type lbWorld struct {
	*world
	lbs   cloud.LoadBalancerInventory
	nodes []*v1.Node
}

func newLBWorld(t *testing.T, opts openstacktest.LBOptions, edit func(*Config)) *lbWorld {
	t.Helper()
	opts.PendingFor = max(opts.PendingFor, lbPending)
	w := newWorld(t, openstacktest.Options{LB: opts}, func(c *Config) {
		lbConfig(c)
		if edit != nil {
			edit(c)
		}
	})
	lb, ok := w.cloud.LoadBalancer()
	if !ok {
		t.Fatal("no load balancers")
	}
	lw := &lbWorld{world: w, lbs: lb.(cloud.LoadBalancerInventory)}
	for i, n := range []string{"node-a", "node-b"} {
		lw.nodes = append(lw.nodes, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n},
			Status: v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "127.0.87." + string(rune('1'+i))}}}})
	}
	return lw
}

func lbSvc(name string, ports ...int32) *v1.Service {
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: uuid.NewUUID()},
		Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer}}
	for i, p := range ports {
		svc.Spec.Ports = append(svc.Spec.Ports, v1.ServicePort{Name: "p" + string(rune('a'+i)), Port: p, Protocol: v1.ProtocolTCP,
			TargetPort: intstr.FromInt32(p), NodePort: 30000 + p%1000})
	}
	return svc
}

// ensure is EnsureLoadBalancer until Octavia has built it.
func (w *lbWorld) ensure(t *testing.T, svc *v1.Service) *v1.LoadBalancerStatus {
	t.Helper()
	for try := 0; ; try++ {
		st, err := w.lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, w.nodes)
		if cloud.IsPending(err) && try < 10 {
			w.os.Settle()
			continue
		}
		if err != nil {
			t.Fatalf("EnsureLoadBalancer(%s): %v", svc.Name, err)
		}
		return st
	}
}

// writes counts the calls that changed Octavia or the floating IPs.
func (w *lbWorld) writes() int {
	n := 0
	for _, calls := range lbCalls {
		for _, c := range calls {
			if c != "lb-list" && c != "lb-get" {
				n += w.os.Calls(c)
			}
		}
	}
	return n
}

func (w *lbWorld) only(t *testing.T) openstacktest.LoadBalancer {
	t.Helper()
	all := w.os.LoadBalancers()
	if len(all) != 1 {
		t.Fatalf("load balancers: %d, want 1", len(all))
	}
	return all[0]
}

// The annotations become what Octavia holds: listener, pool, members and
// monitor settings, the floating IP (none for an internal one), the tags.
func TestLBAnnotations(t *testing.T) {
	w := newLBWorld(t, openstacktest.LBOptions{}, nil)
	svc := lbSvc("tuned", 80, 443)
	svc.Annotations = map[string]string{
		AnnotationProxyProtocol: "v2", AnnotationLBMethod: "LEAST_CONNECTIONS", AnnotationConnectionLimit: "1000",
		AnnotationTimeoutClientData: "60000", AnnotationTimeoutMemberConn: "3000", AnnotationTimeoutMemberData: "61000", AnnotationTimeoutTCPInspect: "10",
		AnnotationMonitorDelay: "7", AnnotationMonitorTimeout: "4", AnnotationMonitorMaxRetries: "2", AnnotationMonitorRetriesDown: "5",
		AnnotationFlavorID: openstacktest.DefaultLBFlavorID, AnnotationAvailabilityZone: openstacktest.DefaultZone, AnnotationKeepFloatingIP: "true",
	}
	svc.Spec.LoadBalancerSourceRanges = []string{"127.0.0.0/8"}
	svc.Spec.SessionAffinity = v1.ServiceAffinityClientIP
	svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	svc.Spec.HealthCheckNodePort = 32100
	st := w.ensure(t, svc)
	l := w.only(t)
	if l.Name != "kube_service_kubernetes_default_tuned" || l.FlavorID != openstacktest.DefaultLBFlavorID || l.AvailabilityZone != openstacktest.DefaultZone {
		t.Errorf("load balancer %s, flavor %s, zone %s", l.Name, l.FlavorID, l.AvailabilityZone)
	}
	for _, want := range []string{l.Name, "mooring:cluster:" + testCluster, "mooring:uid:" + string(svc.UID), keepFIPTag} {
		if !strings.Contains(strings.Join(l.Tags, " "), want) {
			t.Errorf("tags %v: no %s", l.Tags, want)
		}
	}
	for _, tag := range l.Tags {
		if strings.HasPrefix(tag, "kube_service_") && tag != l.Name {
			t.Errorf("tag %s: the upstream CCM would read it as another Service sharing the load balancer", tag)
		}
	}
	if len(l.Listeners) != 2 || len(l.Pools) != 2 {
		t.Fatalf("listeners %d, pools %d; want 2 and 2", len(l.Listeners), len(l.Pools))
	}
	for _, ln := range l.Listeners {
		if ln.ConnectionLimit != 1000 || ln.TimeoutClientData != 60000 || ln.TimeoutMemberConnect != 3000 || ln.TimeoutMemberData != 61000 ||
			ln.TimeoutTCPInspect != 10 || len(ln.AllowedCIDRs) != 1 || ln.AllowedCIDRs[0] != "127.0.0.0/8" {
			t.Errorf("listener %+v", ln)
		}
	}
	for _, p := range l.Pools {
		m := p.Monitor
		if p.Protocol != "PROXYV2" || p.Algorithm != "LEAST_CONNECTIONS" || p.SessionPersistence != "SOURCE_IP" || len(p.Members) != 2 {
			t.Errorf("pool %+v", p)
		}
		if m == nil || m.Type != "HTTP" || m.URLPath != "/healthz" || m.Delay != 7 || m.Timeout != 4 || m.MaxRetries != 2 || m.MaxRetriesDown != 5 {
			t.Errorf("monitor %+v", m)
		}
		if p.Members[0].MonitorPort != 32100 || p.Members[0].SubnetID != openstacktest.DefaultSubnetID {
			t.Errorf("member %+v: want the health check node port and the VIP subnet", p.Members[0])
		}
	}
	fips := w.os.FloatingIPs()
	if len(fips) != 1 || fips[0].PortID != l.VIPPortID || !strings.HasPrefix(fips[0].Description, fipDescription) {
		t.Fatalf("floating IPs %+v, want one on the VIP port %s", fips, l.VIPPortID)
	}
	if len(st.Ingress) != 1 || st.Ingress[0].IP != fips[0].Address || st.Ingress[0].IPMode == nil || *st.Ingress[0].IPMode != v1.LoadBalancerIPModeProxy {
		t.Errorf("status %+v, want the floating IP %s with ipMode Proxy", st.Ingress, fips[0].Address)
	}
	// Nothing to write again.
	before := w.writes()
	w.ensure(t, svc)
	if got := w.writes() - before; got != 0 {
		t.Errorf("writes for an unchanged Service: %d", got)
	}

	// Internal: the floating IP goes, kept (keep-floatingip) but detached.
	svc.Annotations[AnnotationInternal] = "true"
	st = w.ensure(t, svc)
	l = w.only(t)
	fips = w.os.FloatingIPs()
	if len(fips) != 1 || fips[0].PortID != "" {
		t.Errorf("floating IPs %+v, want one, detached (kept)", fips)
	}
	if st.Ingress[0].IP != l.VIPAddress {
		t.Errorf("status %+v, want the VIP %s", st.Ingress, l.VIPAddress)
	}

	// The hostname annotation: the status has it alone.
	svc.Annotations[AnnotationHostname] = "web.example.com"
	if st = w.ensure(t, svc); len(st.Ingress) != 1 || st.Ingress[0].Hostname != "web.example.com" || st.Ingress[0].IP != "" {
		t.Errorf("status %+v, want the hostname alone", st.Ingress)
	}
}

// An unknown or malformed annotation, and what Octavia cannot do, are
// errors naming them, with nothing written.
func TestLBBadInput(t *testing.T) {
	w := newLBWorld(t, openstacktest.LBOptions{}, nil)
	cases := map[string]map[string]string{
		AnnotationPrefix + "x-forwarded-for":      {AnnotationPrefix + "x-forwarded-for": "true"},
		AnnotationPrefix + "class":                {AnnotationPrefix + "class": "fast"},
		AnnotationConnectionLimit:                 {AnnotationConnectionLimit: "many"},
		AnnotationInternal:                        {AnnotationInternal: "yes"},
		AnnotationProxyProtocol:                   {AnnotationProxyProtocol: "v3"},
		AnnotationLBMethod:                        {AnnotationLBMethod: "RANDOM"},
		AnnotationMonitorMaxRetries:               {AnnotationMonitorMaxRetries: "11"},
		AnnotationSubnetID:                        {AnnotationSubnetID: "subnet-1"},
		AnnotationMonitorTimeout:                  {AnnotationMonitorTimeout: "9", AnnotationMonitorDelay: "5"},
		LegacyAnnotationPrefix + "internal-lb":    {LegacyAnnotationPrefix + "internal-lb": "true"},
		AnnotationTimeoutClientData:               {AnnotationTimeoutClientData: "-1"},
		AnnotationFloatingSubnetID + " w/o a net": {AnnotationFloatingNetworkID: "", AnnotationFloatingSubnetID: openstacktest.DefaultFloatingSubnetID},
	}
	for want, ann := range cases {
		svc := lbSvc("bad", 80)
		svc.Annotations = ann
		_, err := w.lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, w.nodes)
		if err == nil || cloud.IsPending(err) || !strings.Contains(err.Error(), strings.Fields(want)[0]) {
			t.Errorf("%s: %v, want an error naming it", want, err)
		}
	}
	udp := lbSvc("udp-proxy", 53)
	udp.Spec.Ports[0].Protocol = v1.ProtocolUDP
	udp.Annotations = map[string]string{AnnotationProxyProtocol: "true"}
	if _, err := w.lbs.EnsureLoadBalancer(context.Background(), "kubernetes", udp, w.nodes); err == nil || !strings.Contains(err.Error(), "PROXY") {
		t.Errorf("PROXY protocol on a UDP port: %v", err)
	}
	if n := w.writes(); n != 0 || len(w.os.LoadBalancers()) != 0 {
		t.Errorf("writes %d, load balancers %d; want none", n, len(w.os.LoadBalancers()))
	}
}

// Without a VIP subnet in the config or the Service, the error says where
// to set one.
func TestLBNoSubnet(t *testing.T) {
	w := newLBWorld(t, openstacktest.LBOptions{}, func(c *Config) { c.LoadBalancer.SubnetID = "" })
	_, err := w.lbs.EnsureLoadBalancer(context.Background(), "kubernetes", lbSvc("web", 80), w.nodes)
	if err == nil || !strings.Contains(err.Error(), "loadBalancer.subnetID") {
		t.Fatalf("%v, want an error naming loadBalancer.subnetID", err)
	}
	svc := lbSvc("web", 80)
	svc.Annotations = map[string]string{AnnotationSubnetID: openstacktest.DefaultSubnetID}
	w.ensure(t, svc)
}

// A load balancer the upstream CCM made (its name, its tag, its floating
// IP) is adopted: the same id, VIP and floating IP, tagged for the
// cluster; the Service's load-balancer-id finds it too.
func TestLBAdoptOCCM(t *testing.T) {
	w := newLBWorld(t, openstacktest.LBOptions{}, nil)
	svc := lbSvc("legacy", 80)
	b := &bed{world: w.world}
	before := b.putLB(t, occmLoadBalancer(svc, w.nodes), true)
	fipCreates := w.os.Calls("fip-create")
	// Another Service naming it (the upstream CCM's sharing) does not get it.
	other := lbSvc("sharer", 81)
	other.Annotations = map[string]string{AnnotationLoadBalancerID: before.ID}
	if _, err := w.lbs.EnsureLoadBalancer(context.Background(), "kubernetes", other, w.nodes); err == nil || !strings.Contains(err.Error(), "share") {
		t.Errorf("a second Service naming the load balancer: %v, want an error", err)
	}
	if n := w.writes(); n != 0 {
		t.Errorf("writes: %d, want none", n)
	}
	svc.Annotations = map[string]string{AnnotationLoadBalancerID: before.ID, AnnotationLoadBalancerAddress: before.IP}
	st := w.ensure(t, svc)
	l := w.only(t)
	if l.ID != before.ID || st.Ingress[0].IP != before.IP || w.os.Calls("lb-create") != 0 || w.os.Calls("fip-create") != fipCreates {
		t.Errorf("adopted %s at %s (creates %d, floating IP creates %d); want %s at %s kept", l.ID, st.Ingress[0].IP,
			w.os.Calls("lb-create"), w.os.Calls("fip-create")-fipCreates, before.ID, before.IP)
	}
	if !strings.Contains(strings.Join(l.Tags, " "), "mooring:uid:"+string(svc.UID)) {
		t.Errorf("tags %v: not the cluster's", l.Tags)
	}
	if l.Pools[0].Monitor == nil {
		t.Error("no health monitor added")
	}
	// Deleting it deletes the floating IP the upstream CCM made for it.
	if err := w.lbs.EnsureLoadBalancerDeleted(context.Background(), "kubernetes", svc); err != nil {
		t.Fatal(err)
	}
	if n, f := len(w.os.LoadBalancers()), len(w.os.FloatingIPs()); n != 0 || f != 0 {
		t.Errorf("left: %d load balancers, %d floating IPs", n, f)
	}
}

// keep-floatingip keeps the floating IP when the load balancer goes.
func TestLBKeepFloatingIP(t *testing.T) {
	w := newLBWorld(t, openstacktest.LBOptions{}, nil)
	svc := lbSvc("kept", 80)
	svc.Annotations = map[string]string{AnnotationKeepFloatingIP: "true"}
	st := w.ensure(t, svc)
	if err := w.lbs.EnsureLoadBalancerDeleted(context.Background(), "kubernetes", svc); err != nil {
		t.Fatal(err)
	}
	fips := w.os.FloatingIPs()
	if len(w.os.LoadBalancers()) != 0 || len(fips) != 1 || fips[0].Address != st.Ingress[0].IP || fips[0].PortID != "" {
		t.Errorf("load balancers %d, floating IPs %+v; want none, and %s kept unassociated", len(w.os.LoadBalancers()), fips, st.Ingress[0].IP)
	}
}

// While Octavia is still building or changing a load balancer, the
// provider waits (a PendingError, no write); Octavia's 409 for a change
// that races another is a wait too, not a failure.
func TestLBPending(t *testing.T) {
	w := newLBWorld(t, openstacktest.LBOptions{PendingFor: time.Hour}, nil) // only Settle settles
	svc := lbSvc("slow", 80)
	ctx := context.Background()
	if _, err := w.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, w.nodes); !cloud.IsPending(err) {
		t.Fatalf("a load balancer being built: %v, want a PendingError", err)
	}
	creates := w.os.Calls("lb-create")
	if _, err := w.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, w.nodes); !cloud.IsPending(err) || w.os.Calls("lb-create") != creates {
		t.Fatalf("asked again while building: %v, creates %d", err, w.os.Calls("lb-create"))
	}
	w.os.Settle()
	w.ensure(t, svc)
	l := w.only(t)

	// Another client's change in flight: Octavia answers 409.
	defer func(d time.Duration) { activeWait = d }(activeWait)
	activeWait = 100 * time.Millisecond
	lbc := &lbCloud{c: w.cloud, seen: map[string]*lbTree{}}
	h, ok, err := lbc.Get(ctx, l.ID)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	w.os.SetProvisioning(l.ID, openstacktest.StatusPendingUpdate)
	before := w.writes()
	spec := h.Spec
	spec.Listeners = append([]lbListener(nil), spec.Listeners...)
	spec.Listeners[0].ConnectionLimit = 10
	_, err = lbc.Update(ctx, h, h.Owner, spec)
	if !cloud.IsPending(err) {
		t.Fatalf("Update while Octavia is changing it: %v, want a PendingError", err)
	}
	if got, _ := w.os.LoadBalancer(l.ID); got.Listeners[0].ConnectionLimit != -1 {
		t.Error("the listener changed while immutable")
	}
	// Once ACTIVE, the change is made, and not waited for: the load
	// balancer answered is pending.
	w.os.Settle()
	if got, err := lbc.Update(ctx, h, h.Owner, spec); err != nil || got.Pending != "" {
		t.Fatalf("Update once ACTIVE: %+v, %v; want it made (and serving meanwhile)", got, err)
	}
	// A change of two calls waits between them, here longer than the
	// provider waits (activeWait): it answers "still changing".
	h, _, _ = lbc.Get(ctx, l.ID)
	w.os.Settle()
	h, _, _ = lbc.Get(ctx, l.ID)
	spec.Listeners[0].ConnectionLimit, spec.Listeners[0].Algorithm = 20, "SOURCE_IP"
	if _, err := lbc.Update(ctx, h, h.Owner, spec); !cloud.IsPending(err) {
		t.Fatalf("a change of two calls while Octavia builds the first: %v, want a PendingError", err)
	}
	if got, _ := w.os.LoadBalancer(l.ID); w.writes() != before+3 || got.Listeners[0].ConnectionLimit != 20 || got.Pools[0].Algorithm != "ROUND_ROBIN" {
		t.Errorf("calls %d, connection limit %d, algorithm %s; want three (the one refused, two made), 20, ROUND_ROBIN (not yet)",
			w.writes()-before, got.Listeners[0].ConnectionLimit, got.Pools[0].Algorithm)
	}
}

// Octavia's quota (403) is an error, not a wait; a build that ends in
// ERROR is an error that says to delete it.
func TestLBQuotaAndError(t *testing.T) {
	w := newLBWorld(t, openstacktest.LBOptions{Quota: 1}, nil)
	w.ensure(t, lbSvc("one", 80))
	_, err := w.lbs.EnsureLoadBalancer(context.Background(), "kubernetes", lbSvc("two", 80), w.nodes)
	if err == nil || cloud.IsPending(err) || !strings.Contains(err.Error(), "Quota") {
		t.Errorf("over quota: %v, want Octavia's quota error", err)
	}

	w = newLBWorld(t, openstacktest.LBOptions{}, nil)
	w.os.FailBuilds(1)
	svc := lbSvc("broken", 80)
	var last error
	for range 5 {
		if _, last = w.lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, w.nodes); !cloud.IsPending(last) {
			break
		}
		w.os.Settle()
	}
	if last == nil || !strings.Contains(last.Error(), "ERROR") {
		t.Errorf("a build in ERROR: %v", last)
	}
	if err := w.lbs.EnsureLoadBalancerDeleted(context.Background(), "kubernetes", svc); err != nil {
		t.Fatalf("deleting one in ERROR: %v", err)
	}
	w.ensure(t, svc)
}

// A UDP port is a UDP listener and pool with a UDP-CONNECT monitor, and
// the data plane carries the TCP port's traffic.
func TestLBProtocols(t *testing.T) {
	w := newLBWorld(t, openstacktest.LBOptions{}, nil)
	svc := lbSvc("dns", 53, 54)
	svc.Spec.Ports[1].Protocol = v1.ProtocolUDP
	svc.Spec.Ports[1].Port = 53
	w.ensure(t, svc)
	l := w.only(t)
	got := map[string]string{}
	for _, ln := range l.Listeners {
		for _, p := range l.Pools {
			if p.ID == ln.DefaultPoolID && p.Monitor != nil {
				got[ln.Protocol] = p.Protocol + "/" + p.Monitor.Type
			}
		}
	}
	if got["TCP"] != "TCP/TCP" || got["UDP"] != "UDP/UDP-CONNECT" {
		t.Errorf("pools and monitors by listener protocol: %v", got)
	}
}

// The loadBalancer block: defaults, and every bad value an error at start.
func TestLBConfig(t *testing.T) {
	good := "authURL: https://keystone.example:5000/v3\napplicationCredentialID: abc\nregion: RegionOne\nclusterID: c1\n"
	c, err := ParseConfig(strings.NewReader(good + "loadBalancer:\n  subnetID: " + openstacktest.DefaultSubnetID +
		"\n  floatingNetworkID: " + openstacktest.DefaultFloatingNetworkID + "\n"))
	lb := c.LoadBalancer
	if err != nil || lb.ClusterName != "kubernetes" || lb.LBMethod != "ROUND_ROBIN" || !*lb.CreateMonitor || lb.MonitorDelay != 5 ||
		lb.MonitorTimeout != 3 || lb.MonitorMaxRetries != 1 || lb.MonitorMaxRetriesDown != 3 || lb.Disabled {
		t.Fatalf("%+v %v", lb, err)
	}
	for _, bad := range []string{
		"loadBalancer:\n  subnetID: subnet-1\n", "loadBalancer:\n  floatingSubnetID: " + openstacktest.DefaultFloatingSubnetID + "\n",
		"loadBalancer:\n  lbMethod: RANDOM\n", "loadBalancer:\n  monitorTimeout: 9\n", "loadBalancer:\n  monitorMaxRetries: 11\n",
		"loadBalancer:\n  clusterName: a b\n", "loadBalancer:\n  flavorID: small\n",
	} {
		if _, err := ParseConfig(strings.NewReader(good + bad)); err == nil || !strings.Contains(err.Error(), "loadBalancer") {
			t.Errorf("%s: %v, want an error naming loadBalancer", bad, err)
		}
	}
	if _, err := ParseConfig(strings.NewReader(good + "loadBalancer:\n  colour: red\n")); err == nil || !strings.Contains(err.Error(), "colour") {
		t.Errorf("an unknown field: %v", err)
	}
	// Disabled: no load balancers.
	w := newWorld(t, openstacktest.Options{}, func(c *Config) { c.LoadBalancer.Disabled = true })
	if _, ok := w.cloud.LoadBalancer(); ok {
		t.Error("load balancers with loadBalancer.disabled")
	}
}
