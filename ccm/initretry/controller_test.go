package initretry

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/component-base/metrics/testutil"
)

// fakeView is a unit-test view: recovery callbacks fired by hand or by a
// successful Refresh while failing, as the real view does.
type fakeView struct {
	mu        sync.Mutex
	watchers  map[int]func()
	next      int
	failing   bool
	down      bool // Refresh fails while down
	refreshes int
}

func newFakeView() *fakeView { return &fakeView{watchers: map[int]func(){}} }

func (f *fakeView) OnRecovery(fn func()) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := f.next
	f.next++
	f.watchers[id] = fn
	return func() {
		f.mu.Lock()
		delete(f.watchers, id)
		f.mu.Unlock()
	}
}

func (f *fakeView) Failing() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failing
}

func (f *fakeView) Refresh(context.Context, time.Duration) error {
	f.mu.Lock()
	f.refreshes++
	if f.down {
		f.failing = true
		f.mu.Unlock()
		return context.DeadlineExceeded
	}
	recovered := f.failing
	f.failing = false
	f.mu.Unlock()
	if recovered {
		f.recover()
	}
	return nil
}

func (f *fakeView) recover() {
	f.mu.Lock()
	var fns []func()
	for _, fn := range f.watchers {
		fns = append(fns, fn)
	}
	f.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

func (f *fakeView) refreshCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.refreshes
}

func node(name string, taints ...v1.Taint) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NodeSpec{Taints: taints}}
}

var (
	uninitTaint = v1.Taint{Key: cloudproviderapi.TaintExternalCloudProvider, Value: "true", Effect: v1.TaintEffectNoSchedule}
	otherTaint  = v1.Taint{Key: "node.kubernetes.io/not-ready", Effect: v1.TaintEffectNoSchedule}
)

// start builds the controller over a fake clientset holding nodes, with the
// informer synced.
func start(t *testing.T, v View, opts Options, nodes ...runtime.Object) (*Controller, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset(nodes...)
	factory := informers.NewSharedInformerFactory(client, 0)
	c := New(client, factory.Core().V1().Nodes(), v, opts)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		factory.Shutdown()
	})
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("informer of %v did not sync", typ)
		}
	}
	return c, client
}

// patched lists the Nodes patched so far, in order, with the annotation
// value each patch wrote.
func patched(t *testing.T, client *fake.Clientset) (names, values []string) {
	t.Helper()
	for _, a := range client.Actions() {
		p, ok := a.(k8stesting.PatchAction)
		if !ok || a.GetVerb() != "patch" || a.GetResource().Resource != "nodes" {
			continue
		}
		var body struct {
			Metadata struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(p.GetPatch(), &body); err != nil {
			t.Fatalf("patch of %s: %v", p.GetName(), err)
		}
		if len(body.Metadata.Annotations) != 1 || body.Metadata.Annotations[AnnotationRecoveredAt] == "" {
			t.Fatalf("patch of %s writes %s, want only %s", p.GetName(), p.GetPatch(), AnnotationRecoveredAt)
		}
		names = append(names, p.GetName())
		values = append(values, body.Metadata.Annotations[AnnotationRecoveredAt])
	}
	slices.Sort(names)
	return names, values
}

func TestRequeuePatchesOnlyUninitializedNodes(t *testing.T) {
	at := time.Date(2026, 5, 4, 3, 2, 1, 123456789, time.UTC)
	c, client := start(t, newFakeView(), Options{Now: func() time.Time { return at }, Workers: 2},
		node("waiting-1", uninitTaint),
		node("waiting-2", otherTaint, v1.Taint{Key: cloudproviderapi.TaintExternalCloudProvider, Effect: v1.TaintEffectNoExecute}),
		node("waiting-3", uninitTaint),
		node("initialized"),
		node("not-ready", otherTaint),
	)
	before, _ := testutil.GetCounterMetricValue(requeued)
	ok, failed := c.Requeue(context.Background())
	if ok != 3 || failed != 0 {
		t.Fatalf("Requeue: %d re-queued, %d failed; want 3, 0", ok, failed)
	}
	names, values := patched(t, client)
	if want := []string{"waiting-1", "waiting-2", "waiting-3"}; !slices.Equal(names, want) {
		t.Fatalf("patched %v, want %v", names, want)
	}
	for _, v := range values {
		if v != "2026-05-04T03:02:01.123456789Z" {
			t.Errorf("annotation %q, want the recovery time in RFC 3339", v)
		}
	}
	for _, name := range []string{"initialized", "not-ready"} {
		n, err := client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := n.Annotations[AnnotationRecoveredAt]; ok {
			t.Errorf("node %s was annotated", name)
		}
	}
	n, err := client.CoreV1().Nodes().Get(context.Background(), "waiting-1", metav1.GetOptions{})
	if err != nil || n.Annotations[AnnotationRecoveredAt] == "" || !slices.Equal(n.Spec.Taints, []v1.Taint{uninitTaint}) {
		t.Fatalf("waiting-1 after the patch: %v, %v", n, err)
	}
	if after, _ := testutil.GetCounterMetricValue(requeued); after-before != 3 {
		t.Errorf("requeued counter grew by %v, want 3", after-before)
	}
}

func TestRequeueWithoutWaitingNodesPatchesNothing(t *testing.T) {
	for _, nodes := range [][]runtime.Object{nil, {node("a"), node("b", otherTaint)}} {
		c, client := start(t, newFakeView(), Options{}, nodes...)
		if ok, failed := c.Requeue(context.Background()); ok+failed != 0 {
			t.Fatalf("Requeue with %d initialized Nodes: %d, %d", len(nodes), ok, failed)
		}
		if names, _ := patched(t, client); len(names) != 0 {
			t.Fatalf("patched %v", names)
		}
	}
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRunRequeuesOnEachRecovery(t *testing.T) {
	v := newFakeView()
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(time.Millisecond)
		return now
	}
	c, client := start(t, v, Options{ProbePeriod: -1, Now: clock}, node("w", uninitTaint), node("done"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	waitFor(t, "the recovery callback", func() bool { v.mu.Lock(); defer v.mu.Unlock(); return len(v.watchers) == 1 })
	v.recover()
	waitFor(t, "one patch", func() bool { names, _ := patched(t, client); return len(names) == 1 })
	v.recover()
	waitFor(t, "a second patch", func() bool { names, _ := patched(t, client); return len(names) == 2 })
	names, values := patched(t, client)
	if !slices.Equal(names, []string{"w", "w"}) || values[0] == values[1] {
		t.Fatalf("patches %v with %v: want node w twice with different times", names, values)
	}
	cancel()
	<-done
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.watchers) != 0 {
		t.Errorf("Run left its recovery callback registered")
	}
}

func TestProbeOnlyWhileFailingAndNodesWait(t *testing.T) {
	run := func(t *testing.T, v *fakeView, nodes ...runtime.Object) *fake.Clientset {
		c, client := start(t, v, Options{ProbePeriod: 10 * time.Millisecond}, nodes...)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { c.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		return client
	}
	t.Run("healthy view", func(t *testing.T) {
		v := newFakeView()
		run(t, v, node("w", uninitTaint))
		time.Sleep(100 * time.Millisecond)
		if n := v.refreshCount(); n != 0 {
			t.Fatalf("%d probes of a healthy view", n)
		}
	})
	t.Run("no Node waits", func(t *testing.T) {
		v := newFakeView()
		v.failing, v.down = true, true
		run(t, v, node("done"))
		time.Sleep(100 * time.Millisecond)
		if n := v.refreshCount(); n != 0 {
			t.Fatalf("%d probes with no Node waiting", n)
		}
	})
	t.Run("outage then recovery", func(t *testing.T) {
		v := newFakeView()
		v.failing, v.down = true, true
		client := run(t, v, node("w1", uninitTaint), node("w2", uninitTaint), node("done"))
		waitFor(t, "probes during the outage", func() bool { return v.refreshCount() >= 3 })
		if names, _ := patched(t, client); len(names) != 0 {
			t.Fatalf("patched %v during the outage", names)
		}
		v.mu.Lock()
		v.down = false
		v.mu.Unlock()
		waitFor(t, "both waiting Nodes re-queued", func() bool { names, _ := patched(t, client); return len(names) == 2 })
		// Recovered: probing stops.
		time.Sleep(30 * time.Millisecond)
		n := v.refreshCount()
		time.Sleep(100 * time.Millisecond)
		if m := v.refreshCount(); m != n {
			t.Fatalf("%d probes after the recovery", m-n)
		}
		if names, _ := patched(t, client); !slices.Equal(names, []string{"w1", "w2"}) {
			t.Fatalf("patched %v", names)
		}
	})
}
