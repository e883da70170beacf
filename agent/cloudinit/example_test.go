package cloudinit

import (
	"flag"
	"os"
	"testing"
)

var update = flag.Bool("update", false, "rewrite example-user-data.yaml")

// TestExampleIsCurrent keeps example-user-data.yaml (shown in docs/join.md)
// what Render produces; go test ./agent/cloudinit -update rewrites it.
func TestExampleIsCurrent(t *testing.T) {
	out, err := Render(params())
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile("example-user-data.yaml", out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("example-user-data.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != string(out) {
		t.Fatal("example-user-data.yaml is stale: go test ./agent/cloudinit -update")
	}
}
