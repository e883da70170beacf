package gce

import (
	"strings"
	"testing"
	"time"
)

// The loadBalancers and upstream fields: their defaults, each bad value an
// error that names it, the block refused without loadBalancers: upstream
// and required with it.
func TestUpstreamConfig(t *testing.T) {
	base := "projects: [mooring-test]\nclusterID: c1\n"
	c, err := ParseConfig(strings.NewReader(base + "loadBalancers: upstream\nupstream:\n  zone: us-central1-b\n  nodeTags: [k8s-node]\n"))
	if err != nil {
		t.Fatal(err)
	}
	u := c.Upstream
	if c.LoadBalancers != LoadBalancersUpstream || u.Project != "mooring-test" || u.Network != "default" ||
		len(u.ManagedZones) != 1 || u.ManagedZones[0] != "us-central1-b" || u.OperationPollInterval.Duration != time.Second {
		t.Fatalf("defaults: %+v %+v", c, u)
	}
	if c, err := ParseConfig(strings.NewReader(base)); err != nil || c.LoadBalancers != LoadBalancersNone || c.Upstream != nil {
		t.Fatalf("no load balancers by default: %+v, %v", c, err)
	}
	for bad, want := range map[string]string{
		"loadBalancers: upstream\n":                                                                                      "needs the upstream block",
		"loadBalancers: native\n":                                                                                        `loadBalancers "native"`,
		"upstream:\n  zone: us-central1-b\n  nodeTags: [n]\n":                                                            "read only with loadBalancers: upstream",
		"loadBalancers: upstream\nupstream:\n  zone: central\n  nodeTags: [n]\n":                                         `upstream.zone "central"`,
		"loadBalancers: upstream\nupstream:\n  zone: us-central1-b\n":                                                    "upstream.nodeTags is required",
		"loadBalancers: upstream\nupstream:\n  zone: us-central1-b\n  nodeTags: [Bad_Tag]\n":                             `"Bad_Tag" is not a network tag`,
		"loadBalancers: upstream\nupstream:\n  zone: us-central1-b\n  nodeTags: [n]\n  project: other-project\n":         "upstream.project",
		"loadBalancers: upstream\nupstream:\n  zone: us-central1-b\n  nodeTags: [n]\n  managedZones: [europe-west1-b]\n": "not a zone of region us-central1",
		"loadBalancers: upstream\nupstream:\n  zone: us-central1-b\n  nodeTags: [n]\n  network: Bad!\n":                  "upstream.network",
		"loadBalancers: upstream\nupstream:\n  zone: us-central1-b\n  nodeTags: [n]\n  operationPollInterval: 1ms\n":     "upstream.operationPollInterval",
		"loadBalancers: upstream\nupstream:\n  zone: us-central1-b\n  nodeTags: [n]\n  tags: [x]\n":                      "tags",
	} {
		_, err := ParseConfig(strings.NewReader(base + bad))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error with %q", bad, err, want)
		}
	}
}

// A network or subnetwork name is made a resource URL of GCE's own base,
// whatever endpoint the API is reached at; a URL is kept.
func TestUpstreamResourceURL(t *testing.T) {
	if got := resourceURL("vpc-1", "p1", "global", "networks"); got != "https://www.googleapis.com/compute/v1/projects/p1/global/networks/vpc-1" {
		t.Errorf("network URL %s", got)
	}
	if got := resourceURL("projects/p2/regions/r/subnetworks/s", "p1", "regions/r", "subnetworks"); got != "projects/p2/regions/r/subnetworks/s" {
		t.Errorf("kept URL %s", got)
	}
	if regionOf("us-central1-a") != "us-central1" || regionOf("us-central1-ai1a") != "us-central1" || regionOf("central") != "" {
		t.Error("regionOf")
	}
}
