package gcetest

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	compute "google.golang.org/api/compute/v1"
)

// An internal load balancer's pieces as the upstream GCE provider writes
// them: an unmanaged instance group of the nodes (members by URLs of the
// caller's endpoint, listed back as full URLs), an HTTP health check with
// its defaults, a regional backend service of both (fingerprints, 412 on a
// stale one), the targets of its data plane, and deletions refused while a
// resource is used.
func TestInternalPiecesWire(t *testing.T) {
	c := NewStarted(t, Options{})
	s := service(t, c)
	wait := waiter(t, s)
	p, z := DefaultProject, DefaultZone
	base := c.Endpoint() + "projects/" + p // as the upstream makes its links
	for i, name := range []string{"node-1", "node-2", "node-3"} {
		c.Put(Instance{Name: name, InternalIP: "127.0.79." + string(rune('1'+i))})
	}
	c.Put(Instance{Name: "far", Zone: "europe-west1-b", InternalIP: "127.0.79.9"})

	// The group.
	if err := wait(s.InstanceGroups.Insert(p, z, &compute.InstanceGroup{Name: "k8s-ig--uid"}).Do()); err != nil {
		t.Fatal(err)
	}
	ref := func(zone, name string) *compute.InstanceReference {
		return &compute.InstanceReference{Instance: base + "/zones/" + zone + "/instances/" + name}
	}
	add := &compute.InstanceGroupsAddInstancesRequest{Instances: []*compute.InstanceReference{ref(z, "node-1"), ref(z, "node-2")}}
	if err := wait(s.InstanceGroups.AddInstances(p, z, "k8s-ig--uid", add).Do()); err != nil {
		t.Fatal(err)
	}
	_, err := s.InstanceGroups.AddInstances(p, z, "k8s-ig--uid", &compute.InstanceGroupsAddInstancesRequest{
		Instances: []*compute.InstanceReference{ref(z, "node-2")}}).Do()
	apiErr(t, err, http.StatusBadRequest, "memberAlreadyExists")
	_, err = s.InstanceGroups.AddInstances(p, z, "k8s-ig--uid", &compute.InstanceGroupsAddInstancesRequest{
		Instances: []*compute.InstanceReference{ref(z, "nobody")}}).Do()
	apiErr(t, err, http.StatusNotFound, "notFound")
	_, err = s.InstanceGroups.AddInstances(p, z, "k8s-ig--uid", &compute.InstanceGroupsAddInstancesRequest{
		Instances: []*compute.InstanceReference{ref("europe-west1-b", "far")}}).Do()
	apiErr(t, err, http.StatusBadRequest, "invalid")
	_, err = s.InstanceGroups.Insert(p, z, &compute.InstanceGroup{Name: "k8s-ig--uid"}).Do()
	apiErr(t, err, http.StatusConflict, "alreadyExists")

	ig, err := s.InstanceGroups.Get(p, z, "k8s-ig--uid").Do()
	if err != nil {
		t.Fatal(err)
	}
	igLink := resourceBase + "projects/" + p + "/zones/" + z + "/instanceGroups/k8s-ig--uid"
	if ig.SelfLink != igLink || ig.Size != 2 || ig.Zone != resourceBase+"projects/"+p+"/zones/"+z || ig.Network != network {
		t.Errorf("group %+v", ig)
	}
	var members []string
	if err := s.InstanceGroups.ListInstances(p, z, "k8s-ig--uid", &compute.InstanceGroupsListInstancesRequest{InstanceState: "ALL"}).
		Pages(context.Background(), func(l *compute.InstanceGroupsListInstances) error {
			for _, i := range l.Items {
				members = append(members, i.Instance+" "+i.Status)
			}
			return nil
		}); err != nil {
		t.Fatal(err)
	}
	inst := resourceBase + "projects/" + p + "/zones/" + z + "/instances/"
	if want := []string{inst + "node-1 RUNNING", inst + "node-2 RUNNING"}; !slices.Equal(members, want) {
		t.Errorf("listInstances %v, want %v", members, want)
	}

	// The health check.
	_, err = s.HealthChecks.Insert(p, &compute.HealthCheck{Name: "bad", Type: "HTTP", CheckIntervalSec: 2, TimeoutSec: 8,
		HttpHealthCheck: &compute.HTTPHealthCheck{Port: 10256}}).Do()
	apiErr(t, err, http.StatusBadRequest, "invalid")
	if err := wait(s.HealthChecks.Insert(p, &compute.HealthCheck{Name: "k8s-uid-node", Type: "HTTP",
		HttpHealthCheck: &compute.HTTPHealthCheck{Port: 10256, RequestPath: "/healthz"}}).Do()); err != nil {
		t.Fatal(err)
	}
	hc, err := s.HealthChecks.Get(p, "k8s-uid-node").Do()
	if err != nil {
		t.Fatal(err)
	}
	if hc.CheckIntervalSec != 5 || hc.TimeoutSec != 5 || hc.HealthyThreshold != 2 || hc.UnhealthyThreshold != 2 ||
		hc.HttpHealthCheck.Port != 10256 || hc.SelfLink != resourceBase+"projects/"+p+"/global/healthChecks/k8s-uid-node" {
		t.Errorf("health check %+v %+v", hc, hc.HttpHealthCheck)
	}
	hc.CheckIntervalSec, hc.TimeoutSec = 8, 1
	if err := wait(s.HealthChecks.Update(p, hc.Name, hc).Do()); err != nil {
		t.Fatal(err)
	}

	// The backend service, of links as the upstream makes them.
	bs := &compute.BackendService{Name: "k8s-uid-svc", Protocol: "TCP", LoadBalancingScheme: "INTERNAL", SessionAffinity: "NONE",
		HealthChecks: []string{hc.SelfLink}, Backends: []*compute.Backend{{Group: base + "/zones/" + z + "/instanceGroups/k8s-ig--uid"}}}
	missing := *bs
	missing.HealthChecks = []string{base + "/global/healthChecks/nothing"}
	_, err = s.RegionBackendServices.Insert(p, "us-central1", &missing).Do()
	apiErr(t, err, http.StatusNotFound, "notFound")
	if err := wait(s.RegionBackendServices.Insert(p, "us-central1", bs).Do()); err != nil {
		t.Fatal(err)
	}
	got, err := s.RegionBackendServices.Get(p, "us-central1", bs.Name).Do()
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Backends) != 1 || got.Backends[0].Group != igLink || got.Fingerprint == "" || got.LoadBalancingScheme != "INTERNAL" {
		t.Errorf("backend service %+v", got)
	}
	bsLink := c.Endpoint() + "projects/" + p + "/regions/us-central1/backendServices/" + bs.Name
	if targets := c.BackendServiceTargets(bsLink); !slices.Equal(targets, []string{"node-1", "node-2"}) {
		t.Errorf("targets %v", targets)
	}

	// A member joins and leaves; a deleted instance leaves by itself.
	if err := wait(s.InstanceGroups.AddInstances(p, z, "k8s-ig--uid", &compute.InstanceGroupsAddInstancesRequest{
		Instances: []*compute.InstanceReference{ref(z, "node-3")}}).Do()); err != nil {
		t.Fatal(err)
	}
	if err := wait(s.InstanceGroups.RemoveInstances(p, z, "k8s-ig--uid", &compute.InstanceGroupsRemoveInstancesRequest{
		Instances: []*compute.InstanceReference{ref(z, "node-1")}}).Do()); err != nil {
		t.Fatal(err)
	}
	c.Delete(p, z, "node-2")
	if targets := c.BackendServiceTargets(bsLink); !slices.Equal(targets, []string{"node-3"}) {
		t.Errorf("targets after the changes %v", targets)
	}

	// An update of a stale fingerprint, then of the fresh one.
	got.SessionAffinity = "CLIENT_IP"
	stale := *got
	stale.Fingerprint = "AAAAAAAAAAA="
	_, err = s.RegionBackendServices.Update(p, "us-central1", bs.Name, &stale).Do()
	apiErr(t, err, http.StatusPreconditionFailed, "conditionNotMet")
	if err := wait(s.RegionBackendServices.Update(p, "us-central1", bs.Name, got).Do()); err != nil {
		t.Fatal(err)
	}
	after, _ := c.BackendService(p, "us-central1", bs.Name)
	if after.SessionAffinity != "CLIENT_IP" || after.Fingerprint == got.Fingerprint {
		t.Errorf("after the update %+v", after)
	}

	// In use: the group by the service, the check by the service.
	_, err = s.InstanceGroups.Delete(p, z, "k8s-ig--uid").Do()
	if gerr := apiErr(t, err, http.StatusBadRequest, "resourceInUseByAnotherResource"); !strings.Contains(gerr.Message, "being used by") {
		t.Errorf("in use: %q", gerr.Message)
	}
	_, err = s.HealthChecks.Delete(p, hc.Name).Do()
	apiErr(t, err, http.StatusBadRequest, "resourceInUseByAnotherResource")
	if err := wait(s.RegionBackendServices.Delete(p, "us-central1", bs.Name).Do()); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{wait(s.HealthChecks.Delete(p, hc.Name).Do()), wait(s.InstanceGroups.Delete(p, z, "k8s-ig--uid").Do())} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if targets := c.BackendServiceTargets(bsLink); len(targets) != 0 {
		t.Errorf("targets of a deleted service %v", targets)
	}
}

// zones.list with the upstream's filter of a region's zones.
func TestZonesOfRegion(t *testing.T) {
	c := NewStarted(t, Options{})
	s := service(t, c)
	c.Put(Instance{Name: "n", Zone: "us-central1-ai1a", InternalIP: "127.0.79.1"})
	l, err := s.Zones.List(DefaultProject).Filter("region eq .*/regions/us-central1").Do()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, z := range l.Items {
		got = append(got, z.Name)
	}
	if want := []string{"us-central1-a", "us-central1-ai1a", "us-central1-b", "us-central1-c", "us-central1-f"}; !slices.Equal(got, want) {
		t.Errorf("zones of us-central1: %v, want %v", got, want)
	}
}
