package hetznertest

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

func get(t *testing.T, url, token string) []byte {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v: %s", url, resp.StatusCode, err, data)
	}
	return data
}

func decode(t *testing.T, data []byte) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatalf("%v: %s", err, data)
	}
	return v
}

// reversedPTR reads Hetzner's reverse DNS name of an IPv4 address,
// static.<the octets reversed>.clients.your-server.de, back into the
// address.
func reversedPTR(ptr string) string {
	m := regexp.MustCompile(`^static\.(\d+)\.(\d+)\.(\d+)\.(\d+)\.clients\.your-server\.de$`).FindStringSubmatch(ptr)
	if m == nil {
		return ""
	}
	return m[4] + "." + m[3] + "." + m[2] + "." + m[1]
}

// The endpoint answers as the API and the metadata service did in the
// genuine artefacts: a server object of the same fields and kinds as
// hcloud-go's recorded GET /servers/{id} (server type with category,
// deprecation, prices and locations; the image's architecture, labels,
// protection and times; traffic as numbers), times in its form, the IPv4
// reverse DNS name in Hetzner's form, the IPv6 /64; the list's servers the
// same; a metadata document with every key of cloud-init's sample
// (network-config and network-sysconfig among them) in its shapes; and
// private-networks entries of its fields, the first private interface
// numbered 2 after the public one.
func TestAnswersAsGenuine(t *testing.T) {
	c := NewStarted(t, Options{})
	created := time.Date(2025, 12, 15, 15, 22, 19, 0, time.UTC)
	s := c.Put(Server{Name: "test1", Location: "hel1", ServerType: "cx22", PublicIPv4: "127.0.86.9",
		PublicIPv6: "::/64", Labels: map[string]string{}, Created: created})
	recorded := cloudtest.Artefact(t, "../testdata/server-get.json", "")
	answer := decode(t, get(t, fmt.Sprintf("%s/servers/%d", c.Endpoint(), s.ID), c.Token()))
	if d := cloudtest.DiffShapes(cloudtest.ShapeOf(answer), cloudtest.ShapeOf(recorded), false); len(d) != 0 {
		t.Errorf("the server object differs from the API's:\n  %s", strings.Join(d, "\n  "))
	}
	for path, re := range map[string]string{
		"server.created":            `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`,
		"server.image.created":      `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`,
		"server.public_net.ipv6.ip": `::/64$`,
		"server.status":             `^running$`,
	} {
		for side, v := range map[string]any{"here": answer, "the API's": recorded} {
			if got, _ := cloudtest.At(v, path).(string); !regexp.MustCompile(re).MatchString(got) {
				t.Errorf("%s %s %q does not match %s", side, path, got, re)
			}
		}
	}
	for side, v := range map[string]any{"here": answer, "the API's": recorded} {
		ptr, _ := cloudtest.At(v, "server.public_net.ipv4.dns_ptr").(string)
		if ip, _ := cloudtest.At(v, "server.public_net.ipv4.ip").(string); reversedPTR(ptr) != ip {
			t.Errorf("%s: reverse DNS name %q of %s is not static.<reversed address>.clients.your-server.de", side, ptr, ip)
		}
	}
	list := decode(t, get(t, c.Endpoint()+"/servers?per_page=50", c.Token()))
	servers, _ := cloudtest.At(list, "servers").([]any)
	if len(servers) != 1 {
		t.Fatalf("the list: %v", list)
	}
	if d := cloudtest.DiffShapes(cloudtest.ShapeOf(servers[0]), cloudtest.ShapeOf(cloudtest.At(recorded, "server")), false); len(d) != 0 {
		t.Errorf("the listed server differs from the API's:\n  %s", strings.Join(d, "\n  "))
	}

	// The metadata service of a server with both public addresses and a
	// private network.
	m := c.Put(Server{Name: "md-1", PublicIPv4: "127.0.86.10", PublicIPv6: "::/64",
		PrivateNets: []PrivateNet{{Network: DefaultNetworkID, IP: "127.0.85.10"}}})
	base, err := c.MetadataURL(m.ID)
	if err != nil {
		t.Fatal(err)
	}
	doc := decode(t, get(t, base, ""))
	// The sample is of 2018: today's document has more (region,
	// availability-zone, private-networks).
	if d := cloudtest.DiffShapes(cloudtest.ShapeOf(doc), cloudtest.ShapeOf(cloudtest.Artefact(t, "../testdata/metadata.yaml", "")), true); len(d) != 0 {
		t.Errorf("the metadata document differs from cloud-init's sample:\n  %s", strings.Join(d, "\n  "))
	}
	nets := decode(t, get(t, base+"/private-networks", ""))
	sample := cloudtest.Artefact(t, "../testdata/private-networks.yaml", "")
	if d := cloudtest.DiffShapes(cloudtest.ShapeOf(nets), cloudtest.ShapeOf(sample), false); len(d) != 0 {
		t.Errorf("private-networks differs from cloud-init's sample:\n  %s", strings.Join(d, "\n  "))
	}
	first := func(v any) any {
		l, _ := v.([]any)
		if len(l) == 0 {
			return nil
		}
		return cloudtest.At(l[0], "interface_num")
	}
	if got, want := first(nets), first(sample); got != want {
		t.Errorf("the first private interface is number %v, in the sample %v", got, want)
	}
}
