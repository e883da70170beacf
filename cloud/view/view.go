// Package view is mooring's one shared, batched view of a cloud's instances.
// Every instance lookup of the CCM's controllers and of the CSR approver goes
// through it: lookups are answered from a snapshot filled by one paginated
// List of the cluster's instances, concurrent refreshes share one List
// (singleflight), each caller says how old an answer it accepts, and a miss
// refreshes the snapshot (at most once per MinRefreshInterval) before it is
// believed. The cloud's cost is so O(1) List calls per period, however many
// nodes there are.
//
// The view also tells when the cloud answers again: OnRecovery callbacks run
// after a List succeeds that follows one or more failed Lists.
package view

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
)

// State is an instance's lifecycle state, common to every cloud.
type State string

// States.
const (
	StatePending    State = "pending"
	StateRunning    State = "running"
	StateStopped    State = "stopped"
	StateTerminated State = "terminated"
)

// Instance is what mooring needs to know of a cloud instance.
type Instance struct {
	// ProviderID is the Node's spec.providerID for this instance.
	ProviderID string
	ID         string
	Name       string
	// NodeName is the name the instance's kubelet registers its Node with,
	// as the backend's node name policy derives it (lower case, as object
	// names are); "" when the policy gives the instance none.
	NodeName     string
	Zone         string
	Region       string
	InstanceType string
	Cluster      string
	State        State
	// Addresses in the order Nodes carry them.
	Addresses []v1.NodeAddress
	// Asserted holds the addresses among Addresses (by their Address) that
	// a guest or a tenant asserts rather than the cloud assigns, each with
	// the source that asserts it (VMware Tools' guest.net, say). Nodes carry
	// them, but they back no serving certificate's SAN: a backend whose
	// configuration trusts a source leaves that source's addresses out.
	// Each backend's doc says which of its sources are which.
	Asserted map[string]string
	Labels   map[string]string
	// Created is when the cloud created the instance (zero when the
	// backend does not say); join tickets compare it with their issue time.
	Created time.Time
	// Identity is the cloud identity the instance's software acts as now,
	// as the backend names it (AWS: the ARN of its IAM instance profile);
	// "" when it has none or the backend does not say. A backend's
	// cloud.InstanceChecker may require one its configuration allows.
	Identity string
	// VTPM: the cloud's record says the instance has an enabled virtual
	// TPM (GCE's shieldedInstanceConfig.enableVtpm, EC2's tpmSupport v2.0,
	// Azure's securityProfile vTpmEnabled). Under the approver's TPM
	// policy "preferred", such an instance must prove its join with its
	// TPM (cloud/tpm), so that leaving the TPM evidence out is no way
	// around it.
	VTPM bool
}

// Source lists a cloud's instances; it is the boundary to a cloud backend.
type Source interface {
	// ListInstances returns every instance of the cluster, terminated ones
	// the cloud still reports included, following pages itself.
	ListInstances(ctx context.Context) ([]Instance, error)
}

// ErrNotFound means a fresh list of the cloud, one that began after the
// lookup was asked, does not hold the instance.
var ErrNotFound = errors.New("instance not found")

// ErrUnconfirmed means the instance is not in a snapshot whose list began
// before the lookup was asked (so it may be newer than the list), and the
// next List for misses is not due yet (Options.MinRefreshInterval,
// Options.ListCost): neither found nor not found. Ask again later, ask the
// cloud for the instance itself, or look up through Patient, which waits.
var ErrUnconfirmed = errors.New("instance not in the last list, which began before the lookup")

// UnconfirmedError is an ErrUnconfirmed answer, with how long until the
// view lists again for a miss: a lookup asked again after RetryAfter gets
// an answer from a List that began after it (RetryAfter says when to ask,
// not how long to back off).
type UnconfirmedError struct {
	By, Key string
	// Age is how long ago the snapshot's List began; RetryAfter is how
	// long until the next List for misses may begin.
	Age, RetryAfter time.Duration
}

func (e *UnconfirmedError) Error() string {
	return fmt.Sprintf("%v: %s %q (the list began %v ago; the next may begin in %v)",
		ErrUnconfirmed, e.By, e.Key, e.Age.Round(time.Millisecond), e.RetryAfter.Round(time.Millisecond))
}

// Is makes an UnconfirmedError an ErrUnconfirmed.
func (e *UnconfirmedError) Is(target error) bool { return target == ErrUnconfirmed }

// RetryAfter is when to ask again after err, if err is an ErrUnconfirmed
// answer of a View: then, not sooner, a lookup is answered by a new List.
func RetryAfter(err error) (time.Duration, bool) {
	var u *UnconfirmedError
	if !errors.As(err, &u) {
		return 0, false
	}
	return u.RetryAfter, true
}

// Options tune a View.
type Options struct {
	// MinRefreshInterval bounds how often misses refresh the snapshot: a
	// List for misses begins at least this long after the last List began
	// (and ListCost may space them more); until then a miss in a snapshot
	// whose List began before the lookup is ErrUnconfirmed, or, for a
	// Patient lookup, a wait for that List. Default 1s. It is also the first
	// pause after a failed List (see MaxFailureBackoff).
	MinRefreshInterval time.Duration
	// MaxFailureBackoff caps the pause after failed Lists: while the cloud
	// fails, a List that fails holds back the next one for
	// MinRefreshInterval, doubling with each failure up to this cap, and
	// lookups that would need a List meanwhile get the last List's error
	// at once (callers retry later: nothing is decided on an error). So an
	// outage costs the cloud one List per pause, however many callers
	// retry. Default 16s.
	MaxFailureBackoff time.Duration
	// ListCost is how long the cloud's rate limit takes to allow a List of
	// n instances (its pages at the limit), when the backend knows its
	// limit. Lists for misses then begin at least twice that apart, so
	// they take at most half of the calls the cloud allows, whatever the
	// cluster's size. nil: MinRefreshInterval alone spaces them.
	ListCost func(n int) time.Duration
	// Clock defaults to the real clock. Lists waiting to begin wait on
	// its timers when it has them (clock.Clock), on real time otherwise.
	Clock clock.PassiveClock
}

// View is the shared snapshot. It is safe for concurrent use.
type View struct {
	src  Source
	opts Options

	mu       sync.Mutex
	snap     *snapshot
	inflight *refresh
	// next is the one List waiting to begin (after inflight ends, and
	// not before its time): every caller that needs a List newer than
	// inflight joins it.
	next *refresh
	// lastStart is when the newest List began.
	lastStart time.Time
	// failing: the newest List to finish failed.
	failing bool
	// failed is the newest List's error while failing, and heldUntil when
	// the next List may start; backoff is the current pause.
	failed    error
	heldUntil time.Time
	backoff   time.Duration
	// twinsSeen describes the newest snapshot's twins (reportTwins).
	twinsSeen string
	// watchers are the OnRecovery callbacks, by registration number.
	watchers map[uint64]func()
	nextID   uint64
}

type snapshot struct {
	at           time.Time
	all          []Instance
	byProviderID map[string]int
	// twins holds, for each providerID that more than one instance not
	// terminated lists under, those instances: none of them is answered.
	twins map[string][]int
	// byAddress holds, by AddressKey, the instances not terminated that
	// list an address or name (among their addresses, or as node name).
	byAddress  map[string][]int
	byID       map[string]int
	byName     map[string]int
	byNodeName map[string]int
	// named holds every instance of a name (lower case), terminated ones
	// included, in list order.
	named map[string][]int
}

// refresh is one List, in flight or waiting to begin; joiners wait on
// done.
type refresh struct {
	started time.Time // when the List began; zero while it waits
	// at is when a waiting List may begin, and poke is closed when at
	// moves sooner.
	at   time.Time
	poke chan struct{}
	done chan struct{}
	snap *snapshot
	err  error
}

// New makes a view over src.
func New(src Source, opts Options) *View {
	if opts.MinRefreshInterval <= 0 {
		opts.MinRefreshInterval = time.Second
	}
	if opts.MaxFailureBackoff <= 0 {
		opts.MaxFailureBackoff = 16 * time.Second
	}
	opts.MaxFailureBackoff = max(opts.MaxFailureBackoff, opts.MinRefreshInterval)
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	registerMetrics()
	return &View{src: src, opts: opts}
}

// ByProviderID finds an instance by the providerID of its Node.
func (v *View) ByProviderID(ctx context.Context, providerID string, maxAge time.Duration) (Instance, error) {
	return v.lookup(ctx, "providerID", providerID, maxAge, false, func(s *snapshot) (int, bool) {
		i, ok := s.byProviderID[providerID]
		return i, ok
	})
}

// ByID finds an instance by its cloud id.
func (v *View) ByID(ctx context.Context, id string, maxAge time.Duration) (Instance, error) {
	return v.lookup(ctx, "id", id, maxAge, false, func(s *snapshot) (int, bool) {
		i, ok := s.byID[id]
		return i, ok
	})
}

// ByName finds an instance by name, case-insensitively; a live instance
// wins over terminated ones of the same name.
func (v *View) ByName(ctx context.Context, name string, maxAge time.Duration) (Instance, error) {
	key := strings.ToLower(name)
	return v.lookup(ctx, "name", name, maxAge, false, func(s *snapshot) (int, bool) {
		i, ok := s.byName[key]
		return i, ok
	})
}

// List returns every instance of a snapshot no older than maxAge.
func (v *View) List(ctx context.Context, maxAge time.Duration) ([]Instance, error) {
	s, err := v.snapshot(ctx, maxAge)
	if err != nil {
		return nil, err
	}
	out := make([]Instance, len(s.all))
	for i := range s.all {
		out[i] = s.all[i].clone()
	}
	return out, nil
}

// Refresh makes sure a snapshot no older than maxAge exists, listing the
// cloud (or joining a List in flight) if needed, and returns that List's
// error. It is a lookup that copies nothing: a way to probe the cloud.
func (v *View) Refresh(ctx context.Context, maxAge time.Duration) error {
	_, err := v.snapshot(ctx, maxAge)
	return err
}

// Failing reports whether the newest List of the cloud to finish failed:
// the view is waiting for the cloud to answer again.
func (v *View) Failing() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.failing
}

// OnRecovery registers f, called each time a List of the cloud succeeds
// after one or more Lists failed (once per failure-to-success transition,
// never on a success that follows a success). f runs on the goroutine that
// made the List, after the new snapshot is in place and before the List's
// callers get their answer, so it must not block; it may call the view.
// The returned function unregisters f.
func (v *View) OnRecovery(f func()) (cancel func()) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.watchers == nil {
		v.watchers = make(map[uint64]func())
	}
	id := v.nextID
	v.nextID++
	v.watchers[id] = f
	return func() {
		v.mu.Lock()
		delete(v.watchers, id)
		v.mu.Unlock()
	}
}

// Invalidate makes the next lookup list the cloud again, even within a
// pause after a failed List (the caller knows better: the cloud answered
// it).
func (v *View) Invalidate() {
	v.mu.Lock()
	v.snap = nil
	v.heldUntil = time.Time{}
	v.mu.Unlock()
}

func (v *View) lookup(ctx context.Context, by, key string, maxAge time.Duration, patient bool, find func(*snapshot) (int, bool)) (Instance, error) {
	return search(ctx, v, by, key, maxAge, patient, func(s *snapshot) (Instance, bool, error) {
		if i, ok := find(s); ok {
			return s.all[i].clone(), true, s.ambiguous(i)
		}
		return Instance{}, false, nil
	})
}

// search answers one lookup: find reads a snapshot no older than maxAge,
// and a miss is believed only from a List that began after the question.
// A patient lookup waits for that List; another one is told ErrUnconfirmed
// while Lists for misses are not due.
//
// find also says when what it found may not be answered (an
// AmbiguousError): that error is the lookup's answer.
func search[T any](ctx context.Context, v *View, by, key string, maxAge time.Duration, patient bool, find func(*snapshot) (T, bool, error)) (T, error) {
	var none T
	asked := v.opts.Clock.Now()
	s, err := v.snapshot(ctx, maxAge)
	if err != nil {
		lookups.WithLabelValues(by, "error").Inc()
		return none, err
	}
	if got, ok, err := find(s); ok {
		return answer(by, "hit", got, err)
	}
	// A List that began before the question was asked may miss an instance
	// made just before it (the one a CSR or a Node being judged comes
	// from): its miss is no answer. Only a List that began after the
	// question can say "not found". Every lookup that needs one shares the
	// next List for misses, which begins once the one in flight has ended
	// and no sooner than the spacing of such Lists allows, so a miss storm
	// is no List storm.
	if s.at.Before(asked) {
		if !patient {
			if wait := v.missListIn(); wait > 0 {
				lookups.WithLabelValues(by, "deferred").Inc()
				return none, &UnconfirmedError{By: by, Key: key, Age: v.opts.Clock.Since(s.at), RetryAfter: wait}
			}
		}
		if s, err = v.snapshotSince(ctx, asked, true); err != nil {
			lookups.WithLabelValues(by, "error").Inc()
			return none, err
		}
		if got, ok, err := find(s); ok {
			return answer(by, "refreshed", got, err)
		}
	}
	lookups.WithLabelValues(by, "miss").Inc()
	return none, fmt.Errorf("%w: %s %q", ErrNotFound, by, key)
}

// answer counts a lookup that found got, by result, or as ambiguous when
// err says so, and returns got or err.
func answer[T any](by, result string, got T, err error) (T, error) {
	if err != nil {
		var none T
		lookups.WithLabelValues(by, "ambiguous").Inc()
		return none, err
	}
	lookups.WithLabelValues(by, result).Inc()
	return got, nil
}

// spacing is how far apart Lists for misses begin. v.mu is held.
func (v *View) spacing() time.Duration {
	d := v.opts.MinRefreshInterval
	if v.opts.ListCost != nil {
		n := 0
		if v.snap != nil {
			n = len(v.snap.all)
		}
		d = max(d, 2*v.opts.ListCost(n))
	}
	return d
}

// missListIn is how long until a List for a miss may begin: 0 when one
// may begin now.
func (v *View) missListIn() time.Duration {
	v.mu.Lock()
	defer v.mu.Unlock()
	at := v.lastStart.Add(v.spacing())
	if r := v.next; r != nil && r.at.After(at) {
		at = r.at
	}
	return max(0, at.Sub(v.opts.Clock.Now()))
}

// snapshot returns a snapshot no older than maxAge, listing the cloud if
// needed. A List already in flight that started within maxAge is joined.
func (v *View) snapshot(ctx context.Context, maxAge time.Duration) (*snapshot, error) {
	return v.snapshotSince(ctx, v.opts.Clock.Now().Add(-maxAge), false)
}

// snapshotSince returns a snapshot whose List started at or after since,
// joining the List in flight if it did, else the next List (one waits to
// begin at a time, after the one in flight), or starting one. A List for a
// miss (spaced) begins no sooner than spacing after the newest began.
func (v *View) snapshotSince(ctx context.Context, since time.Time, spaced bool) (*snapshot, error) {
	v.mu.Lock()
	if s := v.snap; s != nil && !s.at.Before(since) {
		v.mu.Unlock()
		return s, nil
	}
	r := v.inflight
	if r == nil || r.started.Before(since) {
		now := v.opts.Clock.Now()
		if v.failing && now.Before(v.heldUntil) {
			err := v.heldBack(now)
			v.mu.Unlock()
			return nil, err
		}
		r = v.schedule(now, spaced)
	}
	v.mu.Unlock()
	select {
	case <-r.done:
		return r.snap, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// heldBack is the error of a List not made because Lists back off while
// the cloud fails. v.mu is held.
func (v *View) heldBack(now time.Time) error {
	listCalls.WithLabelValues("held-back").Inc()
	return fmt.Errorf("%w (lists back off while the cloud fails: the next in %v)", v.failed, v.heldUntil.Sub(now).Round(time.Millisecond))
}

// schedule returns the List that begins next: the one waiting, moved
// sooner if this caller may not wait for its time, or a new one, begun at
// once when nothing is in flight and it is due. v.mu is held.
func (v *View) schedule(now time.Time, spaced bool) *refresh {
	at := now
	if spaced {
		if due := v.lastStart.Add(v.spacing()); due.After(at) {
			at = due
		}
	}
	if r := v.next; r != nil {
		if at.Before(r.at) {
			r.at = at
			close(r.poke)
			r.poke = make(chan struct{})
		}
		return r
	}
	if v.inflight == nil && !at.After(now) {
		r := &refresh{done: make(chan struct{})}
		v.begin(r, now)
		go v.run(r)
		return r
	}
	r := &refresh{at: at, poke: make(chan struct{}), done: make(chan struct{})}
	v.next = r
	go v.await(r)
	return r
}

// begin makes r the List in flight. v.mu is held.
func (v *View) begin(r *refresh, now time.Time) {
	r.started = now
	v.inflight = r
	v.lastStart = now
}

// await begins the waiting List r once the List in flight has ended and
// its time has come. While the cloud fails and Lists back off, its callers
// get the last List's error instead.
func (v *View) await(r *refresh) {
	for {
		v.mu.Lock()
		now := v.opts.Clock.Now()
		if v.inflight == nil && !now.Before(r.at) {
			v.next = nil
			if v.failing && now.Before(v.heldUntil) {
				r.err = v.heldBack(now)
				v.mu.Unlock()
				close(r.done)
				return
			}
			v.begin(r, now)
			v.mu.Unlock()
			v.run(r)
			return
		}
		var wake <-chan time.Time
		var ended chan struct{}
		if v.inflight != nil {
			ended = v.inflight.done
		} else {
			wake = v.after(r.at.Sub(now))
		}
		poke := r.poke
		v.mu.Unlock()
		select {
		case <-ended:
		case <-wake:
		case <-poke:
		}
	}
}

// after is the view clock's timer when it has one, else real time's.
func (v *View) after(d time.Duration) <-chan time.Time {
	if c, ok := v.opts.Clock.(clock.Clock); ok {
		return c.After(d)
	}
	return time.After(d)
}

// listTimeout bounds one refresh, which outlives the caller that started it.
const listTimeout = 60 * time.Second

func (v *View) run(r *refresh) {
	ctx, cancel := context.WithTimeout(context.Background(), listTimeout)
	defer cancel()
	start := v.opts.Clock.Now()
	items, err := v.src.ListInstances(ctx)
	listDuration.Observe(v.opts.Clock.Since(start).Seconds())
	if err != nil {
		listCalls.WithLabelValues("error").Inc()
		r.err = fmt.Errorf("list cloud instances: %w", err)
	} else {
		listCalls.WithLabelValues("ok").Inc()
		r.snap = newSnapshot(r.started, items)
		instances.Set(float64(len(items)))
		v.reportTwins(r.snap)
	}
	v.mu.Lock()
	if r.snap != nil && (v.snap == nil || !v.snap.at.After(r.snap.at)) {
		v.snap = r.snap
	}
	if v.inflight == r {
		v.inflight = nil
	}
	// Lists are judged in the order they finish: the cloud has recovered
	// when one succeeds and the one before it failed.
	var (
		recovered bool
		notify    []func()
	)
	if r.err != nil {
		v.failing, v.failed = true, r.err
		v.backoff = min(max(2*v.backoff, v.opts.MinRefreshInterval), v.opts.MaxFailureBackoff)
		v.heldUntil = v.opts.Clock.Now().Add(v.backoff)
	} else if v.failing {
		v.failing, v.failed, v.backoff, recovered = false, nil, 0, true
		for _, f := range v.watchers {
			notify = append(notify, f)
		}
	}
	v.mu.Unlock()
	if recovered {
		recoveries.Inc()
		for _, f := range notify {
			f()
		}
	}
	close(r.done)
}

func newSnapshot(at time.Time, items []Instance) *snapshot {
	s := &snapshot{
		at:           at,
		all:          items,
		byProviderID: make(map[string]int, len(items)),
		byID:         make(map[string]int, len(items)),
		byName:       make(map[string]int, len(items)),
		byNodeName:   make(map[string]int, len(items)),
		named:        make(map[string][]int, len(items)),
		byAddress:    make(map[string][]int, 3*len(items)),
	}
	live := make(map[string][]int)
	for i, in := range items {
		preferLive(s.byID, in.ID, items, i)
		if in.ProviderID != "" {
			preferLive(s.byProviderID, in.ProviderID, items, i)
		}
		name := strings.ToLower(in.Name)
		preferLive(s.byName, name, items, i)
		s.named[name] = append(s.named[name], i)
		if in.NodeName != "" {
			preferLive(s.byNodeName, strings.ToLower(in.NodeName), items, i)
		}
		if in.State == StateTerminated {
			continue
		}
		if in.ProviderID != "" {
			live[in.ProviderID] = append(live[in.ProviderID], i)
		}
		keys := make([]string, 0, len(in.Addresses)+1)
		if in.NodeName != "" {
			keys = append(keys, AddressKey(in.NodeName))
		}
		for _, a := range in.Addresses {
			keys = append(keys, AddressKey(a.Address))
		}
		for _, k := range keys {
			if k != "" && !slices.Contains(s.byAddress[k], i) {
				s.byAddress[k] = append(s.byAddress[k], i)
			}
		}
	}
	for pid, idx := range live {
		if len(idx) > 1 {
			if s.twins == nil {
				s.twins = make(map[string][]int)
			}
			s.twins[pid] = idx
		}
	}
	return s
}

// ambiguous is the error of a lookup that found items[i] when another
// instance not terminated lists under its providerID too, else nil.
func (s *snapshot) ambiguous(i int) error {
	idx, ok := s.twins[s.all[i].ProviderID]
	if !ok {
		return nil
	}
	e := &AmbiguousError{ProviderID: s.all[i].ProviderID}
	for _, j := range idx {
		e.Instances = append(e.Instances, s.all[j].clone())
	}
	return e
}

// preferLive indexes items[i] under key unless a live instance holds it:
// a live instance wins over terminated ones of the same name.
func preferLive(index map[string]int, key string, items []Instance, i int) {
	if j, ok := index[key]; !ok || items[j].State == StateTerminated {
		index[key] = i
	}
}

func (in Instance) clone() Instance {
	in.Addresses = append([]v1.NodeAddress(nil), in.Addresses...)
	in.Asserted = maps.Clone(in.Asserted)
	if in.Labels != nil {
		labels := make(map[string]string, len(in.Labels))
		for k, v := range in.Labels {
			labels[k] = v
		}
		in.Labels = labels
	}
	return in
}
