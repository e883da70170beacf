package cloudtest

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// ArtefactBytes reads a genuine or recorded artefact a backend's tests keep
// (file relative to the test's package directory: "testdata/x.json",
// "../testdata/x.yaml"), failing the test when it cannot.
func ArtefactBytes(t testing.TB, file string) []byte {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// Artefact reads an artefact (ArtefactBytes) as JSON, or as YAML where its
// name does not end in .json, and returns the value at path: object
// fields joined by dots, "" for the whole document. Numbers are float64,
// as encoding/json decodes them into an any. A file that does not decode,
// or nothing at path, fails the test.
func Artefact(t testing.TB, file, path string) any {
	t.Helper()
	data := ArtefactBytes(t, file)
	var v any
	var err error
	if strings.HasSuffix(file, ".json") {
		err = json.Unmarshal(data, &v)
	} else {
		err = yaml.Unmarshal(data, &v)
	}
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if path != "" {
		v = At(v, path)
	}
	if v == nil {
		t.Fatalf("%s has nothing at %q", file, path)
	}
	return v
}

// ArtefactObject is Artefact's value at path, which must be a JSON object.
func ArtefactObject(t testing.TB, file, path string) map[string]any {
	t.Helper()
	m, ok := Artefact(t, file, path).(map[string]any)
	if !ok {
		t.Fatalf("%s: the value at %q is no object", file, path)
	}
	return m
}

// ArtefactJSON is Artefact's value at path written as JSON (a YAML
// document's example body, say, as an API would send it).
func ArtefactJSON(t testing.TB, file, path string) []byte {
	t.Helper()
	out, err := json.Marshal(Artefact(t, file, path))
	if err != nil {
		t.Fatalf("%s at %q: %v", file, path, err)
	}
	return out
}
