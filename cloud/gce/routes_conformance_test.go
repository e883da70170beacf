package gce

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	compute "google.golang.org/api/compute/v1"
	"google.golang.org/api/option"

	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/cloud/gce/gcetest"
)

// The bed's routes half (conformance.RoutesBed): the upstream GCE
// provider's routes (loadBalancers: upstream), its Compute API calls sent
// to gcetest, over the project's global routes there. Its ListRoutes lists
// the routes named <cluster>-* of the network whose description is
// k8s-node-route, each to the Node of its next hop instance's name, never
// as a blackhole (RoutesNoBlackholes: a route whose instance is gone is
// listed to that name, and the route controller deletes it because no Node
// has its pod range). Its CreateRoute names a route <cluster>-<name hint>
// (the Node's UID).

// bedOpPoll is how long the bed's upstream provider waits before reading
// an operation (the upstream's own is a second).
const bedOpPoll = 5 * time.Millisecond

// bedNodeTag is the network tag of the bed's nodes.
const bedNodeTag = "c1-node"

// routeMethods are gcetest's methods of each route call.
var routeMethods = map[conformance.Call][]string{conformance.RouteList: {"routes.list"},
	conformance.RouteCreate: {"routes.insert"}, conformance.RouteDelete: {"routes.delete"}}

// upstreamOn makes cfg's provider one with the upstream's load balancers
// and routes in gcetest's default project and zone (with fakeADC's
// credentials, which the upstream needs to be built).
func upstreamOn(t *testing.T, cfg *Config) {
	fakeADC(t)
	cfg.LoadBalancers = LoadBalancersUpstream
	cfg.Upstream = &UpstreamConfig{Zone: gcetest.DefaultZone, NodeTags: []string{bedNodeTag}}
}

// newBedCloud builds a bed's provider: its own calls through client, the
// upstream's (with loadBalancers: upstream) reading operations every
// bedOpPoll.
func newBedCloud(cfg Config, client *http.Client) (*Cloud, error) {
	svc, err := compute.NewService(context.Background(), option.WithEndpoint(cfg.ComputeEndpoint), option.WithoutAuthentication(),
		option.WithHTTPClient(client))
	if err != nil {
		return nil, err
	}
	return newCloud(cfg, svc, &http.Client{Timeout: client.Timeout}, upstreamOptions{opPoll: bedOpPoll})
}

func (b *bed) CloudRoutes(t testing.TB) []conformance.CloudRoute {
	t.Helper()
	var out []conformance.CloudRoute
	for _, rt := range b.gc.Routes(gcetest.DefaultProject) {
		out = append(out, conformance.CloudRoute{Destination: rt.DestRange, Target: b.routeTarget(rt)})
	}
	return out
}

// routeTarget is the id of a route's next hop instance, or the next hop
// itself: a gone instance's URL, the gateway's name, the address.
func (b *bed) routeTarget(rt compute.Route) string {
	switch {
	case rt.NextHopInstance != "":
		parts := strings.Split(rt.NextHopInstance, "/")
		if len(parts) >= 6 {
			zone, name := parts[len(parts)-3], parts[len(parts)-1]
			if in, ok := b.gc.Get(gcetest.DefaultProject, zone, name); ok {
				return fmt.Sprint(in.ID)
			}
		}
		return rt.NextHopInstance
	case rt.NextHopGateway != "":
		return rt.NextHopGateway[strings.LastIndex(rt.NextHopGateway, "/")+1:]
	}
	return rt.NextHopIp
}

// AddForeignRoute adds another cluster's route via m's instance (named as
// the upstream names that cluster's: c2-..., k8s-node-route), or an
// administrator's to the internet gateway.
func (b *bed) AddForeignRoute(t testing.TB, dest string, m *conformance.Made) (conformance.CloudRoute, bool) {
	t.Helper()
	slug := strings.NewReplacer(".", "-", "/", "-").Replace(dest)
	rt := compute.Route{Name: "admin-to-internet-" + slug, Network: "global/networks/default", DestRange: dest,
		NextHopGateway: "global/gateways/" + gcetest.DefaultGateway, Description: "an administrator's"}
	if m != nil {
		_, zone := where(t, *m)
		rt = compute.Route{Name: "c2-" + slug, Network: "global/networks/default", DestRange: dest,
			NextHopInstance: "zones/" + zone + "/instances/" + m.Name, Description: "k8s-node-route"}
	}
	made, err := b.gc.PutRoute("", rt)
	if err != nil {
		t.Fatal(err)
	}
	return conformance.CloudRoute{Destination: made.DestRange, Target: b.routeTarget(made)}, true
}

// FailCall: the instance list and a deletion fail with 503; a creation is
// accepted and its operation ends in QUOTA_EXCEEDED, as a project out of
// routes answers.
func (b *bed) FailCall(t testing.TB, c conformance.Call) func() {
	if c != conformance.RouteCreate {
		return b.Endpoint.FailCall(t, c)
	}
	b.gc.FailOperations("routes.insert", 1<<20, http.StatusForbidden, "QUOTA_EXCEEDED")
	return func() { b.gc.FailOperations("routes.insert", 0, 0, "") }
}
