package ocitest

import (
	"fmt"
	"time"
)

// Work requests: every write to a load balancer of either API answers a
// work request id (opc-work-request-id) and changes nothing at once. A
// work request is ACCEPTED, IN_PROGRESS once anything has looked at the
// endpoint since, and SUCCEEDED (its change made) or FAILED (nothing
// changed; a load balancer being created, and an NLB, go FAILED) once
// Options.WorkRequestTime has passed, unless the test holds them
// (HoldWorkRequests), when only Settle finishes them. While one runs on a
// load balancer, another write to it is 409.

// WorkRequest is a work request as a test sees it.
type WorkRequest struct {
	ID, Kind, Balancer, Op, State string
	// Error is a FAILED one's message.
	Error    string
	Accepted time.Time
	Finished time.Time
}

// workRequest is a work request and the change it makes.
type workRequest struct {
	WorkRequest
	compartment string
	create, del bool
	apply       func(b *Balancer)
	fail        string
}

// Work request states (both APIs).
const (
	wrAccepted   = "ACCEPTED"
	wrInProgress = "IN_PROGRESS"
	wrSucceeded  = "SUCCEEDED"
	wrFailed     = "FAILED"
)

func (w *workRequest) running() bool { return w.State == wrAccepted || w.State == wrInProgress }

// accept starts a work request on the load balancer of id (c.mu held):
// it puts the load balancer in the state the operation puts it in.
func (c *Cloud) accept(kind, id, op string, create, del bool, apply func(*Balancer)) *workRequest {
	s := &c.lbs
	prefix := "ocid1.loadbalancerworkrequest.oc1."
	if kind == KindNLB {
		prefix = "ocid1.nlbworkrequest.oc1."
	}
	b := s.balancers[id]
	w := &workRequest{WorkRequest: WorkRequest{ID: prefix + c.opts.RegionKey + "." + uniqueID(), Kind: kind, Balancer: id, Op: op,
		State: wrAccepted, Accepted: c.opts.Now()}, compartment: b.Compartment, create: create, del: del, apply: apply}
	if s.failNext > 0 {
		s.failNext--
		w.fail = "BAD_INPUT: injected failure of the work request"
	}
	switch {
	case del:
		b.State = StateDeleting
	case create:
		b.State = StateCreating
	case kind == KindNLB:
		b.State = StateUpdating
	}
	s.work[w.ID] = w
	s.order = append(s.order, w.ID)
	return w
}

// busy reports whether a work request runs on the load balancer of id
// (c.mu held).
func (c *Cloud) busy(id string) bool {
	for _, w := range c.lbs.work {
		if w.Balancer == id && w.running() {
			return true
		}
	}
	return false
}

// advance moves the work requests on: each one older than
// WorkRequestTime finishes unless they are held; the others are
// IN_PROGRESS. The data plane then follows the load balancers changed.
func (c *Cloud) advance() { c.finish(false) }

// Settle finishes every work request that runs, held or not, as
// advance would once their time had passed.
func (c *Cloud) Settle() { c.finish(true) }

// HoldWorkRequests keeps work requests IN_PROGRESS (on) until Settle,
// or lets them finish after WorkRequestTime again (off).
func (c *Cloud) HoldWorkRequests(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lbs.hold = on
}

// FailWorkRequests makes the next n work requests accepted FAILED
// (errorDetails BAD_INPUT), changing nothing; n <= 0 clears it.
func (c *Cloud) FailWorkRequests(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lbs.failNext = max(n, 0)
}

// StartWorkRequest starts a work request on the load balancer of id that
// changes nothing, as another client's change would: while it runs (held
// or for WorkRequestTime), writes to it are 409.
func (c *Cloud) StartWorkRequest(id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lbs.init()
	b, ok := c.lbs.balancers[id]
	if !ok {
		return fmt.Errorf("ocitest: no load balancer %s", id)
	}
	c.accept(b.Kind, id, "UpdateLoadBalancer", false, false, nil)
	return nil
}

// WorkRequests are the work requests accepted, oldest first.
func (c *Cloud) WorkRequests() []WorkRequest {
	c.advance()
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []WorkRequest
	for _, id := range c.lbs.order {
		out = append(out, c.lbs.work[id].WorkRequest)
	}
	return out
}

func (c *Cloud) finish(all bool) {
	c.mu.Lock()
	c.lbs.init()
	now := c.opts.Now()
	changed := map[string]bool{}
	for _, id := range c.lbs.order {
		w := c.lbs.work[id]
		if !w.running() {
			continue
		}
		if !all && (c.lbs.hold || now.Sub(w.Accepted) < c.opts.WorkRequestTime) {
			w.State = wrInProgress
			continue
		}
		c.done(w, now)
		changed[w.Balancer] = true
	}
	c.mu.Unlock()
	for id := range changed {
		c.serve(id)
	}
}

// done finishes a work request (c.mu held).
func (c *Cloud) done(w *workRequest, now time.Time) {
	w.Finished = now
	b, ok := c.lbs.balancers[w.Balancer]
	if !ok {
		w.State, w.Error = wrFailed, fmt.Sprintf("load balancer %s is gone", w.Balancer)
		return
	}
	if w.fail != "" {
		w.State, w.Error = wrFailed, w.fail
		switch {
		case w.create || w.Kind == KindNLB:
			b.State = StateFailed
		default:
			b.State = StateActive
		}
		return
	}
	w.State = wrSucceeded
	if w.del {
		delete(c.lbs.balancers, w.Balancer)
		return
	}
	if w.apply != nil {
		w.apply(b)
	}
	b.State = StateActive
}
