package openstacktest

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// microversion is a Compute API microversion, major.minor.
type microversion struct{ major, minor int }

func (v microversion) String() string { return fmt.Sprintf("%d.%d", v.major, v.minor) }

func (v microversion) atLeast(major, minor int) bool {
	return v.major > major || v.major == major && v.minor >= minor
}

var (
	minMV = microversion{2, 1}
	maxMV = mustMV(MaxMicroversion)
)

func mustMV(s string) microversion {
	v, ok := parseMV(s)
	if !ok {
		panic("openstacktest: bad microversion " + s)
	}
	return v
}

var mvPattern = regexp.MustCompile(`^([1-9][0-9]*)\.(0|[1-9][0-9]*)$`)

func parseMV(s string) (microversion, bool) {
	m := mvPattern.FindStringSubmatch(s)
	if m == nil {
		return microversion{}, false
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	return microversion{major, minor}, true
}

// requestedMV reads the request's microversion: OpenStack-API-Version
// (compute X.Y, possibly among other services'), else
// X-OpenStack-Nova-API-Version, else 2.1; "latest" is the maximum.
func requestedMV(r *http.Request) (microversion, string) {
	s := ""
	for _, h := range r.Header.Values("OpenStack-API-Version") {
		for _, part := range strings.Split(h, ",") {
			if svc, v, ok := strings.Cut(strings.TrimSpace(part), " "); ok && strings.EqualFold(svc, "compute") {
				s = strings.TrimSpace(v)
			}
		}
	}
	if s == "" {
		s = strings.TrimSpace(r.Header.Get("X-OpenStack-Nova-API-Version"))
	}
	switch s {
	case "":
		return minMV, ""
	case "latest":
		return maxMV, ""
	}
	v, ok := parseMV(s)
	if !ok {
		return microversion{}, fmt.Sprintf("Version %s is not a valid microversion.", s)
	}
	if v.major != 2 || !v.atLeast(minMV.major, minMV.minor) || !maxMV.atLeast(v.major, v.minor) {
		return v, fmt.Sprintf("Version %s is not supported by the API. Minimum is %s and maximum is %s.", s, minMV, maxMV)
	}
	return v, ""
}

// novaFaultNames are the keys of Nova's error bodies by status.
var novaFaultNames = map[int]string{
	400: "badRequest", 401: "unauthorized", 403: "forbidden", 404: "itemNotFound", 405: "badMethod",
	409: "conflictingRequest", 413: "overLimit", 415: "badMediaType", 429: "overLimit", 501: "notImplemented",
	503: "serviceUnavailable",
}

func novaError(w http.ResponseWriter, status int, msg string) {
	name, ok := novaFaultNames[status]
	if !ok {
		name = "computeFault"
	}
	cloudtest.WriteJSON(w, status, map[string]any{name: map[string]any{"code": status, "message": msg}})
}

func (c *Cloud) serveAPI(w http.ResponseWriter, r *http.Request) {
	if c.down.Load() {
		cloudtest.HangUp(w)
		return
	}
	switch p := r.URL.Path; {
	case strings.HasPrefix(p, identityBase+"/"):
		c.serveIdentity(w, r, strings.TrimPrefix(p, identityBase))
	case strings.HasPrefix(p, computeBase+"/"):
		c.serveCompute(w, r, strings.TrimPrefix(p, computeBase))
	case strings.HasPrefix(p, networkBase+"/"):
		c.serveNetwork(w, r, strings.TrimPrefix(p, networkBase))
	case p == loadBalancerBase || strings.HasPrefix(p, loadBalancerBase+"/"):
		c.serveLoadBalancer(w, r, strings.TrimPrefix(p, loadBalancerBase))
	default:
		http.NotFound(w, r)
	}
}

var serverPath = regexp.MustCompile(`^/servers/([^/]+)$`)

func (c *Cloud) serveCompute(w http.ResponseWriter, r *http.Request, path string) {
	if !c.validToken(r.Header.Get("X-Auth-Token")) {
		c.Counter.Add("unauthorized")
		unauthorized(w)
		return
	}
	mv, bad := requestedMV(r)
	h := w.Header()
	h.Set("Vary", "OpenStack-API-Version, X-OpenStack-Nova-API-Version")
	if bad != "" {
		status := http.StatusNotAcceptable
		if mv == (microversion{}) {
			status = http.StatusBadRequest
		}
		novaError(w, status, bad)
		return
	}
	h.Set("OpenStack-API-Version", "compute "+mv.String())
	h.Set("X-OpenStack-Nova-API-Version", mv.String())
	c.mu.Lock()
	c.lastMV = mv.String()
	c.mu.Unlock()
	if r.Method != http.MethodGet {
		novaError(w, http.StatusMethodNotAllowed, "The method is not modelled by openstacktest.")
		return
	}
	switch {
	case path == "/servers/detail":
		c.serveList(w, r, mv)
	case serverPath.MatchString(path):
		c.serveGet(w, r, mv, serverPath.FindStringSubmatch(path)[1])
	default:
		novaError(w, http.StatusNotFound, "The resource could not be found.")
	}
}

// sortKeys are the sort keys served, with how they compare.
var sortKeys = map[string]func(a, b *Server) int{
	"created_at":   func(a, b *Server) int { return a.Created.Compare(b.Created) },
	"display_name": func(a, b *Server) int { return strings.Compare(a.Name, b.Name) },
	"uuid":         func(a, b *Server) int { return strings.Compare(a.ID, b.ID) },
}

func (c *Cloud) serveList(w http.ResponseWriter, r *http.Request, mv microversion) {
	if f := c.count("list"); f != nil {
		novaError(w, f.Status, "injected fault")
		return
	}
	q := r.URL.Query()
	limit := c.opts.MaxLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			novaError(w, http.StatusBadRequest, "Invalid input for query parameters limit. Value: "+s+".")
			return
		}
		limit = min(n, c.opts.MaxLimit)
	}
	key, dir := q.Get("sort_key"), q.Get("sort_dir")
	if key == "" {
		key = "created_at"
	}
	if dir == "" {
		dir = "desc"
	}
	cmpKey, ok := sortKeys[key]
	if !ok || (dir != "asc" && dir != "desc") {
		novaError(w, http.StatusBadRequest, fmt.Sprintf("Invalid input for query parameters sort_key/sort_dir: %s %s.", key, dir))
		return
	}
	order := func(a, b *Server) int {
		d := cmpKey(a, b)
		if d == 0 {
			d = cmp.Compare(a.serial, b.serial) // Nova's own id breaks ties
		}
		if dir == "desc" {
			d = -d
		}
		return d
	}
	var nameRE *regexp.Regexp
	if s := q.Get("name"); s != "" {
		re, err := regexp.Compile(s)
		if err != nil {
			novaError(w, http.StatusBadRequest, "Invalid input for query parameters name.")
			return
		}
		nameRE = re
	}
	// Tag filters exist from 2.26; before it they are unknown parameters,
	// which Nova drops for non-admin callers.
	tagFilter := func(*Server) bool { return true }
	if mv.atLeast(2, 26) {
		tagFilter = tagsMatch(q)
	}
	marker := q.Get("marker")
	c.onList.Run(marker)
	var match []*Server
	var markerSrv *Server
	for _, s := range c.servers.List(nil) {
		if s.ID == marker {
			markerSrv = &s
		}
		if (nameRE == nil || nameRE.MatchString(s.Name)) && (q.Get("status") == "" || strings.EqualFold(q.Get("status"), s.Status)) && tagFilter(&s) {
			match = append(match, &s)
		}
	}
	if marker != "" && markerSrv == nil {
		novaError(w, http.StatusBadRequest, "marker ["+marker+"] not found")
		return
	}
	sort.Slice(match, func(i, j int) bool { return order(match[i], match[j]) < 0 })
	start := 0
	if markerSrv != nil {
		start = sort.Search(len(match), func(i int) bool { return order(markerSrv, match[i]) < 0 })
	}
	page := match[start:min(len(match), start+limit)]
	servers := []map[string]any{}
	base := c.linkBase(r)
	for _, s := range page {
		servers = append(servers, wire(*s, mv, base, false))
	}
	body := map[string]any{"servers": servers}
	if limit > 0 && len(page) == limit {
		next := url.Values{}
		for k, v := range q {
			next[k] = v
		}
		next.Set("marker", page[len(page)-1].ID)
		body["servers_links"] = []map[string]any{{"rel": "next", "href": base + "/servers/detail?" + next.Encode()}}
	}
	cloudtest.WriteJSON(w, http.StatusOK, body)
}

// tagsMatch is the tag filters of a list: tags (all of them), tags-any
// (one of them), not-tags (not all of them), not-tags-any (none of them),
// each a comma-separated list.
func tagsMatch(q url.Values) func(*Server) bool {
	split := func(k string) []string {
		if q.Get(k) == "" {
			return nil
		}
		return strings.Split(q.Get(k), ",")
	}
	all, anyOf, notAll, notAny := split("tags"), split("tags-any"), split("not-tags"), split("not-tags-any")
	has := func(s *Server, t string) bool { return slices.Contains(s.Tags, t) }
	return func(s *Server) bool {
		for _, t := range all {
			if !has(s, t) {
				return false
			}
		}
		if len(anyOf) > 0 && !slices.ContainsFunc(anyOf, func(t string) bool { return has(s, t) }) {
			return false
		}
		if len(notAll) > 0 && !slices.ContainsFunc(notAll, func(t string) bool { return !has(s, t) }) {
			return false
		}
		return !slices.ContainsFunc(notAny, func(t string) bool { return has(s, t) })
	}
}

// linkBase is the base of the links Nova writes.
func (c *Cloud) linkBase(r *http.Request) string {
	if c.opts.LinkBase != "" {
		return c.opts.LinkBase
	}
	return "http://" + r.Host + computeBase
}

func (c *Cloud) serveGet(w http.ResponseWriter, r *http.Request, mv microversion, id string) {
	if f := c.count("get"); f != nil {
		novaError(w, f.Status, "injected fault")
		return
	}
	s, ok := c.Get(id)
	if !ok {
		novaError(w, http.StatusNotFound, "Instance "+id+" could not be found.")
		return
	}
	cloudtest.WriteJSON(w, http.StatusOK, map[string]any{"server": wire(s, mv, c.linkBase(r), true)})
}
