package servicelb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/mooring-dev/mooring/cloud"
)

// fakeCloud is a unit-test inventory: load balancers by Service UID with
// the node names they were given.
type fakeCloud struct {
	mu       sync.Mutex
	lbs      map[types.UID]cloud.OwnedLoadBalancer
	nodes    map[types.UID][]string
	ensures  int
	deletes  []string
	listErr  error
	ensureFn func(*v1.Service) error
}

func newFakeCloud() *fakeCloud {
	return &fakeCloud{lbs: map[types.UID]cloud.OwnedLoadBalancer{}, nodes: map[types.UID][]string{}}
}

func fingerprint(nodes []*v1.Node) string {
	var names []string
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	return fmt.Sprint(names)
}

func (f *fakeCloud) GetLoadBalancer(_ context.Context, _ string, svc *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.lbs[svc.UID]
	return &v1.LoadBalancerStatus{}, ok, nil
}

func (f *fakeCloud) GetLoadBalancerName(_ context.Context, _ string, svc *v1.Service) string {
	return "lb-" + string(svc.UID)
}

func (f *fakeCloud) EnsureLoadBalancer(_ context.Context, _ string, svc *v1.Service, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ensures++
	if f.ensureFn != nil {
		if err := f.ensureFn(svc); err != nil {
			return nil, err
		}
	}
	f.lbs[svc.UID] = cloud.OwnedLoadBalancer{Name: "lb-" + string(svc.UID), Namespace: svc.Namespace, Service: svc.Name,
		UID: string(svc.UID), Fingerprint: fingerprint(nodes)}
	var names []string
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	f.nodes[svc.UID] = names
	return &v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: "127.30.0.1"}}}, nil
}

func (f *fakeCloud) UpdateLoadBalancer(ctx context.Context, c string, svc *v1.Service, nodes []*v1.Node) error {
	_, err := f.EnsureLoadBalancer(ctx, c, svc, nodes)
	return err
}

func (f *fakeCloud) EnsureLoadBalancerDeleted(_ context.Context, _ string, svc *v1.Service) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.lbs, svc.UID)
	f.deletes = append(f.deletes, string(svc.UID))
	return nil
}

func (f *fakeCloud) ListOwnedLoadBalancers(context.Context) ([]cloud.OwnedLoadBalancer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listErr != nil {
		return nil, f.listErr
	}
	var out []cloud.OwnedLoadBalancer
	for _, o := range f.lbs {
		out = append(out, o)
	}
	return out, nil
}

func (f *fakeCloud) DesiredFingerprint(_ context.Context, _ *v1.Service, nodes []*v1.Node) (string, error) {
	return fingerprint(nodes), nil
}

func (f *fakeCloud) state(uid types.UID) (cloud.OwnedLoadBalancer, []string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	o, ok := f.lbs[uid]
	return o, slices.Clone(f.nodes[uid]), ok
}

func readyNode(name string) *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1.NodeSpec{ProviderID: "local://" + name},
		Status: v1.NodeStatus{
			Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}},
			Addresses:  []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "127.10.0.1"}},
		},
	}
}

func lbService(name string, class *string) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec: v1.ServiceSpec{
			Type: v1.ServiceTypeLoadBalancer, LoadBalancerClass: class,
			Ports: []v1.ServicePort{{Port: 80, NodePort: 30080, Protocol: v1.ProtocolTCP}},
		},
	}
}

type harness struct {
	client *fake.Clientset
	cloud  *fakeCloud
	ctrl   *Controller
}

func start(t *testing.T, opts Options, objs ...any) *harness {
	t.Helper()
	var runtimeObjs []any
	runtimeObjs = append(runtimeObjs, objs...)
	client := fake.NewClientset()
	for _, o := range runtimeObjs {
		switch v := o.(type) {
		case *v1.Node:
			_, _ = client.CoreV1().Nodes().Create(context.Background(), v, metav1.CreateOptions{})
		case *v1.Service:
			_, _ = client.CoreV1().Services(v.Namespace).Create(context.Background(), v, metav1.CreateOptions{})
		}
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	fc := newFakeCloud()
	if opts.DriftPeriod == 0 {
		opts.DriftPeriod = 50 * time.Millisecond
	}
	if opts.NodeBatch == 0 {
		opts.NodeBatch = -1
	}
	ctrl, err := New(fc, client, factory.Core().V1().Services(), factory.Core().V1().Nodes(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	factory.Start(ctx.Done())
	go func() { ctrl.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		factory.Shutdown()
	})
	return &harness{client: client, cloud: fc, ctrl: ctrl}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func (h *harness) service(t *testing.T, name string) *v1.Service {
	t.Helper()
	s, err := h.client.CoreV1().Services("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestEnsureSetsFinalizerStatusAndBackends(t *testing.T) {
	notReady := readyNode("n-notready")
	notReady.Status.Conditions[0].Status = v1.ConditionFalse
	excluded := readyNode("n-excluded")
	excluded.Labels = map[string]string{LabelExcludeFromLB: ""}
	uninit := readyNode("n-uninit")
	uninit.Spec.ProviderID = ""
	h := start(t, Options{ServeUnclassed: true, Class: "mooring.dev/local"},
		readyNode("n1"), readyNode("n2"), notReady, excluded, uninit, lbService("web", nil))

	eventually(t, "status and finalizer", func() bool {
		s := h.service(t, "web")
		return len(s.Status.LoadBalancer.Ingress) == 1 && slices.Contains(s.Finalizers, Finalizer)
	})
	_, nodes, _ := h.cloud.state("uid-web")
	if !slices.Equal(nodes, []string{"n1", "n2"}) {
		t.Fatalf("backends %v, want only the eligible nodes n1, n2", nodes)
	}

	// A node joining the eligible set updates the load balancer.
	if _, err := h.client.CoreV1().Nodes().Create(context.Background(), readyNode("n3"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "n3 in the backends", func() bool {
		_, nodes, _ := h.cloud.state("uid-web")
		return slices.Contains(nodes, "n3")
	})
}

func TestClasses(t *testing.T) {
	h := start(t, Options{Class: "mooring.dev/local"},
		readyNode("n1"),
		lbService("default-class", nil),
		lbService("ours", ptr.To("mooring.dev/local")),
		lbService("theirs", ptr.To("example.com/other")))
	eventually(t, "our class served", func() bool { _, _, ok := h.cloud.state("uid-ours"); return ok })
	time.Sleep(200 * time.Millisecond) // several sweeps
	for _, name := range []string{"default-class", "theirs"} {
		if _, _, ok := h.cloud.state(types.UID("uid-" + name)); ok {
			t.Errorf("%s: got a load balancer", name)
		}
		if s := h.service(t, name); len(s.Finalizers) > 0 || len(s.Status.LoadBalancer.Ingress) > 0 {
			t.Errorf("%s: touched: finalizers %v, status %v", name, s.Finalizers, s.Status.LoadBalancer)
		}
	}
}

func TestDeletionRemovesLoadBalancerThenFinalizer(t *testing.T) {
	h := start(t, Options{ServeUnclassed: true}, readyNode("n1"), lbService("web", nil))
	eventually(t, "finalizer and status", func() bool {
		s := h.service(t, "web")
		return slices.Contains(s.Finalizers, Finalizer) && len(s.Status.LoadBalancer.Ingress) == 1
	})
	// The fake clientset does not implement graceful deletion: model it.
	s := h.service(t, "web")
	s.DeletionTimestamp = ptr.To(metav1.Now())
	if _, err := h.client.CoreV1().Services("default").Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "load balancer deleted and finalizer removed", func() bool {
		_, _, exists := h.cloud.state("uid-web")
		return !exists && !slices.Contains(h.service(t, "web").Finalizers, Finalizer)
	})
}

func TestTypeChangeRemovesLoadBalancer(t *testing.T) {
	h := start(t, Options{ServeUnclassed: true}, readyNode("n1"), lbService("web", nil))
	eventually(t, "finalizer and status", func() bool {
		s := h.service(t, "web")
		return slices.Contains(s.Finalizers, Finalizer) && len(s.Status.LoadBalancer.Ingress) == 1
	})
	s := h.service(t, "web")
	s.Spec.Type = v1.ServiceTypeClusterIP
	if _, err := h.client.CoreV1().Services("default").Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "load balancer deleted", func() bool {
		_, _, exists := h.cloud.state("uid-web")
		s := h.service(t, "web")
		return !exists && len(s.Finalizers) == 0 && len(s.Status.LoadBalancer.Ingress) == 0
	})
}

func TestSweepRepairsDriftAndCollectsLeaks(t *testing.T) {
	h := start(t, Options{ServeUnclassed: true}, readyNode("n1"), lbService("web", nil))
	eventually(t, "load balancer", func() bool { _, _, ok := h.cloud.state("uid-web"); return ok })

	// Deleted out of band: recreated.
	h.cloud.mu.Lock()
	delete(h.cloud.lbs, "uid-web")
	h.cloud.mu.Unlock()
	eventually(t, "recreated", func() bool { _, _, ok := h.cloud.state("uid-web"); return ok })

	// Changed out of band: repaired.
	h.cloud.mu.Lock()
	o := h.cloud.lbs["uid-web"]
	o.Fingerprint = "tampered"
	h.cloud.lbs["uid-web"] = o
	h.cloud.mu.Unlock()
	eventually(t, "repaired", func() bool { o, _, _ := h.cloud.state("uid-web"); return o.Fingerprint == "[n1]" })

	// A load balancer whose Service is gone: collected.
	h.cloud.mu.Lock()
	h.cloud.lbs["uid-gone"] = cloud.OwnedLoadBalancer{Name: "lb-uid-gone", Namespace: "default", Service: "gone", UID: "uid-gone"}
	h.cloud.mu.Unlock()
	eventually(t, "leak collected", func() bool { _, _, ok := h.cloud.state("uid-gone"); return !ok })
	if _, _, ok := h.cloud.state("uid-web"); !ok {
		t.Fatal("the live Service's load balancer was collected")
	}
}

func TestFailedListDeletesNothing(t *testing.T) {
	h := start(t, Options{ServeUnclassed: true}, readyNode("n1"))
	h.cloud.mu.Lock()
	h.cloud.lbs["uid-orphan"] = cloud.OwnedLoadBalancer{UID: "uid-orphan", Namespace: "default", Service: "orphan"}
	h.cloud.listErr = errors.New("cloud down")
	h.cloud.mu.Unlock()
	time.Sleep(300 * time.Millisecond)
	if _, _, ok := h.cloud.state("uid-orphan"); !ok {
		t.Fatal("a sweep with a failed List deleted a load balancer")
	}
}

func TestEnsureErrorsRetry(t *testing.T) {
	h := start(t, Options{ServeUnclassed: true}, readyNode("n1"))
	var calls int
	h.cloud.mu.Lock()
	h.cloud.ensureFn = func(*v1.Service) error {
		calls++
		if calls < 3 {
			return errors.New("cloud busy")
		}
		return nil
	}
	h.cloud.mu.Unlock()
	if _, err := h.client.CoreV1().Services("default").Create(context.Background(), lbService("web", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "success after retries", func() bool { return len(h.service(t, "web").Status.LoadBalancer.Ingress) == 1 })
}

// A load balancer the cloud is still building is asked about again after
// the delay the cloud gives, not at the error backoff's pace, and is no
// failure.
func TestPendingAsksAgainAfterItsDelay(t *testing.T) {
	// No sweep: this fake lists no load balancer until it is built.
	h := start(t, Options{ServeUnclassed: true, DriftPeriod: -1}, readyNode("n1"))
	var calls int
	h.cloud.mu.Lock()
	h.cloud.ensureFn = func(*v1.Service) error {
		calls++
		if calls < 3 {
			return &cloud.PendingError{LoadBalancer: "lb-web", State: "new", After: 300 * time.Millisecond}
		}
		return nil
	}
	h.cloud.mu.Unlock()
	if _, err := h.client.CoreV1().Services("default").Create(context.Background(), lbService("web", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the first ensure", func() bool {
		h.cloud.mu.Lock()
		defer h.cloud.mu.Unlock()
		return calls >= 1
	})
	time.Sleep(150 * time.Millisecond)
	h.cloud.mu.Lock()
	early := calls
	h.cloud.mu.Unlock()
	if early != 1 {
		t.Errorf("asked %d times within 150ms of a pending answer, want once", early)
	}
	eventually(t, "the status once it is built", func() bool { return len(h.service(t, "web").Status.LoadBalancer.Ingress) == 1 })
	if n := h.ctrl.queue.NumRequeues("default/web"); n != 0 {
		t.Errorf("requeues counted for backoff: %d, want 0", n)
	}
}

func TestNewRefusesServingNothing(t *testing.T) {
	client := fake.NewClientset()
	f := informers.NewSharedInformerFactory(client, 0)
	if _, err := New(newFakeCloud(), client, f.Core().V1().Services(), f.Core().V1().Nodes(), Options{}); err == nil {
		t.Fatal("a controller with no class and no default was built")
	}
}

func TestNodeBurstIsOneUpdatePerLoadBalancer(t *testing.T) {
	const batch = time.Second
	h := start(t, Options{ServeUnclassed: true, DriftPeriod: -1, NodeBatch: batch},
		lbService("a", nil), lbService("b", nil))
	eventually(t, "load balancers", func() bool {
		_, _, okA := h.cloud.state("uid-a")
		_, _, okB := h.cloud.state("uid-b")
		return okA && okB
	})
	h.cloud.mu.Lock()
	before := h.cloud.ensures
	h.cloud.mu.Unlock()
	const joins = 20
	burst := time.Now()
	for i := range joins {
		if _, err := h.client.CoreV1().Nodes().Create(context.Background(), readyNode(fmt.Sprintf("n%02d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(burst)
	eventually(t, "every node behind both load balancers", func() bool {
		_, a, _ := h.cloud.state("uid-a")
		_, b, _ := h.cloud.state("uid-b")
		return len(a) == joins && len(b) == joins
	})
	// An update that changes nothing a load balancer sees triggers nothing.
	n, err := h.client.CoreV1().Nodes().Get(context.Background(), "n00", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Labels = map[string]string{"touched": "yes"}
	if _, err := h.client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	h.cloud.mu.Lock()
	updates := h.cloud.ensures - before
	h.cloud.mu.Unlock()
	// One update per load balancer for each batch window the burst
	// touched: one window when the joins come faster than a window (as
	// here, unless the machine is busy), one more when they straddle two.
	windows := int(took/batch) + 2
	if updates < 2 || updates > 2*windows {
		t.Fatalf("%d node joins in %v made %d load balancer updates, want 2 to %d (one per load balancer and %v window)", joins, took, updates, 2*windows, batch)
	}
	t.Logf("%d node joins in %v: %d load balancer updates", joins, took.Round(time.Millisecond), updates)
}
