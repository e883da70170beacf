package hetznertest

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"testing"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// TestLabelSelector: label_selector has the grammar of Kubernetes' label
// selectors, as the Cloud API's has, set-based terms included; what the
// Cloud API has not (numeric comparisons) and what does not parse are 400
// invalid_input.
func TestLabelSelector(t *testing.T) {
	c := NewStarted(t, Options{})
	c.Put(Server{Name: "a", Labels: map[string]string{"cluster": "c1", "role": "worker"}})
	c.Put(Server{Name: "b", Labels: map[string]string{"cluster": "c1", "role": "control"}})
	c.Put(Server{Name: "c", Labels: map[string]string{"cluster": "c2"}})
	c.Put(Server{Name: "d", Labels: map[string]string{"mooring.dev/cluster": "c1", "n": "3"}})
	list := func(selector string) (int, []string, string) {
		t.Helper()
		resp, raw := cloudtest.Send(t, http.MethodGet, c.Endpoint()+"/servers?"+url.Values{"label_selector": {selector}}.Encode(),
			map[string]string{"Authorization": "Bearer " + c.Token()})
		var body struct {
			Servers []struct{ Name string } `json:"servers"`
			Error   struct{ Code string }   `json:"error"`
		}
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range body.Servers {
			names = append(names, s.Name)
		}
		return resp.StatusCode, names, body.Error.Code
	}
	for sel, want := range map[string][]string{
		"":                              {"a", "b", "c", "d"},
		"cluster==c1":                   {"a", "b"},
		"cluster=c1,role!=control":      {"a"},
		"cluster in (c1, c2)":           {"a", "b", "c"},
		"cluster notin (c1),!n":         {"c"},
		"role":                          {"a", "b"},
		"!cluster":                      {"d"},
		"mooring.dev/cluster==c1":       {"d"},
		" cluster == c2 ":               {"c"},
		"cluster in (c1),role in (foo)": nil,
		"cluster==":                     nil, // empty values are label values
	} {
		st, got, code := list(sel)
		if st != http.StatusOK || !slices.Equal(got, want) {
			t.Errorf("%q: %d %s %v, want %v", sel, st, code, got, want)
		}
	}
	for _, bad := range []string{"n>2", "n<4", "cluster in c1", "==c1", "clu ster=c1", "cluster=c1,", "cluster=a b"} {
		if st, got, code := list(bad); st != http.StatusBadRequest || code != "invalid_input" {
			t.Errorf("%q: %d %s %v, want 400 invalid_input", bad, st, code, got)
		}
	}
}
