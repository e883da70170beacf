package azuretest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// ARM's writes, as Azure Resource Manager documents its asynchronous
// operations and the network resource provider answers them:
//
//   - PUT creates (201 Created) or replaces (200 OK) a resource and
//     answers its body at once with properties.provisioningState
//     "Updating", a new etag (W/"<uuid>") and an Azure-AsyncOperation
//     header; the resource is "Succeeded" after Options.ProvisionTime
//     (Settle finishes every operation at once);
//   - DELETE answers 202 Accepted with Azure-AsyncOperation and Location
//     headers (204 No Content when there is no such resource); the
//     resource is "Deleting" until it is gone;
//   - the Azure-AsyncOperation URL answers {"status": "InProgress"} with
//     Retry-After, then "Succeeded" or "Failed" with an error; the
//     Location URL answers 202 with Retry-After, then 200 (204 after a
//     delete);
//   - If-Match with an etag other than the resource's (or on a resource
//     that does not exist), and If-None-Match: * on one that does, are
//     answered 412 PreconditionFailed;
//   - a write to a resource whose operation is still running is refused
//     429 AnotherOperationInProgress with Retry-After, as the network
//     resource provider does;
//   - a fault injected with Fail/FailCode answers its status with ARM's
//     error body ({"error": {"code", "message"}}); a 429 carries
//     Retry-After (Options.RetryAfter seconds).
//
// Each kind of resource is an ARMKind, registered with Register: its
// type's path, the name under which its calls are counted (Get<Op>,
// Put<Op>, Delete<Op>, List<Op>s) and its checks.

// ARMKind is a type of resource this endpoint writes through ARM.
type ARMKind struct {
	// Type is the resource type under its provider as ARM writes it,
	// such as "Microsoft.Network/loadBalancers", or a child type,
	// "Microsoft.Network/routeTables/routes" (whose parent must exist).
	Type string
	// Op names its calls: Get<Op>, Put<Op>, Delete<Op>, List<Op>s.
	Op string
	// Check, when set, checks a PUT's body (the whole resource, as sent;
	// old is the stored one, nil on create) and may complete it in place
	// (the ids of sub-resources, read-only properties). It runs under no
	// lock of the ARM store: it may read other resources (ARMGet).
	Check func(c *Cloud, id string, body, old map[string]any) *ARMError
	// CanDelete, when set, refuses a delete (a resource still in use).
	CanDelete func(c *Cloud, id string) *ARMError
	// Built, when set, runs once a write's provisioning has finished,
	// with the resource's body (nil once it is deleted), outside the
	// store's lock: a data plane follows it.
	Built func(c *Cloud, id string, body map[string]any)
	// ListExtra, when set, adds to a list of the collection under prefix
	// (a lower-case collection path) what ARM holds of the kind besides
	// what was written through it (the VMs' public IPs).
	ListExtra func(c *Cloud, prefix string) []any
	// Show, when set, completes a copy of a resource as it is answered
	// with what ARM reads from elsewhere (a backend pool's members, from
	// the NICs that name it); it must not call the ARM store.
	Show func(c *Cloud, body map[string]any)
}

// ARMError is an error as ARM answers it: status and
// {"error": {"code": Code, "message": Message}}.
type ARMError struct {
	Status        int
	Code, Message string
}

func (e *ARMError) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

// BadRequest is a 400 ARMError.
func BadRequest(code, format string, args ...any) *ARMError {
	return &ARMError{Status: http.StatusBadRequest, Code: code, Message: fmt.Sprintf(format, args...)}
}

type armResource struct {
	id       string
	kind     *ARMKind
	body     map[string]any
	deleting bool
	op       string // the running operation's id, "" when none
}

type armOp struct {
	id, resource string
	delete       bool
	done         bool
}

// armStore holds the resources written through ARM, by lower-case id.
type armStore struct {
	mu     sync.Mutex
	kinds  map[string]*ARMKind // lower-case type path -> kind
	res    map[string]*armResource
	ops    map[string]*armOp
	groups map[string]bool // lower-case resource groups besides the cloud's
	timers map[string]*time.Timer
}

func (s *armStore) init() {
	if s.res == nil {
		s.kinds, s.res, s.ops = map[string]*ARMKind{}, map[string]*armResource{}, map[string]*armOp{}
		s.groups, s.timers = map[string]bool{}, map[string]*time.Timer{}
	}
}

// Register adds a kind of resource written through ARM.
func (c *Cloud) Register(k ARMKind) {
	c.arm.mu.Lock()
	defer c.arm.mu.Unlock()
	c.arm.init()
	c.arm.kinds[strings.ToLower(k.Type)] = &k
}

// AddResourceGroup makes ARM know another resource group of the
// subscription (the cloud's own is always known).
func (c *Cloud) AddResourceGroup(name string) {
	c.arm.mu.Lock()
	defer c.arm.mu.Unlock()
	c.arm.init()
	c.arm.groups[strings.ToLower(name)] = true
}

// ResourceID is the id of a resource of typ (as ARMKind.Type; a child's
// names joined by "/") named name in resource group rg ("": the cloud's).
func (c *Cloud) ResourceID(rg, typ, name string) string {
	if rg == "" {
		rg = c.opts.ResourceGroup
	}
	provider, types, _ := strings.Cut(typ, "/")
	names := strings.Split(name, "/")
	id := "/subscriptions/" + c.opts.Subscription + "/resourceGroups/" + rg + "/providers/" + provider
	for i, t := range strings.Split(types, "/") {
		if i < len(names) {
			id += "/" + t + "/" + names[i]
		}
	}
	return id
}

// Fail makes the next n calls of method (such as PutLoadBalancer) answer
// status with ARM's error body (n <= 0 clears them); a 429 carries
// Retry-After.
func (c *Cloud) Fail(method string, n, status int) { c.FailCode(method, n, status, "") }

// FailCode is Fail with ARM's error code (default: the status's).
func (c *Cloud) FailCode(method string, n, status int, code string) {
	c.faults.Set(method, cloudtest.Fault{Left: n, Status: status, Code: code})
}

// fault counts a call of method and answers its injected fault, if any;
// it reports whether it answered.
func (c *Cloud) fault(w http.ResponseWriter, method string) bool {
	f := c.calls.Call(&c.faults, method, 0)
	if f == nil {
		return false
	}
	code := f.Code
	if code == "" {
		code = strings.ReplaceAll(http.StatusText(f.Status), " ", "")
	}
	if f.Status == http.StatusTooManyRequests {
		c.count("Throttled")
		w.Header().Set("Retry-After", strconv.Itoa(c.retryAfter()))
	}
	armError(w, f.Status, code, "injected fault")
	return true
}

func (c *Cloud) retryAfter() int { return max(1, int(c.opts.RetryAfter/time.Second)) }

// ARMGet is a copy of the resource of id (any case) and whether it
// exists.
func (c *Cloud) ARMGet(id string) (map[string]any, bool) {
	c.arm.mu.Lock()
	defer c.arm.mu.Unlock()
	c.arm.init()
	r, ok := c.arm.res[strings.ToLower(id)]
	if !ok {
		return nil, false
	}
	return cloneJSON(r.body), true
}

// ARMList is a copy of every resource of typ (as ARMKind.Type), by id.
func (c *Cloud) ARMList(typ string) []map[string]any {
	c.arm.mu.Lock()
	defer c.arm.mu.Unlock()
	c.arm.init()
	var out []map[string]any
	for _, id := range c.sortedIDs() {
		if r := c.arm.res[id]; strings.EqualFold(r.kind.Type, typ) {
			out = append(out, cloneJSON(r.body))
		}
	}
	return out
}

// ARMMutate changes a stored resource out of band (a test's tampering, or
// a parent's list of children): f changes its body; its etag changes.
// It reports whether the resource exists.
func (c *Cloud) ARMMutate(id string, f func(body map[string]any)) bool {
	c.arm.mu.Lock()
	r, ok := c.arm.res[strings.ToLower(id)]
	if ok {
		f(r.body)
		r.body["etag"] = newETag()
	}
	var built func(*Cloud, string, map[string]any)
	var body map[string]any
	if ok && r.op == "" && r.kind.Built != nil {
		built, body = r.kind.Built, cloneJSON(r.body)
	}
	c.arm.mu.Unlock()
	if built != nil {
		built(c, r.id, body)
	}
	return ok
}

// ARMPut stores a resource as ARM holds it once built (a test's setup:
// one made by another tool), Succeeded, with a new etag.
func (c *Cloud) ARMPut(typ, id string, body map[string]any) {
	c.arm.mu.Lock()
	c.arm.init()
	k := c.arm.kinds[strings.ToLower(typ)]
	if k == nil {
		c.arm.mu.Unlock()
		panic("azuretest: no ARM kind " + typ)
	}
	body = cloneJSON(body)
	c.complete(k, id, body)
	setState(body, "Succeeded")
	c.arm.res[strings.ToLower(id)] = &armResource{id: id, kind: k, body: body}
	c.arm.mu.Unlock()
	if k.Built != nil {
		k.Built(c, id, cloneJSON(body))
	}
}

// Settle finishes every running operation now.
func (c *Cloud) Settle() {
	c.arm.mu.Lock()
	var ids []string
	for id, op := range c.arm.ops {
		if !op.done {
			ids = append(ids, id)
		}
	}
	c.arm.mu.Unlock()
	slices.Sort(ids)
	for _, id := range ids {
		c.finish(id)
	}
}

// Running is how many operations are still running.
func (c *Cloud) Running() int {
	c.arm.mu.Lock()
	defer c.arm.mu.Unlock()
	n := 0
	for _, op := range c.arm.ops {
		if !op.done {
			n++
		}
	}
	return n
}

func (c *Cloud) sortedIDs() []string {
	ids := make([]string, 0, len(c.arm.res))
	for id := range c.arm.res {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func newETag() string { return `W/"` + uuid.NewString() + `"` }

func cloneJSON(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	b, _ := json.Marshal(m)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out
}

func setState(body map[string]any, state string) {
	props, _ := body["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
		body["properties"] = props
	}
	props["provisioningState"] = state
	// Sub-resources in lists show their parent's state, as ARM's do.
	for _, v := range props {
		if list, ok := v.([]any); ok {
			for _, it := range list {
				if sub, ok := it.(map[string]any); ok {
					if sp, ok := sub["properties"].(map[string]any); ok {
						sp["provisioningState"] = state
					}
				}
			}
		}
	}
}

// complete sets what ARM writes of every resource: id, name, type,
// location (default the cloud's), etag.
func (c *Cloud) complete(k *ARMKind, id string, body map[string]any) {
	body["id"] = id
	body["name"] = id[strings.LastIndex(id, "/")+1:]
	body["type"] = k.Type
	if _, child := body["location"]; !child && strings.Count(k.Type, "/") == 1 {
		body["location"] = c.opts.Location
	}
	body["etag"] = newETag()
}

// armPath is a parsed ARM path: a resource group's provider path.
type armPath struct {
	rg       string
	provider string
	types    []string // lower-case
	names    []string // as sent
}

func (p armPath) typ() string { return strings.ToLower(p.provider + "/" + strings.Join(p.types, "/")) }

// id is the resource's id, or the collection's path when the last name is
// missing.
func (c *Cloud) pathID(p armPath) string {
	id := "/subscriptions/" + c.opts.Subscription + "/resourceGroups/" + p.rg + "/providers/" + p.provider
	for i, t := range p.types {
		id += "/" + t
		if i < len(p.names) {
			id += "/" + p.names[i]
		}
	}
	return id
}

// serveARMWrite answers ARM's written resources and its operations; it
// reports false for a path that is neither (the read-only compute paths).
func (c *Cloud) serveARMWrite(w http.ResponseWriter, r *http.Request) bool {
	f := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	// /subscriptions/S/providers/Microsoft.Network/locations/L/{operations,operationResults}/ID
	if len(f) == 8 && strings.EqualFold(f[2], "providers") && strings.EqualFold(f[4], "locations") {
		switch strings.ToLower(f[6]) {
		case "operations":
			c.serveOperation(w, r, f[7], false)
			return true
		case "operationresults":
			c.serveOperation(w, r, f[7], true)
			return true
		}
		return false
	}
	if len(f) < 7 || !strings.EqualFold(f[2], "resourceGroups") || !strings.EqualFold(f[4], "providers") {
		return false
	}
	// A VM's NIC, by name: its backend pools are written (nics.go).
	if len(f) == 8 && strings.EqualFold(f[5], "Microsoft.Network") && strings.EqualFold(f[6], "networkInterfaces") {
		if !strings.EqualFold(f[3], c.opts.ResourceGroup) {
			armError(w, http.StatusNotFound, "ResourceGroupNotFound", fmt.Sprintf("Resource group '%s' could not be found.", f[3]))
			return true
		}
		c.serveNIC(w, r, f[7])
		return true
	}
	p := armPath{rg: f[3], provider: f[5]}
	for i := 6; i < len(f); i += 2 {
		p.types = append(p.types, f[i])
		if i+1 < len(f) {
			p.names = append(p.names, f[i+1])
		}
	}
	c.arm.mu.Lock()
	c.arm.init()
	k := c.arm.kinds[p.typ()]
	known := strings.EqualFold(p.rg, c.opts.ResourceGroup) || c.arm.groups[strings.ToLower(p.rg)]
	c.arm.mu.Unlock()
	if k == nil {
		return false
	}
	if !known {
		armError(w, http.StatusNotFound, "ResourceGroupNotFound", fmt.Sprintf("Resource group '%s' could not be found.", p.rg))
		return true
	}
	// Canonical types as the kind spells them.
	p.types = strings.Split(k.Type, "/")[1:]
	id := c.pathID(p)
	list := len(p.names) < len(p.types)
	switch {
	case list && r.Method == http.MethodGet:
		c.armList(w, r, k, id)
	case list:
		armError(w, http.StatusMethodNotAllowed, "MethodNotAllowed", "The requested resource does not support http method '"+r.Method+"'.")
	case r.Method == http.MethodGet:
		c.armGetOne(w, k, id)
	case r.Method == http.MethodPut:
		c.armPut(w, r, k, id)
	case r.Method == http.MethodDelete:
		c.armDelete(w, r, k, id)
	default:
		armError(w, http.StatusMethodNotAllowed, "MethodNotAllowed", "The requested resource does not support http method '"+r.Method+"'.")
	}
	return true
}

func notFound(w http.ResponseWriter, k *ARMKind, id, rg string) {
	name := id[strings.LastIndex(id, "/")+1:]
	armError(w, http.StatusNotFound, "ResourceNotFound", fmt.Sprintf("The Resource '%s/%s' under resource group '%s' was not found. For more details please go to https://aka.ms/ARMResourceNotFoundFix", k.Type, name, rg))
}

func rgOf(id string) string {
	f := strings.Split(id, "/")
	if len(f) > 4 {
		return f[4]
	}
	return ""
}

func (c *Cloud) armList(w http.ResponseWriter, r *http.Request, k *ARMKind, prefix string) {
	if c.fault(w, "List"+k.Op+"s") {
		return
	}
	lp := strings.ToLower(prefix) + "/"
	c.arm.mu.Lock()
	var items []any
	for _, id := range c.sortedIDs() {
		res := c.arm.res[id]
		// The collection's own members: under the prefix, no deeper.
		if res.kind == k && strings.HasPrefix(id, lp) && !strings.Contains(id[len(lp):], "/") {
			items = append(items, cloneJSON(res.body))
		}
	}
	c.arm.mu.Unlock()
	if k.Show != nil {
		for _, it := range items {
			k.Show(c, it.(map[string]any))
		}
	}
	if k.ListExtra != nil {
		items = append(k.ListExtra(c, lp), items...)
	}
	c.page(w, r, items)
}

func (c *Cloud) armGetOne(w http.ResponseWriter, k *ARMKind, id string) {
	if c.fault(w, "Get"+k.Op) {
		return
	}
	body, ok := c.ARMGet(id)
	if !ok {
		notFound(w, k, id, rgOf(id))
		return
	}
	if k.Show != nil {
		k.Show(c, body)
	}
	writeJSON(w, http.StatusOK, body)
}

// precondition checks If-Match and If-None-Match against the stored
// resource (nil: none).
func precondition(r *http.Request, res *armResource) *ARMError {
	failed := &ARMError{Status: http.StatusPreconditionFailed, Code: "PreconditionFailed", Message: "Precondition failed: the resource's etag does not match the request's If-Match or If-None-Match header."}
	if m := r.Header.Get("If-Match"); m != "" {
		if res == nil {
			return failed
		}
		if etag, _ := res.body["etag"].(string); m != "*" && m != etag {
			return failed
		}
	}
	if r.Header.Get("If-None-Match") == "*" && res != nil {
		return failed
	}
	return nil
}

func (c *Cloud) busy(w http.ResponseWriter, res *armResource) {
	w.Header().Set("Retry-After", strconv.Itoa(c.retryAfter()))
	c.count("AnotherOperationInProgress")
	armError(w, http.StatusTooManyRequests, "AnotherOperationInProgress",
		fmt.Sprintf("Another operation on this or dependent resource is in progress. To retrieve status of the operation use uri: %s", c.opURL(res.op, false)))
}

func (c *Cloud) opURL(op string, location bool) string {
	kind := "operations"
	if location {
		kind = "operationResults"
	}
	return c.Endpoint() + "/subscriptions/" + c.opts.Subscription + "/providers/Microsoft.Network/locations/" + c.opts.Location + "/" + kind + "/" + op + "?api-version=2024-05-01"
}

// topLevel are the fields ARM reads of a resource's body.
var topLevel = []string{"id", "name", "type", "location", "tags", "etag", "properties", "sku", "zones", "extendedLocation"}

func (c *Cloud) armPut(w http.ResponseWriter, r *http.Request, k *ARMKind, id string) {
	if c.fault(w, "Put"+k.Op) {
		return
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	var body map[string]any
	if err == nil {
		err = json.Unmarshal(data, &body)
	}
	if err != nil || body == nil {
		armError(w, http.StatusBadRequest, "InvalidRequestFormat", "Cannot parse the request.")
		return
	}
	for f := range body {
		if !slices.Contains(topLevel, f) {
			armError(w, http.StatusBadRequest, "InvalidRequestFormat", fmt.Sprintf("Could not find member '%s' on object of type 'Resource'.", f))
			return
		}
	}
	if bid, ok := body["id"].(string); ok && bid != "" && !strings.EqualFold(bid, id) {
		armError(w, http.StatusBadRequest, "InvalidRequestFormat", "The resource id in the body does not match the request's.")
		return
	}
	if strings.Count(k.Type, "/") > 1 {
		parent := id[:strings.LastIndex(id[:strings.LastIndex(id, "/")], "/")]
		if _, ok := c.ARMGet(parent); !ok {
			notFound(w, k, parent, rgOf(id))
			return
		}
	}
	c.arm.mu.Lock()
	old := c.arm.res[strings.ToLower(id)]
	var oldBody map[string]any
	if old != nil {
		oldBody = cloneJSON(old.body)
	}
	c.arm.mu.Unlock()
	if e := precondition(r, old); e != nil {
		armError(w, e.Status, e.Code, e.Message)
		return
	}
	if old != nil && old.op != "" {
		c.busy(w, old)
		return
	}
	if k.Check != nil {
		if e := k.Check(c, id, body, oldBody); e != nil {
			armError(w, e.Status, e.Code, e.Message)
			return
		}
	}
	c.arm.mu.Lock()
	// A write raced this one between the checks: answer as ARM would.
	now := c.arm.res[strings.ToLower(id)]
	if now != old || (old != nil && (old.op != "" || old.body["etag"] != oldBody["etag"])) {
		c.arm.mu.Unlock()
		if r.Header.Get("If-Match") != "" && now != nil {
			armError(w, http.StatusPreconditionFailed, "PreconditionFailed", "Precondition failed: the resource was changed.")
		} else {
			c.busy(w, now)
		}
		return
	}
	c.complete(k, id, body)
	setState(body, "Updating")
	op := &armOp{id: uuid.NewString(), resource: strings.ToLower(id)}
	res := &armResource{id: id, kind: k, body: body, op: op.id}
	c.arm.res[strings.ToLower(id)] = res
	c.arm.ops[op.id] = op
	out := cloneJSON(body)
	c.arm.mu.Unlock()
	c.schedule(op.id)
	if k.Show != nil {
		k.Show(c, out)
	}
	w.Header().Set("Azure-AsyncOperation", c.opURL(op.id, false))
	status := http.StatusOK
	if old == nil {
		status = http.StatusCreated
	}
	writeJSON(w, status, out)
}

func (c *Cloud) armDelete(w http.ResponseWriter, r *http.Request, k *ARMKind, id string) {
	if c.fault(w, "Delete"+k.Op) {
		return
	}
	c.arm.mu.Lock()
	res := c.arm.res[strings.ToLower(id)]
	c.arm.mu.Unlock()
	if e := precondition(r, res); e != nil {
		armError(w, e.Status, e.Code, e.Message)
		return
	}
	if res == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if res.op != "" {
		c.busy(w, res)
		return
	}
	if k.CanDelete != nil {
		if e := k.CanDelete(c, id); e != nil {
			armError(w, e.Status, e.Code, e.Message)
			return
		}
	}
	c.arm.mu.Lock()
	if c.arm.res[strings.ToLower(id)] != res || res.op != "" {
		c.arm.mu.Unlock()
		c.busy(w, res)
		return
	}
	op := &armOp{id: uuid.NewString(), resource: strings.ToLower(id), delete: true}
	res.op, res.deleting = op.id, true
	setState(res.body, "Deleting")
	c.arm.ops[op.id] = op
	c.arm.mu.Unlock()
	c.schedule(op.id)
	w.Header().Set("Azure-AsyncOperation", c.opURL(op.id, false))
	w.Header().Set("Location", c.opURL(op.id, true))
	w.Header().Set("Retry-After", strconv.Itoa(c.retryAfter()))
	w.WriteHeader(http.StatusAccepted)
}

// schedule finishes the operation after ProvisionTime (at once when it is
// zero or less).
func (c *Cloud) schedule(op string) {
	if c.opts.ProvisionTime <= 0 {
		c.finish(op)
		return
	}
	c.arm.mu.Lock()
	c.arm.timers[op] = time.AfterFunc(c.opts.ProvisionTime, func() { c.finish(op) })
	c.arm.mu.Unlock()
}

// finish ends an operation: the resource is Succeeded, or gone.
func (c *Cloud) finish(opID string) {
	c.arm.mu.Lock()
	op := c.arm.ops[opID]
	if op == nil || op.done {
		c.arm.mu.Unlock()
		return
	}
	op.done = true
	if t := c.arm.timers[opID]; t != nil {
		t.Stop()
		delete(c.arm.timers, opID)
	}
	res := c.arm.res[op.resource]
	var built func(*Cloud, string, map[string]any)
	var body map[string]any
	var id string
	if res != nil && res.op == opID {
		res.op = ""
		id = res.id
		built = res.kind.Built
		if op.delete {
			delete(c.arm.res, op.resource)
		} else {
			setState(res.body, "Succeeded")
			body = cloneJSON(res.body)
		}
	}
	c.arm.mu.Unlock()
	if built != nil {
		built(c, id, body)
	}
}

// serveOperation answers an Azure-AsyncOperation URL (location false) or
// a Location URL.
func (c *Cloud) serveOperation(w http.ResponseWriter, r *http.Request, id string, location bool) {
	if r.Method != http.MethodGet {
		armError(w, http.StatusMethodNotAllowed, "MethodNotAllowed", "The requested resource does not support http method '"+r.Method+"'.")
		return
	}
	if c.fault(w, "GetOperation") {
		return
	}
	c.arm.mu.Lock()
	op := c.arm.ops[id]
	var done, del bool
	var body map[string]any
	if op != nil {
		done, del = op.done, op.delete
		if res := c.arm.res[op.resource]; res != nil && done && !del {
			body = cloneJSON(res.body)
		}
	}
	c.arm.mu.Unlock()
	switch {
	case op == nil:
		armError(w, http.StatusNotFound, "OperationNotFound", "The operation '"+id+"' could not be found.")
	case !done:
		w.Header().Set("Retry-After", strconv.Itoa(c.retryAfter()))
		if location {
			w.Header().Set("Location", c.opURL(id, true))
			w.WriteHeader(http.StatusAccepted)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "name": id, "status": "InProgress"})
	case location && (del || body == nil):
		w.WriteHeader(http.StatusNoContent)
	case location:
		writeJSON(w, http.StatusOK, body)
	default:
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "name": id, "status": "Succeeded"})
	}
}

// armURL is the URL of an ARM path on this endpoint (for tests).
func (c *Cloud) armURL(path string) string {
	return c.Endpoint() + (&url.URL{Path: path}).EscapedPath() + "?api-version=2024-05-01"
}
