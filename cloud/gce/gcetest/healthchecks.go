package gcetest

import (
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"

	compute "google.golang.org/api/compute/v1"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// Health checks, global (global/healthChecks) and regional
// (regions/R/healthChecks): list, get, insert, update (PUT), patch,
// delete, as the Compute API serves them. A check has a type (TCP, HTTP,
// HTTPS, HTTP2; the upstream's internal load balancer writes HTTP) and the
// settings block of that type alone; checkIntervalSec and timeoutSec
// default to 5, healthyThreshold and unhealthyThreshold to 2, an HTTP
// check's port to 80 and requestPath to /; a timeout longer than the
// interval is 400. A check that a backend service uses cannot be deleted
// (400 resourceInUseByAnotherResource). Checks are data here: the data
// plane sends none.

// Health check methods for Calls and Fail: healthChecks.list,
// healthChecks.get, healthChecks.insert, healthChecks.update,
// healthChecks.patch, healthChecks.delete (global and regional alike);
// FailOperations of the writes.
func init() {
	for _, scope := range []string{`(global)`, `(regions/[^/]+)`} {
		handle(http.MethodGet, scope+`/healthChecks`, (*Cloud).serveCheckList)
		handle(http.MethodPost, scope+`/healthChecks`, (*Cloud).serveCheckInsert)
		handle(http.MethodGet, scope+`/healthChecks/([^/]+)`, (*Cloud).serveCheckGet)
		handle(http.MethodPut, scope+`/healthChecks/([^/]+)`, (*Cloud).serveCheckUpdate)
		handle(http.MethodPatch, scope+`/healthChecks/([^/]+)`, (*Cloud).serveCheckUpdate)
		handle(http.MethodDelete, scope+`/healthChecks/([^/]+)`, (*Cloud).serveCheckDelete)
	}
}

func checkKey(project, scope, name string) string { return project + "/" + scope + "/" + name }

// checkHealthCheck checks a health check written in project's scope and
// makes it as stored (without id and creation time).
func checkHealthCheck(project, scope string, in compute.HealthCheck) (compute.HealthCheck, *apiError) {
	if !validName.MatchString(in.Name) {
		return in, nameError(in.Name)
	}
	out := compute.HealthCheck{
		Kind: "compute#healthCheck", Name: in.Name, Description: in.Description, Type: in.Type,
		CheckIntervalSec: cmp.Or(in.CheckIntervalSec, 5), TimeoutSec: cmp.Or(in.TimeoutSec, 5),
		HealthyThreshold: cmp.Or(in.HealthyThreshold, 2), UnhealthyThreshold: cmp.Or(in.UnhealthyThreshold, 2),
		SelfLink: scopeURL(project, scope) + "/healthChecks/" + in.Name,
	}
	if scope != "global" {
		out.Region = scopeURL(project, scope)
	}
	if out.TimeoutSec > out.CheckIntervalSec {
		return in, invalidField("resource.timeoutSec", fmt.Sprint(out.TimeoutSec), "Timeout sec must be less than or equal to check interval sec.")
	}
	set := 0
	for _, b := range []bool{in.TcpHealthCheck != nil, in.HttpHealthCheck != nil, in.HttpsHealthCheck != nil, in.Http2HealthCheck != nil,
		in.SslHealthCheck != nil, in.GrpcHealthCheck != nil} {
		if b {
			set++
		}
	}
	block := func(port int64, what string) *apiError {
		if set != 1 {
			return invalidField("resource", in.Name, "The health check of type "+in.Type+" needs its "+what+" block, and no other.")
		}
		if port < 0 || port > 65535 {
			return invalidField("resource."+what+".port", fmt.Sprint(port), "Must be in the range [1, 65535].")
		}
		return nil
	}
	switch in.Type {
	case "HTTP":
		hc := compute.HTTPHealthCheck{}
		if in.HttpHealthCheck != nil {
			hc = *in.HttpHealthCheck
		}
		if aerr := block(hc.Port, "httpHealthCheck"); aerr != nil {
			return in, aerr
		}
		hc.Port, hc.RequestPath = cmp.Or(hc.Port, 80), cmp.Or(hc.RequestPath, "/")
		hc.ProxyHeader = cmp.Or(hc.ProxyHeader, "NONE")
		out.HttpHealthCheck = &hc
	case "HTTPS":
		hc := compute.HTTPSHealthCheck{}
		if in.HttpsHealthCheck != nil {
			hc = *in.HttpsHealthCheck
		}
		if aerr := block(hc.Port, "httpsHealthCheck"); aerr != nil {
			return in, aerr
		}
		hc.Port, hc.RequestPath = cmp.Or(hc.Port, 443), cmp.Or(hc.RequestPath, "/")
		out.HttpsHealthCheck = &hc
	case "HTTP2":
		hc := compute.HTTP2HealthCheck{}
		if in.Http2HealthCheck != nil {
			hc = *in.Http2HealthCheck
		}
		if aerr := block(hc.Port, "http2HealthCheck"); aerr != nil {
			return in, aerr
		}
		hc.Port, hc.RequestPath = cmp.Or(hc.Port, 443), cmp.Or(hc.RequestPath, "/")
		out.Http2HealthCheck = &hc
	case "TCP":
		hc := compute.TCPHealthCheck{}
		if in.TcpHealthCheck != nil {
			hc = *in.TcpHealthCheck
		}
		if aerr := block(hc.Port, "tcpHealthCheck"); aerr != nil {
			return in, aerr
		}
		hc.Port = cmp.Or(hc.Port, 80)
		out.TcpHealthCheck = &hc
	default:
		return in, invalidField("resource.type", in.Type, "Must be one of TCP, HTTP, HTTPS or HTTP2 here.")
	}
	return out, nil
}

// checkWire copies a stored check.
func checkWire(hc *compute.HealthCheck) compute.HealthCheck {
	out := *hc
	for _, p := range []any{&out.HttpHealthCheck, &out.HttpsHealthCheck, &out.Http2HealthCheck, &out.TcpHealthCheck} {
		v := reflect.ValueOf(p).Elem()
		if !v.IsNil() {
			cp := reflect.New(v.Type().Elem())
			cp.Elem().Set(v.Elem())
			v.Set(cp)
		}
	}
	return out
}

func (c *Cloud) serveCheckList(w http.ResponseWriter, r *http.Request, m []string) {
	project, scope := m[1], m[2]
	if !c.call(w, "healthChecks.list", project) {
		return
	}
	self := scopeURL(project, scope) + "/healthChecks"
	lq, aerr := c.parseListQuery(r, self, reflect.TypeFor[compute.HealthCheck]())
	if aerr != nil {
		aerr.write(w)
		return
	}
	items, next := page(lq, c.HealthChecks(project, scope), func(hc *compute.HealthCheck) string { return hc.Name })
	writeList(w, "compute#healthCheckList", self, items, next)
}

func (c *Cloud) serveCheckGet(w http.ResponseWriter, r *http.Request, m []string) {
	project, scope, name := m[1], m[2], m[3]
	if !c.call(w, "healthChecks.get", project) {
		return
	}
	c.net.mu.Lock()
	c.rt.init()
	hc, ok := c.rt.checks[checkKey(project, scope, name)]
	var out compute.HealthCheck
	if ok {
		out = checkWire(hc)
	}
	c.net.mu.Unlock()
	if !ok {
		notFound("projects/" + project + "/" + scope + "/healthChecks/" + name).write(w)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (c *Cloud) serveCheckInsert(w http.ResponseWriter, r *http.Request, m []string) {
	project, scope := m[1], m[2]
	if !c.call(w, "healthChecks.insert", project) {
		return
	}
	var in compute.HealthCheck
	if field, err := cloudtest.DecodeStrict(r.Body, &in); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid JSON payload received. %v %s", err, field))
		return
	}
	hc, aerr := checkHealthCheck(project, scope, in)
	if aerr != nil {
		aerr.write(w)
		return
	}
	fault := c.opFault("healthChecks.insert")
	n := &c.net
	n.mu.Lock()
	defer n.mu.Unlock()
	n.init()
	c.rt.init()
	key := checkKey(project, scope, hc.Name)
	if _, taken := c.rt.checks[key]; taken {
		alreadyExists(strings.TrimPrefix(hc.SelfLink, resourceBase)).write(w)
		return
	}
	if aerr := n.checkIdle(hc.SelfLink); aerr != nil {
		aerr.write(w)
		return
	}
	if fault != nil {
		answerOp(w, c.begin(project, scope, "insert", hc.SelfLink, 0, failed(fault)))
		return
	}
	hc.Id = n.nextID()
	hc.CreationTimestamp = timestamp(c.opts.Now())
	c.rt.checks[key] = &hc
	answerOp(w, c.begin(project, scope, "insert", hc.SelfLink, hc.Id, nil))
}

// serveCheckUpdate serves update (PUT: the check as given) and patch
// (PATCH: the fields given over the stored ones).
func (c *Cloud) serveCheckUpdate(w http.ResponseWriter, r *http.Request, m []string) {
	project, scope, name := m[1], m[2], m[3]
	method, opType := "healthChecks.update", "update"
	if r.Method == http.MethodPatch {
		method, opType = "healthChecks.patch", "patch"
	}
	if !c.call(w, method, project) {
		return
	}
	fault := c.opFault(method)
	n := &c.net
	n.mu.Lock()
	defer n.mu.Unlock()
	n.init()
	c.rt.init()
	key := checkKey(project, scope, name)
	old, ok := c.rt.checks[key]
	if !ok {
		notFound("projects/" + project + "/" + scope + "/healthChecks/" + name).write(w)
		return
	}
	var in compute.HealthCheck
	if r.Method == http.MethodPatch {
		in = checkWire(old)
	}
	if field, err := cloudtest.DecodeStrict(r.Body, &in); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid JSON payload received. %v %s", err, field))
		return
	}
	if in.Name != name {
		invalidField("resource.name", in.Name, "The name of a health check cannot change.").write(w)
		return
	}
	hc, aerr := checkHealthCheck(project, scope, in)
	if aerr != nil {
		aerr.write(w)
		return
	}
	if aerr := n.checkIdle(old.SelfLink); aerr != nil {
		aerr.write(w)
		return
	}
	if fault != nil {
		answerOp(w, c.begin(project, scope, opType, old.SelfLink, old.Id, failed(fault)))
		return
	}
	hc.Id, hc.CreationTimestamp = old.Id, old.CreationTimestamp
	c.rt.checks[key] = &hc
	answerOp(w, c.begin(project, scope, opType, old.SelfLink, old.Id, nil))
}

func (c *Cloud) serveCheckDelete(w http.ResponseWriter, r *http.Request, m []string) {
	project, scope, name := m[1], m[2], m[3]
	if !c.call(w, "healthChecks.delete", project) {
		return
	}
	fault := c.opFault("healthChecks.delete")
	n := &c.net
	n.mu.Lock()
	defer n.mu.Unlock()
	n.init()
	c.rt.init()
	key := checkKey(project, scope, name)
	hc, ok := c.rt.checks[key]
	if !ok {
		notFound("projects/" + project + "/" + scope + "/healthChecks/" + name).write(w)
		return
	}
	if aerr := n.checkIdle(hc.SelfLink); aerr != nil {
		aerr.write(w)
		return
	}
	for _, k := range slices.Sorted(maps.Keys(c.rt.services)) {
		if bs := c.rt.services[k]; slices.Contains(bs.HealthChecks, hc.SelfLink) {
			inUse("healthCheck", strings.TrimPrefix(hc.SelfLink, resourceBase), strings.TrimPrefix(bs.SelfLink, resourceBase)).write(w)
			return
		}
	}
	if fault != nil {
		answerOp(w, c.begin(project, scope, "delete", hc.SelfLink, hc.Id, failed(fault)))
		return
	}
	delete(c.rt.checks, key)
	answerOp(w, c.begin(project, scope, "delete", hc.SelfLink, hc.Id, nil))
}

// HealthChecks are a scope's health checks ("global" or "regions/R"), in
// name order.
func (c *Cloud) HealthChecks(project, scope string) []compute.HealthCheck {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	c.rt.init()
	var out []compute.HealthCheck
	prefix := project + "/" + scope + "/"
	for _, k := range slices.Sorted(maps.Keys(c.rt.checks)) {
		if rest, ok := strings.CutPrefix(k, prefix); ok && !strings.Contains(rest, "/") {
			out = append(out, checkWire(c.rt.checks[k]))
		}
	}
	return out
}
