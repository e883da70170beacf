package doctest

import "testing"

// TestDocsParse: the docs that mark their examples parse.
func TestDocsParse(t *testing.T) {
	for _, doc := range []string{"../../docs/install.md", "../../docs/join.md"} {
		ex, err := Parse(doc)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d examples, groups %q", doc, len(ex), Groups(ex))
	}
}
