package digitaloceantest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// artefact reads a genuine artefact (../testdata, sources in
// ../testdata/README.md), JSON or YAML, and returns the value at path
// (object fields joined by dots; "" for all of it).
func artefact(t *testing.T, file, path string) any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if path != "" {
		v = at(v, path)
	}
	if v == nil {
		t.Fatalf("%s has nothing at %s", file, path)
	}
	return v
}

// at is the value at a path of object fields ("a.b").
func at(v any, path string) any {
	for _, k := range strings.Split(path, ".") {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	return v
}

// kinds maps every path below a JSON value ("a.b" for an object's field,
// "a[]" for an array's elements, merged) to the kind of its value; an
// empty array is "empty". Where elements differ, a value outweighs null
// and an empty array.
func kinds(prefix string, v any, out map[string]string) map[string]string {
	if out == nil {
		out = map[string]string{}
	}
	join := func(k string) string {
		if prefix == "" {
			return k
		}
		return prefix + "." + k
	}
	note := func(kind string) {
		if old, seen := out[prefix]; !seen || soft(old) {
			out[prefix] = kind
		}
	}
	switch v := v.(type) {
	case map[string]any:
		note("object")
		for k, sub := range v {
			kinds(join(k), sub, out)
		}
	case []any:
		if len(v) == 0 {
			note("empty")
		} else {
			note("array")
		}
		for _, sub := range v {
			kinds(prefix+"[]", sub, out)
		}
	case nil:
		note("null")
	default:
		note(fmt.Sprintf("%T", v))
	}
	return out
}

// soft kinds have nothing below them to compare.
func soft(kind string) bool { return kind == "null" || kind == "empty" }

// blank says whether nothing below path can be compared in k: a value
// above it is null or an empty array.
func blank(k map[string]string, path string) bool {
	for p := path; p != ""; {
		if q, ok := strings.CutSuffix(p, "[]"); ok {
			p = q
		} else if i := strings.LastIndex(p, "."); i >= 0 {
			p = p[:i]
		} else {
			p = ""
		}
		if soft(k[p]) {
			return true
		}
	}
	return false
}

// differ lists the paths theirs has and ours lacks (and, unless subset,
// the other way round), except below a null or an empty array of the other
// side, and the paths whose kinds differ where neither is null or empty;
// loose paths are left out.
func differ(ours, theirs map[string]string, subset bool, loose ...string) []string {
	var out []string
	for p, k := range theirs {
		o, here := ours[p]
		switch {
		case slices.Contains(loose, p):
		case !here && !blank(ours, p):
			out = append(out, "missing here: "+p)
		case here && o != k && !soft(o) && !soft(k):
			out = append(out, fmt.Sprintf("%s: %s here, %s there", p, o, k))
		}
	}
	if !subset {
		for p := range ours {
			if _, there := theirs[p]; !there && !blank(theirs, p) && !slices.Contains(loose, p) {
				out = append(out, "only here: "+p)
			}
		}
	}
	slices.Sort(out)
	return out
}

func call(t *testing.T, url, token string) (int, any) {
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
	data, _ := io.ReadAll(resp.Body)
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("GET %s: %d %v: %s", url, resp.StatusCode, err, data)
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

	single := kinds("", artefact(t, "droplets-examples.yml", "droplet_single.value.droplet"), nil)
	st, got := call(t, fmt.Sprintf("%s/v2/droplets/%d", base, d.ID), c.Token())
	if st != http.StatusOK {
		t.Fatalf("GET droplet: %d %v", st, got)
	}
	if diff := differ(kinds("", at(got, "droplet"), nil), single, false); len(diff) != 0 {
		t.Errorf("the droplet differs from the documented one:\n  %s", strings.Join(diff, "\n  "))
	}
	st, list := call(t, base+"/v2/droplets?tag_name=env:prod&per_page=200", c.Token())
	documented := artefact(t, "droplets-examples.yml", "droplets_tagged.value")
	if st != http.StatusOK {
		t.Fatalf("GET list: %d %v", st, list)
	}
	// links: the reference's examples show both {"pages": {}} and {} for
	// one page; the fields of links are not compared.
	if diff := differ(kinds("", list, nil), kinds("", documented, nil), false, "links", "links.pages"); len(diff) != 0 {
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
		want := artefact(t, tc.file, "content.application/json.example")
		if st != tc.status || at(body, "id") != at(want, "id") {
			t.Errorf("%s (%s): %d %v, documented %d %v", tc.path, tc.file, st, body, tc.status, want)
		}
		if tc.exact && at(body, "message") != at(want, "message") {
			t.Errorf("%s: message %q, documented %q", tc.path, at(body, "message"), at(want, "message"))
		}
	}

	u, err := c.MetadataURL(d.ID)
	if err != nil {
		t.Fatal(err)
	}
	_, md := call(t, u+"/metadata/v1.json", "")
	for _, file := range []string{"metadata.json", "metadata-no-private.json"} {
		sample := kinds("", artefact(t, file, ""), nil)
		// Today's document has more than these (reserved_ip, tags,
		// features).
		if diff := differ(kinds("", md, nil), sample, true, "droplet_id", "public_keys", "floating_ip.ipv4.ip_address"); len(diff) != 0 {
			t.Errorf("the metadata document differs from %s:\n  %s", file, strings.Join(diff, "\n  "))
		}
	}
}
