package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/cloud/view"
)

// The toy's routes: a table of destinations, each to an instance (a
// foreign one is another cluster's), kept to the cluster's.

type toyRoute struct {
	instance int
	foreign  bool
}

func (c *toyCloud) Routes() (cloudprovider.Routes, bool) { return toyRoutes{c}, true }

type toyRoutes struct{ c *toyCloud }

// failingLocked is the API's answer to a route call of kind k.
func (c *toyCloud) failingLocked(k conformance.Call) error {
	if c.fail != "" && c.fail != conformance.GetFails || c.failRoute == k {
		return fmt.Errorf("toy: %s: the API fails", k)
	}
	return nil
}

// nodeLocked is the Node of an instance of the cluster, "" when it is gone
// or terminated.
func (c *toyCloud) nodeLocked(id int) string {
	in, ok := c.ins[id]
	if !ok || in.Foreign || in.state == view.StateTerminated {
		return ""
	}
	return c.toView(in).NodeName
}

func (r toyRoutes) ListRoutes(ctx context.Context, _ string) ([]*cloudprovider.Route, error) {
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.failingLocked(conformance.RouteList); err != nil {
		if c.flaw == "errors-swallowed" {
			return nil, nil
		}
		return nil, err
	}
	var out []*cloudprovider.Route
	for _, dest := range slices.Sorted(maps.Keys(c.routes)) {
		rt := c.routes[dest]
		if rt.foreign && c.flaw != "lists-foreign" {
			continue
		}
		node := c.nodeLocked(rt.instance)
		out = append(out, &cloudprovider.Route{Name: "toy-" + dest, DestinationCIDR: dest, TargetNode: types.NodeName(node), Blackhole: node == ""})
	}
	return out, nil
}

func (r toyRoutes) CreateRoute(ctx context.Context, _, _ string, route *cloudprovider.Route) error {
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.failingLocked(conformance.RouteCreate); err != nil {
		return err
	}
	id := 0
	for _, in := range c.ins {
		if !in.Foreign && c.toView(in).NodeName == string(route.TargetNode) {
			id = in.id
		}
	}
	if id == 0 {
		return fmt.Errorf("toy: no instance of Node %s", route.TargetNode)
	}
	if old, ok := c.routes[route.DestinationCIDR]; ok {
		if old.instance == id && !old.foreign && c.flaw != "create-not-idempotent" {
			return nil
		}
		return fmt.Errorf("toy: %s is routed already", route.DestinationCIDR)
	}
	c.routes[route.DestinationCIDR] = toyRoute{instance: id}
	return nil
}

func (r toyRoutes) DeleteRoute(ctx context.Context, _ string, route *cloudprovider.Route) error {
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.failingLocked(conformance.RouteDelete); err != nil {
		return err
	}
	held, ok := c.routes[route.DestinationCIDR]
	switch {
	case !ok:
		return nil
	case c.flaw == "delete-by-destination":
	case held.foreign:
		return errors.New("toy: not the cluster's route")
	case c.nodeLocked(held.instance) != "" && c.nodeLocked(held.instance) != string(route.TargetNode):
		return nil // made since for another Node
	}
	delete(c.routes, route.DestinationCIDR)
	return nil
}

func (c *toyCloud) CloudRoutes(t testing.TB) []conformance.CloudRoute {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []conformance.CloudRoute
	for dest, rt := range c.routes {
		out = append(out, conformance.CloudRoute{Destination: dest, Target: strconv.Itoa(rt.instance)})
	}
	return out
}

func (c *toyCloud) AddForeignRoute(t testing.TB, dest string, m *conformance.Made) (conformance.CloudRoute, bool) {
	if m == nil {
		return conformance.CloudRoute{}, false
	}
	id, err := strconv.Atoi(m.ID)
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.routes[dest] = toyRoute{instance: id, foreign: true}
	return conformance.CloudRoute{Destination: dest, Target: m.ID}, true
}

func (c *toyCloud) FailCall(t testing.TB, k conformance.Call) func() {
	if k != conformance.RouteCreate && k != conformance.RouteDelete {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failRoute = k
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.failRoute = ""
	}
}

// The routes' contract fails a flawed toy: one that lists routes that are
// not the cluster's (a controller deletes what is listed), one that deletes a
// destination's route whatever it routes to now, one whose create of a
// route that is there is an error, one that answers an empty list when
// the API fails.
func TestRoutesSuiteFailsFlawedBackends(t *testing.T) {
	if flaw := os.Getenv("MOORING_CONFORMANCE_ROUTES_FLAW"); flaw != "" {
		conformance.RunRoutes(t, toyBackend(flaw))
		return
	}
	all := []string{"Lifecycle", "Concurrent", "Foreign", "Gone", "Failures", "Controller"}
	for flaw, failing := range map[string][]string{
		"lists-foreign":         {"Foreign"},
		"delete-by-destination": {"Gone"},
		"create-not-idempotent": {"Lifecycle"},
		"errors-swallowed":      {"Failures"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRoutesSuiteFailsFlawedBackends$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "MOORING_CONFORMANCE_ROUTES_FLAW="+flaw)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Errorf("%s: the suite passed it (%v):\n%s", flaw, err, out)
			continue
		}
		for _, sub := range all {
			want := "--- PASS: "
			if slices.Contains(failing, sub) {
				want = "--- FAIL: "
			}
			if !strings.Contains(string(out), want+"TestRoutesSuiteFailsFlawedBackends/"+sub+" ") {
				t.Errorf("%s: subtest %s: want %s:\n%s", flaw, sub, strings.TrimSpace(want), out)
			}
		}
	}
}
