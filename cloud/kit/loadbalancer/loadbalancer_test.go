package loadbalancer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mooring-dev/mooring/cloud"
)

// memory is a cloud of load balancers in memory whose spec is a port list.
type memory struct {
	lbs    map[string]Held[[]int32]
	next   int
	calls  map[string]int
	idAnno string
	state  string // Pending of what Create makes
	down   bool
}

func newMemory() *memory { return &memory{lbs: map[string]Held[[]int32]{}, calls: map[string]int{}} }

func (m *memory) call(op string) error {
	m.calls[op]++
	if m.down {
		return errors.New("503 down")
	}
	return nil
}

func (m *memory) Name(svc *v1.Service) string { return "a" + string(svc.UID) }
func (m *memory) ID(svc *v1.Service) string   { return svc.Annotations[m.idAnno] }
func (m *memory) Desired(_ context.Context, svc *v1.Service, _ []*v1.Node) ([]int32, error) {
	ps, err := Ports(svc, v1.ProtocolTCP)
	var out []int32
	for _, p := range ps {
		out = append(out, p.Port)
	}
	return out, err
}
func (m *memory) List(context.Context) ([]Held[[]int32], error) {
	if err := m.call("list"); err != nil {
		return nil, err
	}
	var out []Held[[]int32]
	for _, h := range m.lbs {
		out = append(out, h)
	}
	return out, nil
}
func (m *memory) Get(_ context.Context, id string) (Held[[]int32], bool, error) {
	if err := m.call("get"); err != nil {
		return Held[[]int32]{}, false, err
	}
	h, ok := m.lbs[id]
	return h, ok, nil
}
func (m *memory) Create(_ context.Context, name string, o Owner, spec []int32) (Held[[]int32], error) {
	if err := m.call("create"); err != nil {
		return Held[[]int32]{}, err
	}
	m.next++
	h := Held[[]int32]{ID: fmt.Sprint(m.next), Name: name, Owner: o, Spec: spec, Pending: m.state}
	if m.state == "" {
		h.Ingress = Ingress(fmt.Sprintf("127.0.0.%d", m.next), "", false, false)
	}
	m.lbs[h.ID] = h
	return h, nil
}
func (m *memory) Update(_ context.Context, h Held[[]int32], o Owner, spec []int32) (Held[[]int32], error) {
	if err := m.call("update"); err != nil {
		return Held[[]int32]{}, err
	}
	h.Owner, h.Spec = o, spec
	m.lbs[h.ID] = h
	return h, nil
}
func (m *memory) Delete(_ context.Context, h Held[[]int32]) error {
	if err := m.call("delete"); err != nil {
		return err
	}
	delete(m.lbs, h.ID)
	return nil
}

func svc(uid string, ports ...int32) *v1.Service {
	s := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-" + uid, UID: types.UID(uid)},
		Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer}}
	for _, p := range ports {
		s.Spec.Ports = append(s.Spec.Ports, v1.ServicePort{Port: p, NodePort: 30000 + p, Protocol: v1.ProtocolTCP})
	}
	return s
}

func newBalancers(t *testing.T, m *memory) *Balancers[[]int32] {
	t.Helper()
	var c Cloud[[]int32] = m
	if m == nil {
		c = newMemory()
	}
	b, err := New(c, Options{Cluster: "c1", PendingRetry: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A provider started again finds the Service's load balancer by the UID
// in its tags (one List), then by the id it saw (one Get).
func TestFoundByTagsThenByID(t *testing.T) {
	m := newMemory()
	ctx := context.Background()
	s := svc("u1", 80)
	if _, err := newBalancers(t, m).EnsureLoadBalancer(ctx, "", s, nil); err != nil {
		t.Fatal(err)
	}
	b := newBalancers(t, m)
	m.calls = map[string]int{}
	s.Name = "renamed" // not the name: the UID finds it
	for range 2 {
		if _, err := b.EnsureLoadBalancer(ctx, "", s, nil); err != nil {
			t.Fatal(err)
		}
	}
	if m.calls["list"] != 1 || m.calls["get"] != 1 || m.calls["create"]+m.calls["update"] != 0 {
		t.Errorf("calls %v: want one list, one get, no writes", m.calls)
	}
}

// An untagged load balancer of the Service's name, or the one its id
// annotation names, is adopted: tagged, not made again.
func TestAdopts(t *testing.T) {
	ctx := context.Background()
	for _, byID := range []bool{false, true} {
		m := newMemory()
		m.idAnno = "example.com/load-balancer-id"
		s := svc("u1", 80)
		name := m.Name(s)
		if byID {
			name = "made-by-hand"
			s.Annotations = map[string]string{m.idAnno: "7"}
		}
		m.lbs["7"] = Held[[]int32]{ID: "7", Name: name, Spec: []int32{80}, Ingress: Ingress("127.0.0.7", "", false, false)}
		st, err := newBalancers(t, m).EnsureLoadBalancer(ctx, "", s, nil)
		if err != nil {
			t.Fatal(err)
		}
		if st.Ingress[0].IP != "127.0.0.7" || m.calls["create"] != 0 || m.lbs["7"].Owner != OwnerOf("c1", s) {
			t.Errorf("by id %v: status %+v, calls %v, owner %+v: want load balancer 7 adopted", byID, st, m.calls, m.lbs["7"].Owner)
		}
	}
}

// A load balancer tagged for another cluster or Service is refused, and
// deleting the Service leaves it.
func TestForeignLeftAlone(t *testing.T) {
	ctx := context.Background()
	for _, owner := range []Owner{{Cluster: "c2", UID: "u1"}, {Cluster: "c1", UID: "u2"}} {
		m := newMemory()
		s := svc("u1", 80)
		m.lbs["7"] = Held[[]int32]{ID: "7", Name: m.Name(s), Owner: owner, Spec: []int32{9}}
		b := newBalancers(t, m)
		_, err := b.EnsureLoadBalancer(ctx, "", s, nil)
		var foreign *ForeignError
		if !errors.As(err, &foreign) {
			t.Errorf("owner %+v: %v, want a ForeignError", owner, err)
		}
		if err := b.EnsureLoadBalancerDeleted(ctx, "", s); err != nil {
			t.Error(err)
		}
		if m.calls["update"]+m.calls["delete"]+m.calls["create"] != 0 || len(m.lbs) != 1 {
			t.Errorf("owner %+v: calls %v", owner, m.calls)
		}
		if owned, _ := b.ListOwnedLoadBalancers(ctx); len(owned) != 0 && owner.Cluster == "c2" {
			t.Errorf("another cluster's listed: %+v", owned)
		}
	}
}

// While the cloud builds a load balancer, Ensure answers PendingError
// (UpdateLoadBalancer: nil), and writes nothing more.
func TestPending(t *testing.T) {
	m := newMemory()
	m.state = "new"
	b := newBalancers(t, m)
	ctx := context.Background()
	s := svc("u1", 80)
	var p *cloud.PendingError
	for _, want := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second} {
		_, err := b.EnsureLoadBalancer(ctx, "", s, nil)
		if !errors.As(err, &p) || p.After != want || p.State != "new" {
			t.Fatalf("%v, want a PendingError after %v", err, want)
		}
	}
	if err := b.UpdateLoadBalancer(ctx, "", s, nil); err != nil {
		t.Fatal(err)
	}
	if m.calls["create"] != 1 || m.calls["update"] != 0 {
		t.Errorf("calls %v", m.calls)
	}
	// A change asked for while it is built waits for it; the library's
	// controller, which retries only a failed update, is told so.
	s2 := svc("u1", 80, 443)
	if _, err := b.EnsureLoadBalancer(ctx, "", s2, nil); !errors.As(err, &p) || m.calls["update"] != 0 {
		t.Fatalf("a change while pending: %v, calls %v; want a PendingError and no update", err, m.calls)
	}
	if err := b.UpdateLoadBalancer(ctx, "", s2, nil); !errors.As(err, &p) {
		t.Fatalf("UpdateLoadBalancer of a change left for later: %v, want the PendingError", err)
	}
	// Built: its status, and a later build starts at 1s again.
	h := m.lbs["1"]
	h.Pending, h.Ingress = "", Ingress("127.0.0.1", "", false, false)
	m.lbs["1"] = h
	if _, err := b.EnsureLoadBalancer(ctx, "", s2, nil); err != nil || m.calls["update"] != 1 {
		t.Fatalf("once built: %v, calls %v; want the change written", err, m.calls)
	}
	if got := b.wait("u1"); got != time.Second {
		t.Errorf("after a ready answer: wait %v, want 1s", got)
	}
}

// A failing API is an error everywhere; nothing is deleted, and bad input
// reaches no API.
func TestErrors(t *testing.T) {
	m := newMemory()
	b := newBalancers(t, m)
	ctx := context.Background()
	s := svc("u1", 80)
	if _, err := b.EnsureLoadBalancer(ctx, "", s, nil); err != nil {
		t.Fatal(err)
	}
	m.down = true
	changed := svc("u1", 81)
	changed.Spec.Ports[0].NodePort = 30080
	if _, err := b.EnsureLoadBalancer(ctx, "", changed, nil); err == nil {
		t.Error("Ensure: no error")
	}
	m.down = false
	m.lbs["1"] = Held[[]int32]{ID: "1", Name: "au1", Owner: OwnerOf("c1", s), Spec: []int32{80}}
	m.calls = map[string]int{}
	failUpdate := &failingUpdate{m}
	if _, err := newBalancers(t, nil).withCloud(failUpdate).EnsureLoadBalancer(ctx, "", changed, nil); err == nil ||
		!strings.Contains(err.Error(), "update load balancer au1 (1)") {
		t.Errorf("a failed update: %v, want it to name the load balancer", err)
	}
	m.down = true
	if err := b.EnsureLoadBalancerDeleted(ctx, "", s); err == nil {
		t.Error("Delete: no error")
	}
	if _, err := b.ListOwnedLoadBalancers(ctx); err == nil {
		t.Error("List: no error")
	}
	m.down = false
	if len(m.lbs) != 1 {
		t.Fatal("deleted during the outage")
	}
	m.calls = map[string]int{}
	udp := svc("u3", 53)
	udp.Spec.Ports[0].Protocol = v1.ProtocolUDP
	if _, err := b.EnsureLoadBalancer(ctx, "", udp, nil); err == nil || !strings.Contains(err.Error(), "UDP") {
		t.Errorf("UDP: %v", err)
	}
	if len(m.calls) != 0 {
		t.Errorf("bad input called the API: %v", m.calls)
	}
}

// failingUpdate is memory whose updates fail, answering an empty Held.
type failingUpdate struct{ *memory }

func (f *failingUpdate) Update(context.Context, Held[[]int32], Owner, []int32) (Held[[]int32], error) {
	return Held[[]int32]{}, errors.New("409 conflict")
}

func (b *Balancers[S]) withCloud(c Cloud[S]) *Balancers[S] {
	b.cloud = c
	return b
}

func TestAnnotations(t *testing.T) {
	s := svc("u1", 80)
	s.Annotations = map[string]string{
		"x.io/lb-size": "7", "x.io/lb-proxy": "yes", "x.io/lb-typo": "1", "x.io/lb-by-ccm": "id",
		"x.io/lb-mode": "HTTPS", "x.io/lb-ports": "443, 80,443", "x.io/lb-every": "15s", "other.io/x": "y",
	}
	a := Read(s, "x.io/lb-")
	a.Known("x.io/lb-by-ccm")
	if n := a.Int("x.io/lb-size", 1, 1, 5); n != 1 {
		t.Errorf("out of range: %d, want the default", n)
	}
	a.Bool("x.io/lb-proxy", false)
	if m := a.OneOf("x.io/lb-mode", "tcp", "tcp", "https"); m != "https" {
		t.Errorf("mode %q", m)
	}
	if p := a.Ports("x.io/lb-ports"); !slices.Equal(p, []int32{80, 443}) {
		t.Errorf("ports %v", p)
	}
	if d := a.Duration("x.io/lb-every", time.Second, time.Second, time.Minute); d != 15*time.Second {
		t.Errorf("duration %v", d)
	}
	err := a.Err()
	for _, want := range []string{"ns/web-u1", `x.io/lb-size="7": want an integer from 1 to 5`, `x.io/lb-proxy="yes": want true or false`, "x.io/lb-typo is not one"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Err() = %v, want it to say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "other.io") || strings.Contains(err.Error(), "by-ccm") {
		t.Errorf("Err() = %v: names an annotation it should not", err)
	}
}

func TestOwnerCodecs(t *testing.T) {
	o := Owner{Cluster: "k8s:abc", UID: "4f1c-9", Namespace: "default", Service: "web"}
	st := StringTags{Prefix: "mooring", Max: 50}
	if got := st.Owner(append(st.Tags(o), "other")); got != o || !st.Mine(st.Tags(o)) || st.Mine([]string{"k8s"}) {
		t.Errorf("string tags: %+v", got)
	}
	long := o
	long.Namespace = strings.Repeat("n", 60)
	if got := st.Owner(st.Tags(long)); got.UID != o.UID || got.Namespace != "" {
		t.Errorf("a too long service tag is left out: %+v", got)
	}
	lt := LabelTags{Prefix: "mooring.dev"}
	if got := lt.Owner(lt.Labels(o)); got != o {
		t.Errorf("labels: %+v", got)
	}
	if !(Owner{}).Zero() || o.Zero() {
		t.Error("Zero")
	}
}

func TestServiceParts(t *testing.T) {
	s := svc("u1", 443, 80)
	s.Spec.LoadBalancerSourceRanges = []string{"10.0.0.5/8", "127.0.0.0/8"}
	s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	s.Spec.HealthCheckNodePort = 31000
	ps, err := Ports(s)
	if err != nil || ps[0].Port != 80 || ps[1].NodePort != 30443 {
		t.Errorf("ports %+v, %v", ps, err)
	}
	if r, err := SourceRanges(s); err != nil || !slices.Equal(r, []string{"10.0.0.0/8", "127.0.0.0/8"}) {
		t.Errorf("ranges %v, %v", r, err)
	}
	if path, port, ok := HealthCheckNodePort(s); !ok || path != "/healthz" || port != 31000 {
		t.Errorf("health check %q %d %v", path, port, ok)
	}
	s.Spec.Ports[0].NodePort = 0
	if _, err := Ports(s); err == nil {
		t.Error("a port without a node port is accepted")
	}
	if in := Ingress("127.0.0.9", "lb.example", true, false); *in[0].IPMode != v1.LoadBalancerIPModeProxy || in[0].Hostname != "lb.example" {
		t.Errorf("ingress %+v", in)
	}
	if in := Ingress("127.0.0.9", "lb.example", false, true); in[0].IP != "" {
		t.Errorf("hostname only: %+v", in)
	}
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "b"}, Status: v1.NodeStatus{Addresses: []v1.NodeAddress{
		{Type: v1.NodeExternalIP, Address: "127.0.0.2"}, {Type: v1.NodeInternalIP, Address: "127.0.0.1"}}}}
	if ts := Targets([]*v1.Node{n, {ObjectMeta: metav1.ObjectMeta{Name: "a"}}}); ts[0].Node != "a" || ts[1].Address() != "127.0.0.1" {
		t.Errorf("targets %+v", ts)
	}
}

// indexed is memory whose List is dear: Index lists without specs.
type indexed struct{ *memory }

func (x *indexed) Index(ctx context.Context) ([]Held[[]int32], error) {
	if err := x.call("index"); err != nil {
		return nil, err
	}
	var out []Held[[]int32]
	for _, h := range x.lbs {
		h.Spec = nil
		out = append(out, h)
	}
	return out, nil
}

// A Cloud with an index is searched through it, and the one found read
// with a Get: never a whole List.
func TestIndexer(t *testing.T) {
	m := newMemory()
	x := &indexed{m}
	ctx := context.Background()
	for i := range 5 {
		s := svc(fmt.Sprintf("u%d", i), 80)
		if _, err := newBalancers(t, nil).withCloud(x).EnsureLoadBalancer(ctx, "", s, nil); err != nil {
			t.Fatal(err)
		}
	}
	if m.calls["list"] != 0 || m.calls["index"] != 5 || m.calls["create"] != 5 {
		t.Fatalf("calls %v: want 5 index calls and no List", m.calls)
	}
	// Found by its tags in the index, then read whole: unchanged, no write.
	m.calls = map[string]int{}
	if _, err := newBalancers(t, nil).withCloud(x).EnsureLoadBalancer(ctx, "", svc("u3", 80), nil); err != nil {
		t.Fatal(err)
	}
	if m.calls["index"] != 1 || m.calls["get"] != 1 || m.calls["update"] != 0 || m.calls["list"] != 0 {
		t.Errorf("calls %v: want one index call, one get, no write", m.calls)
	}
}
