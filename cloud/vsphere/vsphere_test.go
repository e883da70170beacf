package vsphere

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmware/govmomi/session"
	"github.com/vmware/govmomi/vim25/types"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooring-dev/mooring/cloud/kit/kittest"
	"github.com/mooring-dev/mooring/cloud/view"
	"github.com/mooring-dev/mooring/cloud/vsphere/vspheretest"
)

const testCluster = "c1"

// calls counts the requests the provider makes, by SOAP method or REST
// path and action.
type calls struct {
	mu sync.Mutex
	n  map[string]int
}

var soapMethod = regexp.MustCompile(`<(?:\w+:)?Body[^>]*>\s*<(\w+)`)

func (c *calls) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		key := "REST " + req.Method + " " + req.URL.Path
		if a := req.URL.Query().Get("action"); a != "" {
			key += "?action=" + a
		} else if a := req.URL.Query().Get("~action"); a != "" {
			key += "?action=" + a
		}
		if strings.HasSuffix(req.URL.Path, "/sdk") && req.Body != nil {
			body, err := io.ReadAll(req.Body)
			if err != nil {
				return nil, err
			}
			req.Body = io.NopCloser(bytes.NewReader(body))
			if m := soapMethod.FindSubmatch(body); m != nil {
				key = "SOAP " + string(m[1])
			}
		}
		c.mu.Lock()
		c.n[key]++
		c.mu.Unlock()
		return next.RoundTrip(req)
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// take returns the counts since the last take, and resets them.
func (c *calls) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.n
	c.n = map[string]int{}
	return out
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

type world struct {
	sim   *vspheretest.Sim
	cloud *Cloud
	calls *calls
	// tag ids
	zoneA, zoneB, region, member string
}

func writeFile(t *testing.T, name, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// newWorld starts vcsim with the categories k8s-zone, k8s-region and
// k8s-cluster: region-a on the datacenter, zone-a on the cluster DC0_C0,
// zone-b on the standalone host DC0_H0.
func newWorld(t *testing.T, edit func(*Config)) *world {
	t.Helper()
	sim := vspheretest.Start(t)
	w := &world{sim: sim, calls: &calls{n: map[string]int{}}}
	must := func(s string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	zone := must(sim.CreateCategory("k8s-zone"))
	region := must(sim.CreateCategory("k8s-region"))
	cluster := must(sim.CreateCategory("k8s-cluster"))
	w.zoneA, w.zoneB = must(sim.CreateTag(zone, "zone-a")), must(sim.CreateTag(zone, "zone-b"))
	w.region = must(sim.CreateTag(region, "region-a"))
	w.member = must(sim.CreateTag(cluster, testCluster))
	for tag, path := range map[string]string{
		w.region: "/DC0", w.zoneA: "/DC0/host/DC0_C0", w.zoneB: "/DC0/host/DC0_H0/DC0_H0",
	} {
		ref, err := sim.Ref(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := sim.Attach(tag, ref); err != nil {
			t.Fatal(err)
		}
	}
	cfg := Config{Server: sim.URL, CAFile: sim.CAFile, Username: vspheretest.Username,
		PasswordFile: writeFile(t, "password", vspheretest.Password+"\n"),
		ClusterID:    testCluster, Folder: sim.Folder, Labels: Labels{Zone: "k8s-zone", Region: "k8s-region"},
		ListConfig: kittest.Quick(10 * time.Second)}
	if edit != nil {
		edit(&cfg)
	}
	c, err := New(cfg, WithTransport(w.calls.wrap))
	if err != nil {
		t.Fatal(err)
	}
	w.cloud = c
	return w
}

func uuid(i int) string { return fmt.Sprintf("4237%04x-c66e-05e3-9d0b-9e1205b24d43", i) }

func (w *world) add(t *testing.T, vm vspheretest.VM) types.ManagedObjectReference {
	t.Helper()
	ref, err := w.sim.AddVM(vm)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

func list(t *testing.T, c *Cloud) map[string]view.Instance {
	t.Helper()
	ins, err := c.source.ListInstances(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]view.Instance{}
	for _, in := range ins {
		out[in.Name] = in
	}
	return out
}

// The listing reads the folder's VMs (its subfolders included; not
// templates; the conformance suite checks that VMs elsewhere are left
// out), with what vCenter says of them: BIOS
// UUIDs as providerIDs, power states, creation dates, VMware Tools'
// addresses, zone and region from the tags of the host's hierarchy.
func TestListReadsTheFolder(t *testing.T) {
	w := newWorld(t, nil)
	before := time.Now().Add(-time.Second)
	w.add(t, vspheretest.VM{Name: "Node-1", UUID: strings.ToUpper(uuid(1)), Host: "DC0_C0_H1", IP: "127.0.90.11", HostName: "node-1.example"})
	w.add(t, vspheretest.VM{Name: "node-2", UUID: uuid(2), IP: "127.0.90.12"})
	sub, err := w.sim.CreateFolder(w.sim.Folder, "pool-a")
	if err != nil {
		t.Fatal(err)
	}
	w.add(t, vspheretest.VM{Name: "node-3", UUID: uuid(3), IP: "127.0.90.13", Off: true, Folder: sub})
	w.add(t, vspheretest.VM{Name: "template", UUID: uuid(4), IP: "127.0.90.14", Template: true})
	got := list(t, w.cloud)
	names := make([]string, 0, len(got))
	for n := range got {
		names = append(names, n)
	}
	sort.Strings(names)
	if fmt.Sprint(names) != "[Node-1 node-2 node-3]" {
		t.Fatalf("listed %v", names)
	}
	n1 := got["Node-1"]
	want := []v1.NodeAddress{{Type: v1.NodeHostName, Address: "node-1.example"},
		{Type: v1.NodeInternalIP, Address: "127.0.90.11"}, {Type: v1.NodeExternalIP, Address: "127.0.90.11"}}
	if n1.ProviderID != "vsphere://"+uuid(1) || n1.ID != uuid(1) || n1.NodeName != "node-1" || n1.Cluster != testCluster ||
		n1.State != view.StateRunning || n1.Zone != "zone-a" || n1.Region != "region-a" ||
		n1.InstanceType != "vsphere-vm.cpu-2.mem-4gb.os-ubuntu64" || fmt.Sprint(n1.Addresses) != fmt.Sprint(want) ||
		n1.Created.Before(before) || n1.Created.After(time.Now()) {
		t.Errorf("Node-1: %+v", n1)
	}
	if n2 := got["node-2"]; n2.Zone != "zone-b" || n2.Region != "region-a" || n2.State != view.StateRunning {
		t.Errorf("node-2: %+v", n2)
	}
	if n3 := got["node-3"]; n3.State != view.StateStopped {
		t.Errorf("node-3: %+v", n3)
	}
}

// A listing costs the same few calls with 3 VMs and with 30: one property
// collector retrieval, not a call per VM, and one tag request once the
// tags are known.
func TestListCallsDoNotGrowWithVMs(t *testing.T) {
	w := newWorld(t, func(c *Config) { c.ClusterTagCategory = "k8s-cluster" })
	member := func(ref types.ManagedObjectReference) {
		if err := w.sim.Attach(w.member, ref); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		member(w.add(t, vspheretest.VM{Name: fmt.Sprintf("vm-%d", i), UUID: uuid(i), IP: "127.0.90.20"}))
	}
	if got := list(t, w.cloud); len(got) != 3 {
		t.Fatalf("%d VMs", len(got))
	}
	first := w.calls.take()
	t.Logf("first listing (login, folder, categories, tags): %v", first)
	list(t, w.cloud)
	small := w.calls.take()
	for i := 3; i < 30; i++ {
		ref := w.add(t, vspheretest.VM{Name: fmt.Sprintf("vm-%d", i), UUID: uuid(i), IP: "127.0.90.20",
			Host: fmt.Sprintf("DC0_C0_H%d", i%3)})
		if i%2 == 0 {
			member(ref)
		}
	}
	got := list(t, w.cloud)
	if len(got) != 3+13 {
		t.Fatalf("%d VMs listed, want the 16 that carry the cluster tag", len(got))
	}
	warm := w.calls.take() // the cluster's hosts' zone tag is new
	list(t, w.cloud)
	large := w.calls.take()
	t.Logf("listing of 3 VMs: %v; first of 30: %d calls; then: %v", small, total(warm), large)
	want := map[string]int{"SOAP CreateContainerView": 2, "SOAP RetrievePropertiesEx": 1, "SOAP DestroyView": 2,
		"REST POST /rest/com/vmware/cis/tagging/tag-association?action=list-attached-tags-on-objects": 1}
	if fmt.Sprint(small) != fmt.Sprint(want) || fmt.Sprint(large) != fmt.Sprint(want) {
		t.Errorf("a listing of 3 VMs made %v, of 30 %v; want %v", small, large, want)
	}
	if total(warm) > total(want)+1 {
		t.Errorf("the first listing of 30 VMs made %v", warm)
	}
}

// ConfirmInstance asks vCenter for one BIOS UUID: absent, in another
// folder or without the cluster tag (foreign), or the cluster's.
func TestConfirmInstance(t *testing.T) {
	w := newWorld(t, func(c *Config) { c.ClusterTagCategory = "k8s-cluster" })
	in := w.add(t, vspheretest.VM{Name: "in", UUID: uuid(1), IP: "127.0.90.31"})
	if err := w.sim.Attach(w.member, in); err != nil {
		t.Fatal(err)
	}
	w.add(t, vspheretest.VM{Name: "untagged", UUID: uuid(2), IP: "127.0.90.32"})
	out := w.add(t, vspheretest.VM{Name: "out", UUID: uuid(3), IP: "127.0.90.33", Folder: "/DC0/vm"})
	if err := w.sim.Attach(w.member, out); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	got, err := w.cloud.ConfirmInstance(ctx, "vsphere://"+strings.ToUpper(uuid(1)))
	if err != nil || got.Name != "in" || got.Zone != "zone-b" {
		t.Errorf("in: %+v %v", got, err)
	}
	kittest.Confirms(t, "untagged", w.cloud.ConfirmInstance, "vsphere://"+uuid(2), kittest.Foreign, "tag")
	kittest.Confirms(t, "out of the folder", w.cloud.ConfirmInstance, "vsphere://"+uuid(3), kittest.Foreign, "folder")
	kittest.Confirms(t, "absent", w.cloud.ConfirmInstance, "vsphere://"+uuid(9), kittest.Absent, "")
	if _, err := w.cloud.ConfirmInstance(ctx, "aws:///us-east-1a/i-1"); err == nil {
		t.Error("another cloud's providerID accepted")
	}
	// The CCM's view of a Node: found by providerID in any case (the
	// conformance suite checks power states and a VM vCenter no longer has).
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "in"}, Spec: v1.NodeSpec{ProviderID: "vsphere://" + strings.ToUpper(uuid(1))}}
	md, err := w.cloud.InstanceMetadata(ctx, node)
	if err != nil || md.ProviderID != "vsphere://"+uuid(1) || md.Zone != "zone-b" || md.Region != "region-a" {
		t.Fatalf("metadata: %+v %v", md, err)
	}
	zones, ok := w.cloud.Zones()
	if !ok {
		t.Fatal("Zones is not implemented")
	}
	if z, err := zones.GetZoneByProviderID(ctx, node.Spec.ProviderID); err != nil || z.FailureDomain != "zone-b" || z.Region != "region-a" {
		t.Errorf("zone: %+v %v", z, err)
	}
}

// A session vCenter forgot (expired, or ended by an admin) is logged in
// again, SOAP and REST alike, and the listing goes on.
func TestSessionExpiry(t *testing.T) {
	w := newWorld(t, nil)
	w.add(t, vspheretest.VM{Name: "node-1", UUID: uuid(1), IP: "127.0.90.41"})
	list(t, w.cloud)
	cl, err := w.cloud.source.conn.login(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := session.NewManager(cl.vim).Logout(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := cl.rest.Logout(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.calls.take()
	if got := list(t, w.cloud); len(got) != 1 {
		t.Fatalf("%v", got)
	}
	if n := w.calls.take()["SOAP Login"]; n != 1 {
		t.Errorf("%d logins after the session ended, want 1", n)
	}
	// Only the REST session gone: found by asking it, after a tag call
	// failed.
	cl, _ = w.cloud.source.conn.login(context.Background())
	if err := cl.rest.Logout(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := list(t, w.cloud); len(got) != 1 {
		t.Fatalf("%v", got)
	}
}

// A wrong password is an error that names the user, never the password;
// a missing folder or tag category is an error, never an empty cluster.
func TestFailuresAreErrors(t *testing.T) {
	w := newWorld(t, func(c *Config) { c.PasswordFile = writeFile(t, "pw", "wrong-password") })
	if _, err := w.cloud.source.ListInstances(context.Background()); err == nil || !strings.Contains(err.Error(), vspheretest.Username) || strings.Contains(err.Error(), "wrong-password") {
		t.Errorf("wrong password: %v", err)
	}
	w = newWorld(t, func(c *Config) { c.Folder = "/DC0/vm/nope" })
	if _, err := w.cloud.source.ListInstances(context.Background()); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing folder: %v", err)
	}
	w = newWorld(t, func(c *Config) { c.Labels.Zone = "no-such-category" })
	if _, err := w.cloud.source.ListInstances(context.Background()); err == nil || !strings.Contains(err.Error(), "no tag category") {
		t.Errorf("missing category: %v", err)
	}
}

// A password is any text (only the white space around it is dropped), and
// errors about it never show it.
func TestPassword(t *testing.T) {
	c := Config{PasswordFile: writeFile(t, "pw", " pass wörd\t\n")}
	if pw, err := c.Password(); err != nil || pw != "pass wörd" {
		t.Errorf("%q %v", pw, err)
	}
	kittest.Secret(t, "vsphere: password", func(file, env string) (string, error) {
		c := Config{PasswordFile: file, PasswordEnv: env}
		return c.Password()
	})
}

// Addresses are picked as the upstream CCM picks them: subnets, then
// network names, else the first address as both.
func TestAddressSelection(t *testing.T) {
	w := newWorld(t, func(c *Config) {
		c.Nodes.InternalNetworkSubnetCIDR = "127.0.91.0/24"
		c.Nodes.ExternalVMNetworkName = "vm network"
	})
	w.add(t, vspheretest.VM{Name: "a", UUID: uuid(1), IP: "127.0.91.5"})
	got := list(t, w.cloud)["a"]
	want := []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "127.0.91.5"}, {Type: v1.NodeExternalIP, Address: "127.0.91.5"}}
	if fmt.Sprint(got.Addresses) != fmt.Sprint(want) {
		t.Errorf("%v, want %v", got.Addresses, want)
	}
}

func TestParseConfig(t *testing.T) {
	good := "server: vcenter.example.com\nusername: u@vsphere.local\nclusterID: c1\nfolder: /DC1/vm/k8s\n"
	kittest.Config(t, ParseConfig, good,
		kittest.Fields{Endpoint: "server", SecretFile: "passwordFile", SecretEnv: "passwordEnv", Durations: []string{"maxFailureBackoff", "tagCacheTTL"}})
	c, err := ParseConfig(strings.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	if c.Server != "https://vcenter.example.com/sdk" || c.PasswordEnv != DefaultPasswordEnv || c.NodeNamePolicy != "VMName" || c.Nodes.IPFamily != "ipv4" {
		t.Errorf("defaults: %+v", c)
	}
	for _, tc := range []struct{ cfg, want string }{
		{"", "server is required"},
		{"server: v\n", "username is required"},
		{"server: v\nfolder: DC1/vm\n", "absolute inventory path"},
		{"server: v\nfolder: /DC1/host/x\n", "VM folder"},
		{"server: v\nclusterID: Bad Cluster\n", "clusterID"},
		{"server: v\nlabels: {zone: a, region: a}\n", "same tag category"},
		{"server: v\nnodes: {internalNetworkSubnetCIDR: 10.0.0.0}\n", "internalNetworkSubnetCIDR"},
		{"server: v\nnodes: {ipFamily: ipv5}\n", "ipFamily"},
		{"server: v\nnodeNamePolicy: Hostname\n", "nodeNamePolicy"},
	} {
		if _, err := ParseConfig(strings.NewReader(tc.cfg)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error with %q", tc.cfg, err, tc.want)
		}
	}
}

func TestParseProviderID(t *testing.T) {
	if u, err := ParseProviderID("vsphere://422E4956-AD22-1139-6D72-59CC8F26BC90"); err != nil || u != "422e4956-ad22-1139-6d72-59cc8f26bc90" {
		t.Errorf("%q %v", u, err)
	}
	for _, bad := range []string{"", "vsphere://", "vsphere://x", "hcloud://1", "vsphere:///422e4956-ad22-1139-6d72-59cc8f26bc90"} {
		if _, err := ParseProviderID(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
