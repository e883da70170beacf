package gce

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/cloud/gce/agentid"
	"github.com/mooring-dev/mooring/cloud/gce/gcetest"
	"github.com/mooring-dev/mooring/cloud/view"
)

// GCE's provider keeps the kit's promises (cloud/cloudtest/conformance):
// its list is instances.aggregatedList over every zone of the project, in
// pages of gcetest's MaxPageSize. A deleted instance is gone (TERMINATED
// is GCE's stopped), and every name GCE allows is a Node name.
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Backend{Name: ProviderName, EveryNameANode: true, Zones: true, Evidence: []string{agentid.EvidenceType},
		Routes: true, RoutesNoBlackholes: true, // the upstream's (routes_conformance_test.go)
		BadProviderIDs: []string{"gce://", "gce://p/europe-west1-b/n1", "gce://mooring-test/us-central1-a",
			"gce://mooring-test/us-central1-a/", "gce://mooring-test/us-central1-a/n/x", "gce://mooring-test/us-central1-a/Node",
			"gce://mooring-test/central/n1", "gce:///us-central1-a/n1"},
		New: func(t *testing.T, o conformance.Options) conformance.Bed { return newBed(t, o) },
		Config: func(t *testing.T, b conformance.Bed) string {
			w := b.(*bed).world
			return fmt.Sprintf("projects: [%s]\nclusterID: %s\ncomputeEndpoint: %s\nwithoutAuthentication: true\ncertsURL: %s\n",
				gcetest.DefaultProject, testCluster, w.gc.Endpoint(), w.gc.CertsURL())
		},
	})
}

// bed is the conformance suite's view of a world whose provider's calls
// pass a hook that numbers the pages of aggregatedList (the first has no
// pageToken) before gcetest answers them.
type bed struct {
	*world
	conformance.Endpoint
	mu         sync.Mutex
	beforePage func(page int)
	page       int
}

func newBed(t *testing.T, o conformance.Options) *bed {
	b := &bed{world: newWorld(t, gcetest.Options{MaxPageSize: o.PageSize}, nil)}
	// The Compute API's 503, 401 (credentials refused) or 429
	// (rateLimitExceeded) to every list and get. TERMINATED is GCE's
	// stopped instance, PROVISIONING pending; a deleted instance is absent,
	// never in a state.
	b.Endpoint = conformance.Endpoint{Counter: &b.gc.Counter, Faults: &b.gc.Faults, List: []string{"aggregatedList"}, Get: []string{"get"},
		Statuses: map[view.State]string{view.StateStopped: "TERMINATED", view.StatePending: "PROVISIONING"},
		SetStatus: func(m conformance.Made, status string) error {
			project, zone := where(t, m)
			return b.gc.SetStatus(project, zone, m.Name, status)
		}}
	hook := roundTripper(func(r *http.Request) (*http.Response, error) {
		list := strings.HasSuffix(r.URL.Path, "/aggregated/instances")
		b.mu.Lock()
		f := b.beforePage
		if list {
			if r.URL.Query().Get("pageToken") == "" {
				b.page = 0
			}
			b.page++
		}
		page := b.page
		b.mu.Unlock()
		if f != nil && list {
			f(page)
		}
		return http.DefaultTransport.RoundTrip(r)
	})
	if o.Routes {
		upstreamOn(t, &b.cfg)
		b.Endpoint.Route = routeMethods
	}
	c, err := newBedCloud(b.cfg, &http.Client{Transport: hook, Timeout: b.cfg.RequestTimeout.Duration})
	if err != nil {
		t.Fatal(err)
	}
	b.cloud, b.Cloud = c, c
	return b
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (b *bed) Make(t testing.TB, s conformance.Spec) conformance.Made {
	zone := gcetest.DefaultZone
	if s.First {
		zone = "asia-east1-a" // the list is in zone then name order
	}
	in := b.gc.Put(gcetest.Instance{Name: s.Name, Zone: zone, InternalIP: s.Addr("127.0.79"),
		ExternalIP: s.Addr("127.0.80"), Labels: map[string]string{DefaultClusterLabel: s.Cluster(testCluster, "c2")}, Created: s.Created})
	return conformance.Made{Spec: s, ProviderID: agentid.ProviderID(in.Project, in.Zone, in.Name), ID: fmt.Sprint(in.ID),
		NodeName: in.Name, InternalIP: in.InternalIP}
}

// where is the project and zone of a made instance.
func where(t testing.TB, m conformance.Made) (project, zone string) {
	project, zone, _, err := ParseProviderID(m.ProviderID)
	if err != nil {
		t.Fatal(err)
	}
	return project, zone
}

func (b *bed) Delete(t testing.TB, m conformance.Made) {
	project, zone := where(t, m)
	b.gc.Delete(project, zone, m.Name)
}

func (b *bed) BeforePage(f func(page int)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.beforePage = f
}
