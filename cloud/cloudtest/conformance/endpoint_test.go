package conformance_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/cloud/kit/kittest"
	"github.com/mooring-dev/mooring/cloud/view"
)

// Endpoint fails the list's and the get's methods with each failure's
// status and code until undone (GetFails the get's alone), prefers a
// failure's own way, counts the first method of each, and sets the
// cloud's status of a state it has.
func TestEndpoint(t *testing.T) {
	var e conformance.Endpoint
	e.Counter, e.Faults = &cloudtest.Counter{}, &cloudtest.Faults{}
	e.List, e.Get = []string{"list", "vnics"}, []string{"get"}
	e.Codes = map[conformance.Failure]string{conformance.Throttled: "slow_down"}
	answer := func(method string) (int, string) {
		f := e.Faults.Take(method, 0)
		if f == nil {
			return 0, ""
		}
		return f.Status, f.Code
	}
	for f, want := range map[conformance.Failure][3]int{conformance.Outage: {503, 503, 503}, conformance.Unauthorized: {401, 401, 401},
		conformance.Throttled: {429, 429, 429}, conformance.GetFails: {0, 0, 503}} {
		undo := e.Fail(t, f)
		for i, m := range []string{"list", "vnics", "get"} {
			if got, code := answer(m); got != want[i] || (code != "") != (f == conformance.Throttled && got != 0) {
				t.Errorf("%s: %s answers %d %q, want %d", f, m, got, code, want[i])
			}
		}
		undo()
		for _, m := range []string{"list", "vnics", "get"} {
			if got, _ := answer(m); got != 0 {
				t.Errorf("%s undone: %s answers %d", f, m, got)
			}
		}
	}
	if e.Fail(t, "flood") != nil {
		t.Error("a failure it cannot make: an undo")
	}
	on := false
	e.Own = map[conformance.Failure]func(testing.TB) func(){conformance.Outage: conformance.Switch(func(b bool) { on = b })}
	undo := e.Fail(t, conformance.Outage)
	if got, _ := answer("list"); !on || got != 0 {
		t.Errorf("its own outage: switched %v, list answers %d", on, got)
	}
	if undo(); on {
		t.Error("its own outage not undone")
	}
	e.Counter.Add("list")
	e.Counter.Add("vnics")
	e.Counter.Add("get")
	e.Counter.Add("get")
	if e.Calls(conformance.List) != 1 || e.Calls(conformance.Confirm) != 2 {
		t.Errorf("calls: %d lists, %d gets", e.Calls(conformance.List), e.Calls(conformance.Confirm))
	}
	var set string
	e.Statuses = map[view.State]string{view.StateStopped: "off"}
	e.SetStatus = func(m conformance.Made, status string) error {
		set = m.ID + " " + status
		return nil
	}
	if !e.SetState(t, conformance.Made{ID: "7"}, view.StateStopped) || set != "7 off" {
		t.Errorf("stopped: set %q", set)
	}
	if e.SetState(t, conformance.Made{ID: "7"}, view.StatePending) {
		t.Error("a state the cloud has no status of was set")
	}
	e.SetStatus = func(conformance.Made, string) error { return errors.New("no such instance") }
	if !kittest.Fails(t, func(t testing.TB) { e.SetState(t, conformance.Made{ID: "8"}, view.StateStopped) }) {
		t.Error("a failed SetStatus passed")
	}
}

// WrongSecret writes a secret the endpoint refuses, and the right one
// back; IntID reads a numeric id and fails the test on another.
func TestWrongSecretAndIntID(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	undo := conformance.WrongSecret(file, "s3cret")(t)
	if b, err := os.ReadFile(file); err != nil || string(b) == "s3cret" || len(b) == 0 {
		t.Fatalf("wrong secret %q, %v", b, err)
	}
	undo()
	if b, err := os.ReadFile(file); err != nil || string(b) != "s3cret" {
		t.Fatalf("secret back: %q, %v", b, err)
	}
	if id := (conformance.Made{ID: "42"}).IntID(t); id != 42 {
		t.Errorf("IntID %d", id)
	}
	if !kittest.Fails(t, func(t testing.TB) { (conformance.Made{ID: "i-42"}).IntID(t) }) {
		t.Error("IntID of i-42 passed")
	}
	s := conformance.Spec{N: 9, Foreign: true}
	if s.Addr("127.0.83") != "127.0.83.9" || s.FirstID() != 0 || s.Cluster("c1", "c2") != "c2" {
		t.Errorf("%s %d %s", s.Addr("127.0.83"), s.FirstID(), s.Cluster("c1", "c2"))
	}
	if s := (conformance.Spec{N: 9, First: true}); s.FirstID() != 9 || s.Cluster("c1", "c2") != "c1" {
		t.Errorf("first: %d %s", s.FirstID(), s.Cluster("c1", "c2"))
	}
}
