package digitalocean

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
	"github.com/mooring-dev/mooring/cloud/kit/kittest"
	"github.com/mooring-dev/mooring/cloud/view"
)

// docsAPI answers with the documented examples: the list of droplets
// tagged env:prod (droplets_tagged, or droplets_all when wide, as if the
// API's filter let every droplet through), the droplet 3164444
// (droplet_single), the documented 404 for any other droplet, 401 for
// another token, and the documented 429 while tooMany.
type docsAPI struct {
	examples map[string][]byte
	wide     bool
	tooMany  bool
	asked    []string
}

func newDocsAPI(t *testing.T) *docsAPI {
	d := &docsAPI{examples: map[string][]byte{}}
	for _, name := range []string{"droplets_tagged", "droplets_all", "droplet_single"} {
		d.examples[name] = cloudtest.ArtefactJSON(t, "testdata/droplets-examples.yml", name+".value")
	}
	for _, name := range []string{"unauthorized", "too_many_requests", "not_found"} {
		d.examples[name] = cloudtest.ArtefactJSON(t, "testdata/error-"+name+".yml", "content.application/json.example")
	}
	return d
}

func (d *docsAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.asked = append(d.asked, r.Method+" "+r.URL.RequestURI())
	status, example := http.StatusOK, ""
	switch {
	case r.Header.Get("Authorization") != "Bearer documented-token":
		status, example = http.StatusUnauthorized, "unauthorized"
	case d.tooMany:
		status, example = http.StatusTooManyRequests, "too_many_requests"
	case r.URL.Path == "/v2/droplets" && r.URL.Query().Get("tag_name") == "env:prod" && d.wide:
		example = "droplets_all"
	case r.URL.Path == "/v2/droplets" && r.URL.Query().Get("tag_name") == "env:prod":
		example = "droplets_tagged"
	case r.URL.Path == "/v2/droplets/3164444":
		example = "droplet_single"
	default:
		status, example = http.StatusNotFound, "not_found"
	}
	body := d.examples[example]
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// The provider reads DigitalOcean's documented answers through godo: the
// list of droplets tagged env:prod (one page, links.pages empty, meta.total
// 2), each droplet mapped as DigitalOcean's CCM maps it (the name as
// Hostname and Node name, the private IPv4 as InternalIP, the public IPv4
// and IPv6 as ExternalIP, the size slug, the region and no zone, active as
// running, created_at in UTC, the tags as labels); an answer of every
// droplet (droplets_all) keeps only those carrying the tag; the droplet
// asked for by its providerID maps the same; under another cluster tag it
// is another cluster's; the documented 404 is "gone", the documented 429
// an error.
func TestDocumentedAnswers(t *testing.T) {
	d := newDocsAPI(t)
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	tokenFile := kittest.SecretFile(t, "documented-token")
	provider := func(tag string) *Cloud {
		cfg := Config{ClusterID: testCluster, ClusterTag: tag, APIEndpoint: srv.URL, TokenFile: tokenFile, ListConfig: kittest.Quick(0)}
		c, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := provider("env:prod")
	ctx := context.Background()
	web := view.Instance{
		ProviderID: "digitalocean://3164444", ID: "3164444", Name: "example.com", NodeName: "example.com",
		InstanceType: "s-1vcpu-1gb", Region: "nyc3", Cluster: testCluster, State: view.StateRunning,
		Addresses: []v1.NodeAddress{{Type: v1.NodeHostName, Address: "example.com"},
			{Type: v1.NodeInternalIP, Address: "10.128.192.124"}, {Type: v1.NodeExternalIP, Address: "192.241.165.154"},
			{Type: v1.NodeExternalIP, Address: "2604:a880:0:1010::18a:a001"}},
		Labels:  map[string]string{"web": "", "env:prod": ""},
		Created: time.Date(2020, 7, 21, 18, 37, 44, 0, time.UTC),
	}
	assets := view.Instance{
		ProviderID: "digitalocean://3164459", ID: "3164459", Name: "assets.example.com", NodeName: "assets.example.com",
		InstanceType: "s-1vcpu-1gb", Region: "nyc3", Cluster: testCluster, State: view.StateRunning,
		Addresses: []v1.NodeAddress{{Type: v1.NodeHostName, Address: "assets.example.com"},
			{Type: v1.NodeInternalIP, Address: "10.128.192.138"}, {Type: v1.NodeExternalIP, Address: "162.243.0.4"}},
		Labels:  map[string]string{"storage": "", "env:prod": ""},
		Created: time.Date(2020, 7, 21, 18, 42, 27, 0, time.UTC),
	}
	want := fmt.Sprintf("%+v", []view.Instance{web, assets})
	for _, wide := range []bool{false, true} {
		d.wide = wide
		c.InstanceView().Invalidate()
		all, err := c.InstanceView().List(ctx, 0)
		slices.SortFunc(all, func(a, b view.Instance) int { return strings.Compare(a.ID, b.ID) })
		if got := fmt.Sprintf("%+v", all); err != nil || got != want {
			t.Fatalf("the documented list (every droplet: %v):\n got %s %v\nwant %s", wide, got, err, want)
		}
		for _, in := range all {
			if in.Created.Location() != time.UTC {
				t.Errorf("%s created in %v", in.Name, in.Created.Location())
			}
		}
	}
	if len(d.asked) != 2 || d.asked[0] != "GET /v2/droplets?page=1&per_page=200&tag_name=env%3Aprod" {
		t.Fatalf("asked %q", d.asked)
	}
	got, err := c.ConfirmInstance(ctx, web.ProviderID)
	kittest.Same(t, "the documented droplet", got, err, web)
	kittest.Confirms(t, "a droplet without the cluster tag", provider("env:stage").ConfirmInstance, web.ProviderID, kittest.Foreign, "")
	kittest.Confirms(t, "the documented 404", c.ConfirmInstance, "digitalocean://3164412", kittest.Absent, "")
	d.tooMany = true
	c.InstanceView().Invalidate()
	if _, err := c.InstanceView().List(ctx, 0); err == nil || !strings.Contains(err.Error(), "API rate limit exceeded.") {
		t.Fatalf("the documented 429 on the list: %v", err)
	}
	kittest.Confirms(t, "the documented 429 on GET", c.ConfirmInstance, web.ProviderID, kittest.NoVerdict, "")
}
