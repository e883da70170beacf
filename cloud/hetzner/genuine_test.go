package hetzner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
	"github.com/mooring-dev/mooring/cloud/hetzner/agentid"
	"github.com/mooring-dev/mooring/cloud/kit/kittest"
	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/view"
)

// genuineID is the id of the server in testdata/server-get.json.
const genuineID = 115493226

// genuineAPI answers as the Cloud API did in the answer hcloud-go keeps
// (testdata/server-get.json, sources in testdata/README.md): GET
// /v1/servers/115493226 with that body, the list as one page holding that
// server, and not_found for every other server. The answer carries no
// labels; with labelled set the server object is served with one change,
// the cluster label added, so that the provider takes it for the cluster's.
type genuineAPI struct {
	t        *testing.T
	recorded []byte // server-get.json
	labelled bool
	asked    []string
}

// server is the recorded server object, labelled as asked.
func (g *genuineAPI) server() map[string]any {
	var body struct {
		Server map[string]any `json:"server"`
	}
	if err := json.Unmarshal(g.recorded, &body); err != nil {
		g.t.Error(err)
	}
	srv := body.Server
	if g.labelled {
		srv["labels"] = map[string]any{DefaultClusterLabel: testCluster}
	}
	return srv
}

func (g *genuineAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.asked = append(g.asked, r.Method+" "+r.URL.Path)
	w.Header().Set("Content-Type", "application/json")
	if r.Header.Get("Authorization") != "Bearer genuine-token" {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error": {"code": "unauthorized", "message": "unable to authenticate", "details": {}}}`))
		return
	}
	var body any
	switch r.URL.Path {
	case "/v1/servers":
		// The documented list answer around the recorded server.
		body = map[string]any{"servers": []any{g.server()}, "meta": map[string]any{"pagination": map[string]any{
			"page": 1, "per_page": pageSize, "previous_page": nil, "next_page": nil, "last_page": 1, "total_entries": 1}}}
	case fmt.Sprintf("/v1/servers/%d", genuineID):
		if !g.labelled {
			_, _ = w.Write(g.recorded)
			return
		}
		body = map[string]any{"server": g.server()}
	default:
		w.WriteHeader(http.StatusNotFound)
		body = map[string]any{"error": map[string]any{"code": "not_found", "message": "server not found", "details": map[string]any{}}}
	}
	if err := json.NewEncoder(w).Encode(body); err != nil {
		g.t.Error(err)
	}
}

// The provider reads the server object the Cloud API returned (hcloud-go's
// recorded GET /servers/115493226): unchanged it carries no labels and is
// another cluster's; with the cluster label added it maps field by field as
// hcloud-cloud-controller-manager maps it (the name as Hostname and Node
// name, the public IPv4 address and the ::1 of the IPv6 /64 as ExternalIP,
// cx22, hel1 as region and hel1-dc2 as zone, running, created in UTC). The
// zone is the datacenter the API itself gave this server in December 2025,
// before datacenters left it.
func TestGenuineServer(t *testing.T) {
	g := &genuineAPI{t: t, recorded: cloudtest.ArtefactBytes(t, "testdata/server-get.json")}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	cfg := Config{Endpoint: srv.URL + "/v1", TokenFile: kittest.SecretFile(t, "genuine-token"), ClusterID: testCluster,
		ListConfig: kittest.Quick(0)}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	providerID := agentid.ProviderID(genuineID)

	kittest.Confirms(t, "the recorded server, without labels", c.ConfirmInstance, providerID, kittest.Foreign, "")
	if all, err := c.InstanceView().Named(ctx, "test1", 0); !errors.Is(err, view.ErrNotFound) || len(all) != 0 {
		t.Fatalf("the recorded server listed without labels: %+v %v", all, err)
	}

	g.labelled = true
	c.InstanceView().Invalidate()
	want := view.Instance{
		ProviderID: providerID, ID: "115493226", Name: "test1", NodeName: "test1",
		Zone: "hel1-dc2", Region: "hel1", InstanceType: "cx22", Cluster: testCluster, State: view.StateRunning,
		Addresses: []v1.NodeAddress{{Type: v1.NodeHostName, Address: "test1"},
			{Type: v1.NodeExternalIP, Address: "46.62.147.153"}, {Type: v1.NodeExternalIP, Address: "2a01:4f9:c012:fa81::1"}},
		Labels:  map[string]string{DefaultClusterLabel: testCluster},
		Created: time.Date(2025, 12, 15, 15, 22, 19, 0, time.UTC),
	}
	all, err := c.InstanceView().Named(ctx, "test1", 0)
	if len(all) != 1 {
		t.Fatalf("the recorded server, labelled, listed: %+v %v", all, err)
	}
	kittest.Same(t, "listed", all[0], err, want)
	got, err := c.ConfirmInstance(ctx, providerID)
	kittest.Same(t, "asked for by id", got, err, want)
	for _, a := range g.asked {
		if !strings.HasPrefix(a, "GET ") {
			t.Errorf("the provider asked %s", a)
		}
	}

	// The same server's answer as first recorded names its datacenter.
	var older struct {
		Server struct {
			Location   struct{ Name string } `json:"location"`
			Datacenter struct{ Name string } `json:"datacenter"`
		} `json:"server"`
	}
	if err := json.Unmarshal(cloudtest.ArtefactBytes(t, "testdata/server-get-2025-12.json"), &older); err != nil {
		t.Fatal(err)
	}
	if dc, loc := older.Server.Datacenter.Name, older.Server.Location.Name; dc == "" || ZoneOf(loc) != dc {
		t.Errorf("location %q: zone %q, the API's datacenter then %q", loc, ZoneOf(loc), dc)
	}

	kittest.Confirms(t, "a server the API does not know", c.ConfirmInstance, agentid.ProviderID(4711), kittest.Absent, "")
}

// The agent reads the metadata documents of cloud-init's Hetzner tests
// (testdata/metadata.yaml and private-networks.yaml): the server id and
// name, and the address in its one private network, found by its network
// id or as the lowest interface number; a network it is not attached to is
// an error. The service's leaf paths answer with the document's values, as
// Hetzner documents them.
func TestGenuineMetadata(t *testing.T) {
	doc, nets := cloudtest.ArtefactBytes(t, "testdata/metadata.yaml"), cloudtest.ArtefactBytes(t, "testdata/private-networks.yaml")
	var md struct {
		Hostname   string `json:"hostname"`
		InstanceID int64  `json:"instance-id"`
	}
	if err := yaml.Unmarshal(doc, &md); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/hetzner/v1/metadata/hostname", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(md.Hostname)) })
	mux.HandleFunc("/hetzner/v1/metadata/instance-id", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprint(w, md.InstanceID)
	})
	mux.HandleFunc("/hetzner/v1/metadata/private-networks", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(nets)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	ctx := context.Background()
	for _, tc := range []struct {
		network, ip, err string
	}{
		{"", "10.1.0.2", ""},
		{"11352901", "10.1.0.2", ""},
		{"4711", "", "not attached to network 4711"},
	} {
		settings := map[string]string{}
		if tc.network != "" {
			settings[agentid.SettingNetwork] = tc.network
		}
		id, err := nodeid.New(agentid.Name, nodeid.Config{MetadataURL: srv.URL + "/hetzner/v1/metadata", Settings: settings})
		if err != nil {
			t.Fatal(err)
		}
		got, err := id.Instance(ctx)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("network %s: %+v %v, want an error naming %q", tc.network, got, err, tc.err)
			}
			continue
		}
		want := nodeid.Instance{ID: "123456", Name: "cloudinit-test", NodeName: "cloudinit-test",
			ProviderID: "hcloud://123456", InternalIP: tc.ip}
		if err != nil || got != want {
			t.Errorf("network %q:\n got %+v %v\nwant %+v", tc.network, got, err, want)
		}
	}
}
