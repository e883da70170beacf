package hetznertest

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// Actions: what the Cloud API answers a change with. A POST that changes a
// resource answers an action, "running"; the client polls
// GET /v1/actions?id=... (hcloud-go's WaitFor) until it is "success" or
// "error". Here an action runs for Options.ActionTime (0: it has finished
// by the first read after it was answered), and ends in error when
// FailAction said so (its change is then not made).

func init() { resources["actions"] = (*Cloud).serveActions }

// ActionResource is a resource an action is about ("load_balancer",
// "server", "network") and its id.
type ActionResource struct {
	ID   int64  `json:"id"`
	Type string `json:"type"`
}

type wireActionError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// wireAction is the API's action object.
type wireAction struct {
	ID        int64            `json:"id"`
	Command   string           `json:"command"`
	Status    string           `json:"status"`
	Progress  int              `json:"progress"`
	Started   string           `json:"started"`
	Finished  *string          `json:"finished"`
	Resources []ActionResource `json:"resources"`
	Error     *wireActionError `json:"error"`
}

type action struct {
	id        int64
	command   string
	started   time.Time
	resources []ActionResource
	fail      *wireActionError
}

// actions are the endpoint's actions and the failures FailAction set.
type actions struct {
	mu    sync.Mutex
	next  int64
	all   map[int64]*action
	fails map[string][]wireActionError // command -> next failures
}

// startAction records a running action of command on resources and
// reports whether it is to fail (FailAction): the caller then leaves the
// resource as it was.
func (c *Cloud) startAction(command string, resources ...ActionResource) (wireAction, bool) {
	a := &c.acts
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.all == nil {
		a.all = map[int64]*action{}
	}
	a.next++
	act := &action{id: 13_000_000 + a.next, command: command, started: c.opts.Now(), resources: resources}
	if f := a.fails[command]; len(f) > 0 {
		act.fail = &f[0]
		a.fails[command] = f[1:]
	}
	a.all[act.id] = act
	w := act.wire(act.started, 0)
	w.Status, w.Progress, w.Finished, w.Error = "running", 0, nil, nil
	return w, act.fail != nil
}

// FailAction makes the next action of command (such as "add_target",
// "create_load_balancer") end in error with code and message; the change
// it was for is not made.
func (c *Cloud) FailAction(command, code, message string) {
	a := &c.acts
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fails == nil {
		a.fails = map[string][]wireActionError{}
	}
	a.fails[command] = append(a.fails[command], wireActionError{Code: code, Message: message})
}

// wire is the action as read at now: running until ActionTime has passed
// since it started, then success or error.
func (a *action) wire(now time.Time, runFor time.Duration) wireAction {
	w := wireAction{ID: a.id, Command: a.command, Status: "running", Started: a.started.UTC().Format(createdLayout),
		Resources: slices.Clone(a.resources)}
	if w.Resources == nil {
		w.Resources = []ActionResource{}
	}
	if now.Sub(a.started) < runFor {
		return w
	}
	done := a.started.Add(runFor).UTC().Format(createdLayout)
	w.Finished, w.Progress, w.Status = &done, 100, "success"
	if a.fail != nil {
		w.Status, w.Error = "error", a.fail
	}
	return w
}

var actionPath = regexp.MustCompile(`^/v1/actions/([0-9]+)$`)

// serveActions: GET /v1/actions?id=...(&id=...) (ids required, as since
// 2025; sort, page and per_page accepted) and GET /v1/actions/{id}.
func (c *Cloud) serveActions(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed", nil)
		return
	}
	if f := c.count("action-get", 0); f != nil {
		faultAnswer(w, f)
		return
	}
	now := c.opts.Now()
	a := &c.acts
	if m := actionPath.FindStringSubmatch(r.URL.Path); m != nil {
		id, _ := strconv.ParseInt(m[1], 10, 64)
		a.mu.Lock()
		act, ok := a.all[id]
		var out wireAction
		if ok {
			out = act.wire(now, c.opts.ActionTime)
		}
		a.mu.Unlock()
		if !ok {
			writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("action with ID '%d' not found", id), nil)
			return
		}
		cloudtest.WriteJSON(w, http.StatusOK, map[string]any{"action": out})
		return
	}
	if r.URL.Path != "/v1/actions" {
		writeError(w, http.StatusNotFound, "not_found", "the requested resource was not found", nil)
		return
	}
	q := r.URL.Query()
	for k := range q {
		switch k {
		case "id", "sort", "page", "per_page", "status":
		default:
			invalidInput(w, k, "unknown parameter (not modelled by hetznertest)")
			return
		}
	}
	if len(q["id"]) == 0 {
		invalidInput(w, "id", "is required")
		return
	}
	var out []wireAction
	a.mu.Lock()
	for _, s := range q["id"] {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			a.mu.Unlock()
			invalidInput(w, "id", "must be an integer")
			return
		}
		if act, ok := a.all[id]; ok {
			out = append(out, act.wire(now, c.opts.ActionTime))
		}
	}
	a.mu.Unlock()
	slices.SortFunc(out, func(x, y wireAction) int { return int(x.ID - y.ID) })
	if out == nil {
		out = []wireAction{}
	}
	last := 1
	total := len(out)
	cloudtest.WriteJSON(w, http.StatusOK, map[string]any{"actions": out,
		"meta": map[string]any{"pagination": pagination{Page: 1, PerPage: max(total, 1), LastPage: &last, TotalEntries: &total}}})
}
