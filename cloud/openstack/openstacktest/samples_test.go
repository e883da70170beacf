package openstacktest

import (
	"encoding/json"
	"fmt"
	"github.com/mooring-dev/mooring/cloud/cloudtest"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// memberVisible drops what Nova shows only to admins (its samples are
// recorded as admin; mooring's credential is a project reader): the
// OS-EXT-SRV-ATTR fields, but for the hostname from 2.90, and
// host_status.
func memberVisible(server map[string]any, from290 bool) map[string]any {
	out := map[string]any{}
	for k, v := range server {
		if k == "host_status" || (strings.HasPrefix(k, "OS-EXT-SRV-ATTR:") && !(from290 && k == "OS-EXT-SRV-ATTR:hostname")) {
			continue
		}
		out[k] = v
	}
	return out
}

func keys(v any) []string {
	m, _ := v.(map[string]any)
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// sameShape compares the fields of two server objects, and of their
// flavor, first address and first image link.
func sameShape(t *testing.T, what string, got, want map[string]any) {
	t.Helper()
	first := func(m map[string]any) map[string]any {
		for _, list := range m["addresses"].(map[string]any) {
			return list.([]any)[0].(map[string]any)
		}
		return nil
	}
	for _, c := range []struct {
		part      string
		got, want any
	}{
		{"server", got, want},
		{"flavor", got["flavor"], want["flavor"]},
		{"address", first(got), first(want)},
		{"image", got["image"], want["image"]},
	} {
		if g, w := keys(c.got), keys(c.want); !slices.Equal(g, w) {
			t.Errorf("%s: %s fields differ from Nova's sample:\n  only here:  %v\n  only Nova's: %v", what, c.part, minus(g, w), minus(w, g))
		}
	}
	// Nova's time formats.
	for field, layout := range map[string]string{"created": createdLayout, "updated": createdLayout, "OS-SRV-USG:launched_at": launchedLayout} {
		for side, m := range map[string]map[string]any{"here": got, "Nova's": want} {
			s, _ := m[field].(string)
			if _, err := time.Parse(layout, s); err != nil {
				t.Errorf("%s: %s %s %q is not in %s", what, side, field, s, layout)
			}
		}
	}
}

func minus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// The server object, listed (servers/detail) and shown (servers/{id}), has
// the fields of Nova's own API samples at 2.47 (what mooring asks for) and
// at 2.96 (the highest served), less what only admins see: in particular no
// server_groups in a listing (Nova shows them only for one server) and
// trusted_image_certificates from 2.63.
func TestServerObjectAsNovasSamples(t *testing.T) {
	c := NewStarted(t, Options{})
	id, secret := c.Credential()
	resp, _ := token(t, c, appCred(id, secret))
	tok := resp.Header.Get("X-Subject-Token")
	var last Server
	for i, name := range []string{"new-server-test", "second"} {
		last = c.Put(Server{Name: name, Tags: []string{"t"}, Metadata: map[string]string{"My Server Name": "Apache1"},
			AccessIPv4: "127.0.0.4", Addresses: []Address{{Network: "private", Addr: fmt.Sprintf("127.0.1.%d", 30+i)}}})
	}
	for _, mv := range []string{"2.47", "2.96"} {
		from290 := mv == "2.96"
		list := cloudtest.ArtefactObject(t, "../testdata/nova/v"+mv+"-servers-details-resp.json", "")
		resp, body := get(t, c.ComputeURL()+"/servers/detail?limit=1", tok, "OpenStack-API-Version", "compute "+mv)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", mv, resp.StatusCode)
		}
		if g, w := keys(body), keys(list); !slices.Equal(g, w) {
			t.Errorf("%s: listing %v, Nova's %v", mv, g, w)
		}
		sameShape(t, mv+" servers/detail", body["servers"].([]any)[0].(map[string]any),
			memberVisible(list["servers"].([]any)[0].(map[string]any), from290))

		show := cloudtest.ArtefactObject(t, "../testdata/nova/v"+mv+"-server-get-resp.json", "")
		resp, body = get(t, c.ComputeURL()+"/servers/"+last.ID, tok, "OpenStack-API-Version", "compute "+mv)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s show: %d", mv, resp.StatusCode)
		}
		sameShape(t, mv+" servers/{id}", body["server"].(map[string]any), memberVisible(show["server"].(map[string]any), from290))
	}
}

// A config drive as Nova lays it out, and network_data.json as the
// metadata service serves it: a link per port, a network per port and IP
// version, ipv4_dhcp without an address on a server with DHCP; no
// floating IP; a server without a metadata service answers nothing.
func TestConfigDrive(t *testing.T) {
	c := NewStarted(t, Options{})
	s := c.Put(Server{Name: "Web_1", UserData: "#cloud-config\n", NoMetadataService: true, Addresses: []Address{
		{Network: "private", Addr: "127.0.1.10"}, {Network: "private", Addr: "127.0.2.10", Floating: true},
		{Network: "private", Addr: "::1"}, {Network: "storage", Addr: "127.0.3.10"}, {Network: "private", Addr: "127.0.4.10"},
	}})
	dir := t.TempDir()
	if err := c.WriteConfigDrive(s.ID, dir, DriveOptions{}); err != nil {
		t.Fatal(err)
	}
	read := func(dir, name string) map[string]any {
		t.Helper()
		return cloudtest.ArtefactObject(t, filepath.Join(dir, name), "")
	}
	md := read(dir, "openstack/latest/meta_data.json")
	if md["uuid"] != s.ID || md["name"] != "Web_1" || md["hostname"] != "web-1.novalocal" {
		t.Fatalf("meta_data.json %v", md)
	}
	nd := read(dir, "openstack/latest/network_data.json")
	got, _ := json.Marshal(nd["networks"])
	for _, want := range []string{`"id":"network0"`, `"ip_address":"127.0.1.10"`, `"type":"ipv4"`, `"id":"network1"`, `"ip_address":"::1"`,
		`"type":"ipv6"`, `"id":"network2"`, `"ip_address":"127.0.3.10"`} {
		if !strings.Contains(string(got), want) {
			t.Errorf("network_data.json networks lack %s: %s", want, got)
		}
	}
	if strings.Contains(string(got), "127.0.2.10") || strings.Contains(string(got), "127.0.4.10") || len(nd["links"].([]any)) != 2 {
		t.Errorf("network_data.json: a floating IP, a second address of a port, or not one link per port: %v", nd)
	}
	if ec2 := read(dir, "ec2/latest/meta-data.json"); ec2["local-ipv4"] != "127.0.1.10" {
		t.Errorf("ec2 meta-data.json %v", ec2)
	}
	for _, name := range []string{"openstack/latest/user_data", "ec2/latest/user-data"} {
		if data, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(data) != "#cloud-config\n" {
			t.Errorf("%s: %q %v", name, data, err)
		}
	}
	// Without EC2 documents; with DHCP.
	d := c.Put(Server{Name: "dhcp", DHCP: true, Addresses: []Address{{Network: "private", Addr: "127.0.1.11"}}})
	dir = t.TempDir()
	if err := c.WriteConfigDrive(d.ID, dir, DriveOptions{WithoutEC2: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ec2")); err == nil {
		t.Error("ec2 written WithoutEC2")
	}
	got, _ = json.Marshal(read(dir, "openstack/latest/network_data.json")["networks"])
	if !strings.Contains(string(got), `"type":"ipv4_dhcp"`) || strings.Contains(string(got), "ip_address") {
		t.Errorf("DHCP networks: %s", got)
	}
	// The metadata service serves the same network_data.json, and local-ipv4.
	u, err := c.MetadataURL(d.ID)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{"/openstack/latest/network_data.json": string(got), "/latest/meta-data/local-ipv4": "127.0.1.11"} {
		resp, err := http.Get(u + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if path == "/openstack/latest/network_data.json" {
			var v map[string]any
			_ = json.Unmarshal(body, &v)
			b, _ := json.Marshal(v["networks"])
			body = b
		}
		if resp.StatusCode != http.StatusOK || string(body) != want {
			t.Errorf("%s: %d %s, want %s", path, resp.StatusCode, body, want)
		}
	}
	// No metadata service: connections close unanswered.
	u, err = c.MetadataURL(s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := http.Get(u + "/openstack/latest/meta_data.json"); err == nil {
		resp.Body.Close()
		t.Fatalf("a server without a metadata service answered %d", resp.StatusCode)
	}
	if err := c.WriteConfigDrive("9e5476bd-a4ec-4653-93d6-72c93aa682ba", t.TempDir(), DriveOptions{}); err == nil {
		t.Error("a drive for no server")
	}
}
