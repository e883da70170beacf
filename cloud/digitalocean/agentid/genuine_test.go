package agentid

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
	"github.com/mooring-dev/mooring/cloud/nodeid"
)

// The agent reads the metadata documents cloud-init keeps from droplets
// (../testdata, sources in ../testdata/README.md): one whose droplet_id is
// a string ("22532410"), with a private interface whose address is the
// node's, and one whose droplet_id is a number, with no private interface
// (no InternalIP) and tags null.
func TestGenuineMetadata(t *testing.T) {
	for file, want := range map[string]nodeid.Instance{
		"metadata.json": {ID: "22532410", Name: "utl-96268", NodeName: "utl-96268",
			ProviderID: "digitalocean://22532410", InternalIP: "10.132.6.205"},
		"metadata-no-private.json": {ID: "27223699", Name: "smtest1", NodeName: "smtest1",
			ProviderID: "digitalocean://27223699"},
	} {
		doc := cloudtest.ArtefactBytes(t, "../testdata/"+file)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != metadataPath {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(doc)
		}))
		id, err := NewNodeIdentity(nodeid.Config{MetadataURL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		got, err := id.Instance(context.Background())
		srv.Close()
		if err != nil || got != want {
			t.Errorf("%s:\n got %+v %v\nwant %+v", file, got, err, want)
		}
	}
}

// droplet_id is a number or a string of its digits; anything else is an
// error, never an id.
func TestDropletID(t *testing.T) {
	for text, want := range map[string]int{`22532410`: 22532410, `"22532410"`: 22532410, `null`: 0} {
		var d DropletID
		if err := d.UnmarshalJSON([]byte(text)); err != nil || int(d) != want {
			t.Errorf("%s: %d %v, want %d", text, d, err, want)
		}
	}
	for _, text := range []string{`"0x10"`, `"+5"`, `"007"`, `1.5`, `"-3"`, `""`, `true`, `"12 "`} {
		var d DropletID
		if err := d.UnmarshalJSON([]byte(text)); err == nil {
			t.Errorf("%s read as %d", text, d)
		}
	}
}
