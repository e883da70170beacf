package aws

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	listersv1 "k8s.io/client-go/listers/core/v1"

	"github.com/mooring-dev/mooring/cloud/aws/awstest"
	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
)

// The bed's routes half (conformance.RoutesBed): the upstream AWS
// provider's routes (loadBalancers: upstream, built by its registered
// factory with its EC2 calls sent to awstest through its [ServiceOverride]),
// over the cluster's route table there (tagged kubernetes.io/cluster/c1,
// beside another cluster's), its Nodes in an informer as the CCM's.

// routeActions are awstest's actions of each route call.
var routeActions = map[conformance.Call]string{conformance.RouteList: awstest.ActionDescribeRouteTables,
	conformance.RouteCreate: awstest.ActionCreateRoute, conformance.RouteDelete: awstest.ActionDeleteRoute}

// upstreamActions are the EC2 actions the upstream's routes call.
var upstreamActions = []string{awstest.ActionDescribeInstances, awstest.ActionDescribeRouteTables, awstest.ActionCreateRoute,
	awstest.ActionDeleteRoute, awstest.ActionModifyInstanceAttribute}

// internetGateway is the gateway of the bed's foreign routes that are via
// no instance.
const internetGateway = "igw-0123456789abcdef0"

type routesBed struct {
	aws   *awstest.Cloud
	table string // the cluster's route table
	kube  kubernetes.Interface
	nodes listersv1.NodeLister
}

// upstreamRoutesOn makes cfg's provider one with the upstream's routes, and
// the route tables.
func upstreamRoutesOn(t *testing.T, c *awstest.Cloud, cfg *Config) *routesBed {
	t.Helper()
	isolateSDK(t)
	t.Setenv("AWS_ACCESS_KEY_ID", testUser.AccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", testUser.SecretAccessKey)
	cfg.LoadBalancers = LoadBalancersUpstream
	cfg.UpstreamConfig = writeFile(t, fmt.Sprintf(upstreamOffEC2+
		"[ServiceOverride \"1\"]\nService = EC2\nRegion = %[1]s\nURL = %[2]s\nSigningRegion = %[1]s\nSigningName = ec2\n", c.Region(), c.Endpoint()))
	c.PutRouteTable(awstest.RouteTable{Tags: map[string]string{"kubernetes.io/cluster/c2": "owned"}})
	rt := c.PutRouteTable(awstest.RouteTable{Tags: map[string]string{clusterTag: "owned"}})
	return &routesBed{aws: c, table: rt.ID}
}

// startNodes gives the provider the informers it passes on to the upstream,
// whose routes name Nodes by their instances through them.
func (r *routesBed) startNodes(t *testing.T, p *Cloud) {
	t.Helper()
	r.kube = fake.NewSimpleClientset()
	f := informers.NewSharedInformerFactory(r.kube, 0)
	p.SetInformers(f)
	r.nodes = f.Core().V1().Nodes().Lister()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		f.Shutdown()
	})
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
}

// addNode makes m's Node and waits for the informer to hold it.
func (r *routesBed) addNode(t testing.TB, m conformance.Made) {
	t.Helper()
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: m.NodeName}, Spec: v1.NodeSpec{ProviderID: m.ProviderID}}
	if _, err := r.kube.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, err := r.nodes.Get(m.NodeName); err == nil {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("the informer has no Node %s: %v", m.NodeName, err)
		}
	}
}

// terminate is the routes bed's Delete: EC2 shows a terminated instance
// for about an hour, when the route controller meets its routes (as
// blackholes); its Node stays, as until the node lifecycle controller
// deletes it.
func (r *routesBed) terminate(t testing.TB, m conformance.Made) {
	t.Helper()
	if err := r.aws.SetState(m.ID, "terminated"); err != nil {
		t.Fatal(err)
	}
}

// fail: the upstream's calls fail with the provider's. An outage is 503
// Unavailable, refused credentials 401 AuthFailure (the upstream signs
// with keys of its own) beside the provider's unknown key, throttling an
// empty bucket.
func (r *routesBed) fail(b *ec2Bed, f conformance.Failure) func() {
	failAll := func(status int, code string) func() {
		for _, a := range upstreamActions {
			r.aws.Fail(a, 1<<20, status, code)
		}
		return func() {
			for _, a := range upstreamActions {
				r.aws.Fail(a, 0, 0, "")
			}
		}
	}
	switch f {
	case conformance.Outage:
		return failAll(503, "Unavailable")
	case conformance.Unauthorized:
		b.setKey(awstest.User{AccessKeyID: "AKIAMOORINGUNKNOWN01", SecretAccessKey: "not-a-known-secret"})
		undo := failAll(401, "AuthFailure")
		return func() {
			undo()
			b.setKey(testUser)
		}
	case conformance.Throttled:
		buckets := map[string]awstest.Bucket{}
		for _, a := range upstreamActions {
			buckets[a] = awstest.Bucket{}
		}
		r.aws.Throttle(buckets)
		return r.aws.NoThrottle
	}
	return nil
}

func (b *ec2Bed) CloudRoutes(t testing.TB) []conformance.CloudRoute {
	t.Helper()
	rt, ok := b.aws.RouteTable(b.routes.table)
	if !ok {
		t.Fatal("the cluster's route table is gone")
	}
	var out []conformance.CloudRoute
	for _, r := range rt.Routes {
		target := r.InstanceID
		if target == "" {
			target = r.GatewayID
		}
		out = append(out, conformance.CloudRoute{Destination: r.Destination, Target: target})
	}
	return out
}

// AddForeignRoute adds a route to m's instance, or via an internet gateway.
func (b *ec2Bed) AddForeignRoute(t testing.TB, dest string, m *conformance.Made) (conformance.CloudRoute, bool) {
	t.Helper()
	rt, _ := b.aws.RouteTable(b.routes.table)
	r := awstest.Route{Destination: dest, GatewayID: internetGateway}
	if m != nil {
		r = awstest.Route{Destination: dest, InstanceID: m.ID}
	}
	rt.Routes = append(rt.Routes, r)
	b.aws.PutRouteTable(rt)
	return conformance.CloudRoute{Destination: dest, Target: r.InstanceID + r.GatewayID}, true
}

func (b *ec2Bed) FailCall(t testing.TB, c conformance.Call) func() {
	a, ok := routeActions[c]
	if c == conformance.List {
		a, ok = awstest.ActionDescribeInstances, true
	}
	if !ok || c == conformance.RouteList {
		return nil
	}
	b.aws.Fail(a, 1<<20, 503, "Unavailable")
	return func() { b.aws.Fail(a, 0, 0, "") }
}
