package digitaloceantest

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

func call(t *testing.T, url, token string) (int, any) {
	t.Helper()
	resp, v, err := cloudtest.GetJSON(url, token)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, v
}

// The endpoint answers as DigitalOcean documents and as droplets' metadata
// services did: a droplet object of the fields and kinds of the documented
// droplet_single (disk_info, the image's and the size's full objects), the
// list's droplets the same with meta.total; the documented 401 word for
// word and the documented ids of 404 and 429; a metadata document with
// every key of the documents cloud-init keeps from droplets (auth_key, the
// public interface's anchor_ipv4) in their shapes, save what the 2014
// document writes differently from DigitalOcean's reference (droplet_id
// as a string, public_keys as a string) and the floating IP's address
// (reserved IPs are not modelled).
func TestAnswersAsDocumented(t *testing.T) {
	c := NewStarted(t, Options{HourlyLimit: 4})
	d := c.Put(Droplet{Name: "example.com", PrivateIP: "127.0.83.9", PublicIP: "127.0.84.9", PublicIPv6: "::1",
		Tags: []string{"web", "env:prod"}, UserData: "#cloud-config\n"})
	base := strings.TrimSuffix(c.Endpoint(), "/")

	single := cloudtest.ShapeOf(cloudtest.Artefact(t, "../testdata/droplets-examples.yml", "droplet_single.value.droplet"))
	st, got := call(t, fmt.Sprintf("%s/v2/droplets/%d", base, d.ID), c.Token())
	if st != http.StatusOK {
		t.Fatalf("GET droplet: %d %v", st, got)
	}
	if diff := cloudtest.DiffShapes(cloudtest.ShapeOf(cloudtest.At(got, "droplet")), single, false); len(diff) != 0 {
		t.Errorf("the droplet differs from the documented one:\n  %s", strings.Join(diff, "\n  "))
	}
	st, list := call(t, base+"/v2/droplets?tag_name=env:prod&per_page=200", c.Token())
	documented := cloudtest.Artefact(t, "../testdata/droplets-examples.yml", "droplets_tagged.value")
	if st != http.StatusOK {
		t.Fatalf("GET list: %d %v", st, list)
	}
	// links: the reference's examples show both {"pages": {}} and {} for
	// one page; the fields of links are not compared.
	if diff := cloudtest.DiffShapes(cloudtest.ShapeOf(list), cloudtest.ShapeOf(documented), false, "links", "links.pages"); len(diff) != 0 {
		t.Errorf("the list differs from the documented one:\n  %s", strings.Join(diff, "\n  "))
	}

	for _, tc := range []struct {
		path, token, file string
		status            int
		exact             bool
	}{
		{"/v2/droplets", "not-the-token", "error-unauthorized.yml", http.StatusUnauthorized, true},
		// DigitalOcean's API words this "The resource you were accessing
		// could not be found." where its reference has another sentence.
		{"/v2/droplets/1", c.Token(), "error-not_found.yml", http.StatusNotFound, false},
		{"/v2/droplets/1", c.Token(), "error-too_many_requests.yml", http.StatusTooManyRequests, false},
	} {
		st, body := call(t, base+tc.path, tc.token)
		want := cloudtest.Artefact(t, "../testdata/"+tc.file, "content.application/json.example")
		if st != tc.status || cloudtest.At(body, "id") != cloudtest.At(want, "id") {
			t.Errorf("%s (%s): %d %v, documented %d %v", tc.path, tc.file, st, body, tc.status, want)
		}
		if tc.exact && cloudtest.At(body, "message") != cloudtest.At(want, "message") {
			t.Errorf("%s: message %q, documented %q", tc.path, cloudtest.At(body, "message"), cloudtest.At(want, "message"))
		}
	}

	u, err := c.MetadataURL(d.ID)
	if err != nil {
		t.Fatal(err)
	}
	_, md := call(t, u+"/metadata/v1.json", "")
	for _, file := range []string{"metadata.json", "metadata-no-private.json"} {
		sample := cloudtest.ShapeOf(cloudtest.Artefact(t, "../testdata/"+file, ""))
		// Today's document has more than these (reserved_ip, tags,
		// features).
		if diff := cloudtest.DiffShapes(cloudtest.ShapeOf(md), sample, true, "droplet_id", "public_keys", "floating_ip.ipv4.ip_address"); len(diff) != 0 {
			t.Errorf("the metadata document differs from %s:\n  %s", file, strings.Join(diff, "\n  "))
		}
	}
}
