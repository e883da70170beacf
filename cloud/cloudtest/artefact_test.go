package cloudtest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/mooring-dev/mooring/cloud/kit/kittest"
)

func TestArtefact(t *testing.T) {
	dir := t.TempDir()
	js, ym, yamlInJSON := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.yml"), filepath.Join(dir, "c.json")
	for file, content := range map[string]string{
		js: `{"server": {"id": 42, "name": "web", "tags": ["a"]}}`, ym: "examples:\n  one:\n    value: {id: 7, ok: true}\n", yamlInJSON: "a: 1\n",
	} {
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if got := Artefact(t, js, "server.id"); got != float64(42) {
		t.Errorf("server.id: %#v", got)
	}
	if got := ArtefactObject(t, ym, "examples.one.value"); got["id"] != float64(7) || got["ok"] != true {
		t.Errorf("examples.one.value: %#v", got)
	}
	if got := string(ArtefactJSON(t, ym, "examples.one")); got != `{"value":{"id":7,"ok":true}}` {
		t.Errorf("as JSON: %s", got)
	}
	if got := Artefact(t, js, ""); At(got, "server.name") != "web" {
		t.Errorf("the whole document: %#v", got)
	}
	if got := string(ArtefactBytes(t, ym)); got != "examples:\n  one:\n    value: {id: 7, ok: true}\n" {
		t.Errorf("bytes: %q", got)
	}
	// A missing file, one that does not decode (YAML in a .json file),
	// nothing at the path, and a value that is no object fail the test.
	for name, read := range map[string]func(testing.TB){
		"missing":   func(tb testing.TB) { ArtefactBytes(tb, filepath.Join(dir, "none.json")) },
		"undecoded": func(tb testing.TB) { Artefact(tb, yamlInJSON, "") },
		"no value":  func(tb testing.TB) { Artefact(tb, js, "server.zone") },
		"no object": func(tb testing.TB) { ArtefactObject(tb, js, "server.tags") },
	} {
		if !kittest.Fails(t, read) {
			t.Errorf("%s: the test went on", name)
		}
	}
}
