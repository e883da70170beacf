package gcetest

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/mooring-dev/mooring/cloud/cloudtest"
	compute "google.golang.org/api/compute/v1"
)

// maxPageSize is aggregatedList's largest maxResults.
const maxPageSize = 500

const resourceBase = "https://www.googleapis.com/compute/v1/"

var (
	aggregatedPath = regexp.MustCompile(`^/compute/v1/projects/([^/]+)/aggregated/instances$`)
	getPath        = regexp.MustCompile(`^/compute/v1/projects/([^/]+)/zones/([^/]+)/instances/([^/]+)$`)
	// labelFilter is the one filter form served: labels.KEY = "VALUE"
	// (quotes optional).
	labelFilter = regexp.MustCompile(`^labels\.([a-z][a-z0-9_-]{0,62})\s*=\s*(?:"([a-z0-9_-]{0,63})"|([a-z0-9_-]{1,63}))$`)
)

func (c *Cloud) serveAPI(w http.ResponseWriter, r *http.Request) {
	if c.serveTable(w, r) {
		return
	}
	if r.Method != http.MethodGet {
		writeError(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	switch p := r.URL.Path; {
	case p == "/oauth2/v3/certs":
		c.serveCerts(w, false)
	case p == "/oauth2/v1/certs":
		c.serveCerts(w, true)
	case aggregatedPath.MatchString(p):
		c.serveAggregatedList(w, r, aggregatedPath.FindStringSubmatch(p)[1])
	case getPath.MatchString(p):
		m := getPath.FindStringSubmatch(p)
		c.serveGet(w, m[1], m[2], m[3])
	default:
		writeError(w, http.StatusNotFound, "The requested URL was not found")
	}
}

// writeError writes Google's JSON error form.
func writeError(w http.ResponseWriter, status int, msg string) {
	reason := map[int]string{400: "invalid", 404: "notFound", 403: "forbidden", 409: "alreadyExists", 429: "rateLimitExceeded"}[status]
	if reason == "" {
		reason = "backendError"
	}
	writeReason(w, status, reason, msg)
}

// writeReason writes Google's JSON error form with a reason of its own
// (alreadyExists, resourceNotReady, quotaExceeded, ...).
func writeReason(w http.ResponseWriter, status int, reason, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{
		"code": status, "message": msg,
		"errors": []map[string]string{{"domain": "global", "reason": reason, "message": msg}},
	}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	cloudtest.WriteJSON(w, status, v)
}

func (c *Cloud) serveCerts(w http.ResponseWriter, asPEM bool) {
	if st := c.count("certs"); st != 0 {
		writeError(w, st, "injected fault")
		return
	}
	c.mu.Lock()
	keys := append([]*signingKey(nil), c.keys...)
	c.mu.Unlock()
	// Google's answer may be cached: Cache-Control with a max-age of hours
	// and the matching Expires.
	maxAge := c.opts.CertsMaxAge
	w.Header().Set("Cache-Control", fmt.Sprintf("public, max-age=%d, must-revalidate, no-transform", int(maxAge.Seconds())))
	w.Header().Set("Expires", c.opts.Now().Add(maxAge).UTC().Format(http.TimeFormat))
	if asPEM {
		out := map[string]string{}
		for _, k := range keys {
			out[k.kid] = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: k.cert}))
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	var set jose.JSONWebKeySet
	for _, k := range keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: &k.priv.PublicKey, KeyID: k.kid, Algorithm: string(jose.RS256), Use: "sig"})
	}
	writeJSON(w, http.StatusOK, set)
}

func (c *Cloud) serveAggregatedList(w http.ResponseWriter, r *http.Request, project string) {
	if st := c.count("aggregatedList"); st != 0 {
		writeError(w, st, "injected fault")
		return
	}
	q := r.URL.Query()
	for k := range q {
		switch k {
		case "filter", "maxResults", "pageToken", "alt", "prettyPrint", "returnPartialSuccess", "includeAllScopes":
		default:
			writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid parameter %q", k))
			return
		}
	}
	filterKey, filterValue, filtered := "", "", false
	if f := q.Get("filter"); f != "" {
		m := labelFilter.FindStringSubmatch(strings.TrimSpace(f))
		if m == nil {
			writeError(w, http.StatusBadRequest, "Invalid value for field 'filter': '"+f+"'. Invalid list filter expression.")
			return
		}
		filterKey, filterValue, filtered = m[1], m[2]+m[3], true
	}
	size := c.opts.MaxPageSize
	if s := q.Get("maxResults"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxPageSize {
			writeError(w, http.StatusBadRequest, "Invalid value for field 'maxResults': '"+s+"'. Must be in the range [0, 500].")
			return
		}
		size = min(n, c.opts.MaxPageSize)
	}
	digest := sha256.Sum256([]byte(project + "\x00" + q.Get("filter")))
	tag := hex.EncodeToString(digest[:6])
	after := ""
	if tok := q.Get("pageToken"); tok != "" {
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		t, cursor, ok := strings.Cut(string(raw), ":")
		if err != nil || !ok || t != tag {
			writeError(w, http.StatusBadRequest, "Invalid value for field 'pageToken': '"+tok+"'.")
			return
		}
		after = cursor
	}
	if q.Get("pageToken") != "" {
		c.Counter.Add(NextPage)
	}
	all, known := c.project(project)
	c.mu.Lock()
	unreachable := map[string]bool{}
	for z := range c.unreach {
		unreachable[z] = true
	}
	c.mu.Unlock()
	if !known {
		writeError(w, http.StatusNotFound, "The resource 'projects/"+project+"' was not found")
		return
	}
	out := &compute.InstanceAggregatedList{
		Kind: "compute#instanceAggregatedList", Id: "projects/" + project + "/aggregated/instances",
		SelfLink: resourceBase + "projects/" + project + "/aggregated/instances",
		Items:    map[string]compute.InstancesScopedList{},
	}
	n := 0
	for _, in := range all {
		cursor := in.Zone + "/" + in.Name
		if after != "" && cursor <= after {
			continue
		}
		if filtered && (in.Labels == nil || in.Labels[filterKey] != filterValue) {
			continue
		}
		if unreachable[in.Zone] {
			continue
		}
		if n == size {
			out.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte(tag + ":" + after))
			break
		}
		scope := "zones/" + in.Zone
		l := out.Items[scope]
		l.Instances = append(l.Instances, wire(in))
		out.Items[scope] = l
		after = cursor
		n++
	}
	c.addScopeWarnings(out, all, unreachable, q.Get("returnPartialSuccess") == "true")
	writeJSON(w, http.StatusOK, out)
}

func (c *Cloud) serveGet(w http.ResponseWriter, project, zone, name string) {
	if st := c.count("get"); st != 0 {
		writeError(w, st, "injected fault")
		return
	}
	in, ok := c.Get(project, zone, name)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("The resource 'projects/%s/zones/%s/instances/%s' was not found", project, zone, name))
		return
	}
	writeJSON(w, http.StatusOK, wire(in))
}

// wire is an instance as the Compute API shows it.
func wire(in Instance) *compute.Instance {
	zoneURL := resourceBase + "projects/" + in.Project + "/zones/" + in.Zone
	nic := &compute.NetworkInterface{
		Kind: "compute#networkInterface", Name: "nic0", NetworkIP: in.InternalIP,
		Network: resourceBase + "projects/" + in.Project + "/global/networks/default",
	}
	if in.ExternalIP != "" {
		ac := &compute.AccessConfig{Kind: "compute#accessConfig", Name: "External NAT", Type: "ONE_TO_ONE_NAT", NetworkTier: "PREMIUM"}
		if in.Status == "RUNNING" {
			ac.NatIP = in.ExternalIP
		}
		nic.AccessConfigs = []*compute.AccessConfig{ac}
	}
	var shielded *compute.ShieldedInstanceConfig
	if sh := in.Shielded; sh != nil {
		shielded = &compute.ShieldedInstanceConfig{EnableVtpm: sh.VTPM, EnableSecureBoot: sh.SecureBoot, EnableIntegrityMonitoring: sh.IntegrityMonitoring,
			ForceSendFields: []string{"EnableVtpm", "EnableSecureBoot", "EnableIntegrityMonitoring"}}
	}
	return &compute.Instance{
		Kind: "compute#instance", Id: in.ID, Name: in.Name, Zone: zoneURL,
		ShieldedInstanceConfig: shielded,
		MachineType:            zoneURL + "/machineTypes/" + in.MachineType,
		Status:                 in.Status,
		Labels:                 maps.Clone(in.Labels),
		Hostname:               in.Hostname,
		NetworkInterfaces:      []*compute.NetworkInterface{nic},
		CreationTimestamp:      in.Created.Format("2006-01-02T15:04:05.000-07:00"),
		SelfLink:               zoneURL + "/instances/" + in.Name,
	}
}

// addScopeWarnings gives every zone of the project that has no instance
// on the page its scope with a warning, as the API does: UNREACHABLE for
// an unreachable zone (also listed in unreachables when the caller asked
// for partial success), NO_RESULTS_ON_PAGE for the others.
func (c *Cloud) addScopeWarnings(out *compute.InstanceAggregatedList, all []Instance, unreachable map[string]bool, partial bool) {
	zones := map[string]bool{DefaultZone: true}
	for _, in := range all {
		zones[in.Zone] = true
	}
	for z := range unreachable {
		zones[z] = true
	}
	for z := range zones {
		scope := "zones/" + z
		if _, listed := out.Items[scope]; listed {
			continue
		}
		code, msg := "NO_RESULTS_ON_PAGE", "There are no results for scope '"+scope+"' on this page."
		if unreachable[z] {
			code, msg = "UNREACHABLE", "Scope '"+scope+"' is unreachable."
			if partial {
				out.Unreachables = append(out.Unreachables, scope)
			}
		}
		out.Items[scope] = compute.InstancesScopedList{Warning: &compute.InstancesScopedListWarning{
			Code: code, Message: msg, Data: []*compute.InstancesScopedListWarningData{{Key: "scope", Value: scope}},
		}}
	}
	sort.Strings(out.Unreachables)
}
