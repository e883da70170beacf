package openstack

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	v1 "k8s.io/api/core/v1"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/openstack/agentid"
	"github.com/mooring-dev/mooring/cloud/openstack/openstacktest"
	"github.com/mooring-dev/mooring/cloud/view"
)

// novaSampleSource is a Source whose compute endpoint answers the first
// page of the listing with one of Nova's API samples, unchanged
// (testdata/nova, sources in testdata/README.md), and the page after the
// sample's next link with no servers, as Nova does past the last server.
func novaSampleSource(t *testing.T, sample string) (Source, *int) {
	t.Helper()
	body := cloudtest.ArtefactBytes(t, "testdata/nova/"+sample)
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if r.URL.Path != "/v2.1/servers/detail" || r.Header.Get("X-Auth-Token") != "token" {
			http.Error(w, `{"itemNotFound": {"code": 404, "message": "not here"}}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("marker") != "" {
			_, _ = w.Write([]byte(`{"servers": []}`))
			return
		}
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	pc := &gophercloud.ProviderClient{HTTPClient: *srv.Client()}
	pc.SetToken("token")
	client := &gophercloud.ServiceClient{ProviderClient: pc, Endpoint: srv.URL + "/v2.1/", Microversion: Microversion}
	sources, err := (&Config{}).addressSources()
	if err != nil {
		t.Fatal(err)
	}
	// The samples' one server carries no tag; its metadata item makes it
	// the cluster's.
	return Source{Compute: func(context.Context) (*gophercloud.ServiceClient, error) { return client, nil },
		ClusterID: "Apache1", ClusterMetadataKey: "My Server Name", Region: "RegionOne", Sources: sources}, &calls
}

// Nova's own servers/detail samples (2.47, the microversion mooring asks
// for, and 2.96) map onto the view: the id, the name, the availability
// zone, the flavor's name, ACTIVE, created, the fixed address as
// InternalIP, accessIPv4 and accessIPv6 as ExternalIPs that a project
// member asserts; the next link's marker is followed at the compute
// endpoint.
func TestNovaSamplesMap(t *testing.T) {
	for _, tc := range []struct {
		sample, id, flavor string
		created            time.Time
	}{
		{"v2.47-servers-details-resp.json", "764e369e-a874-4401-b7ce-43e4760888da", "m1.tiny.specs", time.Date(2017, 2, 14, 19, 24, 42, 0, time.UTC)},
		{"v2.96-servers-details-resp.json", "f5dc173b-6804-445a-a6d8-c705dad5b5eb", "m1.tiny", time.Date(2013, 9, 3, 4, 1, 32, 0, time.UTC)},
	} {
		src, calls := novaSampleSource(t, tc.sample)
		all, err := src.ListInstances(context.Background())
		if err != nil || len(all) != 1 {
			t.Fatalf("%s: %+v %v", tc.sample, all, err)
		}
		want := view.Instance{
			ProviderID: "openstack:///" + tc.id, ID: tc.id, Name: "new-server-test", NodeName: "new-server-test",
			Zone: "us-west", Region: "RegionOne", InstanceType: tc.flavor, Cluster: "Apache1", State: view.StateRunning,
			Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "192.168.1.30"},
				{Type: v1.NodeExternalIP, Address: "1.2.3.4"}, {Type: v1.NodeExternalIP, Address: "80fe::"}},
			Asserted: map[string]string{
				"1.2.3.4": "any member of the server's project (accessIPv4; not in trustedAddressSources)",
				"80fe::":  "any member of the server's project (accessIPv6; not in trustedAddressSources)",
			},
			Labels: map[string]string{"My Server Name": "Apache1"}, Created: tc.created,
		}
		if fmt.Sprint(all[0]) != fmt.Sprint(want) || !all[0].Created.Equal(tc.created) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.sample, all[0], want)
		}
		if *calls != 2 {
			t.Errorf("%s: %d calls, want the sample's page and the one after its marker", tc.sample, *calls)
		}
	}
}

// A server of a cloud that offers only config drives (no metadata
// service): the agent reads the drive openstacktest writes as Nova does,
// and its record agrees with the view's; the address comes from
// local-ipv4 of the drive's EC2 document, or from network_data.json when
// the drive has none, and there is none when the subnet has DHCP and the
// drive no EC2 document.
func TestAgentConfigDrive(t *testing.T) {
	w := newWorld(t, openstacktest.Options{}, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		dhcp bool
		opts openstacktest.DriveOptions
		want string
	}{
		{"drive-ec2", false, openstacktest.DriveOptions{}, "127.0.87.31"},
		{"drive-network-data", false, openstacktest.DriveOptions{WithoutEC2: true}, "127.0.87.31"},
		{"drive-dhcp", true, openstacktest.DriveOptions{}, "127.0.87.31"},
		{"drive-dhcp-no-ec2", true, openstacktest.DriveOptions{WithoutEC2: true}, ""},
	} {
		s := w.os.Put(openstacktest.Server{Name: tc.name, Tags: []string{testTag}, NoMetadataService: true, DHCP: tc.dhcp,
			Addresses: []openstacktest.Address{{Addr: "127.0.89.31", Floating: true}, {Addr: "127.0.87.31"}, {Addr: "::1"}}})
		dir := t.TempDir()
		if err := w.os.WriteConfigDrive(s.ID, dir, tc.opts); err != nil {
			t.Fatal(err)
		}
		// The metadata service's address is configured, but nothing
		// answers there: auto mode reads the drive.
		ni, err := w.identity(t, s, map[string]string{agentid.SettingConfigDrive: dir}).Instance(ctx)
		want := nodeid.Instance{ID: s.ID, Name: tc.name, NodeName: tc.name, ProviderID: "openstack:///" + s.ID, InternalIP: tc.want}
		if err != nil || ni != want {
			t.Fatalf("%s: got %+v %v\nwant %+v", tc.name, ni, err, want)
		}
		vi, err := w.cloud.InstanceView().ByNodeName(ctx, ni.NodeName, 0)
		if err != nil || vi.ProviderID != ni.ProviderID || (tc.want != "" && vi.Addresses[0] != v1.NodeAddress{Type: v1.NodeInternalIP, Address: tc.want}) {
			t.Fatalf("%s: view %+v %v", tc.name, vi, err)
		}
	}
	if n := w.os.Calls("metadata"); n != 0 {
		t.Fatalf("%d metadata calls answered for servers without a metadata service", n)
	}
}
