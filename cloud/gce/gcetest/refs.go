package gcetest

import (
	"net/http"
	"regexp"
	"strings"
)

// A reference from one resource to another (a route's network and next hop
// instance, a backend's instance group, a backend service's health check,
// an instance group's members) is, as the API takes it, a full URL or a
// partial one: projects/P/..., or the path under the project for one of
// the caller's own. A full URL may be of any host: clients make them of
// the endpoint they call (the upstream GCE provider of its api-endpoint).
// The endpoint stores them, and answers them, as GCE does: full URLs of
// https://www.googleapis.com/compute/v1/.

// resourceRef is a parsed reference.
type resourceRef struct {
	project string
	parts   []string // the path after projects/P/
}

// link is the reference's canonical URL.
func (r resourceRef) link() string {
	return resourceBase + "projects/" + r.project + "/" + strings.Join(r.parts, "/")
}

// path is its partial URL (projects/P/...).
func (r resourceRef) path() string { return strings.TrimPrefix(r.link(), resourceBase) }

// name is its last part.
func (r resourceRef) name() string { return r.parts[len(r.parts)-1] }

// scope is the part that holds it ("global", "zones/Z", "regions/R").
func (r resourceRef) scope() string {
	if r.parts[0] == "global" {
		return "global"
	}
	return r.parts[0] + "/" + r.parts[1]
}

var versionPath = regexp.MustCompile(`^/compute/(v1|beta|alpha)/`)

// parseRef parses ref, a reference made in project, whose path under the
// project must have the shape of collections (such as zones, *, instances,
// *: a * is any valid name).
func parseRef(project, ref string, shape ...string) (resourceRef, bool) {
	p := ref
	if _, rest, ok := strings.Cut(p, "://"); ok {
		i := strings.Index(rest, "/")
		if i < 0 {
			return resourceRef{}, false
		}
		loc := versionPath.FindStringIndex(rest[i:])
		if loc == nil {
			return resourceRef{}, false
		}
		p = rest[i+loc[1]:]
	}
	r := resourceRef{project: project}
	if rest, ok := strings.CutPrefix(p, "projects/"); ok {
		proj, tail, ok := strings.Cut(rest, "/")
		if !ok || proj == "" {
			return resourceRef{}, false
		}
		r.project, p = proj, tail
	}
	r.parts = strings.Split(p, "/")
	if len(r.parts) != len(shape) {
		return resourceRef{}, false
	}
	for i, want := range shape {
		switch {
		case want == "*" && !validName.MatchString(r.parts[i]):
			return resourceRef{}, false
		case want != "*" && r.parts[i] != want:
			return resourceRef{}, false
		}
	}
	return r, true
}

// validName is a resource name as GCE takes it (RFC 1035, 1-63
// characters).
var validName = regexp.MustCompile(`^[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$`)

// nameError is the answer to a resource written under a bad name.
func nameError(name string) *apiError {
	return invalidField("resource.name", name, "Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'")
}

// invalidField is a 400 about a field's value.
func invalidField(field, value, why string) *apiError {
	return &apiError{status: http.StatusBadRequest, reason: "invalid",
		msg: "Invalid value for field '" + field + "': '" + value + "'. " + why}
}

// notFound is the 404 of a resource (its partial URL).
func notFound(path string) *apiError {
	return &apiError{status: http.StatusNotFound, reason: "notFound", msg: "The resource '" + path + "' was not found"}
}

// alreadyExists is the 409 of an insert whose name is taken.
func alreadyExists(path string) *apiError {
	return &apiError{status: http.StatusConflict, reason: "alreadyExists", msg: "The resource '" + path + "' already exists"}
}

// inUse is the 400 of a deletion of a resource another uses.
func inUse(kind, path, user string) *apiError {
	return &apiError{status: http.StatusBadRequest, reason: "resourceInUseByAnotherResource",
		msg: "The " + kind + " resource '" + path + "' is already being used by '" + user + "'"}
}
