package cloudtest

import (
	"encoding/json"
	"slices"
	"testing"
)

func TestDiffShapes(t *testing.T) {
	decode := func(s string) any {
		var v any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	theirs := ShapeOf(decode(`{"id": 1, "name": "a", "tags": [], "image": {"id": 2, "labels": {"x": "y"}}, "nets": [{"ip": "x"}], "gone": null, "links": {"pages": {}}}`))
	ours := ShapeOf(decode(`{"id": "1", "name": "a", "tags": ["t"], "image": {"id": 2}, "nets": [{"ip": "x", "mac": "m"}], "gone": {"a": 1}, "links": {}}`))
	got := DiffShapes(ours, theirs, false, "links.pages")
	want := []string{"id: string here, number there", "missing here: image.labels", "missing here: image.labels.x", "only here: nets[].mac"}
	if !slices.Equal(got, want) {
		t.Errorf("DiffShapes = %q\nwant %q", got, want)
	}
	if got := DiffShapes(ours, theirs, true, "links.pages"); slices.Contains(got, "only here: nets[].mac") {
		t.Errorf("subset: %q", got)
	}
	if At(decode(`{"a": {"b": 3}}`), "a.b") != 3.0 || At(decode(`{"a": 1}`), "a.b") != nil {
		t.Error("At")
	}
}
