package conformance

import (
	"net/http"
	"os"
	"strconv"
	"testing"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
	"github.com/mooring-dev/mooring/cloud/view"
)

// Endpoint is a Bed's Provider, Fail, Calls and SetState over a test endpoint built
// on cloudtest.Base, which counts its calls and fails them by method, and
// which sets an instance's status by the cloud's own name of it. Embedded
// in a Bed, its methods are the Bed's.
type Endpoint struct {
	// Cloud is the provider over the endpoint: the Bed's Provider.
	Cloud Provider
	// Counter and Faults are the endpoint's (its cloudtest.Base's).
	Counter *cloudtest.Counter
	Faults  *cloudtest.Faults
	// List and Get are the endpoint's methods of the instance list and of
	// the get of one instance (Call Confirm); the first of each is the one
	// Calls counts. Outage, Unauthorized and Throttled fail them all, with
	// HTTP 503, 401 and 429; GetFails fails Get's alone, with 503.
	List, Get []string
	// Codes are the error codes that go with those answers, where the
	// cloud's error body has one.
	Codes map[Failure]string
	// Own are the failures the endpoint makes its own way (an outage that
	// hangs up, a token the provider reads again refused), in place of an
	// answer to List and Get: see Switch and WrongSecret.
	Own map[Failure]func(t testing.TB) (undo func())
	// LB are the endpoint's methods of its load balancer API by Call
	// (LBList, LBGet, LBCreate, LBUpdate, LBDelete; a call the cloud makes
	// of several methods lists them all): Calls sums them, and Outage,
	// Unauthorized and Throttled fail them too.
	LB map[Call][]string
	// Route are the endpoint's methods of its routes by Call (RouteList,
	// RouteCreate, RouteDelete), as LB's: Calls sums them, Outage,
	// Unauthorized and Throttled fail them too, and FailCall fails one
	// Call's alone.
	Route map[Call][]string
	// Statuses are the cloud's statuses of the view's states, those it
	// has; SetStatus puts the instance in one.
	Statuses  map[view.State]string
	SetStatus func(m Made, status string) error
}

// Provider is Bed's Provider: Cloud.
func (e *Endpoint) Provider() Provider { return e.Cloud }

// answers are the HTTP statuses of the failures Endpoint makes.
var answers = map[Failure]int{Outage: http.StatusServiceUnavailable, Unauthorized: http.StatusUnauthorized,
	Throttled: http.StatusTooManyRequests, GetFails: http.StatusServiceUnavailable}

// Fail is Bed's Fail: the endpoint's own way, else its answer to every
// call of the failure's methods, until undo.
func (e *Endpoint) Fail(t testing.TB, f Failure) (undo func()) {
	if own := e.Own[f]; own != nil {
		return own(t)
	}
	status := answers[f]
	if status == 0 {
		return nil
	}
	methods := append(append([]string(nil), e.List...), e.Get...)
	for _, ms := range e.LB {
		methods = append(methods, ms...)
	}
	for _, ms := range e.Route {
		methods = append(methods, ms...)
	}
	if f == GetFails {
		methods = e.Get
	}
	for _, m := range methods {
		e.Faults.Set(m, cloudtest.Fault{Left: 1 << 20, Status: status, Code: e.Codes[f]})
	}
	return func() {
		for _, m := range methods {
			e.Faults.Clear(m)
		}
	}
}

// Calls is Bed's Calls: the calls of List's first method, Get's, or an
// LB call's methods.
func (e *Endpoint) Calls(c Call) int {
	ms, ok := e.LB[c]
	if !ok {
		ms, ok = e.Route[c]
	}
	if ok {
		n := 0
		for _, m := range ms {
			n += e.Counter.Get(m)
		}
		return n
	}
	if c == List {
		return e.Counter.Get(e.List[0])
	}
	return e.Counter.Get(e.Get[0])
}

// FailCall is RoutesBed's FailCall: every call of c's methods (List's,
// or Route's of c) answered with 503 and GetFails' code until undo; nil for a
// Call of no methods.
func (e *Endpoint) FailCall(t testing.TB, c Call) (undo func()) {
	methods := e.Route[c]
	if c == List {
		methods = e.List
	}
	if len(methods) == 0 {
		return nil
	}
	for _, m := range methods {
		e.Faults.Set(m, cloudtest.Fault{Left: 1 << 20, Status: http.StatusServiceUnavailable, Code: e.Codes[GetFails]})
	}
	return func() {
		for _, m := range methods {
			e.Faults.Clear(m)
		}
	}
}

// SetState is Bed's SetState: the cloud's status of s, where it has one.
func (e *Endpoint) SetState(t testing.TB, m Made, s view.State) bool {
	status, ok := e.Statuses[s]
	if !ok {
		return false
	}
	if err := e.SetStatus(m, status); err != nil {
		t.Fatal(err)
	}
	return true
}

// Switch is an Own failure that turns set on until undone: an endpoint's
// outage switch.
func Switch(set func(on bool)) func(testing.TB) func() {
	return func(testing.TB) func() {
		set(true)
		return func() { set(false) }
	}
}

// WrongSecret is an Own Unauthorized for a provider that reads its secret
// from file at every call: the file holds a secret the endpoint refuses
// until undone, then secret again.
func WrongSecret(file, secret string) func(testing.TB) func() {
	write := func(t testing.TB, s string) {
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return func(t testing.TB) func() {
		write(t, "wrong-"+secret)
		return func() { write(t, secret) }
	}
}

// IntID is a made instance's ID, of a cloud whose ids are numbers.
func (m Made) IntID(t testing.TB) int {
	id, err := strconv.Atoi(m.ID)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// Addr is the spec's address in the /24 of prefix (such as "127.0.83"):
// its N is the address's last byte.
func (s Spec) Addr(prefix string) string { return prefix + "." + strconv.Itoa(s.N) }

// FirstID is an id for an instance of s on a cloud whose list is in the
// order of ids a bed may pick: N, below those the endpoint gives, when s
// asks to be First; else 0, the endpoint's choice.
func (s Spec) FirstID() int {
	if s.First {
		return s.N
	}
	return 0
}

// Cluster is own, or foreign for an instance of another cluster: its tag
// or label.
func (s Spec) Cluster(own, foreign string) string {
	if s.Foreign {
		return foreign
	}
	return own
}
