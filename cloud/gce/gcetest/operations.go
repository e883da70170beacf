package gcetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
	compute "google.golang.org/api/compute/v1"
)

// Operations, as the Compute API runs them: every write of a networking
// resource answers an Operation at once (status RUNNING) and finishes it
// later, after Options.OperationDelay; the write's effect on the resource
// is seen at once, what it makes the data plane do only when the operation
// is DONE, and until then the resource is busy: another write to it answers
// 400 resourceNotReady. An operation that fails ends DONE with its error
// (error.errors[].code, httpErrorStatusCode), as GCE's do. Operations are
// zonal (zones/Z/operations), regional (regions/R/operations) or global
// (global/operations), each served by get and by wait (POST .../wait, which
// answers when the operation is DONE or after two minutes, whichever is
// first, as GCE's does), and deleted by delete.

// DefaultOperationDelay is how long an operation runs unless
// Options.OperationDelay says otherwise.
const DefaultOperationDelay = 50 * time.Millisecond

// maxWait is how long operations.wait waits at most.
const maxWait = 2 * time.Minute

// OpError is how an operation ends in error: Code is GCE's (such as
// QUOTA_EXCEEDED, RESOURCE_IN_USE_BY_ANOTHER_RESOURCE), Status the HTTP
// status it carries.
type OpError struct {
	Code, Message string
	Status        int
}

func (e *OpError) Error() string { return e.Code + ": " + e.Message }

// operation is one operation and its completion.
type operation struct {
	op     compute.Operation
	done   chan struct{}
	finish func() *OpError // run under net.mu when the operation ends
}

// netState is what the networking resources and operations hold; its zero
// value is ready.
type netState struct {
	mu      sync.Mutex
	ops     map[string]*operation // by project/scope/name
	busy    map[string]string     // a resource's self link -> its running operation's key
	held    bool                  // operations do not end until released
	heldOps []*operation
	closed  bool
	seq     uint64 // ids of operations and resources
	wg      sync.WaitGroup
	dp      cloudtest.DataPlane
	lb      lbState // lb.go
}

func (n *netState) init() {
	if n.ops == nil {
		n.ops = map[string]*operation{}
		n.busy = map[string]string{}
		n.seq = 7300000000000000001
	}
}

// nextID is a new resource or operation id; under n.mu.
func (n *netState) nextID() uint64 {
	n.init()
	n.seq += 104729
	return n.seq
}

// scopeURL is the resource URL of a project's scope ("global",
// "regions/R", "zones/Z").
func scopeURL(project, scope string) string {
	return resourceBase + "projects/" + project + "/" + scope
}

func opKey(project, scope, name string) string { return project + "/" + scope + "/" + name }

func opName() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return fmt.Sprintf("operation-%d-%s-%s-%s", time.Now().UnixMilli(), h[:8], h[8:16], h[16:])
}

// busyError is the answer to a write of a resource whose operation still
// runs.
func busyError(link string) *apiError {
	return &apiError{status: http.StatusBadRequest, reason: "resourceNotReady",
		msg: fmt.Sprintf("The resource '%s' is not ready", strings.TrimPrefix(link, resourceBase))}
}

// apiError is an answer in Google's error form.
type apiError struct {
	status      int
	reason, msg string
}

func (e *apiError) Error() string { return e.msg }

func (e *apiError) write(w http.ResponseWriter) { writeReason(w, e.status, e.reason, e.msg) }

// checkIdle is busyError when a resource's operation still runs; under
// n.mu.
func (n *netState) checkIdle(link string) *apiError {
	n.init()
	if _, ok := n.busy[link]; ok {
		return busyError(link)
	}
	return nil
}

// begin starts an operation of opType on the resource at targetLink (id
// targetID) in project's scope; finish runs, under n.mu, when it ends, and
// its error ends it in error. The caller holds n.mu, has checked the
// target idle and made the write's change. It returns the operation as
// answered now.
func (c *Cloud) begin(project, scope, opType, targetLink string, targetID uint64, finish func() *OpError) *compute.Operation {
	n := &c.net
	n.init()
	now := c.opts.Now()
	name := opName()
	o := &operation{done: make(chan struct{}), finish: finish, op: compute.Operation{
		Kind: "compute#operation", Id: n.nextID(), Name: name, OperationType: opType,
		TargetLink: targetLink, TargetId: targetID, Status: "RUNNING", Progress: 0,
		User:       "mooring-test@" + project + ".iam.gserviceaccount.com",
		InsertTime: now.Format(time.RFC3339Nano), StartTime: now.Format(time.RFC3339Nano),
		SelfLink: scopeURL(project, scope) + "/operations/" + name,
	}}
	switch {
	case strings.HasPrefix(scope, "zones/"):
		o.op.Zone = scopeURL(project, scope)
	case strings.HasPrefix(scope, "regions/"):
		o.op.Region = scopeURL(project, scope)
	}
	key := opKey(project, scope, name)
	n.ops[key] = o
	if targetLink != "" {
		n.busy[targetLink] = key
	}
	if n.held {
		n.heldOps = append(n.heldOps, o)
	} else {
		c.schedule(o, key)
	}
	out := o.op
	return &out
}

// schedule ends o after the operation delay; under n.mu.
func (c *Cloud) schedule(o *operation, key string) {
	n := &c.net
	n.wg.Add(1)
	time.AfterFunc(c.opts.OperationDelay, func() {
		defer n.wg.Done()
		n.mu.Lock()
		defer n.mu.Unlock()
		c.end(o, key)
	})
}

// end finishes an operation; under n.mu.
func (c *Cloud) end(o *operation, key string) {
	n := &c.net
	if o.op.Status == "DONE" {
		return
	}
	var oerr *OpError
	if !n.closed && o.finish != nil {
		oerr = o.finish()
	}
	o.op.Status, o.op.Progress = "DONE", 100
	o.op.EndTime = c.opts.Now().Format(time.RFC3339Nano)
	if oerr != nil {
		o.op.Error = &compute.OperationError{Errors: []*compute.OperationErrorErrors{{Code: oerr.Code, Message: oerr.Message}}}
		o.op.HttpErrorStatusCode = int64(oerr.Status)
		o.op.HttpErrorMessage = http.StatusText(oerr.Status)
	}
	if n.busy[o.op.TargetLink] == key {
		delete(n.busy, o.op.TargetLink)
	}
	close(o.done)
}

// HoldOperations keeps operations running (true) until released (false),
// when the held ones run their delay and end.
func (c *Cloud) HoldOperations(hold bool) {
	n := &c.net
	n.mu.Lock()
	defer n.mu.Unlock()
	n.init()
	n.held = hold
	if hold {
		return
	}
	for _, o := range n.heldOps {
		for k, v := range n.ops {
			if v == o {
				c.schedule(o, k)
			}
		}
	}
	n.heldOps = nil
}

// RunningOperations is how many operations have not ended.
func (c *Cloud) RunningOperations() int {
	n := &c.net
	n.mu.Lock()
	defer n.mu.Unlock()
	k := 0
	for _, o := range n.ops {
		if o.op.Status != "DONE" {
			k++
		}
	}
	return k
}

// Settle ends every running operation now (held ones too).
func (c *Cloud) Settle() {
	n := &c.net
	n.mu.Lock()
	defer n.mu.Unlock()
	n.init()
	for k, o := range n.ops {
		c.end(o, k)
	}
	n.heldOps = nil
}

// Close stops the endpoint: its servers, its operations (those running
// end without effect) and its data plane.
func (c *Cloud) Close() error {
	n := &c.net
	n.mu.Lock()
	n.closed = true
	n.init()
	for k, o := range n.ops {
		c.end(o, k)
	}
	n.mu.Unlock()
	n.wg.Wait()
	err := c.Base.Close()
	if derr := c.dataPlaneClose(); err == nil {
		err = derr
	}
	return err
}

func init() {
	for _, scope := range []string{`(global)`, `(regions/[^/]+)`, `(zones/[^/]+)`} {
		handle(http.MethodGet, scope+`/operations/([^/]+)`, (*Cloud).serveOpGet)
		handle(http.MethodDelete, scope+`/operations/([^/]+)`, (*Cloud).serveOpDelete)
		handle(http.MethodPost, scope+`/operations/([^/]+)/wait`, (*Cloud).serveOpWait)
	}
}

// lookupOp is the operation of m (project, scope, name), or an answer.
func (c *Cloud) lookupOp(w http.ResponseWriter, m []string) (*operation, bool) {
	n := &c.net
	n.mu.Lock()
	n.init()
	o, ok := n.ops[opKey(m[1], m[2], m[3])]
	n.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("The resource 'projects/%s/%s/operations/%s' was not found", m[1], m[2], m[3]))
	}
	return o, ok
}

func (c *Cloud) opSnapshot(o *operation) *compute.Operation {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	out := o.op
	return &out
}

func (c *Cloud) serveOpGet(w http.ResponseWriter, r *http.Request, m []string) {
	if st := c.count("operations.get"); st != 0 {
		writeError(w, st, "injected fault")
		return
	}
	if o, ok := c.lookupOp(w, m); ok {
		writeJSON(w, http.StatusOK, c.opSnapshot(o))
	}
}

func (c *Cloud) serveOpWait(w http.ResponseWriter, r *http.Request, m []string) {
	if st := c.count("operations.wait"); st != 0 {
		writeError(w, st, "injected fault")
		return
	}
	o, ok := c.lookupOp(w, m)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), maxWait)
	defer cancel()
	select {
	case <-o.done:
	case <-ctx.Done():
	}
	writeJSON(w, http.StatusOK, c.opSnapshot(o))
}

func (c *Cloud) serveOpDelete(w http.ResponseWriter, r *http.Request, m []string) {
	if st := c.count("operations.delete"); st != 0 {
		writeError(w, st, "injected fault")
		return
	}
	if _, ok := c.lookupOp(w, m); !ok {
		return
	}
	c.net.mu.Lock()
	delete(c.net.ops, opKey(m[1], m[2], m[3]))
	c.net.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// answerOp writes an operation just begun.
func answerOp(w http.ResponseWriter, op *compute.Operation) { writeJSON(w, http.StatusOK, op) }
