package openstacktest

import (
	"net/http"
	"strings"
	"sync"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// neutronResources serve Neutron's collections under /v2.0/<name>: each
// file that models one registers it in an init (routers.go: routers).
// The handler gets the path after /v2.0/<name> ("" or "/{id}...").
var neutronResources = map[string]func(c *Cloud, w http.ResponseWriter, r *http.Request, rest string){}

// neutronError is Neutron's error body: the exception's name, its
// message, and an empty detail.
func neutronError(w http.ResponseWriter, status int, typ, msg string) {
	cloudtest.WriteJSON(w, status, map[string]any{"NeutronError": map[string]any{"type": typ, "message": msg, "detail": ""}})
}

// neutronTime is how Neutron writes created_at and updated_at.
const neutronTime = "2006-01-02T15:04:05Z"

// serveNetwork is Neutron: its version document at the root; else a
// valid token, then /v2.0/extensions or a
// registered collection.
func (c *Cloud) serveNetwork(w http.ResponseWriter, r *http.Request, path string) {
	if path == "/" && r.Method == http.MethodGet {
		// The version document, unauthenticated, as Neutron's root
		// answers it (gophercloud reads it to find v2.0).
		self := "http://" + r.Host + networkBase + "/v2.0/"
		cloudtest.WriteJSON(w, http.StatusOK, map[string]any{"versions": []map[string]any{{"id": "v2.0", "status": "CURRENT",
			"links": []map[string]any{{"href": self, "rel": "self"}}}}})
		return
	}
	if !c.validToken(r.Header.Get("X-Auth-Token")) {
		c.Counter.Add("unauthorized")
		unauthorized(w)
		return
	}
	rest, ok := strings.CutPrefix(path, "/v2.0/")
	if !ok {
		neutronError(w, http.StatusNotFound, "HTTPNotFound", "The resource could not be found.")
		return
	}
	name, sub, _ := strings.Cut(rest, "/")
	if sub != "" {
		sub = "/" + sub
	}
	if name == "extensions" && sub == "" {
		c.serveExtensions(w, r)
		return
	}
	serve, ok := neutronResources[name]
	if !ok {
		neutronError(w, http.StatusNotFound, "HTTPNotFound", "The resource could not be found.")
		return
	}
	serve(c, w, r, sub)
}

// neutronExtensions are the aliases GET /v2.0/extensions lists: those of
// what is modelled (extraroute-atomic unless Options leave it out).
func (c *Cloud) neutronExtensions() []string {
	out := []string{"router", "extraroute", "standard-attr-revisions", "external-net"}
	if !c.opts.NoAtomicExtraRoutes {
		out = append(out, "extraroute-atomic")
	}
	if !c.opts.NoAllowedAddressPairs {
		out = append(out, "allowed-address-pairs", "port-security")
	}
	return out
}

func (c *Cloud) serveExtensions(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		neutronError(w, http.StatusMethodNotAllowed, "HTTPMethodNotAllowed", "The method is not allowed for the requested URL.")
		return
	}
	if f := c.count("extensions"); f != nil {
		neutronError(w, f.Status, http.StatusText(f.Status), "injected fault")
		return
	}
	var exts []map[string]any
	for _, a := range c.neutronExtensions() {
		exts = append(exts, map[string]any{"alias": a, "name": a, "description": "openstacktest: " + a,
			"updated": "2019-01-01T10:00:00-00:00", "links": []any{}})
	}
	cloudtest.WriteJSON(w, http.StatusOK, map[string]any{"extensions": exts})
}

// neutron is Neutron's state: subnets, routers, and the ports' state.
type neutron struct {
	mu      sync.Mutex
	subnets map[string]Subnet
	routers map[string]*Router
	ports   map[string]*portState // by port id (ports.go)
}
