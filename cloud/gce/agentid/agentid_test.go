package agentid

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/mooring-dev/mooring/cloud/gce/gcetest"
	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/nodeid/nodeidtest"
)

// The metadata library reaches the server named by GCE_METADATA_HOST, and
// the server refuses requests without Metadata-Flavor: Google.
func TestMetadataHostAndFlavor(t *testing.T) {
	gc := gcetest.NewStarted(t, gcetest.Options{})
	in := gc.Put(gcetest.Instance{Name: "node-2", InternalIP: "127.0.79.11", ExternalIP: "127.0.80.11", Labels: map[string]string{"mooring-cluster": "c1"}})
	host, err := gc.MetadataHost(in.Project, in.Zone, in.Name)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("GCE_METADATA_HOST", host)
	id, err := NewNodeIdentity(nodeid.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ni, err := id.Instance(context.Background())
	if err != nil || ni.NodeName != "node-2" {
		t.Fatalf("%+v %v", ni, err)
	}
	resp, err := http.Get("http://" + host + "/computeMetadata/v1/instance/id")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("without Metadata-Flavor: HTTP %d", resp.StatusCode)
	}
}

// nodeidtest.Check: registered, Node names and refusals as every
// backend; its own refusals: another policy, a setting, https.
func TestShared(t *testing.T) {
	nodeidtest.Check(t, nodeidtest.Spec[*NodeIdentity]{Name: Name, New: NewNodeIdentity,
		Policy: PolicyInstanceName, Plain: true,
		Refusals: map[string]nodeid.Config{
			"another policy": {NodeNamePolicy: "InstanceID"},
			"https":          {MetadataURL: "https://169.254.169.254"},
		}})
}

func TestNames(t *testing.T) {
	if got := ProviderID("mooring-test", "us-central1-a", "node-1"); got != "gce://mooring-test/us-central1-a/node-1" {
		t.Errorf("ProviderID = %s", got)
	}
	for _, c := range []struct {
		valid     func(string) bool
		good, bad []string
	}{
		{ValidProjectID, []string{"mooring-test", "a12345"}, []string{"short", "Upper-case", "ends-with-", "example.com:proj", "1starts-with-digit"}},
		{ValidInstanceID, []string{"1", "18446744073709551615"}, []string{"0", "01", "-1", "i-123", ""}},
		{ValidInstanceName, []string{"node-1", "a"}, []string{"Node-1", "1node", "node-", "", "node_1"}},
	} {
		for _, s := range c.good {
			if !c.valid(s) {
				t.Errorf("%q refused", s)
			}
		}
		for _, s := range c.bad {
			if c.valid(s) {
				t.Errorf("%q accepted", s)
			}
		}
	}
	if got := lastSegment("projects/123/zones/us-central1-a"); got != "us-central1-a" {
		t.Errorf("lastSegment = %q", got)
	}
}

// Real zone names, each with its region, as Google's documentation lists
// them: "Regions and zones" of Memorystore for Memcached
// (https://cloud.google.com/memorystore/docs/memcached/regions: the zones
// of africa-south1, me-central2, europe-west12, northamerica-northeast1,
// us-east5, us-central1's f, europe-west1's d), "About AI zones"
// (https://docs.cloud.google.com/compute/docs/regions-zones/ai-zones:
// us-central1-ai1a, us-south1-ai1b) and "TPU regions and zones"
// (https://docs.cloud.google.com/tpu/docs/regions-zones: us-central2-b,
// us-south1-ai1b, us-central1-ai1a).
var documentedZones = []struct{ zone, region string }{
	{"us-central1-a", "us-central1"},
	{"us-central1-f", "us-central1"},
	{"us-central1-ai1a", "us-central1"},
	{"us-south1-ai1b", "us-south1"},
	{"us-central2-b", "us-central2"},
	{"us-east5-a", "us-east5"},
	{"europe-west1-d", "europe-west1"},
	{"europe-west12-c", "europe-west12"},
	{"me-central2-a", "me-central2"},
	{"africa-south1-b", "africa-south1"},
	{"northamerica-northeast1-a", "northamerica-northeast1"},
	{"asia-northeast3-c", "asia-northeast3"},
	{"australia-southeast2-b", "australia-southeast2"},
}

func TestZones(t *testing.T) {
	for _, z := range documentedZones {
		if !ValidZone(z.zone) {
			t.Errorf("documented zone %q refused", z.zone)
		}
		if got := RegionOf(z.zone); got != z.region {
			t.Errorf("RegionOf(%q) = %q, want %q", z.zone, got, z.region)
		}
	}
	// Not zones: regions, empty or odd suffixes, path and other
	// separators, upper case, names past 63 characters.
	for _, bad := range []string{
		"", "us-central1", "us-central1-", "-us-central1-a", "us-central1--a", "US-central1-a", "us-central1-A",
		"us-central1-1a", "us-central1-ai1", "us-central1-a-", "us-central1-a/b", "us-central1-a/../b",
		"projects/1/zones/us-central1-a", "us-central1-a.", "us-central1-a b", "us-central1-a\n", "us-central1-aaaaaaaaa",
		"us-central-a", "uscentral1a", "us-central1-a%2f", strings.Repeat("a", 53) + "-central1-a",
	} {
		if ValidZone(bad) {
			t.Errorf("%q accepted as a zone", bad)
		}
		if r := RegionOf(bad); r != "" {
			t.Errorf("RegionOf(%q) = %q, want none", bad, r)
		}
	}
}
