package agentid

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/mooring-dev/mooring/cloud/nodeid"
)

// genuine are the config drives of real clouds kept in
// ../testdata/configdrive (sources in ../testdata/README.md), and what the
// agent must read from each: the server's id and name, and its address
// from network_data.json (OVH's one network; Rackspace's first IPv4
// network, PublicNet, before ServiceNet; none on the drives from before
// network_data.json).
var genuine = []struct {
	drive, id, name, ip string
}{
	{"ovh", "7398a9a5-2a6a-477d-a0ff-1948ed2e211d", "centos-7-ovh-bhs1-0002156591", "158.69.65.118"},
	{"rax-iad", "e5bf01c5-5be7-4c2e-b436-14e0ee5ac855", "pabelanger-test", "146.20.110.113"},
	{"rax", "2615627a-222f-41bb-813b-df92b776ee78", "test-monty-config-drive", ""},
	{"hp", "88a8a694-bd3d-428d-870e-673790ac90d1", "monty-testnova", ""},
}

func genuineDrive(t *testing.T, name string) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "testdata", "configdrive", name))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func newIdentity(t *testing.T, metadataURL string, settings map[string]string) *NodeIdentity {
	t.Helper()
	n, err := NewNodeIdentity(nodeid.Config{MetadataURL: metadataURL, Settings: settings})
	if err != nil {
		t.Fatal(err)
	}
	// No test looks at this machine's devices or mounts anything.
	n.drive.devRoot = t.TempDir()
	n.drive.mount = func(string, string) error { return errors.New("no mounting in tests") }
	return n
}

// The genuine drives, read from a directory: id, name and address.
func TestGenuineConfigDrives(t *testing.T) {
	for _, g := range genuine {
		n := newIdentity(t, "", map[string]string{SettingMetadataSource: SourceConfigDrive, SettingConfigDrive: genuineDrive(t, g.drive)})
		got, err := n.Instance(context.Background())
		want := nodeid.Instance{ID: g.id, Name: g.name, NodeName: g.name, ProviderID: "openstack:///" + g.id, InternalIP: g.ip}
		if err != nil || got != want {
			t.Errorf("%s: got %+v %v\nwant %+v", g.drive, got, err, want)
		}
	}
}

// metadataService serves a drive's openstack/latest files as Nova's
// metadata service does, and local-ipv4 when it is given; it counts the
// paths asked.
type metadataService struct {
	dir, localIPv4 string
	status         int // answers every path with it when set
	mu             sync.Mutex
	asked          map[string]int
}

func (m *metadataService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	m.asked[r.URL.Path]++
	m.mu.Unlock()
	if m.status != 0 {
		http.Error(w, "failing", m.status)
		return
	}
	if r.URL.Path == LocalIPv4Path && m.localIPv4 != "" {
		_, _ = w.Write([]byte(m.localIPv4))
		return
	}
	if rest, ok := strings.CutPrefix(r.URL.Path, "/openstack/latest/"); ok && !strings.Contains(rest, "/") {
		if data, err := os.ReadFile(filepath.Join(m.dir, "openstack", "latest", rest)); err == nil {
			_, _ = w.Write(data)
			return
		}
	}
	http.NotFound(w, r)
}

func (m *metadataService) count(path string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.asked[path]
}

func serve(t *testing.T, m *metadataService) string {
	t.Helper()
	m.asked = map[string]int{}
	s := httptest.NewServer(m)
	t.Cleanup(s.Close)
	return s.URL
}

// The same genuine documents from the metadata service: without a
// local-ipv4 the address comes from network_data.json; with one,
// network_data.json is not asked for.
func TestGenuineMetadataService(t *testing.T) {
	for _, g := range genuine {
		m := &metadataService{dir: genuineDrive(t, g.drive)}
		n := newIdentity(t, serve(t, m), nil)
		got, err := n.Instance(context.Background())
		want := nodeid.Instance{ID: g.id, Name: g.name, NodeName: g.name, ProviderID: "openstack:///" + g.id, InternalIP: g.ip}
		if err != nil || got != want {
			t.Errorf("%s: got %+v %v\nwant %+v", g.drive, got, err, want)
		}
		if m.count(NetworkDataPath) != 1 {
			t.Errorf("%s: network_data.json asked %d times", g.drive, m.count(NetworkDataPath))
		}
	}
	m := &metadataService{dir: genuineDrive(t, "ovh"), localIPv4: "10.0.0.7\n"}
	got, err := newIdentity(t, serve(t, m), nil).Instance(context.Background())
	if err != nil || got.InternalIP != "10.0.0.7" || m.count(NetworkDataPath) != 0 {
		t.Fatalf("with local-ipv4: %+v %v; network_data.json asked %d times", got, err, m.count(NetworkDataPath))
	}
	// Nova answers the request's address as local-ipv4 for a server without
	// a fixed IPv4 address: an IPv6 one is not taken.
	m = &metadataService{dir: genuineDrive(t, "ovh"), localIPv4: "2001:db8::9"}
	got, err = newIdentity(t, serve(t, m), nil).Instance(context.Background())
	if err != nil || got.InternalIP != "158.69.65.118" {
		t.Fatalf("with an IPv6 local-ipv4: %+v %v", got, err)
	}
}

// NodeAddress: the first IPv4 network with an address, else the first
// IPv6 one; DHCP networks have none; a wrong address is an error.
func TestNodeAddress(t *testing.T) {
	for _, tc := range []struct {
		name string
		nets []Network
		want string
		bad  bool
	}{
		{"none", nil, "", false},
		{"DHCP only", []Network{{ID: "network0", Type: "ipv4_dhcp"}, {ID: "network1", Type: "ipv6_dhcp"}}, "", false},
		{"IPv4 after IPv6", []Network{{Type: "ipv6", IPAddress: "2001:db8::5"}, {Type: "ipv4_dhcp"}, {Type: "ipv4", IPAddress: "192.0.2.5"},
			{Type: "ipv4", IPAddress: "192.0.2.6"}}, "192.0.2.5", false},
		{"IPv6 only, SLAAC", []Network{{Type: "ipv6_slaac", IPAddress: "2001:db8::7"}, {Type: "ipv6", IPAddress: "2001:db8::8"}}, "2001:db8::7", false},
		{"IPv4 by DHCP, IPv6 static", []Network{{Type: "ipv4_dhcp"}, {Type: "ipv6", IPAddress: "2001:db8::8"}}, "", false},
		{"cloud-init's static", []Network{{Type: "static", IPAddress: "192.0.2.9"}}, "192.0.2.9", false},
		{"unknown type", []Network{{Type: "ipv4_magic", IPAddress: "192.0.2.10"}, {Type: "ipv4", IPAddress: "192.0.2.11"}}, "192.0.2.11", false},
		{"not an address", []Network{{Type: "ipv4", IPAddress: "192.0.2.300"}}, "", true},
		{"with a prefix", []Network{{Type: "ipv4", IPAddress: "192.0.2.5/24"}}, "", true},
		{"IPv6 under ipv4", []Network{{Type: "ipv4", IPAddress: "2001:db8::1"}}, "", true},
		{"IPv4 under ipv6", []Network{{Type: "ipv6", IPAddress: "192.0.2.1"}}, "", true},
	} {
		got, err := (&NetworkData{Networks: tc.nets}).NodeAddress()
		if got != tc.want || (err != nil) != tc.bad {
			t.Errorf("%s: %q %v, want %q (error %v)", tc.name, got, err, tc.want, tc.bad)
		}
	}
}

// writeDrive lays out a config drive's files under dir.
func writeDrive(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const testMetaData = `{"uuid": "9e5476bd-a4ec-4653-93d6-72c93aa682ba", "name": "web-1", "admin_pass": "do-not-show"}`

// The drive's device found by its label under /dev/disk/by-label (a tree
// here), mounted read-only on a temporary directory under the mount
// directory, read, unmounted, and the directory removed.
func TestConfigDriveByLabel(t *testing.T) {
	for _, label := range DriveLabels {
		n := newIdentity(t, "", map[string]string{SettingMetadataSource: SourceConfigDrive})
		byLabel := filepath.Join(n.drive.devRoot, "disk", "by-label")
		if err := os.MkdirAll(byLabel, 0o755); err != nil {
			t.Fatal(err)
		}
		dev := filepath.Join(n.drive.devRoot, "sr0")
		if err := os.WriteFile(dev, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("../../sr0", filepath.Join(byLabel, label)); err != nil {
			t.Fatal(err)
		}
		n.drive.mountDir = filepath.Join(t.TempDir(), "run", "mooring")
		var mounted, unmounted string
		n.drive.mount = func(d, dir string) error {
			if d != dev {
				t.Errorf("mounted %s, want %s", d, dev)
			}
			mounted = dir
			writeDrive(t, dir, map[string]string{DriveMetaData: testMetaData,
				DriveEC2MetaData: `{"local-ipv4": "192.0.2.20", "instance-id": "i-00000001"}`})
			return nil
		}
		n.drive.unmount = func(dir string) error {
			unmounted = dir
			// What the mount showed goes away with it.
			for _, sub := range []string{"openstack", "ec2"} {
				if err := os.RemoveAll(filepath.Join(dir, sub)); err != nil {
					return err
				}
			}
			return nil
		}
		got, err := n.Instance(context.Background())
		if err != nil || got.ID != "9e5476bd-a4ec-4653-93d6-72c93aa682ba" || got.InternalIP != "192.0.2.20" {
			t.Fatalf("%s: %+v %v", label, got, err)
		}
		if filepath.Dir(mounted) != n.drive.mountDir || unmounted != mounted {
			t.Fatalf("%s: mounted on %q, unmounted %q (mount dir %s)", label, mounted, unmounted, n.drive.mountDir)
		}
		if _, err := os.Stat(mounted); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s: mount point left behind: %v", label, err)
		}
		// A mount that fails is an error, and leaves no mount point.
		n.drive.mount = func(string, string) error { return errors.New("wrong fs type") }
		if _, err := n.Instance(context.Background()); err == nil || !strings.Contains(err.Error(), "wrong fs type") {
			t.Fatalf("%s: failed mount: %v", label, err)
		}
		if entries, _ := os.ReadDir(n.drive.mountDir); len(entries) != 0 {
			t.Fatalf("%s: %d mount points left behind", label, len(entries))
		}
	}
	// No device of either label.
	n := newIdentity(t, "", map[string]string{SettingMetadataSource: SourceConfigDrive})
	if _, err := n.Instance(context.Background()); !errors.Is(err, errNoDrive) || !strings.Contains(err.Error(), "config-2") {
		t.Fatalf("no drive: %v", err)
	}
}

// What a drive may hold: an EC2 local-ipv4 (null without a fixed IPv4
// address) before network_data.json, no network_data.json; what it may not:
// no meta_data.json, a link out of the drive, documents that are not JSON
// (their text never in the error).
func TestConfigDriveContents(t *testing.T) {
	ctx := context.Background()
	netData := `{"links": [{"id": "tap1", "ethernet_mac_address": "fa:16:3e:00:00:01", "type": "ovs", "mtu": null}],
		"networks": [{"id": "network0", "type": "ipv4", "link": "tap1", "ip_address": "192.0.2.30", "netmask": "255.255.255.0",
		"routes": [], "network_id": "f0000000-0000-4000-8000-000000000000", "services": []}], "services": []}`
	read := func(files map[string]string) (nodeid.Instance, error) {
		dir := t.TempDir()
		writeDrive(t, dir, files)
		return newIdentity(t, "", map[string]string{SettingMetadataSource: SourceConfigDrive, SettingConfigDrive: dir}).Instance(ctx)
	}
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"local-ipv4 first", map[string]string{DriveMetaData: testMetaData, DriveEC2MetaData: `{"local-ipv4": "192.0.2.31"}`, DriveNetworkData: netData}, "192.0.2.31"},
		{"local-ipv4 null", map[string]string{DriveMetaData: testMetaData, DriveEC2MetaData: `{"local-ipv4": null}`, DriveNetworkData: netData}, "192.0.2.30"},
		{"no EC2 metadata", map[string]string{DriveMetaData: testMetaData, DriveNetworkData: netData}, "192.0.2.30"},
		{"meta_data.json only", map[string]string{DriveMetaData: testMetaData}, ""},
		// Nova's local-ipv4 of a server without a fixed IPv4 address is the
		// request's address: not the server's.
		{"local-ipv4 IPv6", map[string]string{DriveMetaData: testMetaData, DriveEC2MetaData: `{"local-ipv4": "2001:db8::1"}`, DriveNetworkData: netData}, "192.0.2.30"},
	} {
		got, err := read(tc.files)
		if err != nil || got.InternalIP != tc.want || got.NodeName != "web-1" {
			t.Errorf("%s: %+v %v, want address %q", tc.name, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"no meta_data.json", map[string]string{DriveNetworkData: netData}, "not an OpenStack config drive"},
		{"meta_data.json not JSON", map[string]string{DriveMetaData: `admin_pass=do-not-show`}, "is not JSON"},
		{"network_data.json not JSON", map[string]string{DriveMetaData: testMetaData, DriveNetworkData: `do-not-show`}, "is not JSON"},
		{"local-ipv4 not an address", map[string]string{DriveMetaData: testMetaData, DriveEC2MetaData: `{"local-ipv4": "no-address"}`}, "not an IP address"},
		{"uuid not a server id", map[string]string{DriveMetaData: `{"uuid": "nope", "name": "x"}`}, "not a server id"},
	} {
		_, err := read(tc.files)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "do-not-show") {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	// A link out of the drive is not followed.
	outside := t.TempDir()
	writeDrive(t, outside, map[string]string{"meta_data.json": testMetaData})
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "openstack", "latest"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "meta_data.json"), filepath.Join(dir, DriveMetaData)); err != nil {
		t.Fatal(err)
	}
	if _, err := newIdentity(t, "", map[string]string{SettingMetadataSource: SourceConfigDrive, SettingConfigDrive: dir}).Instance(ctx); err == nil {
		t.Fatal("a meta_data.json linked from outside the drive was read")
	}
}

// closedURL is an address where nothing listens.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return "http://" + addr
}

// auto reads the metadata service, and the config drive only when
// nothing answers there or it has no OpenStack metadata; a service that
// fails is an error, not a reason to read the drive. metadataService never
// reads the drive, configDrive never asks the service.
func TestMetadataSources(t *testing.T) {
	ctx := context.Background()
	drive := genuineDrive(t, "ovh")
	fromDrive := func(n *NodeIdentity) (nodeid.Instance, error) { return n.Instance(ctx) }

	// Nothing listens: the drive.
	n := newIdentity(t, closedURL(t), map[string]string{SettingConfigDrive: drive})
	if got, err := fromDrive(n); err != nil || got.InternalIP != "158.69.65.118" {
		t.Fatalf("no service: %+v %v", got, err)
	}
	// A service without OpenStack metadata (404): the drive.
	m := &metadataService{dir: t.TempDir()}
	n = newIdentity(t, serve(t, m), map[string]string{SettingConfigDrive: drive})
	if got, err := fromDrive(n); err != nil || got.Name != "centos-7-ovh-bhs1-0002156591" {
		t.Fatalf("404 service: %+v %v", got, err)
	}
	// A service that fails: its error.
	m = &metadataService{dir: drive, status: http.StatusInternalServerError}
	n = newIdentity(t, serve(t, m), map[string]string{SettingConfigDrive: drive})
	if _, err := fromDrive(n); err == nil || !strings.Contains(err.Error(), "HTTP 500") {
		t.Fatalf("failing service: %v", err)
	}
	// A service that answers: the drive is not read.
	m = &metadataService{dir: genuineDrive(t, "rax-iad")}
	n = newIdentity(t, serve(t, m), map[string]string{SettingConfigDrive: drive})
	if got, err := fromDrive(n); err != nil || got.Name != "pabelanger-test" {
		t.Fatalf("service and drive: %+v %v", got, err)
	}
	// Neither: both named.
	n = newIdentity(t, closedURL(t), nil)
	if _, err := fromDrive(n); err == nil || !errors.Is(err, errNoService) || !errors.Is(err, errNoDrive) {
		t.Fatalf("neither: %v", err)
	}
	// metadataService only.
	n = newIdentity(t, closedURL(t), map[string]string{SettingMetadataSource: SourceMetadataService, SettingConfigDrive: drive})
	if _, err := fromDrive(n); err == nil || errors.Is(err, errNoDrive) {
		t.Fatalf("metadataService read the drive: %v", err)
	}
	// configDrive only: the service is never asked.
	m = &metadataService{dir: genuineDrive(t, "rax-iad")}
	n = newIdentity(t, serve(t, m), map[string]string{SettingMetadataSource: SourceConfigDrive, SettingConfigDrive: drive})
	if got, err := fromDrive(n); err != nil || got.Name != "centos-7-ovh-bhs1-0002156591" || len(m.asked) != 0 {
		t.Fatalf("configDrive: %+v %v, service asked %v", got, err, m.asked)
	}
	// A configured drive that is not there.
	n = newIdentity(t, "", map[string]string{SettingMetadataSource: SourceConfigDrive, SettingConfigDrive: filepath.Join(t.TempDir(), "none")})
	if _, err := fromDrive(n); !errors.Is(err, errNoDrive) {
		t.Fatalf("missing drive: %v", err)
	}
}

func TestSettings(t *testing.T) {
	n, err := NewNodeIdentity(nodeid.Config{Settings: map[string]string{SettingRegion: "RegionOne", SettingMetadataSource: SourceConfigDrive,
		SettingConfigDrive: "/mnt/config", SettingConfigDriveMountDir: "/run/x"}})
	if err != nil || n.region != "RegionOne" || n.source != SourceConfigDrive || n.drive.path != "/mnt/config" || n.drive.mountDir != "/run/x" {
		t.Fatalf("%+v %v", n, err)
	}
	if n, err := NewNodeIdentity(nodeid.Config{}); err != nil || n.source != SourceAuto || n.drive.path != "" || n.drive.mountDir != DefaultMountDir ||
		n.drive.devRoot != "/dev" {
		t.Fatalf("defaults: %+v %v", n, err)
	}
	for _, bad := range []map[string]string{
		{SettingMetadataSource: "ec2"}, {SettingMetadataSource: ""}, {SettingConfigDrive: "mnt/config"}, {SettingConfigDrive: ""},
		{SettingConfigDrive: "/mnt/../config"}, {SettingConfigDriveMountDir: "run"}, {"configdrive": "/mnt/config"},
	} {
		if _, err := NewNodeIdentity(nodeid.Config{Settings: bad}); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
