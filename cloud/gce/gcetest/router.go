package gcetest

import (
	"net/http"
	"regexp"
)

// The Compute API's resource paths beyond instances are served from a table
// that each resource's file fills in its init (handle): api.go's serveAPI
// asks it first. A path matched by none falls through to serveAPI's own.

// apiHandler serves one method of a path; m are the pattern's submatches
// (m[1] is the project).
type apiHandler func(c *Cloud, w http.ResponseWriter, r *http.Request, m []string)

type apiRoute struct {
	pattern *regexp.Regexp
	methods map[string]apiHandler
}

var apiRoutes []*apiRoute

// handle serves method on the paths pattern matches (anchored by handle).
// A path of the table asked with a method it does not serve answers 405.
func handle(method, pattern string, h apiHandler) {
	full := "^/compute/v1/projects/([^/]+)/" + pattern + "$"
	for _, rt := range apiRoutes {
		if rt.pattern.String() == full {
			rt.methods[method] = h
			return
		}
	}
	apiRoutes = append(apiRoutes, &apiRoute{pattern: regexp.MustCompile(full), methods: map[string]apiHandler{method: h}})
}

// serveTable serves r from the table; false when no path of it matches.
func (c *Cloud) serveTable(w http.ResponseWriter, r *http.Request) bool {
	for _, rt := range apiRoutes {
		m := rt.pattern.FindStringSubmatch(r.URL.Path)
		if m == nil {
			continue
		}
		h, ok := rt.methods[r.Method]
		if !ok {
			writeError(w, http.StatusMethodNotAllowed, "method not allowed")
			return true
		}
		h(c, w, r, m)
		return true
	}
	return false
}
