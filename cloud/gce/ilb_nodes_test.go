package gce

import (
	"context"
	"net"
	"slices"
	"strconv"
	"testing"

	"github.com/mooring-dev/mooring/cloud/gce/gcetest"
)

// The upstream's internal load balancer as nodes come and go: its instance
// group follows the nodes (addInstances, removeInstances), and so does the
// traffic of its forwarding rule, through the backend service, once each
// change's operation ended; deleted, it leaves no group, backend service or
// health check.
func TestUpstreamInternalLoadBalancerNodes(t *testing.T) {
	w := newLBWorld(t, 3, nil)
	w.serveNodePort(t, 8080, 31080)
	all := w.nodes
	w.nodes = all[:2]
	svc := lbService("ilb-nodes", 8080)
	svc.Annotations = map[string]string{"networking.gke.io/load-balancer-type": "Internal"}
	ip := w.ensure(t, svc).Ingress[0].IP
	p, z := gcetest.DefaultProject, gcetest.DefaultZone
	groups := w.gc.InstanceGroups(p, z)
	if len(groups) != 1 {
		t.Fatalf("instance groups %+v, want the cluster's one", groups)
	}
	members := func() []string { return w.gc.GroupMembers(p, z, groups[0].Name) }
	if got := members(); !slices.Equal(got, []string{"lbnode-0", "lbnode-1"}) {
		t.Fatalf("members %v", got)
	}
	reached(t, ip, 8080, "lbnode-0", "lbnode-1")

	lbs, _ := w.cloud.LoadBalancer()
	w.nodes = all[1:]
	if err := lbs.UpdateLoadBalancer(context.Background(), "kubernetes", svc, w.nodes); err != nil {
		t.Fatal(err)
	}
	if got := members(); !slices.Equal(got, []string{"lbnode-1", "lbnode-2"}) {
		t.Fatalf("members after lbnode-0 left and lbnode-2 came: %v", got)
	}
	if n := w.gc.Calls("instanceGroups.addInstances") + w.gc.Calls("instanceGroups.removeInstances"); n != 3 {
		t.Errorf("%d member changes, want 3 (an add of two, a remove, an add)", n)
	}
	reached(t, ip, 8080, "lbnode-1", "lbnode-2")
	for range 20 {
		if name := dialName(t, ip, 8080); name == "lbnode-0" {
			t.Fatal("traffic still reaches the node that left")
		}
	}

	if err := lbs.EnsureLoadBalancerDeleted(context.Background(), "kubernetes", svc); err != nil {
		t.Fatal(err)
	}
	if gs, bs, hcs := w.gc.InstanceGroups(p, z), w.gc.BackendServices(p, "us-central1"), w.gc.HealthChecks(p, "global"); len(gs)+len(bs)+len(hcs) != 0 {
		t.Errorf("left: groups %d, backend services %d, health checks %d", len(gs), len(bs), len(hcs))
	}
}

// dialName is the name a node port answers through ip:port ("" when none).
func dialName(t *testing.T, ip string, port int) string {
	t.Helper()
	conn, err := net.Dial("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		return ""
	}
	defer conn.Close()
	b := make([]byte, 64)
	n, _ := conn.Read(b)
	s := string(b[:n])
	if len(s) > 0 && s[len(s)-1] == '\n' {
		s = s[:len(s)-1]
	}
	return s
}
