package openstack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/pagination"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/cloud/kit/kittest"
	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/nodeid/nodeidtest"
	"github.com/mooring-dev/mooring/cloud/openstack/agentid"
	"github.com/mooring-dev/mooring/cloud/openstack/openstacktest"
	"github.com/mooring-dev/mooring/cloud/view"
)

const testCluster = "c1"

var testTag = DefaultClusterTagPrefix + testCluster

type world struct {
	os    *openstacktest.Cloud
	cloud *Cloud
}

// writeSecret is the application credential's secretFile.
func writeSecret(t *testing.T, secret string) string { return kittest.SecretFile(t, secret) }

func newWorld(t *testing.T, opts openstacktest.Options, edit func(*Config)) *world {
	t.Helper()
	o := openstacktest.NewStarted(t, opts)
	id, secret := o.Credential()
	cfg := Config{AuthURL: o.AuthURL(), ApplicationCredentialID: id, SecretFile: kittest.SecretFile(t, secret),
		Region: o.Region(), ClusterID: testCluster, ListConfig: kittest.Quick(5 * time.Second)}
	if edit != nil {
		edit(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &world{os: o, cloud: c}
}

// add makes an ACTIVE server of the cluster (or with tags) whose fixed
// address is 127.0.87.<octet>.
func (w *world) add(name string, octet int, tags ...string) openstacktest.Server {
	if tags == nil {
		tags = []string{testTag}
	}
	return w.os.Put(openstacktest.Server{Name: name, Tags: tags,
		Addresses: []openstacktest.Address{{Addr: fmt.Sprintf("127.0.87.%d", octet)}}})
}

func node(name, providerID string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NodeSpec{ProviderID: providerID}}
}

// The view authenticates once and asks at microversion 2.47, oldest first;
// pages end at a short page or an empty one (the conformance suite checks
// that every page is followed and another cluster's servers left out).
func TestListPages(t *testing.T) {
	w := newWorld(t, openstacktest.Options{MaxLimit: 2}, nil)
	for i := range 5 {
		w.add(fmt.Sprintf("node-%d", i), 10+i)
	}
	all, err := w.cloud.source().ListInstances(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 5 {
		t.Fatalf("%d servers: %+v", len(all), all)
	}
	for i, in := range all {
		if in.Name != fmt.Sprintf("node-%d", i) || in.Cluster != testCluster {
			t.Errorf("server %d (oldest first): %+v", i, in)
		}
	}
	// 5 servers in pages of 2: 3 pages, the last short (Nova gives no next
	// link under the limit).
	if n := w.os.Calls("list"); n != 3 {
		t.Fatalf("%d list calls for 5 servers in pages of 2, want 3", n)
	}
	if n, u := w.os.Calls("auth"), w.os.Calls("unauthorized"); n != 1 || u != 0 {
		t.Fatalf("%d authentications, %d refused calls", n, u)
	}
	if mv := w.os.LastMicroversion(); mv != Microversion {
		t.Fatalf("served at microversion %s, want %s", mv, Microversion)
	}
	// A sixth server makes the last page full: a next link, then an empty
	// page that ends the listing.
	w.add("node-5", 15)
	before := w.os.Calls("list")
	if all, err := w.cloud.source().ListInstances(context.Background()); err != nil || len(all) != 6 {
		t.Fatalf("%d %v", len(all), err)
	}
	if n := w.os.Calls("list") - before; n != 4 {
		t.Fatalf("%d list calls for 6 servers in pages of 2, want 4", n)
	}
	// Nova behind a proxy writes its links with an address of its own:
	// the next page is asked of the catalog's endpoint all the same (the
	// token goes nowhere else).
	proxied := newWorld(t, openstacktest.Options{MaxLimit: 2, LinkBase: "http://nova-api.internal.invalid:8774/v2.1"}, nil)
	for i := range 3 {
		proxied.add(fmt.Sprintf("node-%d", i), 10+i)
	}
	if all, err := proxied.cloud.source().ListInstances(context.Background()); err != nil || len(all) != 3 || proxied.os.Calls("list") != 2 {
		t.Fatalf("links of another host: %d servers, %v, %d list calls", len(all), err, proxied.os.Calls("list"))
	}
	// The tag filter narrows the listing; membership is checked here.
	src := w.cloud.source()
	id := "9e5476bd-a4ec-4653-93d6-72c93aa682ba"
	other := []string{DefaultClusterTagPrefix + "other"}
	if _, ok := src.toView(&servers.Server{ID: id, Name: "x", Tags: &other}); ok {
		t.Fatal("a server of another cluster the API let through was kept")
	}
	if _, ok := src.toView(&servers.Server{ID: id, Name: "x"}); ok {
		t.Fatal("a server without tags (an old microversion) was kept")
	}
	mine := []string{testTag}
	if in, ok := src.toView(&servers.Server{ID: id, Name: "x", Tags: &mine}); !ok || !in.Created.IsZero() {
		t.Fatalf("no creation time: %+v %v", in, ok)
	}
	if _, ok := src.toView(&servers.Server{ID: "42", Name: "x", Tags: &mine}); ok {
		t.Fatal("a server whose id is no UUID was kept")
	}
}

// Membership by a metadata item: every server of the project is listed,
// the item decides.
func TestMetadataMembership(t *testing.T) {
	w := newWorld(t, openstacktest.Options{MaxLimit: 2}, func(c *Config) { c.ClusterMetadataKey = "k8s-cluster" })
	for i, md := range []map[string]string{{"k8s-cluster": testCluster}, {"k8s-cluster": "other"}, nil, {"k8s-cluster": testCluster}} {
		w.os.Put(openstacktest.Server{Name: fmt.Sprintf("s-%d", i), Metadata: md, Tags: []string{testTag}})
	}
	all, err := w.cloud.source().ListInstances(context.Background())
	if err != nil || len(all) != 2 || all[0].Name != "s-0" || all[1].Name != "s-3" {
		t.Fatalf("%+v %v", all, err)
	}
	if w.os.Calls("list") != 3 {
		t.Fatalf("%d list calls for 4 servers in pages of 2", w.os.Calls("list"))
	}
}

// Every field of a server maps, in the OpenStack CCM's forms.
func TestServerMapping(t *testing.T) {
	created := time.Date(2026, 11, 20, 8, 30, 15, 0, time.UTC)
	put := func(w *world) openstacktest.Server {
		return w.os.Put(openstacktest.Server{Name: "Web-1", AvailabilityZone: "az 1 (east)", Flavor: "m1.large", Created: created,
			Tags: []string{testTag, "role-worker"}, Metadata: map[string]string{"hostname": "web-1.example", "team": "x"},
			AccessIPv4: "127.0.88.20",
			Addresses: []openstacktest.Address{
				{Network: "private", Addr: "127.0.87.20"}, {Network: "private", Addr: "127.0.89.20", Floating: true},
				{Network: "storage", Addr: "127.0.90.20"}, {Network: "ext-net", Addr: "127.0.91.20"}, {Network: "private", Addr: "::1"},
			}})
	}
	cases := []struct {
		name string
		edit func(*Config)
		pid  func(id string) string
		want []v1.NodeAddress
	}{
		{"every network internal", nil, func(id string) string { return "openstack:///" + id }, []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: "127.0.91.20"}, {Type: v1.NodeInternalIP, Address: "127.0.87.20"},
			{Type: v1.NodeInternalIP, Address: "::1"}, {Type: v1.NodeInternalIP, Address: "127.0.90.20"},
			{Type: v1.NodeExternalIP, Address: "127.0.88.20"}, {Type: v1.NodeHostName, Address: "web-1.example"},
			{Type: v1.NodeExternalIP, Address: "127.0.89.20"}}},
		{"a public network, one internal, regional", func(c *Config) {
			c.PublicNetworkNames, c.InternalNetworkNames, c.RegionalProviderID = []string{"ext-net"}, []string{"private"}, true
		}, func(id string) string { return "openstack://RegionOne/" + id }, []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: "127.0.87.20"}, {Type: v1.NodeInternalIP, Address: "::1"},
			{Type: v1.NodeExternalIP, Address: "127.0.88.20"}, {Type: v1.NodeHostName, Address: "web-1.example"},
			{Type: v1.NodeExternalIP, Address: "127.0.91.20"}, {Type: v1.NodeExternalIP, Address: "127.0.89.20"}}},
	}
	for _, tc := range cases {
		w := newWorld(t, openstacktest.Options{}, tc.edit)
		s := put(w)
		in := kittest.ListedOne(t, w.cloud.source().ListInstances)
		want := view.Instance{
			ProviderID: tc.pid(s.ID), ID: s.ID, Name: "Web-1", NodeName: "web-1",
			Zone: "az-1-east", Region: openstacktest.DefaultRegion, InstanceType: "m1.large", Cluster: testCluster, State: view.StateRunning,
			Addresses: tc.want, Labels: map[string]string{"hostname": "web-1.example", "team": "x"}, Created: created,
			// What a project member set backs no serving SAN.
			Asserted: map[string]string{
				"127.0.88.20":   "any member of the server's project (accessIPv4; not in trustedAddressSources)",
				"web-1.example": "any member of the server's project (metadata.hostname; not in trustedAddressSources)",
			},
		}
		kittest.Same(t, tc.name, in, nil, want)
	}
	// A server with no address has none; a name no Node can have gives no
	// Node name.
	w := newWorld(t, openstacktest.Options{}, nil)
	w.os.Put(openstacktest.Server{Name: "bad_name", Tags: []string{testTag}})
	all, err := w.cloud.source().ListInstances(context.Background())
	if err != nil || len(all) != 1 || all[0].NodeName != "" || len(all[0].Addresses) != 0 || all[0].Zone != "nova" {
		t.Fatalf("%+v %v", all, err)
	}
	for az, want := range map[string]string{"nova": "nova", "-a b-": "a-b", "x/y:z": "x-y-z", strings.Repeat("z", 70): strings.Repeat("z", 63)} {
		if got := ZoneOf(az); got != want {
			t.Errorf("ZoneOf(%q) = %q, want %q", az, got, want)
		}
	}
	if got := instanceType(map[string]any{"id": "2"}); got != "2" {
		t.Errorf("flavor without a name: %q", got)
	}
	if got := instanceType(map[string]any{"original_name": "bad name!", "id": "2"}); got != "2" {
		t.Errorf("flavor name that is no label value: %q", got)
	}
}

func TestStates(t *testing.T) {
	w := newWorld(t, openstacktest.Options{}, nil)
	want := map[string]view.State{
		"ACTIVE": view.StateRunning, "SHUTOFF": view.StateStopped, "SOFT_DELETED": view.StateStopped, "DELETED": view.StateTerminated,
		"BUILD": view.StatePending, "REBOOT": view.StatePending, "HARD_REBOOT": view.StatePending, "PAUSED": view.StatePending,
		"SUSPENDED": view.StatePending, "SHELVED_OFFLOADED": view.StatePending, "ERROR": view.StatePending, "SOME_NEW": view.StatePending,
	}
	ids := map[string]string{}
	i := 0
	for status := range want {
		s := w.add("s-"+strings.ToLower(status), 40+i)
		if err := w.os.SetStatus(s.ID, status); err != nil {
			t.Fatal(err)
		}
		ids[status] = s.ID
		i++
	}
	all, err := w.cloud.source().ListInstances(context.Background())
	if err != nil || len(all) != len(want) {
		t.Fatal(len(all), err)
	}
	for _, in := range all {
		status := strings.ToUpper(strings.TrimPrefix(in.Name, "s-"))
		if in.State != want[status] {
			t.Errorf("status %s: state %s, want %s", status, in.State, want[status])
		}
	}
}

// Nova's own answers to a list that changes between pages (the
// conformance suite checks a failed page, an outage, and that a list is
// whole or an error): the marker server deleted is Nova's 400; a server
// created meanwhile is the newest, on a later page of this listing.
func TestListChangesBetweenPages(t *testing.T) {
	w := newWorld(t, openstacktest.Options{MaxLimit: 2}, nil)
	for i := range 4 {
		w.add(fmt.Sprintf("node-%d", i), 10+i)
	}
	ctx := context.Background()
	src := w.cloud.source()
	// The marker server deleted while the pages are read: Nova's 400.
	w.os.OnList(func(marker string) {
		if marker == "" {
			return
		}
		w.os.Delete(marker)
		w.os.OnList(nil)
	})
	if _, err := src.ListInstances(ctx); !gophercloud.ResponseCodeIs(err, http.StatusBadRequest) || !strings.Contains(err.Error(), "marker") {
		t.Fatalf("marker deleted between pages: %v", err)
	}
	// A server created meanwhile is the newest: it lands on a later page.
	w.os.OnList(func(marker string) {
		if marker != "" {
			w.add("late", 20)
			w.os.OnList(nil)
		}
	})
	all, err := src.ListInstances(ctx)
	if err != nil || len(all) != 4 || all[3].Name != "late" {
		t.Fatalf("creation between pages: %+v %v", all, err)
	}
}

// Keystone: a wrong secret is refused and never in the error; an expired
// token is renewed once and the call goes through; the secret may come
// from the environment. (The conformance suite's Unauthorized revokes the
// credential.)
func TestAuthentication(t *testing.T) {
	w := newWorld(t, openstacktest.Options{}, func(c *Config) { c.SecretFile = kittest.SecretFile(t, "wrong-secret-value") })
	w.add("node-1", 10)
	_, err := w.cloud.source().ListInstances(context.Background())
	if !gophercloud.ResponseCodeIs(err, http.StatusUnauthorized) || strings.Contains(err.Error(), "wrong-secret-value") ||
		!strings.Contains(err.Error(), openstacktest.DefaultCredentialID) {
		t.Fatalf("wrong secret: %v", err)
	}
	// The next call tries again (no failure is cached).
	if _, err := w.cloud.source().ListInstances(context.Background()); err == nil || w.os.Calls("auth") != 2 {
		t.Fatalf("second try: %v, %d auth calls", err, w.os.Calls("auth"))
	}

	w = newWorld(t, openstacktest.Options{}, nil)
	w.add("node-1", 10)
	src := w.cloud.source()
	if _, err := src.ListInstances(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.os.ExpireTokens()
	if all, err := src.ListInstances(context.Background()); err != nil || len(all) != 1 {
		t.Fatalf("after the token expired: %+v %v", all, err)
	}
	if a, u := w.os.Calls("auth"), w.os.Calls("unauthorized"); a != 2 || u != 1 {
		t.Fatalf("token expiry: %d authentications, %d refused calls; want 2 and 1", a, u)
	}

	// By name and user, the secret from the environment.
	o := openstacktest.NewStarted(t, openstacktest.Options{})
	o.Put(openstacktest.Server{Name: "n", Tags: []string{"cluster-x"}})
	_, secret := o.Credential()
	t.Setenv("MY_OS_SECRET", secret)
	c, err := New(Config{AuthURL: o.AuthURL(), ApplicationCredentialName: openstacktest.DefaultCredentialName,
		UserID: openstacktest.DefaultUserID, SecretEnv: "MY_OS_SECRET", Region: o.Region(), ClusterID: testCluster, ClusterTag: "cluster-x"})
	if err != nil {
		t.Fatal(err)
	}
	if all, err := c.source().ListInstances(context.Background()); err != nil || len(all) != 1 {
		t.Fatalf("%+v %v", all, err)
	}
	// A region the catalog lacks.
	c, err = New(Config{AuthURL: o.AuthURL(), ApplicationCredentialID: openstacktest.DefaultCredentialID, SecretEnv: "MY_OS_SECRET",
		Region: "RegionTwo", ClusterID: testCluster})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.source().ListInstances(context.Background()); err == nil || !strings.Contains(err.Error(), "RegionTwo") {
		t.Fatalf("a region without a compute endpoint: %v", err)
	}
	// Read from secretFile or secretEnv (how, and that errors show no
	// value: kit's TestSecret).
	kittest.Secret(t, "openstack: application credential secret", func(file, env string) (string, error) {
		c := Config{SecretFile: file, SecretEnv: env}
		return c.Secret()
	})
}

// A CA file that holds no certificate is an error at start.
func TestCAFile(t *testing.T) {
	o := openstacktest.NewStarted(t, openstacktest.Options{})
	_, secret := o.Credential()
	bad := kittest.SecretFile(t, "not a certificate")
	_, err := New(Config{AuthURL: o.AuthURL(), ApplicationCredentialID: "x", SecretFile: kittest.SecretFile(t, secret),
		Region: "r", ClusterID: testCluster, CAFile: bad})
	if err == nil || !strings.Contains(err.Error(), "caFile") {
		t.Fatalf("%v", err)
	}
}

// The config's own fields and defaults; kittest.Config checks that it
// applies kit's checks (endpoint, secret, durations, strictness) to them.
func TestConfig(t *testing.T) {
	good := "authURL: https://keystone.example:5000/v3\napplicationCredentialID: abc\nregion: RegionOne\nclusterID: c1\n"
	kittest.Config(t, ParseConfig, good,
		kittest.Fields{Endpoint: "authURL", SecretFile: "secretFile", SecretEnv: "secretEnv", Durations: []string{"maxFailureBackoff"}})
	c, err := ParseConfig(strings.NewReader(good))
	if err != nil || c.SecretEnv != DefaultSecretEnv || c.ClusterTag != "mooring-cluster=c1" || c.Interface != "public" ||
		c.NodeNamePolicy != agentid.PolicyServerName || c.RequestTimeout.Duration != DefaultRequestTimeout {
		t.Fatalf("%+v %v", c, err)
	}
	c, err = ParseConfig(strings.NewReader("authURL: https://k/identity/v3/\napplicationCredentialName: n\nuserID: u\nregion: r\n" +
		"clusterID: prod\nclusterMetadataKey: cluster\nsecretFile: /etc/os/secret\ninterface: internal\nregionalProviderID: true\n" +
		"internalNetworkNames: [private]\npublicNetworkNames: [ext]\n"))
	if err != nil || c.SecretEnv != "" || c.ClusterTag != "" || c.ClusterMetadataKey != "cluster" {
		t.Fatalf("%+v %v", c, err)
	}
	for _, bad := range []string{
		"", strings.Replace(good, "/v3", "/v2.0", 1), strings.Replace(good, "applicationCredentialID: abc\n", "", 1),
		good + "applicationCredentialName: n\nuserID: u\n", strings.Replace(good, "applicationCredentialID: abc", "applicationCredentialName: n", 1),
		strings.Replace(good, "region: RegionOne\n", "", 1),
		strings.Replace(good, "RegionOne", "Region/One", 1), good + "interface: private\n", strings.Replace(good, "clusterID: c1", "clusterID: a/b", 1),
		good + "clusterTag: x\nclusterMetadataKey: y\n", good + "clusterTag: " + strings.Repeat("t", 61) + "\n", good + "clusterTag: a,b\n",
		strings.Replace(good, "clusterID: c1", "clusterID: "+strings.Repeat("c", 50), 1),
		good + "internalNetworkNames: [a]\npublicNetworkNames: [a]\n", good + "publicNetworkNames: ['']\n",
		good + "nodeNamePolicy: ServerID\n", good + "clusterID: c2\n",
	} {
		if _, err := ParseConfig(strings.NewReader(bad)); err == nil {
			t.Errorf("accepted:\n%s", bad)
		}
	}
	// Every problem at once.
	_, err = ParseConfig(strings.NewReader("interface: x\n"))
	if err == nil || !strings.Contains(err.Error(), "clusterID is required") || !strings.Contains(err.Error(), "interface") ||
		!strings.Contains(err.Error(), "authURL is required") || !strings.Contains(err.Error(), "region is required") {
		t.Fatalf("%v", err)
	}
}

func (w *world) identity(t *testing.T, s openstacktest.Server, settings map[string]string) *agentid.NodeIdentity {
	t.Helper()
	// This machine's devices are never looked at: without a drive of its
	// own, a server has none.
	all := map[string]string{agentid.SettingConfigDrive: filepath.Join(t.TempDir(), "no-config-drive")}
	for k, v := range settings {
		all[k] = v
	}
	return nodeidtest.Agent(t, agentid.NewNodeIdentity, all)(w.os.MetadataURL(s.ID))
}

// The node agent's identity from the metadata service agrees with the view
// (nodeidtest.Unsigned). Its own: the region setting makes the providerID
// regional.
func TestAgentIdentity(t *testing.T) {
	w := newWorld(t, openstacktest.Options{}, nil)
	servers := map[string]openstacktest.Server{}
	n := 9
	nodeidtest.Unsigned(t, nodeidtest.Bed{
		Put: func(name string, bare bool) (nodeid.Identity, nodeid.Instance) {
			n++
			s := openstacktest.Server{Name: name, Tags: []string{testTag}, UserData: "#cloud-config\n"}
			internal := ""
			if !bare {
				internal = fmt.Sprintf("127.0.87.%d", n)
				s.Addresses = []openstacktest.Address{{Addr: fmt.Sprintf("127.0.89.%d", n), Floating: true}, {Addr: internal}}
			}
			s = w.os.Put(s)
			servers[name] = s
			return w.identity(t, s, nil), nodeid.Instance{ID: s.ID, Name: name, ProviderID: "openstack:///" + s.ID,
				NodeName: strings.ToLower(name), InternalIP: internal}
		},
		View:     w.cloud.InstanceView(),
		FailNext: func() { w.os.Fail("metadata", 1, http.StatusInternalServerError) },
		Stop:     func(in nodeid.Instance) error { return w.os.SetStatus(in.ID, openstacktest.StatusShutoff) },
	})
	s := servers["bare"]
	ni, err := w.identity(t, s, map[string]string{agentid.SettingRegion: "RegionOne"}).Instance(context.Background())
	if err != nil || ni.ProviderID != "openstack://RegionOne/"+s.ID {
		t.Fatalf("region setting: %+v %v", ni, err)
	}
}

// Either providerID form of this region is read, in InstancesV2 and Zones;
// another region's is an error; metadata as the upstream CCM sets it; a
// Node name the project has no server of is InstanceNotFound. (The
// conformance suite checks the rest of InstancesV2.)
func TestRegionalProviderIDs(t *testing.T) {
	w := newWorld(t, openstacktest.Options{}, nil)
	s := w.add("node-1", 10)
	ctx := context.Background()
	md, err := w.cloud.InstanceMetadata(ctx, node("node-1", "openstack://RegionOne/"+s.ID))
	if err != nil || md.ProviderID != "openstack:///"+s.ID || md.InstanceType != openstacktest.DefaultFlavor || md.Zone != "nova" ||
		md.Region != openstacktest.DefaultRegion || len(md.NodeAddresses) != 1 {
		t.Fatalf("regional providerID: %+v %v", md, err)
	}
	if _, err := w.cloud.InstanceExists(ctx, node("node-1", "openstack://RegionTwo/"+s.ID)); err == nil {
		t.Fatal("another region's providerID was answered")
	}
	zones, ok := w.cloud.Zones()
	if !ok {
		t.Fatal("Zones is not implemented")
	}
	if z, err := zones.GetZoneByProviderID(ctx, "openstack://RegionOne/"+s.ID); err != nil || z.FailureDomain != "nova" || z.Region != "RegionOne" {
		t.Fatalf("%+v %v", z, err)
	}
	if z, err := zones.GetZoneByNodeName(ctx, types.NodeName("node-1")); err != nil || z.Region != "RegionOne" {
		t.Fatalf("%+v %v", z, err)
	}
	// A miss is an answer only from a list that began after the question:
	// past the minimum refresh interval (1 ms here) the lookup lists again.
	time.Sleep(2 * time.Millisecond)
	if _, err := w.cloud.InstanceMetadata(ctx, node("node-9", "")); !errors.Is(err, cloudprovider.InstanceNotFound) {
		t.Fatalf("unknown node: %v", err)
	}
}

// A next link whose marker is no server id is refused; the next page is
// always the catalog's endpoint with the marker.
func TestNextPage(t *testing.T) {
	page := func(href string) serverPage {
		body := map[string]any{"servers": []any{}, "servers_links": []any{map[string]any{"rel": "next", "href": href}}}
		return serverPage{
			ServerPage: servers.ServerPage{LinkedPageBase: pagination.LinkedPageBase{PageResult: pagination.PageResult{Result: gophercloud.Result{Body: body}}}},
			next:       func(m string) string { return "https://nova.example/v2.1/servers/detail?" + listQuery("t", 2, m) },
		}
	}
	const id = "9e5476bd-a4ec-4653-93d6-72c93aa682ba"
	got, err := page("http://10.0.0.7:8774/v2.1/servers/detail?limit=2&marker=" + id).NextPageURL()
	if err != nil || got != "https://nova.example/v2.1/servers/detail?limit=2&marker="+id+"&sort_dir=asc&sort_key=created_at&tags=t" {
		t.Fatalf("%q %v", got, err)
	}
	for _, bad := range []string{"http://x/servers/detail?marker=1", "http://x/servers/detail", "::"} {
		if _, err := page(bad).NextPageURL(); !errors.Is(err, errListing) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
