package conformance

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// LBBed is a Bed whose cloud has Service load balancers
// (Backend.LoadBalancer): its provider's LoadBalancer is a
// cloud.LoadBalancerInventory (or an upstream provider's plain one, with
// Backend.LBUpstream), and its endpoint's load balancers carry
// traffic on loopback (cloudtest.DataPlane).
type LBBed interface {
	Bed
	// LBs are the load balancers the cloud holds, all of them (its
	// API's list, read by the endpoint itself, not through the provider).
	LBs(t testing.TB) []LB
	// MadeByCloudCCM makes the load balancer the cloud's own CCM would
	// have made for svc (its name for it, its tags or none of ours,
	// forwarding svc's ports to their node ports on nodes), as a cluster
	// switching to mooring has it, ready; it returns it.
	MadeByCloudCCM(t testing.TB, svc *v1.Service, nodes []*v1.Node) LB
	// MadeForOtherCluster makes a load balancer of the name svc's would
	// get, tagged for another cluster's Service.
	MadeForOtherCluster(t testing.TB, svc *v1.Service) LB
	// Tamper changes the load balancer out of band (drops a target or
	// changes a port), so that it no longer does what its Service calls
	// for.
	Tamper(t testing.TB, lb LB)
	// TargetAddress is the address of m that the cloud's load balancers
	// forward to (its private or its public one), where the suite's
	// stand-in for kube-proxy listens on the node port.
	TargetAddress(m Made) string
	// Settle finishes building every load balancer the cloud is still
	// building (a cloud whose load balancers are asynchronous); a no-op
	// for one whose are ready at once.
	Settle(t testing.TB)
}

// LB is one load balancer as a test endpoint holds it.
type LB struct {
	ID, Name string
	// IP is its address on loopback ("" while it has none); Hostname its
	// name, where the cloud gives one.
	IP, Hostname string
	// Ports are its listeners' ports.
	Ports []int32
	// Targets are how many backends (nodes) it forwards to.
	Targets int
}

// LB calls a Bed counts (Bed.Calls), besides List and Confirm.
const (
	LBList   Call = "lb-list"
	LBGet    Call = "lb-get"
	LBCreate Call = "lb-create"
	// LBUpdate counts every call that changes a load balancer (one, or
	// more where the cloud changes targets, listeners and settings with
	// calls of their own).
	LBUpdate Call = "lb-update"
	LBDelete Call = "lb-delete"
)

// RunLoadBalancers runs the Service load balancers' contract, through the
// provider's cloud.LoadBalancerInventory against the bed's endpoint: a
// load balancer is made once, carries traffic to the nodes' node ports,
// is written only when what the Service and nodes call for changes (a
// node, a port, a change made out of band), and deleted with nothing
// left; one the cloud's own CCM made is adopted with its address, one of
// another cluster is neither changed nor deleted; bad input (an unknown
// annotation, a protocol the cloud lacks) and a failing API are errors
// with nothing written or deleted; one whose Service is gone is found by
// its tags and collected. An upstream provider's load balancers
// (Backend.LBUpstream) run Lifecycle and Failures alone.
func RunLoadBalancers(t *testing.T, b Backend) {
	upstream := func(t *testing.T, why string) bool {
		if b.LBUpstream {
			t.Skip("an upstream provider's load balancers (Backend.LBUpstream): " + why)
		}
		return false
	}
	t.Run("Lifecycle", func(t *testing.T) { lbLifecycle(t, b) })
	t.Run("Adopt", func(t *testing.T) {
		if !upstream(t, "they carry no cluster tag, so there is no telling the cloud CCM's load balancer from the cluster's own, nor listing it") {
			lbAdopt(t, b)
		}
	})
	t.Run("OtherCluster", func(t *testing.T) {
		if !upstream(t, "they carry no cluster tag, so another cluster's load balancer of the same name cannot be told apart") {
			lbOtherCluster(t, b)
		}
	})
	t.Run("BadInput", func(t *testing.T) {
		if !upstream(t, "the upstream ignores annotations it does not know, and has no DesiredFingerprint") {
			lbBadInput(t, b)
		}
	})
	t.Run("Failures", func(t *testing.T) { lbFailures(t, b) })
	t.Run("Orphan", func(t *testing.T) {
		if !upstream(t, "they carry no cluster tag, so one whose Service is gone cannot be found (no ListOwnedLoadBalancers)") {
			lbOrphan(t, b)
		}
	})
}

// rig is a bed with nodes and the provider's load balancers.
type rig struct {
	bed LBBed
	lbs cloudprovider.LoadBalancer
	// inv is lbs as a cloud.LoadBalancerInventory; nil for an upstream
	// provider's (Backend.LBUpstream), whose checks through it are left
	// out.
	inv   cloud.LoadBalancerInventory
	made  []Made
	nodes []*v1.Node
}

func newRig(t *testing.T, b Backend, nodes int) *rig {
	t.Helper()
	bed, ok := b.New(t, Options{}).(LBBed)
	if !ok {
		t.Fatalf("backend %s has load balancers, but its Bed is no LBBed", b.Name)
	}
	lb, ok := bed.Provider().LoadBalancer()
	if !ok {
		t.Fatal("LoadBalancer not implemented")
	}
	inv, ok := lb.(cloud.LoadBalancerInventory)
	if !ok && !b.LBUpstream {
		t.Fatalf("the load balancers (%T) cannot be listed: no cloud.LoadBalancerInventory", lb)
	}
	r := &rig{bed: bed, lbs: lb, inv: inv}
	for range nodes {
		r.addNode(t)
	}
	return r
}

// addNode makes an instance and its Node, Ready, with its InternalIP.
func (r *rig) addNode(t testing.TB) *v1.Node {
	t.Helper()
	n := 200 + len(r.made)
	m := r.bed.Make(t, Spec{Name: fmt.Sprintf("lbnode-%d", n), N: n})
	node := node(m.NodeName, m.ProviderID)
	if m.InternalIP != "" {
		node.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: m.InternalIP}}
	}
	node.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}
	r.made = append(r.made, m)
	r.nodes = append(r.nodes, node)
	return node
}

// writes counts the calls that changed load balancers.
func (r *rig) writes() int {
	return max(r.bed.Calls(LBCreate), 0) + r.bed.Calls(LBUpdate) + r.bed.Calls(LBDelete)
}

// creates counts the calls that made load balancers; -1 on a bed whose
// cloud makes and changes them with one call (counted as LBUpdate).
func (r *rig) creates() int { return r.bed.Calls(LBCreate) }

// ensure is EnsureLoadBalancer until the cloud has built the load
// balancer (Settle between).
func (r *rig) ensure(t testing.TB, svc *v1.Service) *v1.LoadBalancerStatus {
	t.Helper()
	for try := 0; ; try++ {
		st, err := r.lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, r.nodes)
		if cloud.IsPending(err) && try < 5 {
			r.bed.Settle(t)
			continue
		}
		if err != nil {
			t.Fatalf("EnsureLoadBalancer(%s): %v", svc.Name, err)
		}
		if st == nil || len(st.Ingress) == 0 || st.Ingress[0].IP == "" && st.Ingress[0].Hostname == "" {
			t.Fatalf("EnsureLoadBalancer(%s): status %+v, want an address", svc.Name, st)
		}
		return st
	}
}

// owned is the listed load balancer of svc's UID.
func (r *rig) owned(t testing.TB, svc *v1.Service) (cloud.OwnedLoadBalancer, bool) {
	t.Helper()
	if r.inv == nil {
		t.Fatal("an upstream provider's load balancers cannot be listed")
	}
	all, err := r.inv.ListOwnedLoadBalancers(context.Background())
	if err != nil {
		t.Fatalf("ListOwnedLoadBalancers: %v", err)
	}
	for _, o := range all {
		if o.UID == string(svc.UID) {
			return o, true
		}
	}
	return cloud.OwnedLoadBalancer{}, false
}

// inSync checks that the listed load balancer of svc does what svc and
// the nodes call for, or does not (want false); nothing to check on an
// upstream provider's (no inventory: the callers check the endpoint's
// copy).
func (r *rig) inSync(t testing.TB, svc *v1.Service, want bool) {
	t.Helper()
	if r.inv == nil {
		return
	}
	o, ok := r.owned(t, svc)
	if !ok {
		t.Fatalf("ListOwnedLoadBalancers has no load balancer of %s", svc.Name)
	}
	fp, err := r.inv.DesiredFingerprint(context.Background(), svc, r.nodes)
	if err != nil {
		t.Fatalf("DesiredFingerprint(%s): %v", svc.Name, err)
	}
	if (o.Fingerprint == fp) != want {
		t.Fatalf("the listed load balancer of %s does what the Service calls for: %v, want %v", svc.Name, !want, want)
	}
	if o.Namespace != "" && o.Namespace != svc.Namespace || o.Service != "" && o.Service != svc.Name {
		t.Errorf("listed as %s/%s's, want %s/%s's", o.Namespace, o.Service, svc.Namespace, svc.Name)
	}
}

// cloudLB is the endpoint's load balancer of id (or of name, id "").
func (r *rig) cloudLB(t testing.TB, id, name string) (LB, bool) {
	t.Helper()
	for _, l := range r.bed.LBs(t) {
		if id != "" && l.ID == id || id == "" && l.Name == name {
			return l, true
		}
	}
	return LB{}, false
}

// lbService is a LoadBalancer Service of ports, each to a node port of
// its own.
func lbService(name string, ports ...int32) *v1.Service {
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: uuid.NewUUID()},
		Spec:       v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer},
	}
	for _, p := range ports {
		svc.Spec.Ports = append(svc.Spec.Ports, v1.ServicePort{Name: fmt.Sprintf("p%d", p), Port: p,
			Protocol: v1.ProtocolTCP, NodePort: int32(30000 + rand.IntN(2700))})
	}
	return svc
}

// serveNodePorts stands in for kube-proxy: on each node's target address
// (from the i-th node on) at each of svc's node ports, a server that
// answers its node's name.
func (r *rig) serveNodePorts(t testing.TB, svc *v1.Service, from int) {
	t.Helper()
	for i, m := range r.made[from:] {
		i += from
		for _, p := range svc.Spec.Ports {
			cloudtest.ServeName(t, net.JoinHostPort(r.bed.TargetAddress(m), strconv.Itoa(int(p.NodePort))), r.nodes[i].Name)
		}
	}
}

// traffic checks that a connection to addr:port reaches a node (within a
// while: the load balancer's health checks pass first).
func traffic(t testing.TB, addr string, port int32, nodes []*v1.Node) {
	t.Helper()
	target := net.JoinHostPort(addr, strconv.Itoa(int(port)))
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", target, time.Second)
		if err == nil {
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			line, rerr := bufio.NewReader(c).ReadString('\n')
			c.Close()
			line = strings.TrimSpace(line)
			for _, n := range nodes {
				if line == n.Name {
					return
				}
			}
			last = fmt.Sprintf("answer %q, %v", line, rerr)
		} else {
			last = err.Error()
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no traffic through the load balancer at %s to a node: %s", target, last)
}

// address is where the status says the load balancer is: its IP, or the
// endpoint's IP of it when the status has only a hostname.
func (r *rig) address(t testing.TB, st *v1.LoadBalancerStatus, name string) string {
	t.Helper()
	if ip := st.Ingress[0].IP; ip != "" {
		return ip
	}
	l, ok := r.cloudLB(t, "", name)
	if !ok || l.IP == "" {
		t.Fatalf("the endpoint has no address of load balancer %s", name)
	}
	return l.IP
}

// A Service's load balancer, from creation to deletion: made once, it
// carries traffic; written again only when the nodes, the ports or the
// cloud's copy (changed out of band) differ from what is called for.
func lbLifecycle(t *testing.T, b Backend) {
	r := newRig(t, b, 2)
	ctx := context.Background()
	svc := lbService("web", 8080)
	r.serveNodePorts(t, svc, 0)
	st := r.ensure(t, svc)
	if got := r.creates(); got != 1 && got != -1 {
		t.Errorf("create calls: %d, want 1", got)
	}
	name := r.lbs.GetLoadBalancerName(ctx, "kubernetes", svc)
	l, ok := r.cloudLB(t, "", name)
	if !ok {
		t.Fatalf("the cloud holds no load balancer %s", name)
	}
	if l.Targets != 2 || !slices.Equal(l.Ports, []int32{8080}) {
		t.Errorf("the cloud's load balancer: %+v, want 2 targets and port 8080", l)
	}
	traffic(t, r.address(t, st, name), 8080, r.nodes)
	r.inSync(t, svc, true)
	if got, ok, err := r.lbs.GetLoadBalancer(ctx, "kubernetes", svc); err != nil || !ok || !reflect.DeepEqual(got, st) {
		t.Errorf("GetLoadBalancer: %+v, %v, %v; want %+v", got, ok, err, st)
	}

	t.Run("Unchanged", func(t *testing.T) {
		w := r.writes()
		r.ensure(t, svc)
		if err := r.lbs.UpdateLoadBalancer(ctx, "kubernetes", svc, r.nodes); err != nil {
			t.Fatal(err)
		}
		if got := r.writes() - w; got != 0 && b.LBUpstream {
			// Not mooring's to change: said, not failed.
			t.Skipf("an upstream provider's load balancers (Backend.LBUpstream): %d writes for one that does what is called for, the upstream's own", got)
		} else if got != 0 {
			t.Errorf("writes for a load balancer that does what is called for: %d, want 0", got)
		}
	})
	t.Run("NodeJoins", func(t *testing.T) {
		r.addNode(t)
		r.serveNodePorts(t, svc, 2)
		w := r.writes()
		r.inSync(t, svc, false)
		r.ensure(t, svc)
		if r.writes() == w || r.creates() > 1 {
			t.Errorf("a node joined: writes %d, creates %d; want an update", r.writes()-w, r.creates())
		}
		if l, _ := r.cloudLB(t, l.ID, ""); l.Targets != 3 {
			t.Errorf("targets: %d, want 3", l.Targets)
		}
		r.inSync(t, svc, true)
	})
	t.Run("NodeLeaves", func(t *testing.T) {
		r.nodes = r.nodes[:2]
		r.made = r.made[:2]
		r.ensure(t, svc)
		if l, _ := r.cloudLB(t, l.ID, ""); l.Targets != 2 {
			t.Errorf("targets: %d, want 2", l.Targets)
		}
		r.inSync(t, svc, true)
	})
	t.Run("PortChanges", func(t *testing.T) {
		svc.Spec.Ports[0].Port = 8081
		svc.Spec.Ports[0].Name = "p8081"
		st := r.ensure(t, svc)
		got, _ := r.cloudLB(t, l.ID, "")
		if !slices.Equal(got.Ports, []int32{8081}) || r.creates() > 1 {
			t.Errorf("after a port change: ports %v, creates %d; want [8081], one create in all", got.Ports, r.creates())
		}
		traffic(t, r.address(t, st, name), 8081, r.nodes)
		r.inSync(t, svc, true)
	})
	t.Run("Drift", func(t *testing.T) {
		r.bed.Tamper(t, l)
		r.inSync(t, svc, false)
		r.ensure(t, svc)
		r.inSync(t, svc, true)
		if got, _ := r.cloudLB(t, l.ID, ""); got.Targets != len(r.nodes) || !slices.Equal(got.Ports, []int32{8081}) {
			t.Errorf("after the repair: %+v, want %d targets and port 8081", got, len(r.nodes))
		}
		if r.creates() > 1 {
			t.Errorf("repairing made a new load balancer")
		}
	})
	t.Run("Delete", func(t *testing.T) {
		if err := r.lbs.EnsureLoadBalancerDeleted(ctx, "kubernetes", svc); err != nil {
			t.Fatal(err)
		}
		if _, ok := r.cloudLB(t, l.ID, ""); ok {
			t.Fatal("the load balancer is still there")
		}
		if r.inv == nil {
			// an upstream provider's: the endpoint's copy is gone (above)
		} else if _, ok := r.owned(t, svc); ok {
			t.Error("still listed as the cluster's")
		}
		if err := r.lbs.EnsureLoadBalancerDeleted(ctx, "kubernetes", svc); err != nil {
			t.Errorf("deleting it again: %v", err)
		}
		if _, ok, err := r.lbs.GetLoadBalancer(ctx, "kubernetes", svc); ok || err != nil {
			t.Errorf("GetLoadBalancer after deletion: %v, %v", ok, err)
		}
	})
}

// A load balancer the cloud's own CCM made for a Service is adopted: no
// new one, its id and address kept, tagged for the cluster.
func lbAdopt(t *testing.T, b Backend) {
	r := newRig(t, b, 2)
	svc := lbService("adopted", 8080)
	r.serveNodePorts(t, svc, 0)
	before := r.bed.MadeByCloudCCM(t, svc, r.nodes)
	if _, ok := r.owned(t, svc); ok {
		t.Fatal("a load balancer the cluster did not make is listed as its own before adoption")
	}
	st := r.ensure(t, svc)
	if got := r.creates(); got > 0 {
		t.Errorf("create calls: %d, want 0 (adopted)", got)
	}
	after, ok := r.cloudLB(t, before.ID, "")
	if !ok || after.IP != before.IP || len(r.bed.LBs(t)) != 1 {
		t.Fatalf("after adoption: %+v (of %d), want load balancer %s at %s kept", after, len(r.bed.LBs(t)), before.ID, before.IP)
	}
	if ip := st.Ingress[0].IP; ip != "" && ip != before.IP {
		t.Errorf("status IP %s, want the adopted load balancer's %s", ip, before.IP)
	}
	r.inSync(t, svc, true)
	traffic(t, r.address(t, st, before.Name), 8080, r.nodes)
}

// A load balancer of the name a Service's would get but of another
// cluster is neither changed nor deleted, nor listed as the cluster's.
func lbOtherCluster(t *testing.T, b Backend) {
	r := newRig(t, b, 1)
	ctx := context.Background()
	svc := lbService("theirs", 8080)
	theirs := r.bed.MadeForOtherCluster(t, svc)
	w := r.writes()
	if _, err := r.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, r.nodes); err == nil || cloud.IsPending(err) {
		t.Errorf("EnsureLoadBalancer over another cluster's load balancer: %v, want an error", err)
	}
	if err := r.lbs.UpdateLoadBalancer(ctx, "kubernetes", svc, r.nodes); err == nil {
		t.Error("UpdateLoadBalancer over another cluster's load balancer: no error")
	}
	if err := r.lbs.EnsureLoadBalancerDeleted(ctx, "kubernetes", svc); err != nil {
		t.Errorf("EnsureLoadBalancerDeleted: %v, want nil (not this Service's: left alone)", err)
	}
	if got := r.writes() - w; got != 0 {
		t.Errorf("writes: %d, want 0", got)
	}
	if l, ok := r.cloudLB(t, theirs.ID, ""); !ok || !reflect.DeepEqual(l, theirs) {
		t.Errorf("another cluster's load balancer: %+v, %v; want %+v unchanged", l, ok, theirs)
	}
	if _, ok := r.owned(t, svc); ok {
		t.Error("another cluster's load balancer is listed as this cluster's")
	}
}

// Bad input is an error that names it, before the cloud is written: an
// annotation under the cloud's CCM's prefixes that the backend does not
// know, and a protocol its load balancers lack.
func lbBadInput(t *testing.T, b Backend) {
	r := newRig(t, b, 1)
	ctx := context.Background()
	bad := map[string]*v1.Service{}
	for _, p := range b.LBAnnotationPrefixes {
		svc := lbService("unknown", 8080)
		svc.Annotations = map[string]string{p + "no-such-setting": "1"}
		bad[p+"no-such-setting"] = svc
	}
	sctp := lbService("sctp", 8080)
	sctp.Spec.Ports[0].Protocol = v1.ProtocolSCTP
	bad["SCTP"] = sctp
	for want, svc := range bad {
		if _, err := r.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, r.nodes); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("EnsureLoadBalancer with %s: %v, want an error naming it", want, err)
		}
		if _, err := r.inv.DesiredFingerprint(context.Background(), svc, r.nodes); err == nil {
			t.Errorf("DesiredFingerprint with %s: no error", want)
		}
	}
	if got := r.writes(); got != 0 || len(r.bed.LBs(t)) != 0 {
		t.Errorf("writes: %d, load balancers: %d; want none", got, len(r.bed.LBs(t)))
	}
}

// A failing API is an error for every call, with nothing deleted; the
// provider answers again once the API does.
func lbFailures(t *testing.T, b Backend) {
	r := newRig(t, b, 1)
	ctx := context.Background()
	svc := lbService("steady", 8080)
	r.ensure(t, svc)
	held := r.bed.LBs(t)
	for _, f := range []Failure{Outage, Unauthorized, Throttled} {
		undo := r.bed.Fail(t, f)
		if undo == nil {
			continue
		}
		svc.Spec.Ports[0].NodePort++ // a change to write
		if _, err := r.lbs.EnsureLoadBalancer(ctx, "kubernetes", svc, r.nodes); err == nil || cloud.IsPending(err) {
			t.Errorf("%s: EnsureLoadBalancer: %v, want an error", f, err)
		}
		if r.inv != nil {
			if _, err := r.inv.ListOwnedLoadBalancers(ctx); err == nil {
				t.Errorf("%s: ListOwnedLoadBalancers: no error", f)
			}
		}
		if err := r.lbs.EnsureLoadBalancerDeleted(ctx, "kubernetes", svc); err == nil {
			t.Errorf("%s: EnsureLoadBalancerDeleted: no error", f)
		}
		if _, _, err := r.lbs.GetLoadBalancer(ctx, "kubernetes", svc); err == nil {
			t.Errorf("%s: GetLoadBalancer: no error", f)
		}
		undo()
		if got := r.bed.LBs(t); len(got) != len(held) {
			t.Fatalf("%s: load balancers %+v, want %+v: none deleted", f, got, held)
		}
		r.ensure(t, svc)
		r.inSync(t, svc, true)
	}
}

// A load balancer whose Service is gone is listed by its tags, and
// deleted through a Service of its namespace, name and UID alone (what
// ccm/servicelb's sweep has left of it).
func lbOrphan(t *testing.T, b Backend) {
	r := newRig(t, b, 1)
	ctx := context.Background()
	svc := lbService("gone", 8080)
	r.ensure(t, svc)
	orphan := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: svc.Name, UID: svc.UID}}
	if _, ok := r.owned(t, svc); !ok {
		t.Fatal("not listed as the cluster's")
	}
	if err := r.lbs.EnsureLoadBalancerDeleted(ctx, "kubernetes", orphan); err != nil {
		t.Fatal(err)
	}
	if n := len(r.bed.LBs(t)); n != 0 {
		t.Errorf("load balancers left: %d", n)
	}
}
