package agentid

import (
	"context"
	"net/http"
	"testing"

	"github.com/mooring-dev/mooring/cloud/gce/gcetest"
	"github.com/mooring-dev/mooring/cloud/nodeid"
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
	for _, cfg := range []nodeid.Config{
		{NodeNamePolicy: "InstanceID"}, {Settings: map[string]string{"x": "y"}}, {MetadataURL: "https://169.254.169.254"},
	} {
		if _, err := NewNodeIdentity(cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}

func TestRegistered(t *testing.T) {
	if _, err := nodeid.New(Name, nodeid.Config{}); err != nil {
		t.Fatalf("%s: %v (registered: %v)", Name, err, nodeid.Backends())
	}
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
		{ValidZone, []string{"us-central1-a", "europe-west4-b"}, []string{"us-central1", "us-central1-", "US-central1-a", ""}},
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
