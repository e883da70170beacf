package doctest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const doc = "# T\n\n<!-- example: write a/b.yaml -->\n```yaml\nkey: VALUE\n```\n\n" +
	"<!-- example(g): run -->\n```sh\ncat a/b.yaml > out\necho ran\n```\n\n" +
	"<!-- example: skip needs a cloud -->\n```sh\nexit 1\n```\n\n```yaml\nnot: marked\n```\n"

func TestParseAndRun(t *testing.T) {
	ex, err := ParseBytes("t.md", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(ex) != 3 || ex[0].Action != Write || ex[0].Arg != "a/b.yaml" || ex[0].Line != 4 || ex[1].Action != Run || ex[2].Arg != "needs a cloud" {
		t.Fatalf("parsed %+v", ex)
	}
	dir := t.TempDir()
	r := &Runner{Dir: dir, Replace: []Replacement{{"VALUE", "v"}}}
	if g := Select(ex, "g"); len(g) != 1 || g[0].Line != 9 {
		t.Errorf("group g: %+v", g)
	}
	outs := r.Run(t, ex)
	r.CheckReplacements(t)
	if got, _ := os.ReadFile(filepath.Join(dir, "out")); string(got) != "key: v\n" || outs["t.md:9"] != "ran\n" {
		t.Errorf("out %q, outputs %q", got, outs)
	}
}

func TestParseRefuses(t *testing.T) {
	for name, bad := range map[string]string{
		"unmarked sh":          "```sh\nls\n```\n",
		"marker without fence": "<!-- example: run -->\ntext\n```sh\nls\n```\n",
		"write without path":   "<!-- example: write -->\n```yaml\n```\n",
		"skip without reason":  "<!-- example: skip -->\n```sh\n```\n",
		"unknown action":       "<!-- example: exec -->\n```sh\n```\n",
		"run of yaml":          "<!-- example: run -->\n```yaml\n```\n",
		"unclosed":             "<!-- example: run -->\n```sh\nls\n",
	} {
		if _, err := ParseBytes("t.md", []byte(bad)); err == nil {
			t.Errorf("%s: parsed", name)
		} else if !strings.Contains(err.Error(), "t.md:") {
			t.Errorf("%s: %v names no place", name, err)
		}
	}
}
