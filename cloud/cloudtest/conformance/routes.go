package conformance

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	cloudprovider "k8s.io/cloud-provider"
	routecontroller "k8s.io/cloud-provider/controllers/route"
	"k8s.io/component-base/metrics/prometheus/controllers"
	_ "k8s.io/controller-manager/pkg/features/register" // the route controller asks for its feature gate
)

// RoutesBed is a Bed whose cloud routes the Nodes' pod ranges
// (Backend.Routes), as Backend.New makes it with Options.Routes: its
// provider's Routes() answers (the bed configures what the cloud's routes
// need: a network, a route table, an upstream provider), and the bed reads
// and writes the cloud's routes directly, not through the provider.
type RoutesBed interface {
	Bed
	// CloudRoutes are the routes the cloud holds where the provider keeps
	// the cluster's (its network, route table or router), all of them, the
	// cluster's and others', read by the endpoint itself.
	CloudRoutes(t testing.TB) []CloudRoute
	// AddForeignRoute adds a route of dest there that is not the
	// cluster's, as an administrator or another cluster would: via m, an
	// instance of another cluster (Spec.Foreign), or, with m nil, via a
	// gateway that is no instance (an address in the network that no
	// server has, an internet gateway). false when the cloud has no such
	// route (the suite then skips that case).
	AddForeignRoute(t testing.TB, dest string, m *Made) (CloudRoute, bool)
	// FailCall makes the API's calls of kind c alone fail with a server
	// error until undo is called: List (the instance list, while the
	// routes answer), RouteCreate and RouteDelete. nil when the bed
	// cannot.
	FailCall(t testing.TB, c Call) (undo func())
}

// CloudRoute is one route as the cloud holds it.
type CloudRoute struct {
	// Destination is its destination CIDR, as the cloud writes it.
	Destination string
	// Target is the ID (Made.ID) of the instance it routes to; for a
	// route via a gateway that is no known instance (another kind of
	// gateway, or an instance gone), the cloud's own name of that gateway.
	Target string
}

// Route calls a Bed counts (Bed.Calls), besides List and Confirm: reads of
// the routes (a read of the network, route table or router that holds
// them), and changes (one route added or removed, or the whole set written
// where the cloud writes it whole).
const (
	RouteList   Call = "route-list"
	RouteCreate Call = "route-create"
	RouteDelete Call = "route-delete"
)

// ClusterCIDR is the pod range of the suite's cluster. A provider that keeps
// its routes to the cluster's pod ranges (SetClusterCIDRs, as ccm/app tells
// it --cluster-cidr) is told it before the suite runs; every route the suite
// asks for lies in it.
const ClusterCIDR = "10.244.0.0/16"

// Destinations the suite uses: the cluster's Nodes' pod ranges (podCIDR(i)),
// and a range outside ClusterCIDR for routes that are not the cluster's.
const outsideCIDR = "192.168.77.0/24"

// podCIDR is the i-th Node pod range in ClusterCIDR.
func podCIDR(i int) string { return fmt.Sprintf("10.244.%d.0/24", i) }

// RunRoutes runs the routes' contract, through the provider's
// cloudprovider.Routes against the bed's endpoint, as the stock route
// controller (k8s.io/cloud-provider controllers/route) drives it: it lists
// the routes, creates one per Node pod range missing (several at once),
// and deletes every listed route inside --cluster-cidr that is a
// blackhole or matches no Node's pod range, passing the route as listed.
//
//   - Lifecycle: CreateRoute routes a pod range to its Node's instance;
//     ListRoutes lists it with that TargetNode and DestinationCIDR, not as
//     a blackhole; creating it again is no error and leaves one route;
//     DeleteRoute of the listed route removes it alone, and deleting it
//     again is no error.
//   - Concurrent: routes created at once, as the controller does, are all
//     made.
//   - Foreign: a route that is not the cluster's (via another cluster's
//     instance, or via a gateway that is no instance; in ClusterCIDR or
//     outside it) is never listed, so the controller never deletes it, and
//     stays through the cluster's creates and deletes, even a create of its
//     destination (an error, or a route of the cluster's beside it where
//     the cloud holds both). A provider whose ListRoutes fails instead
//     (Backend.RoutesForeignInstanceIsError) is checked for that: an
//     error, never a deletion.
//   - Gone: the route of an instance the cloud no longer has is listed as
//     a blackhole (the controller deletes it); its pod range moved to
//     another Node is routed there (a create that fails while the old
//     route is there succeeds once it is deleted), and a deletion of the
//     old route as listed, even one that comes after the new route is
//     made (the controller deletes and creates in the same pass), leaves
//     the new route. Skipped for a cloud that cannot tell
//     (Backend.RoutesNoBlackholes).
//   - Controller: the stock route controller itself over the provider,
//     with the Nodes of the bed's instances: their pod ranges are routed, a
//     stale route of the cluster's is deleted, a deleted Node's route goes,
//     a route that is not the cluster's stays.
//   - Failures: while the API fails (an outage, refused credentials,
//     throttling) every call is an error and nothing changes; while the
//     instance list alone fails ListRoutes is an error or the right list,
//     never a live route listed as a blackhole; a create or delete the
//     cloud refuses is an error, with the routes as they were (no half
//     made replacement).
func RunRoutes(t *testing.T, b Backend) {
	t.Run("Lifecycle", func(t *testing.T) { routesLifecycle(t, b) })
	t.Run("Concurrent", func(t *testing.T) { routesConcurrent(t, b) })
	t.Run("Foreign", func(t *testing.T) { routesForeign(t, b) })
	t.Run("Gone", func(t *testing.T) {
		if b.RoutesNoBlackholes {
			t.Skip("the cloud cannot tell a route whose instance is gone (Backend.RoutesNoBlackholes)")
		}
		routesGone(t, b)
	})
	t.Run("Failures", func(t *testing.T) { routesFailures(t, b) })
	t.Run("Controller", func(t *testing.T) { routesController(t, b) })
}

// routeRig is a routes bed with the cluster's instances and Nodes.
type routeRig struct {
	bed    RoutesBed
	routes cloudprovider.Routes
	made   []Made
}

func newRouteRig(t *testing.T, b Backend, nodes int) *routeRig {
	t.Helper()
	bed, ok := b.New(t, Options{Routes: true}).(RoutesBed)
	if !ok {
		t.Fatalf("backend %s has routes, but its Bed is no RoutesBed", b.Name)
	}
	if s, ok := bed.Provider().(interface{ SetClusterCIDRs(string) error }); ok {
		if err := s.SetClusterCIDRs(ClusterCIDR); err != nil {
			t.Fatalf("SetClusterCIDRs(%s): %v", ClusterCIDR, err)
		}
	}
	routes, ok := bed.Provider().Routes()
	if !ok || routes == nil {
		t.Fatal("Routes not implemented on a bed made with Options.Routes")
	}
	r := &routeRig{bed: bed, routes: routes}
	for range nodes {
		r.add(t)
	}
	return r
}

// add makes an instance of the cluster.
func (r *routeRig) add(t testing.TB) Made {
	t.Helper()
	n := 100 + len(r.made)
	m := r.bed.Make(t, Spec{Name: fmt.Sprintf("rtnode-%d", n), N: n})
	r.made = append(r.made, m)
	return m
}

// route is the route the controller asks for: m's Node's pod range.
func route(m Made, dest string) *cloudprovider.Route {
	rt := &cloudprovider.Route{TargetNode: types.NodeName(m.NodeName), DestinationCIDR: dest}
	if m.InternalIP != "" {
		rt.TargetNodeAddresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: m.InternalIP}}
	}
	return rt
}

func (r *routeRig) create(ctx context.Context, m Made, dest string) error {
	return r.routes.CreateRoute(ctx, "kubernetes", routeHint(m, dest), route(m, dest))
}

// routeHint is the name hint of the suite's route of dest to m. The
// controller's is the Node's UID, one per Node, which has one pod range
// (per family) that never changes; a cloud may name the route by it (the
// upstream GCE provider's <cluster>-<hint>, a create of a name taken being
// "already there"). Where the suite routes two pod ranges to one Node, or
// moves one to another, it stands for Nodes of their own: each route it
// makes has a hint of its own.
func routeHint(m Made, dest string) string {
	return m.NodeName + "-" + strings.NewReplacer(".", "-", "/", "-", ":", "-").Replace(dest)
}

// nodeUID is a Node's UID as the API server writes them (a random UUID),
// made of its name.
func nodeUID(name string) types.UID {
	h := sha256.Sum256([]byte(name))
	x := hex.EncodeToString(h[:16])
	return types.UID(x[:8] + "-" + x[8:12] + "-4" + x[13:16] + "-8" + x[17:20] + "-" + x[20:32])
}

func (r *routeRig) mustCreate(t testing.TB, m Made, dest string) {
	t.Helper()
	if err := r.create(context.Background(), m, dest); err != nil {
		t.Fatalf("CreateRoute %s to %s: %v", dest, m.NodeName, err)
	}
}

// list is ListRoutes, which must answer.
func (r *routeRig) list(t testing.TB) []*cloudprovider.Route {
	t.Helper()
	rs, err := r.routes.ListRoutes(context.Background(), "kubernetes")
	if err != nil {
		t.Fatalf("ListRoutes: %v", err)
	}
	return rs
}

// listed is the listed route of dest.
func listed(rs []*cloudprovider.Route, dest string) (*cloudprovider.Route, bool) {
	for _, rt := range rs {
		if rt.DestinationCIDR == dest {
			return rt, true
		}
	}
	return nil, false
}

// mustList checks that ListRoutes lists dest to m's Node (not as a
// blackhole) and returns that route.
func (r *routeRig) mustList(t testing.TB, m Made, dest string) *cloudprovider.Route {
	t.Helper()
	rs := r.list(t)
	rt, ok := listed(rs, dest)
	switch {
	case !ok:
		t.Fatalf("ListRoutes %s has no route of %s", show(rs), dest)
	case rt.Blackhole || rt.TargetNode != types.NodeName(m.NodeName):
		t.Fatalf("ListRoutes lists %s as %s, want to Node %s", dest, show([]*cloudprovider.Route{rt}), m.NodeName)
	}
	if n := count(rs, dest); n != 1 {
		t.Errorf("ListRoutes lists %d routes of %s, want 1", n, dest)
	}
	return rt
}

func count(rs []*cloudprovider.Route, dest string) int {
	n := 0
	for _, rt := range rs {
		if rt.DestinationCIDR == dest {
			n++
		}
	}
	return n
}

// show writes listed routes for a message.
func show(rs []*cloudprovider.Route) string {
	var out []string
	for _, rt := range rs {
		s := rt.DestinationCIDR + "->" + string(rt.TargetNode)
		if rt.Blackhole {
			s += "(blackhole)"
		}
		out = append(out, s)
	}
	return "[" + strings.Join(out, " ") + "]"
}

// cloudRoutes are the cloud's routes, sorted, for comparisons.
func (r *routeRig) cloudRoutes(t testing.TB) []CloudRoute {
	t.Helper()
	rs := r.bed.CloudRoutes(t)
	slices.SortFunc(rs, func(a, b CloudRoute) int {
		return strings.Compare(a.Destination+" "+a.Target, b.Destination+" "+b.Target)
	})
	return rs
}

// inCloud checks that the cloud routes dest to m (want) or not at all
// (!want), and never elsewhere.
func (r *routeRig) inCloud(t testing.TB, m Made, dest string, want bool) {
	t.Helper()
	var got []CloudRoute
	for _, cr := range r.cloudRoutes(t) {
		if cr.Destination == dest {
			got = append(got, cr)
		}
	}
	switch {
	case want && (len(got) != 1 || got[0].Target != m.ID):
		t.Fatalf("the cloud's routes of %s: %+v, want one to %s", dest, got, m.ID)
	case !want && len(got) != 0:
		t.Fatalf("the cloud's routes of %s: %+v, want none", dest, got)
	}
}

// Lifecycle: made, listed, made again, deleted, deleted again.
func routesLifecycle(t *testing.T, b Backend) {
	r := newRouteRig(t, b, 2)
	ctx := context.Background()
	if rs := r.list(t); len(rs) != 0 {
		t.Fatalf("ListRoutes of a cluster without routes: %s", show(rs))
	}
	a, c := podCIDR(1), podCIDR(2)
	r.mustCreate(t, r.made[0], a)
	r.mustCreate(t, r.made[1], c)
	r.mustList(t, r.made[0], a)
	old := r.mustList(t, r.made[1], c)
	r.inCloud(t, r.made[0], a, true)
	r.inCloud(t, r.made[1], c, true)
	if n := len(r.list(t)); n != 2 {
		t.Errorf("ListRoutes lists %d routes, want 2", n)
	}

	t.Run("CreateAgain", func(t *testing.T) {
		before := r.cloudRoutes(t)
		if err := r.create(ctx, r.made[0], a); err != nil {
			t.Errorf("CreateRoute of a route that is there: %v, want nil", err)
		}
		if got := r.cloudRoutes(t); !slices.Equal(got, before) {
			t.Errorf("the cloud's routes after creating one again: %+v, want %+v", got, before)
		}
		r.mustList(t, r.made[0], a)
	})
	t.Run("Delete", func(t *testing.T) {
		if err := r.routes.DeleteRoute(ctx, "kubernetes", old); err != nil {
			t.Fatalf("DeleteRoute %s: %v", c, err)
		}
		r.inCloud(t, r.made[1], c, false)
		if _, ok := listed(r.list(t), c); ok {
			t.Errorf("ListRoutes still lists %s", c)
		}
		r.inCloud(t, r.made[0], a, true)
		r.mustList(t, r.made[0], a)
		if err := r.routes.DeleteRoute(ctx, "kubernetes", old); err != nil {
			t.Errorf("DeleteRoute of a route already gone: %v, want nil", err)
		}
		r.inCloud(t, r.made[0], a, true)
	})
}

// Concurrent: the controller creates the missing routes at once, each in
// its own goroutine; every one is made.
func routesConcurrent(t *testing.T, b Backend) {
	const n = 4
	r := newRouteRig(t, b, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, m := range r.made {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.create(context.Background(), m, podCIDR(10+i))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("CreateRoute %s (one of %d at once): %v", podCIDR(10+i), n, err)
		}
	}
	for i, m := range r.made {
		r.mustList(t, m, podCIDR(10+i))
		r.inCloud(t, m, podCIDR(10+i), true)
	}
}

// Foreign: routes that are not the cluster's are neither listed nor
// touched.
func routesForeign(t *testing.T, b Backend) {
	r := newRouteRig(t, b, 1)
	ctx := context.Background()
	theirs := r.bed.Make(t, Spec{Name: "rtother-1", N: 150, Foreign: true})
	var foreign []CloudRoute
	for i, c := range []struct {
		dest string
		via  *Made
	}{{podCIDR(200), &theirs}, {podCIDR(201), nil}, {outsideCIDR, nil}} {
		if fr, ok := r.bed.AddForeignRoute(t, c.dest, c.via); ok {
			foreign = append(foreign, fr)
		} else {
			t.Logf("the cloud has no foreign route of kind %d (via another cluster's instance: %v)", i, c.via != nil)
		}
	}
	if len(foreign) == 0 {
		t.Fatal("the bed added no foreign route")
	}
	keeps := func(t testing.TB, when string) {
		t.Helper()
		got := r.cloudRoutes(t)
		for _, fr := range foreign {
			if !slices.Contains(got, fr) {
				t.Errorf("%s: the foreign route %+v is gone or changed: the cloud holds %+v", when, fr, got)
			}
		}
	}
	mine := podCIDR(3)
	if b.RoutesForeignInstanceIsError {
		// The provider names every instance route's Node: one via an
		// instance that is none is an error, and nothing is deleted.
		if rs, err := r.routes.ListRoutes(ctx, "kubernetes"); err == nil {
			t.Errorf("ListRoutes with a route via another cluster's instance: %s, want an error (Backend.RoutesForeignInstanceIsError)", show(rs))
		}
		keeps(t, "after ListRoutes")
		return
	}
	r.mustCreate(t, r.made[0], mine)
	rs := r.list(t)
	for _, fr := range foreign {
		if rt, ok := listed(rs, fr.Destination); ok {
			t.Errorf("ListRoutes lists the foreign route %+v as %s: the controller deletes it", fr, show([]*cloudprovider.Route{rt}))
		}
	}
	r.mustList(t, r.made[0], mine)
	keeps(t, "after CreateRoute")

	// A Node given a pod range another route already takes.
	for _, fr := range foreign {
		if fr.Destination == outsideCIDR {
			continue
		}
		err := r.create(ctx, r.made[0], fr.Destination)
		t.Logf("CreateRoute of a foreign route's destination %s: %v", fr.Destination, err)
		keeps(t, "after CreateRoute of a foreign route's destination")
		if err == nil {
			rt := r.mustList(t, r.made[0], fr.Destination)
			if err := r.routes.DeleteRoute(ctx, "kubernetes", rt); err != nil {
				t.Errorf("DeleteRoute of the cluster's route beside a foreign one: %v", err)
			}
			keeps(t, "after DeleteRoute of the cluster's route beside it")
		}
	}

	rt := r.mustList(t, r.made[0], mine)
	if err := r.routes.DeleteRoute(ctx, "kubernetes", rt); err != nil {
		t.Fatalf("DeleteRoute %s: %v", mine, err)
	}
	r.inCloud(t, r.made[0], mine, false)
	keeps(t, "after DeleteRoute")
}

// Gone: an instance the cloud no longer has leaves a blackhole, which is
// listed, and its pod range moves to another Node.
func routesGone(t *testing.T, b Backend) {
	r := newRouteRig(t, b, 2)
	ctx := context.Background()
	gone, next := r.made[0], r.made[1]
	dest, kept := podCIDR(5), podCIDR(6)
	r.mustCreate(t, gone, dest)
	r.mustCreate(t, next, kept)
	r.mustList(t, gone, dest)
	r.bed.Delete(t, gone)
	// The view's answers may be as old as the provider's instance max age:
	// that time passes.
	r.bed.Provider().InstanceView().Invalidate()

	rs := r.list(t)
	old, ok := listed(rs, dest)
	if !ok || !old.Blackhole {
		t.Fatalf("ListRoutes after the instance's deletion: %s, want %s as a blackhole", show(rs), dest)
	}
	r.mustList(t, next, kept)

	// The controller, in one pass: the moved pod range's route made for
	// its new Node, the old one deleted as listed. A create refused while
	// the old route is there succeeds after the deletion.
	createErr := r.create(ctx, next, dest)
	if err := r.routes.DeleteRoute(ctx, "kubernetes", old); err != nil {
		t.Fatalf("DeleteRoute of the blackhole %s: %v", dest, err)
	}
	if createErr != nil {
		t.Logf("CreateRoute while the old route is there: %v", createErr)
		r.mustCreate(t, next, dest)
	}
	r.mustList(t, next, dest)
	r.inCloud(t, next, dest, true)

	// The old route's deletion again, as a controller that listed it
	// before the new route was made does: the new route stays.
	if err := r.routes.DeleteRoute(ctx, "kubernetes", old); err != nil {
		t.Errorf("DeleteRoute of the blackhole again: %v, want nil", err)
	}
	r.mustList(t, next, dest)
	r.inCloud(t, next, dest, true)
	r.inCloud(t, next, kept, true)
}

// Failures: a failing API changes nothing, and says so.
func routesFailures(t *testing.T, b Backend) {
	r := newRouteRig(t, b, 1)
	ctx := context.Background()
	m := r.made[0]
	held, more := podCIDR(7), podCIDR(8)
	r.mustCreate(t, m, held)
	listedHeld := r.mustList(t, m, held)
	before := r.cloudRoutes(t)
	same := func(t testing.TB, when string) {
		t.Helper()
		if got := r.cloudRoutes(t); !slices.Equal(got, before) {
			t.Fatalf("%s: the cloud's routes %+v, want %+v", when, got, before)
		}
	}

	t.Run("InstanceListFails", func(t *testing.T) {
		undo := r.bed.FailCall(t, List)
		if undo == nil {
			t.Skip("the bed cannot fail the instance list alone")
		}
		rs, err := r.routes.ListRoutes(ctx, "kubernetes")
		undo()
		if err == nil {
			if rt, ok := listed(rs, held); !ok || rt.Blackhole || rt.TargetNode != types.NodeName(m.NodeName) {
				t.Errorf("ListRoutes while the instance list fails: %s, want an error or %s to %s", show(rs), held, m.NodeName)
			}
		}
		same(t, "after ListRoutes")
	})
	t.Run("CreateRefused", func(t *testing.T) {
		undo := r.bed.FailCall(t, RouteCreate)
		if undo == nil {
			t.Skip("the bed cannot fail route creation alone")
		}
		err := r.create(ctx, m, more)
		undo()
		if err == nil {
			t.Error("CreateRoute the cloud refused: no error")
		}
		same(t, "after a refused CreateRoute")
		r.mustCreate(t, m, more)
		r.mustList(t, m, more)
		before = r.cloudRoutes(t)
	})
	t.Run("DeleteRefused", func(t *testing.T) {
		undo := r.bed.FailCall(t, RouteDelete)
		if undo == nil {
			t.Skip("the bed cannot fail route deletion alone")
		}
		err := r.routes.DeleteRoute(ctx, "kubernetes", listedHeld)
		undo()
		if err == nil {
			t.Error("DeleteRoute the cloud refused: no error")
		}
		same(t, "after a refused DeleteRoute")
		r.mustList(t, m, held)
	})

	// The whole API failing comes last: a provider may slow its calls down
	// for a while after throttling (the upstream AWS provider does).
	for _, f := range []Failure{Outage, Unauthorized, Throttled} {
		undo := r.bed.Fail(t, f)
		if undo == nil {
			continue
		}
		if rs, err := r.routes.ListRoutes(ctx, "kubernetes"); err == nil {
			t.Errorf("%s: ListRoutes: %s, want an error", f, show(rs))
		}
		if err := r.create(ctx, m, podCIDR(9)); err == nil {
			t.Errorf("%s: CreateRoute: no error", f)
		}
		if err := r.routes.DeleteRoute(ctx, "kubernetes", listedHeld); err == nil {
			t.Errorf("%s: DeleteRoute: no error", f)
		}
		undo()
		same(t, string(f))
		r.mustList(t, m, held)
	}
}

// Controller: k8s.io/cloud-provider's route controller, as mooring-ccm runs
// it with --configure-cloud-routes, over the provider.
func routesController(t *testing.T, b Backend) {
	r := newRouteRig(t, b, 2)
	ctx, cancel := context.WithCancel(context.Background())
	stale := podCIDR(30)
	r.mustCreate(t, r.made[0], stale) // its Node's pod range is another
	var foreign []CloudRoute
	if fr, ok := r.bed.AddForeignRoute(t, podCIDR(230), nil); ok {
		foreign = append(foreign, fr)
	} else if !b.RoutesForeignInstanceIsError {
		theirs := r.bed.Make(t, Spec{Name: "rtother-2", N: 151, Foreign: true})
		if fr, ok := r.bed.AddForeignRoute(t, podCIDR(230), &theirs); ok {
			foreign = append(foreign, fr)
		}
	}

	var nodes []runtime.Object
	for i, m := range r.made {
		n := node(m.NodeName, m.ProviderID)
		n.UID = nodeUID(m.NodeName) // the controller's name hint
		n.Spec.PodCIDR, n.Spec.PodCIDRs = podCIDR(31+i), []string{podCIDR(31 + i)}
		if m.InternalIP != "" {
			n.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: m.InternalIP}}
		}
		nodes = append(nodes, n)
	}
	kube := fake.NewClientset(nodes...)
	inf := informers.NewSharedInformerFactory(kube, 0)
	_, cidr, err := net.ParseCIDR(ClusterCIDR)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := routecontroller.New(r.routes, kube, inf.Core().V1().Nodes(), "kubernetes", []*net.IPNet{cidr})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		inf.Shutdown()
		<-done
	})
	inf.Start(ctx.Done())
	go func() {
		defer close(done)
		rc.Run(ctx, 100*time.Millisecond, controllers.NewControllerManagerMetrics("conformance"))
	}()

	// wait waits until the cloud's routes inside ClusterCIDR are want's
	// (destination to instance) and the foreign ones.
	wait := func(want map[string]string) {
		t.Helper()
		for i, fr := range foreign {
			want[fr.Destination] = foreign[i].Target
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			got := map[string]string{}
			for _, cr := range r.cloudRoutes(t) {
				if p, err := netip.ParsePrefix(cr.Destination); err == nil && netip.MustParsePrefix(ClusterCIDR).Overlaps(p) {
					got[cr.Destination] = cr.Target
				}
			}
			if maps.Equal(got, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the cloud's routes in %s: %v, want %v", ClusterCIDR, got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	wait(map[string]string{podCIDR(31): r.made[0].ID, podCIDR(32): r.made[1].ID})

	if err := kube.CoreV1().Nodes().Delete(ctx, r.made[1].NodeName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait(map[string]string{podCIDR(31): r.made[0].ID})
}
