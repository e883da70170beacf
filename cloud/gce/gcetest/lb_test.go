package gcetest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	compute "google.golang.org/api/compute/v1"
)

const region = "us-central1"

// The load balancers' wire format as the Compute API documents it, through
// the real client: writes answer operations (get and wait), a taken name
// is 409 alreadyExists, a write to a resource whose operation runs is 400
// resourceNotReady, a quota 403 quotaExceeded, an injected 429
// rateLimitExceeded, a target pool a rule uses 400
// resourceInUseByAnotherResource, a missing one 404 notFound; an
// operation made to fail ends DONE with its code and HTTP status.
func TestLoadBalancerWire(t *testing.T) {
	c := NewStarted(t, Options{OperationDelay: 30 * time.Millisecond})
	s := service(t, c)
	done := waiter(t, s)
	p := DefaultProject
	in := c.Put(Instance{Name: "n1", InternalIP: "127.0.79.31"})

	// An address is given one of the data plane's.
	if err := done(s.Addresses.Insert(p, region, &compute.Address{Name: "a1"}).Do()); err != nil {
		t.Fatal(err)
	}
	a, err := s.Addresses.Get(p, region, "a1").Do()
	if err != nil || !DataPlanePrefix.Contains(netip.MustParseAddr(a.Address)) || a.Status != "RESERVED" || a.Region == "" {
		t.Fatalf("address %+v, %v", a, err)
	}
	_, err = s.Addresses.Insert(p, region, &compute.Address{Name: "a1"}).Do()
	apiErr(t, err, http.StatusConflict, "alreadyExists")

	// A target pool of the instance by the upstream's partial URL; the
	// operation read with get until DONE.
	op, err := s.TargetPools.Insert(p, region, &compute.TargetPool{Name: "tp1", Instances: []string{"/zones/" + in.Zone + "/instances/n1"}}).Do()
	if err != nil || op.Status != "RUNNING" || op.OperationType != "insert" || !strings.HasSuffix(op.Region, "/regions/"+region) {
		t.Fatalf("insert: %+v, %v", op, err)
	}
	// Busy while its operation runs.
	_, err = s.TargetPools.AddInstance(p, region, "tp1", &compute.TargetPoolsAddInstanceRequest{}).Do()
	apiErr(t, err, http.StatusBadRequest, "resourceNotReady")
	for op.Status != "DONE" {
		time.Sleep(10 * time.Millisecond)
		if op, err = s.RegionOperations.Get(p, region, op.Name).Do(); err != nil {
			t.Fatal(err)
		}
	}
	tp, err := s.TargetPools.Get(p, region, "tp1").Do()
	if err != nil || len(tp.Instances) != 1 || tp.Instances[0] != resourceBase+"projects/"+p+"/zones/"+in.Zone+"/instances/n1" {
		t.Fatalf("target pool %+v, %v", tp, err)
	}
	err = done(s.TargetPools.AddInstance(p, region, "tp1", &compute.TargetPoolsAddInstanceRequest{
		Instances: []*compute.InstanceReference{{Instance: "zones/" + in.Zone + "/instances/n1"}}}).Do())
	apiErr(t, err, http.StatusBadRequest, "invalid")
	_, err = s.TargetPools.AddInstance(p, region, "tp1", &compute.TargetPoolsAddInstanceRequest{
		Instances: []*compute.InstanceReference{{Instance: "zones/" + in.Zone + "/instances/gone"}}}).Do()
	apiErr(t, err, http.StatusNotFound, "notFound")

	// Quota.
	c.SetQuota("targetPools", 1)
	_, err = s.TargetPools.Insert(p, region, &compute.TargetPool{Name: "tp2"}).Do()
	if gerr := apiErr(t, err, http.StatusForbidden, "quotaExceeded"); !strings.Contains(gerr.Message, "TARGET_POOLS") {
		t.Errorf("quota message %q", gerr.Message)
	}
	c.SetQuota("targetPools", 0)

	// A forwarding rule on the address, to the pool.
	if err := done(s.ForwardingRules.Insert(p, region, &compute.ForwardingRule{Name: "fr1", IPAddress: a.Address, IPProtocol: "TCP",
		PortRange: "80-80", Target: tp.SelfLink}).Do()); err != nil {
		t.Fatal(err)
	}
	if a, _ := s.Addresses.Get(p, region, "a1").Do(); a.Status != "IN_USE" || len(a.Users) != 1 {
		t.Errorf("address in use: %+v", a)
	}
	err = done(s.TargetPools.Delete(p, region, "tp1").Do())
	apiErr(t, err, http.StatusBadRequest, "resourceInUseByAnotherResource")
	// The static address released stays the rule's.
	if err := done(s.Addresses.Delete(p, region, "a1").Do()); err != nil {
		t.Fatal(err)
	}
	if fr, err := s.ForwardingRules.Get(p, region, "fr1").Do(); err != nil || fr.IPAddress != a.Address {
		t.Fatalf("rule after its address's release: %+v, %v", fr, err)
	}

	// Rate limited, then an operation that ends in error.
	c.Fail("forwardingRules.get", 1, http.StatusTooManyRequests)
	_, err = s.ForwardingRules.Get(p, region, "fr1").Do()
	apiErr(t, err, http.StatusTooManyRequests, "rateLimitExceeded")
	c.FailOperations("firewalls.insert", 1, 0, "")
	op, err = s.Firewalls.Insert(p, &compute.Firewall{Name: "fw1", Allowed: []*compute.FirewallAllowed{{IPProtocol: "tcp", Ports: []string{"80"}}},
		SourceRanges: []string{"0.0.0.0/0"}, TargetTags: []string{"node"}}).Do()
	if err != nil {
		t.Fatal(err)
	}
	op, err = s.GlobalOperations.Wait(p, op.Name).Do()
	if err != nil || op.Status != "DONE" || op.Error == nil || op.Error.Errors[0].Code != "QUOTA_EXCEEDED" || op.HttpErrorStatusCode != 403 {
		t.Fatalf("failed operation: %+v, %v", op, err)
	}
	if _, err := s.Firewalls.Get(p, "fw1").Do(); err == nil {
		t.Error("the failed insert made its firewall")
	}
	_, err = s.GlobalOperations.Get(p, "operation-none").Do()
	apiErr(t, err, http.StatusNotFound, "notFound")
	// A firewall updated and patched.
	if err := done(s.Firewalls.Insert(p, &compute.Firewall{Name: "fw1", Allowed: []*compute.FirewallAllowed{{IPProtocol: "tcp", Ports: []string{"80"}}},
		SourceRanges: []string{"0.0.0.0/0"}}).Do()); err != nil {
		t.Fatal(err)
	}
	if err := done(s.Firewalls.Patch(p, "fw1", &compute.Firewall{Name: "fw1", SourceRanges: []string{"10.0.0.0/8"}}).Do()); err != nil {
		t.Fatal(err)
	}
	if fw, err := s.Firewalls.Get(p, "fw1").Do(); err != nil || fw.SourceRanges[0] != "10.0.0.0/8" || len(fw.Allowed) != 1 {
		t.Fatalf("patched firewall %+v, %v", fw, err)
	}
	// Lists and their filter (the upstream's address lookup by IP).
	l, err := s.ForwardingRules.List(p, region).Filter("IPAddress eq " + a.Address).Do()
	if err != nil || len(l.Items) != 1 {
		t.Fatalf("filtered list: %+v, %v", l, err)
	}
	il, err := s.Instances.List(p, in.Zone).Filter("name eq n.*").Do()
	if err != nil || len(il.Items) != 1 || il.Items[0].Name != "n1" {
		t.Fatalf("instances list: %+v, %v", il, err)
	}
}

// The data plane: a forwarding rule forwards its ports to its pool's
// instances, at the node port SetKubeProxy says, follows a removeInstance
// when its operation ends, and stops with the rule.
func TestLoadBalancerDataPlane(t *testing.T) {
	c := NewStarted(t, Options{OperationDelay: 10 * time.Millisecond})
	s := service(t, c)
	done := waiter(t, s)
	p := DefaultProject
	var links []string
	for i, ip := range []string{"127.0.79.41", "127.0.79.42"} {
		in := c.Put(Instance{Name: fmt.Sprint("dp", i), InternalIP: ip})
		links = append(links, resourceBase+"projects/"+p+"/zones/"+in.Zone+"/instances/"+in.Name)
		l, err := net.Listen("tcp", ip+":30123")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				conn, err := l.Accept()
				if err != nil {
					return
				}
				_, _ = io.WriteString(conn, in.Name)
				conn.Close()
			}
		}()
	}
	c.SetKubeProxy(func(*compute.ForwardingRule) map[int]int { return map[int]int{443: 30123} })
	if err := done(s.TargetPools.Insert(p, region, &compute.TargetPool{Name: "tp", Instances: links}).Do()); err != nil {
		t.Fatal(err)
	}
	if err := done(s.ForwardingRules.Insert(p, region, &compute.ForwardingRule{Name: "fr", IPProtocol: "TCP", PortRange: "443",
		Target: resourceBase + "projects/" + p + "/regions/" + region + "/targetPools/tp"}).Do()); err != nil {
		t.Fatal(err)
	}
	fr, err := s.ForwardingRules.Get(p, region, "fr").Do()
	if err != nil {
		t.Fatal(err)
	}
	seen := func() map[string]bool {
		out := map[string]bool{}
		for range 20 {
			conn, err := net.DialTimeout("tcp", fr.IPAddress+":443", time.Second)
			if err != nil {
				continue
			}
			b, _ := io.ReadAll(conn)
			conn.Close()
			out[string(b)] = true
		}
		return out
	}
	if got := seen(); !got["dp0"] || !got["dp1"] {
		t.Fatalf("traffic reached %v, want both instances", got)
	}
	if err := done(s.TargetPools.RemoveInstance(p, region, "tp", &compute.TargetPoolsRemoveInstanceRequest{
		Instances: []*compute.InstanceReference{{Instance: links[1]}}}).Do()); err != nil {
		t.Fatal(err)
	}
	if got := seen(); !got["dp0"] || got["dp1"] {
		t.Fatalf("traffic after a removeInstance reached %v, want dp0 alone", got)
	}
	if err := done(s.ForwardingRules.Delete(p, region, "fr").Do()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", fr.IPAddress+":443"); err == nil {
		conn.Close()
		t.Fatal("the deleted rule's address still answers")
	}
}
