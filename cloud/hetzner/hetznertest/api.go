package hetznertest

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

var serverPath = regexp.MustCompile(`^/v1/servers/([0-9]+)$`)

func (c *Cloud) serveAPI(w http.ResponseWriter, r *http.Request) {
	if c.down.Load() {
		cloudtest.HangUp(w)
		return
	}
	if !c.spend(w) {
		writeError(w, http.StatusTooManyRequests, "rate_limit_exceeded", "limit of requests per hour reached", nil)
		return
	}
	if !cloudtest.Bearer(r, c.opts.Token) {
		c.Counter.Add("unauthorized")
		writeError(w, http.StatusUnauthorized, "unauthorized", "unable to authenticate", nil)
		return
	}
	if serve := resources[resource(r.URL.Path)]; serve != nil {
		serve(c, w, r)
		return
	}
	if r.Method != http.MethodGet {
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed", nil)
		return
	}
	switch p := r.URL.Path; {
	case p == "/v1/servers":
		c.serveList(w, r)
	case serverPath.MatchString(p):
		id, err := strconv.ParseInt(serverPath.FindStringSubmatch(p)[1], 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid_input", "invalid server id", nil)
			return
		}
		c.serveGet(w, id)
	default:
		writeError(w, http.StatusNotFound, "not_found", "the requested resource was not found", nil)
	}
}

// resources serve the API's resources beyond servers, by the path's first
// segment after /v1/ ("load_balancers", "actions", "networks"), every
// method: each resource's file registers itself here in an init func, so
// that resources are added without touching serveAPI.
var resources = map[string]func(c *Cloud, w http.ResponseWriter, r *http.Request){}

// resource is the first segment of an API path after /v1/.
func resource(path string) string {
	rest, ok := strings.CutPrefix(path, "/v1/")
	if !ok {
		return ""
	}
	first, _, _ := strings.Cut(rest, "/")
	return first
}

// spend takes one request from the budget, refilled evenly over the hour,
// and sets the RateLimit headers; false when it is spent.
func (c *Cloud) spend(w http.ResponseWriter) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.opts.Now()
	ok := c.budget.Take(now)
	cloudtest.SetRateLimitHeaders(w.Header(), c.opts.RateLimit, c.budget.Remaining(), c.budget.FullAt(now))
	return ok
}

// apiError is Hetzner's error body: {"error": {"code", "message",
// "details"}}.
type apiError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Details any    `json:"details"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, status int, code, msg string, details any) {
	var e apiError
	e.Error.Code, e.Error.Message, e.Error.Details = code, msg, details
	cloudtest.WriteJSON(w, status, e)
}

// invalidInput is the invalid_input error naming a field.
func invalidInput(w http.ResponseWriter, field, msg string) {
	details := map[string]any{"fields": []map[string]any{{"name": field, "messages": []string{msg}}}}
	writeError(w, http.StatusBadRequest, "invalid_input", "invalid input in field '"+field+"'", details)
}

// faultAnswer writes an injected fault's answer.
func faultAnswer(w http.ResponseWriter, f *cloudtest.Fault) {
	code := f.Code
	if code == "" {
		code = "server_error"
	}
	writeError(w, f.Status, code, "injected fault", nil)
}

// listParams are the query parameters of GET /servers this endpoint
// serves.
var listParams = map[string]bool{"page": true, "per_page": true, "label_selector": true, "sort": true, "name": true, "status": true}

func (c *Cloud) serveList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	page, perPage, sel, ok := c.listQuery(w, q, "list", listParams)
	if !ok {
		return
	}
	less, err := sorter(q["sort"])
	if err != nil {
		invalidInput(w, "sort", err.Error())
		return
	}
	c.onList.Run(page)
	all := c.servers.List(nil)
	noMeta := c.noMeta.Load()
	var match []Server
	for _, s := range all {
		if sel.Matches(labels.Set(s.Labels)) && (q.Get("name") == "" || s.Name == q.Get("name")) && statusIn(s.Status, q["status"]) {
			match = append(match, s)
		}
	}
	sort.SliceStable(match, func(i, j int) bool { return less(match[i], match[j]) })
	from, to, p := paged(len(match), page, perPage)
	servers := []wireServer{}
	for _, s := range match[from:to] {
		servers = append(servers, wire(s))
	}
	body := map[string]any{"servers": servers}
	if !noMeta {
		body["meta"] = map[string]any{"pagination": p}
	}
	cloudtest.WriteJSON(w, http.StatusOK, body)
}

// listQuery reads what the lists of servers and load balancers share:
// page (a bad one answered after the call of method is counted on no
// page), the call counted on its page (an injected fault answered),
// parameters beyond params refused, per_page (at most Options.PageLimit)
// and label_selector. ok is false when it answered.
func (c *Cloud) listQuery(w http.ResponseWriter, q url.Values, method string, params map[string]bool) (page, perPage int, sel labels.Selector, ok bool) {
	page, ok = pageNumber(w, q.Get("page"))
	if !ok {
		c.count(method, 0)
		return 0, 0, nil, false
	}
	if f := c.count(method, page); f != nil {
		faultAnswer(w, f)
		return 0, 0, nil, false
	}
	if !knownParams(w, q, params) {
		return 0, 0, nil, false
	}
	if perPage, ok = perPageNumber(w, q.Get("per_page")); !ok {
		return 0, 0, nil, false
	}
	perPage = min(perPage, c.opts.PageLimit)
	sel, err := parseSelector(q.Get("label_selector"))
	if err != nil {
		invalidInput(w, "label_selector", err.Error())
		return 0, 0, nil, false
	}
	return page, perPage, sel, true
}

// knownParams answers invalid_input on the first query parameter beyond
// params; false when it did.
func knownParams(w http.ResponseWriter, q url.Values, params map[string]bool) bool {
	for k := range q {
		if !params[k] {
			invalidInput(w, k, "unknown parameter (not modelled by hetznertest)")
			return false
		}
	}
	return true
}

// pageNumber reads page (1 when it is not given); false when it answered
// an error.
func pageNumber(w http.ResponseWriter, s string) (int, bool) {
	if s == "" {
		return 1, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		invalidInput(w, "page", "must be a positive integer")
		return 0, false
	}
	return n, true
}

// perPageNumber reads per_page (DefaultPerPage when it is not given);
// false when it answered an error.
func perPageNumber(w http.ResponseWriter, s string) (int, bool) {
	if s == "" {
		return DefaultPerPage, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxPerPage {
		invalidInput(w, "per_page", fmt.Sprintf("must be between 1 and %d", MaxPerPage))
		return 0, false
	}
	return n, true
}

// paged is the page of a list of total items: the items [from, to) it
// holds and its meta.pagination.
func paged(total, page, perPage int) (from, to int, p pagination) {
	from, to, last := cloudtest.Page(total, page, perPage)
	p = pagination{Page: page, PerPage: perPage, LastPage: &last, TotalEntries: &total}
	if page > 1 {
		prev := min(page-1, last)
		p.PreviousPage = &prev
	}
	if page < last {
		next := page + 1
		p.NextPage = &next
	}
	return from, to, p
}

// pagination is meta.pagination; the page numbers and total are null when
// there is none.
type pagination struct {
	Page         int  `json:"page"`
	PerPage      int  `json:"per_page"`
	PreviousPage *int `json:"previous_page"`
	NextPage     *int `json:"next_page"`
	LastPage     *int `json:"last_page"`
	TotalEntries *int `json:"total_entries"`
}

func statusIn(status string, want []string) bool {
	if len(want) == 0 {
		return true
	}
	for _, s := range want {
		if s == status {
			return true
		}
	}
	return false
}

// sorter reads sort parameters (id, name, created, each with :asc or
// :desc); none sorts by id.
func sorter(keys []string) (func(a, b Server) bool, error) {
	type order func(a, b Server) int
	var cmps []order
	for _, k := range keys {
		field, dir, _ := strings.Cut(k, ":")
		var f order
		switch field {
		case "id":
			f = func(a, b Server) int { return cmp.Compare(a.ID, b.ID) }
		case "name":
			f = func(a, b Server) int { return strings.Compare(a.Name, b.Name) }
		case "created":
			f = func(a, b Server) int { return a.Created.Compare(b.Created) }
		default:
			return nil, fmt.Errorf("unknown sort field %q", field)
		}
		switch dir {
		case "", "asc":
			cmps = append(cmps, f)
		case "desc":
			cmps = append(cmps, func(a, b Server) int { return -f(a, b) })
		default:
			return nil, fmt.Errorf("unknown sort direction %q", dir)
		}
	}
	cmps = append(cmps, func(a, b Server) int { return cmp.Compare(a.ID, b.ID) })
	return func(a, b Server) bool {
		for _, f := range cmps {
			if d := f(a, b); d != 0 {
				return d < 0
			}
		}
		return false
	}, nil
}

// parseSelector reads a label selector with Kubernetes' grammar
// (labels.Parse: k=v, k==v, k!=v, k, !k, k in (v1,v2), k notin (v1,v2),
// joined by commas), and refuses what it has and Hetzner's has not: the
// numeric comparisons k>n and k<n.
func parseSelector(s string) (labels.Selector, error) {
	sel, err := labels.Parse(s)
	if err != nil {
		return nil, err
	}
	reqs, _ := sel.Requirements()
	for _, r := range reqs {
		if op := r.Operator(); op == selection.GreaterThan || op == selection.LessThan {
			return nil, fmt.Errorf("the operator %s of %q is not one of the Cloud API's label selectors", op, r.String())
		}
	}
	return sel, nil
}

func (c *Cloud) serveGet(w http.ResponseWriter, id int64) {
	if f := c.count("get", 0); f != nil {
		faultAnswer(w, f)
		return
	}
	s, ok := c.Get(id)
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("server with ID '%d' not found", id), nil)
		return
	}
	cloudtest.WriteJSON(w, http.StatusOK, map[string]any{"server": wire(s)})
}
