package view

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// countingSource is a unit-test cloud: a list of instances, a call counter,
// an optional error and an optional gate that holds List calls.
type countingSource struct {
	mu    sync.Mutex
	items []Instance
	err   error
	gate  chan struct{}
	calls atomic.Int32
}

func (s *countingSource) ListInstances(ctx context.Context) ([]Instance, error) {
	s.calls.Add(1)
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	return append([]Instance(nil), s.items...), nil
}

func (s *countingSource) set(items []Instance, err error) {
	s.mu.Lock()
	s.items, s.err = items, err
	s.mu.Unlock()
}

func inst(id, name string, state State) Instance {
	return Instance{ID: id, ProviderID: "local://" + id, Name: name, State: state, Labels: map[string]string{"a": "b"}}
}

func fleet(n int) []Instance {
	out := make([]Instance, n)
	for i := range out {
		out[i] = inst(fmt.Sprintf("i-%04d", i), fmt.Sprintf("node-%d", i), StateRunning)
	}
	return out
}

func TestConcurrentLookupsShareOneList(t *testing.T) {
	src := &countingSource{items: fleet(100), gate: make(chan struct{})}
	v := New(src, Options{})
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 100 {
		wg.Go(func() {
			_, err := v.ByProviderID(context.Background(), fmt.Sprintf("local://i-%04d", i), time.Minute)
			errs <- err
		})
	}
	// Let every caller reach the in-flight List before it answers.
	deadline := time.Now().Add(5 * time.Second)
	for src.calls.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	close(src.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := src.calls.Load(); n != 1 {
		t.Fatalf("100 lookups made %d List calls, want 1", n)
	}
}

func TestMaxAge(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	src := &countingSource{items: fleet(3)}
	v := New(src, Options{Clock: clk})
	ctx := context.Background()
	for range 10 {
		if _, err := v.ByID(ctx, "i-0001", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	clk.Step(30 * time.Second)
	if _, err := v.ByName(ctx, "node-2", time.Minute); err != nil {
		t.Fatal(err)
	}
	if n := src.calls.Load(); n != 1 {
		t.Fatalf("lookups within max age made %d calls", n)
	}
	// A caller that wants fresher data than the snapshot gets a new List.
	if _, err := v.ByName(ctx, "node-2", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := src.calls.Load(); n != 2 {
		t.Fatalf("a stricter max age made %d calls in all, want 2", n)
	}
	if all, err := v.List(ctx, time.Minute); err != nil || len(all) != 3 {
		t.Fatalf("List: %d, %v", len(all), err)
	}
}

func TestMissRefreshesAtMostOncePerInterval(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	src := &countingSource{items: fleet(2)}
	v := New(src, Options{Clock: clk, MinRefreshInterval: time.Second})
	ctx := context.Background()
	if _, err := v.ByID(ctx, "i-0000", time.Hour); err != nil {
		t.Fatal(err)
	}
	// A miss on a brand-new snapshot is believed.
	if _, err := v.ByID(ctx, "i-9999", time.Hour); !errors.Is(err, ErrNotFound) {
		t.Fatalf("miss: %v", err)
	}
	if n := src.calls.Load(); n != 1 {
		t.Fatalf("calls %d, want 1", n)
	}
	// An instance made after the snapshot is found by refreshing on a miss.
	src.set(append(fleet(2), inst("i-new", "late", StateRunning)), nil)
	clk.Step(2 * time.Second)
	got, err := v.ByProviderID(ctx, "local://i-new", time.Hour)
	if err != nil || got.Name != "late" {
		t.Fatalf("late instance: %+v, %v", got, err)
	}
	for range 50 {
		if _, err := v.ByID(ctx, "i-gone", time.Hour); !errors.Is(err, ErrNotFound) {
			t.Fatal(err)
		}
	}
	if n := src.calls.Load(); n != 2 {
		t.Fatalf("50 misses within the interval made %d calls in all, want 2", n)
	}
	v.Invalidate()
	if _, err := v.ByID(ctx, "i-0000", time.Hour); err != nil {
		t.Fatal(err)
	}
	if n := src.calls.Load(); n != 3 {
		t.Fatalf("after Invalidate: %d calls, want 3", n)
	}
}

func TestErrorsAreNotNotFound(t *testing.T) {
	src := &countingSource{err: errors.New("cloud down")}
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	v := New(src, Options{Clock: clk})
	_, err := v.ByID(context.Background(), "i-0000", time.Minute)
	if err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("an outage must be an error, not a miss: %v", err)
	}
	// The failed List is not cached: once its pause is over, the next
	// lookup tries again.
	src.set(fleet(1), nil)
	clk.Step(time.Second)
	if _, err := v.ByID(context.Background(), "i-0000", time.Minute); err != nil {
		t.Fatal(err)
	}
}

// While the cloud fails, Lists back off (MinRefreshInterval, doubling, up
// to MaxFailureBackoff) however many lookups retry meanwhile; those get the
// last error at once, never a miss. A success ends the backoff.
func TestFailedListsBackOff(t *testing.T) {
	src := &countingSource{err: errors.New("cloud down")}
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	v := New(src, Options{Clock: clk, MinRefreshInterval: time.Second, MaxFailureBackoff: 4 * time.Second})
	ctx := context.Background()
	storm := func() {
		t.Helper()
		for range 100 {
			_, err := v.ByID(ctx, "i-0000", time.Minute)
			if err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "cloud down") {
				t.Fatalf("during the outage: %v, want the cloud's error", err)
			}
		}
	}
	storm()
	// Pauses after each failure: 1s, 2s, 4s, 4s (capped).
	calls := int32(1)
	for _, pause := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
		if n := src.calls.Load(); n != calls {
			t.Fatalf("%d Lists, want %d", n, calls)
		}
		clk.Step(pause - time.Millisecond)
		storm()
		if n := src.calls.Load(); n != calls {
			t.Fatalf("a List before the pause of %v was over: %d, want %d", pause, n, calls)
		}
		clk.Step(time.Millisecond)
		storm()
		calls++
	}
	// The cloud answers: the next List after the pause succeeds, and the
	// next failure pauses 1s again.
	src.set(fleet(1), nil)
	clk.Step(4 * time.Second)
	if _, err := v.ByID(ctx, "i-0000", time.Minute); err != nil {
		t.Fatal(err)
	}
	src.set(nil, errors.New("cloud down"))
	clk.Step(2 * time.Minute)
	storm()
	clk.Step(time.Second)
	before := src.calls.Load()
	storm()
	if n := src.calls.Load(); n != before+1 {
		t.Fatalf("after a success and a new failure, the pause was not 1s: %d Lists, want %d", n, before+1)
	}
}

func TestNamesPreferLiveInstances(t *testing.T) {
	src := &countingSource{items: []Instance{
		inst("i-1", "Node-A", StateTerminated), inst("i-2", "node-a", StateRunning), inst("i-3", "node-a", StateTerminated),
	}}
	v := New(src, Options{})
	got, err := v.ByName(context.Background(), "NODE-A", time.Minute)
	if err != nil || got.ID != "i-2" {
		t.Fatalf("got %+v, %v", got, err)
	}
	// Answers are copies.
	got.Labels["a"] = "changed"
	again, _ := v.ByName(context.Background(), "node-a", time.Minute)
	if again.Labels["a"] != "b" {
		t.Fatal("a caller changed the shared snapshot")
	}
}

// Node names are the backend's (Instance.NodeName), indexed like names:
// case-insensitively, a live instance first, and instances without one are
// never found by it.
func TestByNodeName(t *testing.T) {
	named := func(id, nodeName string, state State) Instance {
		in := inst(id, "name-"+id, state)
		in.NodeName = nodeName
		return in
	}
	src := &countingSource{items: []Instance{
		named("i-1", "ip-127-0-0-1.ec2.internal", StateTerminated), named("i-2", "ip-127-0-0-1.ec2.internal", StateRunning),
		named("i-3", "", StateRunning),
	}}
	// A still clock: every lookup is asked when the one list began, so its
	// misses are answers.
	v := New(src, Options{Clock: clocktesting.NewFakeClock(time.Unix(1000, 0))})
	ctx := context.Background()
	if got, err := v.ByNodeName(ctx, "IP-127-0-0-1.ec2.internal", time.Minute); err != nil || got.ID != "i-2" {
		t.Fatalf("got %+v, %v", got, err)
	}
	for _, name := range []string{"name-i-3", "i-3", ""} {
		if _, err := v.ByNodeName(ctx, name, time.Minute); !errors.Is(err, ErrNotFound) {
			t.Fatalf("ByNodeName(%q): %v, want not found", name, err)
		}
	}
}

func TestCancelledCallerLeavesTheListRunning(t *testing.T) {
	src := &countingSource{items: fleet(1), gate: make(chan struct{})}
	v := New(src, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := v.ByID(ctx, "i-0000", time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	close(src.gate)
	if _, err := v.ByID(context.Background(), "i-0000", time.Minute); err != nil {
		t.Fatal(err)
	}
	if n := src.calls.Load(); n != 1 {
		t.Fatalf("the second caller should join the first List: %d calls", n)
	}
}

func TestOnRecoveryFiresOncePerFailureToSuccess(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	src := &countingSource{items: fleet(2)}
	v := New(src, Options{Clock: clk})
	var fired atomic.Int32
	cancel := v.OnRecovery(func() {
		// The new snapshot is in place before the callback runs, and the
		// callback may use the view.
		if v.Failing() {
			t.Error("Failing() inside the recovery callback")
		}
		if _, err := v.ByID(context.Background(), "i-0001", time.Hour); err != nil {
			t.Errorf("lookup inside the recovery callback: %v", err)
		}
		fired.Add(1)
	})
	ctx := context.Background()
	// Every call lists anew: the clock moves past each snapshot.
	list := func() error {
		clk.Step(time.Second)
		return v.Refresh(ctx, 0)
	}
	outage := errors.New("503 Service Unavailable")
	steps := []struct {
		err         error
		wantFired   int32
		wantFailing bool
	}{
		{nil, 0, false},   // a first success is no recovery
		{nil, 0, false},   // nor a success after a success
		{outage, 0, true}, // the cloud goes away
		{outage, 0, true}, // and stays away
		{outage, 0, true}, //
		{nil, 1, false},   // it answers again: one signal
		{nil, 1, false},   // later successes: none
		{nil, 1, false},   //
		{outage, 1, true}, // a second outage
		{nil, 2, false},   // a second recovery
		{outage, 2, true}, //
	}
	for i, s := range steps {
		src.set(fleet(2), s.err)
		err := list()
		if (err != nil) != (s.err != nil) {
			t.Fatalf("step %d: List error %v, want %v", i, err, s.err)
		}
		if got := fired.Load(); got != s.wantFired {
			t.Fatalf("step %d: recovery signalled %d times, want %d", i, got, s.wantFired)
		}
		if got := v.Failing(); got != s.wantFailing {
			t.Fatalf("step %d: Failing() = %v, want %v", i, got, s.wantFailing)
		}
	}
	// Unregistered: the next recovery is not signalled to it.
	cancel()
	src.set(fleet(2), nil)
	if err := list(); err != nil {
		t.Fatal(err)
	}
	if got := fired.Load(); got != 2 {
		t.Fatalf("after cancel: signalled %d times, want 2", got)
	}
}

func TestOnRecoveryAfterFailedLookups(t *testing.T) {
	// Concurrent lookups during an outage share failing Lists; the first
	// success after them is one recovery, signalled to every watcher once.
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	src := &countingSource{err: errors.New("down")}
	v := New(src, Options{Clock: clk})
	var a, b atomic.Int32
	v.OnRecovery(func() { a.Add(1) })
	v.OnRecovery(func() { b.Add(1) })
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			if _, err := v.ByName(ctx, fmt.Sprintf("node-%d", i), time.Minute); err == nil || errors.Is(err, ErrNotFound) {
				t.Errorf("lookup during the outage: %v, want a cloud error", err)
			}
		})
	}
	wg.Wait()
	if !v.Failing() || a.Load()+b.Load() != 0 {
		t.Fatalf("during the outage: failing %v, signals %d+%d", v.Failing(), a.Load(), b.Load())
	}
	src.set(fleet(20), nil)
	clk.Step(time.Second)
	for i := range 20 {
		if _, err := v.ByName(ctx, fmt.Sprintf("node-%d", i), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if a.Load() != 1 || b.Load() != 1 || v.Failing() {
		t.Fatalf("after recovery: signals %d and %d, want 1 each; failing %v", a.Load(), b.Load(), v.Failing())
	}
}

// laggingSource lists the items it holds when a List begins, however long
// the List then takes (until gate opens, when set): a List is the cloud as
// it was when the List began.
type laggingSource struct {
	mu    sync.Mutex
	items []Instance
	gate  chan struct{}
	calls atomic.Int32
}

func (s *laggingSource) ListInstances(ctx context.Context) ([]Instance, error) {
	s.calls.Add(1)
	s.mu.Lock()
	items, gate := append([]Instance(nil), s.items...), s.gate
	s.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return items, nil
}

// TestMissNeverJoinsAnOlderList: an instance made while a List is in
// flight is missing from that List. A lookup asked after the instance was
// made (the CSR of a machine that just booted) must not take that List's
// miss for "not found": it lists again. (Under a slow cloud, the approver
// used to deny such joins InstanceNotInCluster.)
func TestMissNeverJoinsAnOlderList(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	src := &laggingSource{items: fleet(1)}
	v := New(src, Options{Clock: clk, MinRefreshInterval: time.Second})
	ctx := context.Background()
	if _, err := v.ByID(ctx, "i-0000", time.Hour); err != nil {
		t.Fatal(err)
	}
	// A slow List begins...
	src.mu.Lock()
	src.gate = make(chan struct{})
	src.mu.Unlock()
	clk.Step(2 * time.Second)
	go func() { _ = v.Refresh(ctx, 0) }()
	for src.calls.Load() != 2 {
		time.Sleep(time.Millisecond)
	}
	// ...then the instance is made, and then asked about.
	src.mu.Lock()
	src.items = append(fleet(1), inst("i-new", "new", StateRunning))
	src.mu.Unlock()
	clk.Step(2 * time.Second)
	type result struct {
		in  Instance
		err error
	}
	got := make(chan result, 1)
	go func() {
		in, err := v.ByID(ctx, "i-new", time.Hour)
		got <- result{in, err}
	}()
	// The lookup waits for a List that begins once the slow one has ended
	// (one List in flight at a time); joining the slow List instead would
	// never list again.
	time.Sleep(50 * time.Millisecond)
	if n := src.calls.Load(); n != 2 {
		t.Fatalf("%d Lists while one was in flight, want 2: one at a time", n)
	}
	close(src.gate)
	if r := <-got; r.err != nil || r.in.ID != "i-new" {
		t.Fatalf("an instance made before the lookup: %+v, %v; want found by a List that began after the lookup", r.in, r.err)
	}
	if n := src.calls.Load(); n != 3 {
		t.Fatalf("%d Lists, want 3", n)
	}
}

// TestMissesShareTheNextList: many lookups whose instances the view has not
// listed, asked while a List is in flight, share one List after it, however
// many they are and whether they wait (Patient) or not: a boot wave's joins
// cost one List, not one each.
func TestMissesShareTheNextList(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	src := &laggingSource{items: fleet(1)}
	v := New(src, Options{Clock: clk, MinRefreshInterval: time.Second})
	ctx := context.Background()
	if _, err := v.ByID(ctx, "i-0000", time.Hour); err != nil {
		t.Fatal(err)
	}
	src.mu.Lock()
	src.gate = make(chan struct{})
	src.mu.Unlock()
	clk.Step(2 * time.Second)
	go func() { _ = v.Refresh(ctx, 0) }()
	for src.calls.Load() != 2 {
		time.Sleep(time.Millisecond)
	}
	const n = 200
	src.mu.Lock()
	src.items = fleet(1)
	for i := range n {
		src.items = append(src.items, inst(fmt.Sprintf("i-new-%d", i), fmt.Sprintf("new-%d", i), StateRunning))
	}
	src.mu.Unlock()
	clk.Step(2 * time.Second)
	// Each asked a moment after the one before (a List in flight when
	// one is asked began before it).
	errs := make(chan error, n)
	for i := range n {
		clk.Step(time.Millisecond)
		time.Sleep(100 * time.Microsecond)
		go func() {
			id := fmt.Sprintf("i-new-%d", i)
			var err error
			if i%2 == 0 {
				_, err = v.Patient().ByID(ctx, id, time.Hour)
			} else {
				_, err = v.ByID(ctx, id, time.Hour)
			}
			errs <- err
		}()
	}
	time.Sleep(50 * time.Millisecond)
	close(src.gate)
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := src.calls.Load(); got != 3 {
		t.Fatalf("%d lookups missing while a List was in flight made %d Lists in all, want 3 (the first, the slow one, one shared after it)", n, got)
	}
}

// TestMissListsAreSpacedByTheCloudsLimit: with the cost of a List at the
// cloud's rate limit known, Lists for misses begin at least twice that
// apart. A patient lookup waits for the List, sharing it with every other
// one asked before it begins; another lookup is told when to ask again.
func TestMissListsAreSpacedByTheCloudsLimit(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	src := &countingSource{items: fleet(3000)}
	// 1,000 instances a page at 2 calls/s: 3 pages cost 1.5 s.
	cost := func(n int) time.Duration { return time.Duration((n+999)/1000) * 500 * time.Millisecond }
	v := New(src, Options{Clock: clk, MinRefreshInterval: time.Second, ListCost: cost})
	ctx := context.Background()
	if _, err := v.ByID(ctx, "i-0000", time.Hour); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Second)
	_, err := v.ByID(ctx, "i-gone", time.Hour)
	if retry, ok := RetryAfter(err); !ok || retry != 2*time.Second {
		t.Fatalf("a miss 1 s after a List: %v; want ErrUnconfirmed, ask again in 2 s (Lists 3 s apart)", err)
	}
	const n = 50
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := v.Patient().ByID(ctx, fmt.Sprintf("i-gone-%d", i), time.Hour)
			errs <- err
		}()
	}
	for deadline := time.Now().Add(5 * time.Second); !clk.HasWaiters() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if got := src.calls.Load(); got != 1 {
		t.Fatalf("%d Lists before the spacing allowed one, want 1", got)
	}
	clk.Step(2 * time.Second)
	for range n {
		if err := <-errs; !errors.Is(err, ErrNotFound) {
			t.Fatalf("patient miss: %v, want ErrNotFound from the next List", err)
		}
	}
	if got := src.calls.Load(); got != 2 {
		t.Fatalf("%d patient misses made %d Lists in all, want 2", n, got)
	}
	// A caller that needs a fresher snapshot is not held to the spacing.
	clk.Step(time.Second)
	if _, err := v.ByID(ctx, "i-0001", 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got := src.calls.Load(); got != 3 {
		t.Fatalf("a stricter max age made %d Lists in all, want 3", got)
	}
}

// TestYoungMissIsUnconfirmed: a miss on a snapshot too young to list
// again, whose List began before the lookup, is neither found nor
// ErrNotFound, but ErrUnconfirmed: ask again.
func TestYoungMissIsUnconfirmed(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	v := New(&countingSource{items: fleet(1)}, Options{Clock: clk, MinRefreshInterval: time.Second})
	ctx := context.Background()
	if _, err := v.ByID(ctx, "i-0000", time.Hour); err != nil {
		t.Fatal(err)
	}
	clk.Step(500 * time.Millisecond)
	_, err := v.ByID(ctx, "i-new", time.Hour)
	if !errors.Is(err, ErrUnconfirmed) || errors.Is(err, ErrNotFound) {
		t.Fatalf("young miss: %v, want ErrUnconfirmed", err)
	}
	// Asked again when it says, a new List answers.
	retry, ok := RetryAfter(fmt.Errorf("wrapped: %w", err))
	if !ok || retry != 500*time.Millisecond {
		t.Fatalf("RetryAfter = %v, %v; want 500ms: what remains of the 1s interval", retry, ok)
	}
	clk.Step(retry)
	if _, err := v.ByID(ctx, "i-new", time.Hour); !errors.Is(err, ErrNotFound) {
		t.Fatalf("asked again after %v: %v, want ErrNotFound from a new List", retry, err)
	}
	if _, ok := RetryAfter(errors.New("cloud outage")); ok {
		t.Fatal("RetryAfter of another error")
	}
}

// TestNamed: every instance of a name, case-insensitively and terminated
// ones included, as copies; a name no instance has is not found, but only
// from a List that began after the question.
func TestNamed(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	src := &countingSource{items: []Instance{
		inst("i-1", "Web-1", StateTerminated), inst("i-2", "web-1", StateRunning), inst("i-3", "web-2", StateRunning),
	}}
	v := New(src, Options{Clock: clk, MinRefreshInterval: time.Second})
	ctx := context.Background()
	got, err := v.Named(ctx, "WEB-1", time.Minute)
	if err != nil || len(got) != 2 || got[0].ID != "i-1" || got[1].ID != "i-2" {
		t.Fatalf("Named(WEB-1) = %+v, %v; want i-1 and i-2", got, err)
	}
	got[1].Labels["a"] = "changed"
	if again, _ := v.Named(ctx, "web-1", time.Minute); again[1].Labels["a"] != "b" {
		t.Fatal("a caller changed the shared snapshot")
	}
	// Asked while the one List is young and began before the question:
	// no answer yet.
	clk.Step(500 * time.Millisecond)
	if _, err := v.Named(ctx, "web-3", time.Minute); !errors.Is(err, ErrUnconfirmed) {
		t.Fatalf("young miss: %v, want ErrUnconfirmed", err)
	}
	// Later a fresh List answers: still none of that name.
	clk.Step(time.Second)
	if _, err := v.Named(ctx, "web-3", time.Minute); !errors.Is(err, ErrNotFound) {
		t.Fatalf("miss: %v, want ErrNotFound", err)
	}
	if n := src.calls.Load(); n != 2 {
		t.Fatalf("%d lists, want 2", n)
	}
	// An instance made after the first List is found by the fresh one.
	src.set(append(src.items, inst("i-4", "web-3", StateRunning)), nil)
	clk.Step(2 * time.Second)
	if got, err := v.Named(ctx, "web-3", time.Minute); err != nil || len(got) != 1 || got[0].ID != "i-4" {
		t.Fatalf("Named(web-3) after it was made = %+v, %v", got, err)
	}
}

// TestPatientLookups: Patient's lookups answer as the view's do, and a miss
// waits for a List that began after the question instead of ErrUnconfirmed.
func TestPatientLookups(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	src := &countingSource{items: fleet(2)}
	v := New(src, Options{Clock: clk, MinRefreshInterval: time.Second})
	p := v.Patient()
	ctx := context.Background()
	if in, err := p.ByProviderID(ctx, "local://i-0001", time.Hour); err != nil || in.Name != "node-1" {
		t.Fatalf("ByProviderID: %+v, %v", in, err)
	}
	if all, err := p.Named(ctx, "NODE-0", time.Hour); err != nil || len(all) != 1 || all[0].ID != "i-0000" {
		t.Fatalf("Named: %+v, %v", all, err)
	}
	src.set(append(fleet(2), inst("i-late", "late", StateRunning)), nil)
	clk.Step(100 * time.Millisecond)
	if _, err := v.Named(ctx, "late", time.Hour); !errors.Is(err, ErrUnconfirmed) {
		t.Fatalf("the view's own lookup: %v, want ErrUnconfirmed", err)
	}
	got := make(chan error, 1)
	go func() {
		all, err := p.Named(ctx, "late", time.Hour)
		if err == nil && (len(all) != 1 || all[0].ID != "i-late") {
			err = fmt.Errorf("found %+v", all)
		}
		got <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); !clk.HasWaiters() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	clk.Step(900 * time.Millisecond)
	if err := <-got; err != nil {
		t.Fatalf("patient Named: %v", err)
	}
	if n := src.calls.Load(); n != 2 {
		t.Fatalf("%d Lists, want 2", n)
	}
	cancel := p.OnRecovery(func() {})
	cancel()
}
