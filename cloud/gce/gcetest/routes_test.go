package gcetest

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	compute "google.golang.org/api/compute/v1"
	"google.golang.org/api/googleapi"
)

// waiter is wait of a test and client.
func waiter(t *testing.T, s *compute.Service) func(*compute.Operation, error) error {
	return func(op *compute.Operation, err error) error {
		t.Helper()
		return wait(t, s, op, err)
	}
}

// wait waits for an operation with operations.wait, as the upstream GCE
// provider does, and answers its error as the provider makes it of the
// operation (code and HTTP status).
func wait(t *testing.T, s *compute.Service, op *compute.Operation, err error) error {
	t.Helper()
	if err != nil {
		return err
	}
	if op.Status != "RUNNING" || op.Kind != "compute#operation" || op.TargetLink == "" {
		t.Fatalf("operation answered %+v, want a running one with its target", op)
	}
	ctx := context.Background()
	parts := strings.Split(strings.TrimPrefix(op.SelfLink, resourceBase+"projects/"), "/")
	var done *compute.Operation
	switch {
	case parts[1] == "global":
		done, err = s.GlobalOperations.Wait(parts[0], op.Name).Context(ctx).Do()
	case parts[1] == "zones":
		done, err = s.ZoneOperations.Wait(parts[0], parts[2], op.Name).Context(ctx).Do()
	default:
		done, err = s.RegionOperations.Wait(parts[0], parts[2], op.Name).Context(ctx).Do()
	}
	if err != nil {
		t.Fatal(err)
	}
	if done.Status != "DONE" {
		t.Fatalf("operation after wait: %+v", done)
	}
	if done.Error != nil {
		return &googleapi.Error{Code: int(done.HttpErrorStatusCode), Message: done.Error.Errors[0].Code + " - " + done.Error.Errors[0].Message}
	}
	return nil
}

// apiErr checks that err is the API's error of HTTP status code with
// reason (when not empty) and returns it.
func apiErr(t *testing.T, err error, code int, reason string) *googleapi.Error {
	t.Helper()
	var gerr *googleapi.Error
	if !errors.As(err, &gerr) || gerr.Code != code {
		t.Fatalf("error %v, want HTTP %d", err, code)
	}
	if reason != "" && (len(gerr.Errors) == 0 || gerr.Errors[0].Reason != reason) {
		t.Fatalf("error %v: reasons %+v, want %s", err, gerr.Errors, reason)
	}
	return gerr
}

const (
	network = resourceBase + "projects/" + DefaultProject + "/global/networks/default"
	// routeFilter is the upstream GCE provider's ListRoutes filter of
	// cluster kubernetes (k8s-cloud-provider's filter package).
	routeFilter = "(name eq kubernetes-.*) (network eq " + network + ") (description eq k8s-node-route)"
)

// Routes as the upstream GCE provider writes and lists them: a partial
// next hop stored and answered as a full URL, the operation to wait for,
// its filter of three regular expressions, get, delete, the errors of a
// taken name, a missing route, bad fields.
func TestRoutesWire(t *testing.T) {
	c := NewStarted(t, Options{})
	s := service(t, c)
	wait := waiter(t, s)
	in := c.Put(Instance{Name: "node-1", InternalIP: "127.0.79.10"})
	p := DefaultProject
	rt := &compute.Route{Name: "kubernetes-0b1d", DestRange: "10.244.1.0/24", NextHopInstance: "zones/" + in.Zone + "/instances/node-1",
		Network: "http://127.0.0.1:1/compute/v1/projects/" + p + "/global/networks/default", Priority: 1000, Description: "k8s-node-route"}
	if err := wait(s.Routes.Insert(p, rt).Do()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutRoute("", compute.Route{Name: "kubernetes-other-net", Network: "global/networks/other", DestRange: "10.244.2.0/24",
		NextHopInstance: "zones/" + in.Zone + "/instances/node-1", Description: "k8s-node-route"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutRoute("", compute.Route{Name: "c2-abc", Network: "global/networks/default", DestRange: "10.244.3.0/24",
		NextHopInstance: "zones/" + in.Zone + "/instances/node-1", Description: "k8s-node-route"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutRoute("", compute.Route{Name: "kubernetes-by-hand", Network: "global/networks/default", DestRange: "10.244.4.0/24",
		NextHopGateway: "global/gateways/default-internet-gateway"}); err != nil {
		t.Fatal(err)
	}
	var got []*compute.Route
	if err := s.Routes.List(p).Filter(routeFilter).Pages(context.Background(), func(l *compute.RouteList) error {
		got = append(got, l.Items...)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Name != rt.Name {
		t.Fatalf("the upstream's filter lists %d routes (%v), want %s alone", len(got), got, rt.Name)
	}
	r := got[0]
	wantHop := resourceBase + "projects/" + p + "/zones/" + in.Zone + "/instances/node-1"
	if r.NextHopInstance != wantHop || r.Network != network || r.Priority != 1000 || r.DestRange != rt.DestRange || r.Id == 0 ||
		r.SelfLink != resourceBase+"projects/"+p+"/global/routes/"+rt.Name || r.Kind != "compute#route" || len(r.Warnings) != 0 {
		t.Errorf("listed %+v", r)
	}

	// A taken name, a bad one, a range with host bits, two next hops.
	_, err := s.Routes.Insert(p, rt).Do()
	apiErr(t, err, http.StatusConflict, "alreadyExists")
	for _, bad := range []*compute.Route{
		{Name: "kubernetes-", Network: network, DestRange: "10.0.0.0/24", NextHopIp: "10.0.0.1"},
		{Name: "r1", Network: network, DestRange: "10.0.0.1/24", NextHopIp: "10.0.0.1"},
		{Name: "r2", Network: network, DestRange: "10.0.0.0/24", NextHopIp: "10.0.0.1", NextHopInstance: wantHop},
		{Name: "r3", Network: network, DestRange: "10.0.0.0/24"},
		{Name: "r4", DestRange: "10.0.0.0/24", NextHopIp: "10.0.0.1"},
	} {
		_, err := s.Routes.Insert(p, bad).Do()
		apiErr(t, err, http.StatusBadRequest, "invalid")
	}
	// An instance that does not exist: the operation ends in error.
	err = wait(s.Routes.Insert(p, &compute.Route{Name: "kubernetes-gone", Network: network, DestRange: "10.244.9.0/24",
		NextHopInstance: "zones/" + in.Zone + "/instances/nobody", Description: "k8s-node-route"}).Do())
	if gerr := apiErr(t, err, http.StatusNotFound, ""); !strings.HasPrefix(gerr.Message, "RESOURCE_NOT_FOUND") {
		t.Errorf("operation error %q", gerr.Message)
	}
	if _, ok := c.Route(p, "kubernetes-gone"); ok {
		t.Error("a route whose operation failed was made")
	}

	// The instance gone: the route stays, with GCE's warning.
	c.Delete(p, in.Zone, "node-1")
	r, err = s.Routes.Get(p, rt.Name).Do()
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Warnings) != 1 || r.Warnings[0].Code != "NEXT_HOP_INSTANCE_NOT_FOUND" {
		t.Errorf("warnings of a route whose instance is gone: %+v", r.Warnings)
	}

	if err := wait(s.Routes.Delete(p, rt.Name).Do()); err != nil {
		t.Fatal(err)
	}
	_, err = s.Routes.Get(p, rt.Name).Do()
	apiErr(t, err, http.StatusNotFound, "notFound")
	_, err = s.Routes.Delete(p, rt.Name).Do()
	apiErr(t, err, http.StatusNotFound, "notFound")
}

// A route is busy while its operation runs; FailOperations ends a write's
// operation in error without its effect.
func TestRouteOperations(t *testing.T) {
	c := NewStarted(t, Options{})
	s := service(t, c)
	wait := waiter(t, s)
	c.HoldOperations(true)
	op, err := s.Routes.Insert(DefaultProject, &compute.Route{Name: "r1", Network: network, DestRange: "10.1.0.0/16", NextHopIp: "10.0.0.9"}).Do()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Route(DefaultProject, "r1"); !ok {
		t.Error("the route is not seen while its insert runs")
	}
	_, err = s.Routes.Delete(DefaultProject, "r1").Do()
	apiErr(t, err, http.StatusBadRequest, "resourceNotReady")
	c.HoldOperations(false)
	if err := wait(op, nil); err != nil {
		t.Fatal(err)
	}

	c.FailOperations("routes.delete", 1, 0, "")
	err = wait(s.Routes.Delete(DefaultProject, "r1").Do())
	if gerr := apiErr(t, err, http.StatusForbidden, ""); !strings.HasPrefix(gerr.Message, "QUOTA_EXCEEDED") {
		t.Errorf("operation error %q", gerr.Message)
	}
	if _, ok := c.Route(DefaultProject, "r1"); !ok {
		t.Error("a deletion whose operation failed deleted the route")
	}
	if err := wait(s.Routes.Delete(DefaultProject, "r1").Do()); err != nil {
		t.Fatal(err)
	}
	if n := c.Calls("routes.delete"); n != 3 {
		t.Errorf("routes.delete counted %d times, want 3", n)
	}
}

// Lists: pages tied to their filter, the comparison form, refused filters.
func TestListFiltersAndPages(t *testing.T) {
	c := NewStarted(t, Options{})
	s := service(t, c)
	for _, name := range []string{"a-1", "a-2", "a-3", "b-1"} {
		if _, err := c.PutRoute("", compute.Route{Name: name, Network: "global/networks/default", DestRange: "10.9.0.0/16",
			NextHopIp: "10.0.0.1", Priority: 900}); err != nil {
			t.Fatal(err)
		}
	}
	names := func(call *compute.RoutesListCall) []string {
		t.Helper()
		var out []string
		pages := 0
		if err := call.MaxResults(2).Pages(context.Background(), func(l *compute.RouteList) error {
			pages++
			for _, r := range l.Items {
				out = append(out, r.Name)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	for filter, want := range map[string][]string{
		"":                               {"a-1", "a-2", "a-3", "b-1"},
		"name eq a-.*":                   {"a-1", "a-2", "a-3"},
		"name ne a-.*":                   {"b-1"},
		`name eq "a-[12]"`:               {"a-1", "a-2"},
		"(name eq a-.*) (name ne a-2)":   {"a-1", "a-3"},
		`name = "a-3"`:                   {"a-3"},
		"name != a-3 AND priority = 900": {"a-1", "a-2", "b-1"},
		"name = a":                       nil,
		"name eq a":                      nil,
	} {
		if got := names(s.Routes.List(DefaultProject).Filter(filter)); !slices.Equal(got, want) {
			t.Errorf("filter %q: %v, want %v", filter, got, want)
		}
	}
	for _, bad := range []string{"nofield eq x", "(name eq a) name = b", "name = a OR name = b", "(name eq a", "name > a"} {
		_, err := s.Routes.List(DefaultProject).Filter(bad).Do()
		apiErr(t, err, http.StatusBadRequest, "invalid")
	}
	// A page token of another filter.
	l, err := s.Routes.List(DefaultProject).MaxResults(1).Do()
	if err != nil || l.NextPageToken == "" {
		t.Fatalf("first page %+v, %v", l, err)
	}
	_, err = s.Routes.List(DefaultProject).Filter("name eq a-.*").PageToken(l.NextPageToken).Do()
	apiErr(t, err, http.StatusBadRequest, "invalid")
	// Unknown projects and methods.
	_, err = s.Routes.List("another-project").Do()
	apiErr(t, err, http.StatusNotFound, "")
	req, _ := http.NewRequest(http.MethodPut, c.Endpoint()+"projects/"+DefaultProject+"/global/routes/a-1", strings.NewReader("{}"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("PUT of a route: %d", resp.StatusCode)
	}
}
