package hetzner

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/cloud/hetzner/agentid"
	"github.com/mooring-dev/mooring/cloud/hetzner/hetznertest"
	"github.com/mooring-dev/mooring/cloud/kit/kittest"
	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/nodeid/nodeidtest"
	"github.com/mooring-dev/mooring/cloud/view"
)

const testCluster = "c1"

type world struct {
	hz        *hetznertest.Cloud
	cloud     *Cloud
	tokenFile string
}

// newWorld starts the endpoint and a provider over it (client options
// added last).
func newWorld(t *testing.T, opts hetznertest.Options, edit func(*Config), client ...hcloud.ClientOption) *world {
	t.Helper()
	hz := hetznertest.NewStarted(t, opts)
	cfg := Config{Endpoint: hz.Endpoint(), TokenFile: kittest.SecretFile(t, hz.Token()), ClusterID: testCluster,
		ListConfig: kittest.Quick(5 * time.Second)}
	if edit != nil {
		edit(&cfg)
	}
	c, err := New(cfg, client...)
	if err != nil {
		t.Fatal(err)
	}
	return &world{hz: hz, cloud: c, tokenFile: cfg.TokenFile}
}

// add makes a running server of the cluster (or with labels) whose private
// address is 127.0.85.<octet> and public one 127.0.86.<octet>.
func (w *world) add(name string, octet int, labels map[string]string) hetznertest.Server {
	if labels == nil {
		labels = map[string]string{DefaultClusterLabel: testCluster}
	}
	return w.hz.Put(hetznertest.Server{Name: name, Labels: labels,
		PublicIPv4:  fmt.Sprintf("127.0.86.%d", octet),
		PrivateNets: []hetznertest.PrivateNet{{Network: hetznertest.DefaultNetworkID, IP: fmt.Sprintf("127.0.85.%d", octet)}}})
}

func node(name, providerID string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NodeSpec{ProviderID: providerID}}
}

// The label selector narrows the listing; membership is checked here
// (the conformance suite's OtherCluster and Pages: a server of another
// cluster's label value). A server the API gives no creation time keeps
// none (a ticket for it is refused), and stays listed.
func TestMembershipCheckedHere(t *testing.T) {
	src := Source{ClusterLabel: DefaultClusterLabel, ClusterID: testCluster}
	if _, ok := src.toView(&hcloud.Server{ID: 7, Name: "x", Labels: map[string]string{DefaultClusterLabel: "other"}}); ok {
		t.Fatal("a server of another cluster the API let through was kept")
	}
	if _, ok := src.toView(&hcloud.Server{ID: 7, Name: "x"}); ok {
		t.Fatal("a server without labels the API let through was kept")
	}
	if in, ok := src.toView(&hcloud.Server{ID: 7, Name: "x", Labels: map[string]string{DefaultClusterLabel: testCluster}}); !ok || !in.Created.IsZero() {
		t.Fatalf("no creation time: %+v %v", in, ok)
	}
}

// Every field of a server maps, in hcloud-cloud-controller-manager's forms.
func TestServerMapping(t *testing.T) {
	created := time.Date(2026, 11, 20, 8, 30, 15, 0, time.UTC)
	put := func(w *world) hetznertest.Server {
		return w.hz.Put(hetznertest.Server{Name: "Web-1", Location: "nbg1", ServerType: "cpx31", Created: created,
			Labels: map[string]string{DefaultClusterLabel: testCluster, "role": "worker"}, PublicIPv4: "127.0.86.20", PublicIPv6: "::/64",
			PrivateNets: []hetznertest.PrivateNet{{Network: hetznertest.DefaultNetworkID, IP: "127.0.85.20"}, {Network: 99, IP: "127.0.85.120"}}})
	}
	cases := []struct {
		name string
		edit func(*Config)
		want []v1.NodeAddress
	}{
		{"dualstack, every private network", nil, []v1.NodeAddress{
			{Type: v1.NodeHostName, Address: "Web-1"}, {Type: v1.NodeExternalIP, Address: "127.0.86.20"}, {Type: v1.NodeExternalIP, Address: "::1"},
			{Type: v1.NodeInternalIP, Address: "127.0.85.20"}, {Type: v1.NodeInternalIP, Address: "127.0.85.120"}}},
		{"ipv4, one network", func(c *Config) {
			c.AddressFamily, c.Network = AddressFamilyIPv4, NetworkRef{ID: hetznertest.DefaultNetworkID}
		}, []v1.NodeAddress{
			{Type: v1.NodeHostName, Address: "Web-1"}, {Type: v1.NodeExternalIP, Address: "127.0.86.20"}, {Type: v1.NodeInternalIP, Address: "127.0.85.20"}}},
		{"ipv6, the other network", func(c *Config) { c.AddressFamily, c.Network = AddressFamilyIPv6, NetworkRef{ID: 99} }, []v1.NodeAddress{
			{Type: v1.NodeHostName, Address: "Web-1"}, {Type: v1.NodeExternalIP, Address: "::1"}, {Type: v1.NodeInternalIP, Address: "127.0.85.120"}}},
	}
	for _, tc := range cases {
		w := newWorld(t, hetznertest.Options{}, tc.edit)
		s := put(w)
		in := kittest.ListedOne(t, w.cloud.source().ListInstances)
		want := view.Instance{
			ProviderID: fmt.Sprintf("hcloud://%d", s.ID), ID: fmt.Sprint(s.ID), Name: "Web-1", NodeName: "web-1",
			Zone: "nbg1-dc3", Region: "nbg1", InstanceType: "cpx31", Cluster: testCluster, State: view.StateRunning,
			Addresses: tc.want, Labels: map[string]string{DefaultClusterLabel: testCluster, "role": "worker"}, Created: created,
		}
		kittest.Same(t, tc.name, in, nil, want)
	}
	// A server with no public network and no private one has only its name;
	// a name no Node can have gives no Node name; a location opened since
	// datacenters left the API is its own zone.
	w := newWorld(t, hetznertest.Options{}, nil)
	w.hz.Put(hetznertest.Server{Name: "bad_name", Location: "fsn2", Labels: map[string]string{DefaultClusterLabel: testCluster}})
	all, err := w.cloud.source().ListInstances(context.Background())
	if err != nil || len(all) != 1 {
		t.Fatal(all, err)
	}
	if in := all[0]; in.NodeName != "" || in.Zone != "fsn2" || in.Region != "fsn2" ||
		fmt.Sprint(in.Addresses) != fmt.Sprint([]v1.NodeAddress{{Type: v1.NodeHostName, Address: "bad_name"}}) {
		t.Fatalf("%+v", in)
	}
}

// Every status Hetzner documents, and one it may add, maps to a state
// (the conformance suite checks what each state means to InstancesV2).
func TestStates(t *testing.T) {
	src := Source{ClusterLabel: DefaultClusterLabel, ClusterID: testCluster}
	for status, want := range map[string]view.State{
		"running": view.StateRunning, "off": view.StateStopped, "stopping": view.StateStopped, "deleting": view.StateTerminated,
		"initializing": view.StatePending, "starting": view.StatePending, "migrating": view.StatePending,
		"rebuilding": view.StatePending, "unknown": view.StatePending, "some-new-status": view.StatePending,
	} {
		in, ok := src.toView(&hcloud.Server{ID: 7, Name: "x", Status: hcloud.ServerStatus(status), Labels: map[string]string{DefaultClusterLabel: testCluster}})
		if !ok || in.State != want {
			t.Errorf("status %s: state %s, want %s", status, in.State, want)
		}
	}
}

// Failures beyond the conformance suite's: a failed page keeps the API's
// error code, a listing without pagination is refused, a server deleted
// between pages at every attempt gives up after listAttempts; a server
// created between pages lands after every other and moves nothing (one
// attempt); an outage fails Named (the join tickets' lookup) too.
func TestListingFailuresAreErrors(t *testing.T) {
	w := newWorld(t, hetznertest.Options{PageLimit: 2}, nil)
	var servers []hetznertest.Server
	for i := range 5 {
		servers = append(servers, w.add(fmt.Sprintf("node-%d", i), 10+i, nil))
	}
	ctx := context.Background()
	src := w.cloud.source()
	w.hz.FailPage("list", 2, 1, http.StatusServiceUnavailable, "unavailable")
	if all, err := src.ListInstances(ctx); err == nil || !hcloud.IsError(err, "unavailable") {
		t.Fatalf("failed second page: %d servers, %v", len(all), err)
	}
	w.hz.OmitPagination(true)
	if _, err := src.ListInstances(ctx); !errors.Is(err, errListing) {
		t.Fatalf("no meta.pagination: %v", err)
	}
	w.hz.OmitPagination(false)
	w.hz.OnList(func(page int) {
		if page == 2 {
			w.add("late", 20, nil)
			w.hz.OnList(nil)
		}
	})
	calls := w.hz.Calls("list")
	all, err := src.ListInstances(ctx)
	if err != nil || len(all) != 6 || all[5].Name != "late" || w.hz.Calls("list")-calls != 3 {
		t.Fatalf("creation between pages: %+v %v, %d list calls", all, err, w.hz.Calls("list")-calls)
	}
	n := 0
	w.hz.OnList(func(page int) {
		if page == 2 {
			w.hz.Delete(servers[n].ID)
			n++
		}
	})
	if _, err := src.ListInstances(ctx); !errors.Is(err, errListing) || !strings.Contains(err.Error(), "fell") {
		t.Fatalf("deletion between pages at every attempt: %v", err)
	}
	w.hz.OnList(nil)
	if n != listAttempts {
		t.Fatalf("%d attempts, want %d", n, listAttempts)
	}
	w.hz.SetDown(true)
	w.cloud.InstanceView().Invalidate()
	if _, err := w.cloud.InstanceView().Named(ctx, "node-4", 0); err == nil || errors.Is(err, view.ErrNotFound) {
		t.Fatalf("an outage answered Named: %v", err)
	}
	w.hz.SetDown(false)
	w.cloud.InstanceView().Invalidate()
	if in, err := w.cloud.InstanceView().Named(ctx, "node-4", 0); err != nil || len(in) != 1 {
		t.Fatalf("after the outage: %+v %v", in, err)
	}
}

// A wrong token is refused by the API; the error does not carry it.
func TestTokenSentAndNotLeaked(t *testing.T) {
	w := newWorld(t, hetznertest.Options{}, func(c *Config) { c.TokenFile = kittest.SecretFile(t, "wrong-token-value") })
	w.add("node-1", 10, nil)
	_, err := w.cloud.source().ListInstances(context.Background())
	if !hcloud.IsError(err, hcloud.ErrorCodeUnauthorized) || strings.Contains(err.Error(), "wrong-token-value") {
		t.Fatalf("wrong token: %v", err)
	}
	if w.hz.Calls("unauthorized") != 1 {
		t.Fatalf("%d unauthorized calls", w.hz.Calls("unauthorized"))
	}
	// The token from the environment.
	hz := hetznertest.NewStarted(t, hetznertest.Options{})
	hz.Put(hetznertest.Server{Name: "n", Labels: map[string]string{"cluster": testCluster}})
	t.Setenv("MY_HCLOUD_TOKEN", hz.Token())
	c, err := New(Config{Endpoint: hz.Endpoint(), TokenEnv: "MY_HCLOUD_TOKEN", ClusterID: testCluster, ClusterLabel: "cluster"})
	if err != nil {
		t.Fatal(err)
	}
	if all, err := c.source().ListInstances(context.Background()); err != nil || len(all) != 1 {
		t.Fatalf("%+v %v", all, err)
	}
	// Read from tokenFile or tokenEnv (how, and that errors show no
	// value: kit's TestSecret).
	kittest.Secret(t, "hetzner: API token", func(file, env string) (string, error) {
		c := Config{ClusterID: testCluster, TokenFile: file, TokenEnv: env}
		return c.Token()
	})
}

// The config's own fields and defaults; kittest.Config checks that it
// applies kit's checks (endpoint, token, durations, strictness) to them.
func TestConfig(t *testing.T) {
	good := "clusterID: c1\n"
	kittest.Config(t, ParseConfig, good,
		kittest.Fields{Endpoint: "endpoint", SecretFile: "tokenFile", SecretEnv: "tokenEnv", Durations: []string{"maxFailureBackoff"}})
	c, err := ParseConfig(strings.NewReader(good))
	if err != nil || c.Endpoint != DefaultEndpoint || c.TokenEnv != DefaultTokenEnv || c.ClusterLabel != DefaultClusterLabel ||
		c.AddressFamily != AddressFamilyDualStack || c.LabelSelector() != "mooring.dev/cluster==c1" || c.RequestTimeout.Duration != DefaultRequestTimeout {
		t.Fatalf("%+v %v", c, err)
	}
	c, err = ParseConfig(strings.NewReader("clusterID: prod\nclusterLabel: cluster\ntokenFile: /etc/hcloud/token\nnetwork: 4711\naddressFamily: ipv4\n"))
	if err != nil || c.TokenEnv != "" || c.LabelSelector() != "cluster==prod" || c.Network != (NetworkRef{ID: 4711}) {
		t.Fatalf("%+v %v", c, err)
	}
	for _, bad := range []string{
		"", "clusterLabel: x\n", good + "clusterLabel: 'bad key!'\n",
		good + "clusterLabel: hetzner.cloud/cluster\n", "clusterID: 'bad value!'\n", good + "network: -1\n",
		good + "addressFamily: ipv5\n", good + "nodeNamePolicy: ServerID\n", good + "clusterID: c2\n",
	} {
		if _, err := ParseConfig(strings.NewReader(bad)); err == nil {
			t.Errorf("accepted:\n%s", bad)
		}
	}
	// Every problem at once.
	_, err = ParseConfig(strings.NewReader("addressFamily: x\nnetwork: -2\n"))
	if err == nil || !strings.Contains(err.Error(), "clusterID is required") || !strings.Contains(err.Error(), "addressFamily") || !strings.Contains(err.Error(), "network") {
		t.Fatalf("%v", err)
	}
}

// ParseProviderID is kit.NumericProviderID with this cloud's prefix, the
// agent's ProviderID's inverse.
func TestProviderID(t *testing.T) { kittest.NumericProviderID(t, ParseProviderID, agentid.ProviderID) }

func (w *world) identity(t *testing.T, s hetznertest.Server, settings map[string]string) *agentid.NodeIdentity {
	t.Helper()
	return nodeidtest.Agent(t, agentid.NewNodeIdentity, settings)(w.hz.MetadataURL(s.ID))
}

// The node agent's identity from the metadata service agrees with the view
// (nodeidtest.Unsigned). Its own: the address is the one in the network
// the network setting names, or in the first one; a network the server is
// not attached to is an error.
func TestAgentIdentity(t *testing.T) {
	w := newWorld(t, hetznertest.Options{}, nil)
	ctx := context.Background()
	servers := map[string]hetznertest.Server{}
	n := 9
	nodeidtest.Unsigned(t, nodeidtest.Bed{
		Put: func(name string, bare bool) (nodeid.Identity, nodeid.Instance) {
			n++
			s := hetznertest.Server{Name: name, Labels: map[string]string{DefaultClusterLabel: testCluster}, PublicIPv4: fmt.Sprintf("127.0.86.%d", n)}
			internal := ""
			if !bare {
				internal = fmt.Sprintf("127.0.85.%d", 100+n)
				s.PrivateNets = []hetznertest.PrivateNet{{Network: 99, IP: internal}, {Network: hetznertest.DefaultNetworkID, IP: fmt.Sprintf("127.0.85.%d", n)}}
			}
			s = w.hz.Put(s)
			servers[name] = s
			return w.identity(t, s, nil), nodeid.Instance{ID: fmt.Sprint(s.ID), Name: name, ProviderID: fmt.Sprintf("hcloud://%d", s.ID),
				NodeName: strings.ToLower(name), InternalIP: internal}
		},
		View:     w.cloud.InstanceView(),
		FailNext: func() { w.hz.Fail("metadata", 1, http.StatusInternalServerError, "") },
		Stop:     func(in nodeid.Instance) error { return w.hz.SetStatus(servers["Node-7"].ID, "off") },
	})
	s := w.hz.Put(hetznertest.Server{Name: "node-2", Labels: map[string]string{DefaultClusterLabel: testCluster},
		PrivateNets: []hetznertest.PrivateNet{{Network: 99, IP: "127.0.85.110"}, {Network: hetznertest.DefaultNetworkID, IP: "127.0.85.10"}}})
	ni, err := w.identity(t, s, map[string]string{agentid.SettingNetwork: fmt.Sprint(hetznertest.DefaultNetworkID)}).Instance(ctx)
	if err != nil || ni.InternalIP != "127.0.85.10" {
		t.Fatalf("network setting: %+v %v", ni, err)
	}
	if _, err := w.identity(t, s, map[string]string{agentid.SettingNetwork: "5"}).Instance(ctx); err == nil {
		t.Fatal("a network the server is not attached to gave an address")
	}
}

// InstancesV2 and Zones as Hetzner's: metadata as the upstream CCM sets
// it (the provided-by label, the former datacenter as zone), zones by
// providerID and by Node name, an unknown Node name not found, a failing
// get of a server the list missed no verdict; the cluster id is the
// approver's tag.
func TestInstancesV2(t *testing.T) {
	w := newWorld(t, hetznertest.Options{}, nil)
	var servers []hetznertest.Server
	for i := range 4 {
		servers = append(servers, w.add(fmt.Sprintf("node-%d", i), 10+i, nil))
	}
	ctx := context.Background()
	md, err := w.cloud.InstanceMetadata(ctx, node("node-1", ""))
	if err != nil {
		t.Fatal(err)
	}
	if md.ProviderID != agentid.ProviderID(servers[1].ID) || md.InstanceType != hetznertest.DefaultServerType || md.Zone != "fsn1-dc14" ||
		md.Region != "fsn1" || md.AdditionalLabels[ProvidedByLabel] != "cloud" || len(md.NodeAddresses) != 3 {
		t.Fatalf("%+v", md)
	}
	zones, ok := w.cloud.Zones()
	if !ok {
		t.Fatal("Zones is not implemented")
	}
	z, err := zones.GetZoneByProviderID(ctx, agentid.ProviderID(servers[2].ID))
	if err != nil || z.FailureDomain != "fsn1-dc14" || z.Region != "fsn1" {
		t.Fatalf("%+v %v", z, err)
	}
	if z, err := zones.GetZoneByNodeName(ctx, types.NodeName("node-3")); err != nil || z.Region != "fsn1" {
		t.Fatalf("%+v %v", z, err)
	}
	w.cloud.InstanceView().Invalidate()
	if _, err := w.cloud.InstanceMetadata(ctx, node("node-9", "")); !errors.Is(err, cloudprovider.InstanceNotFound) {
		t.Fatalf("unknown node: %v", err)
	}
	w.hz.Delete(servers[2].ID)
	w.hz.Fail("get", 1, http.StatusInternalServerError, "server_error")
	w.cloud.InstanceView().Invalidate()
	if _, err := w.cloud.InstanceExists(ctx, node("node-2", agentid.ProviderID(servers[2].ID))); err == nil {
		t.Fatal("a failing get answered InstanceExists")
	}
	if w.cloud.ClusterTag() != testCluster {
		t.Fatalf("cluster tag %q", w.cloud.ClusterTag())
	}
}
