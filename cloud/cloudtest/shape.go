package cloudtest

import (
	"fmt"
	"slices"
	"strings"
)

// Shape is what a decoded JSON (or YAML) value is made of: each path below
// it ("a.b" for an object's field, "a[]" for an array's elements, every
// element's fields merged) with the kind of its value: object, array,
// empty (an array without elements), null, string, number or bool. Where
// elements differ, a value outweighs null and an empty array. The tests of
// the test endpoints compare the endpoints' answers with genuine ones by
// their shapes.
type Shape map[string]string

// ShapeOf is v's shape.
func ShapeOf(v any) Shape {
	s := Shape{}
	s.walk("", v)
	return s
}

func (s Shape) walk(path string, v any) {
	note := func(kind string) {
		if old, seen := s[path]; !seen || soft(old) {
			s[path] = kind
		}
	}
	switch v := v.(type) {
	case map[string]any:
		note("object")
		for k, sub := range v {
			p := k
			if path != "" {
				p = path + "." + k
			}
			s.walk(p, sub)
		}
	case []any:
		if len(v) == 0 {
			note("empty")
		} else {
			note("array")
		}
		for _, sub := range v {
			s.walk(path+"[]", sub)
		}
	case string:
		note("string")
	case bool:
		note("bool")
	case nil:
		note("null")
	case float64, float32, int, int64, int32, uint64:
		note("number")
	default:
		note(fmt.Sprintf("%T", v))
	}
}

// soft kinds have nothing below them to compare.
func soft(kind string) bool { return kind == "null" || kind == "empty" }

// blank says whether nothing below path can be compared in s: a value above
// it is null or an empty array.
func (s Shape) blank(path string) bool {
	for p := path; p != ""; {
		if q, ok := strings.CutSuffix(p, "[]"); ok {
			p = q
		} else if i := strings.LastIndex(p, "."); i >= 0 {
			p = p[:i]
		} else {
			p = ""
		}
		if soft(s[p]) {
			return true
		}
	}
	return false
}

// DiffShapes lists how ours differs from theirs: the paths theirs has and
// ours lacks ("missing here: PATH") and, unless subset, the other way round
// ("only here: PATH"), except below a null or an empty array of the other
// side; and the paths whose kinds differ where neither is null or empty.
// Loose paths are left out. Sorted; empty when the shapes agree.
func DiffShapes(ours, theirs Shape, subset bool, loose ...string) []string {
	var out []string
	for p, k := range theirs {
		o, here := ours[p]
		switch {
		case slices.Contains(loose, p):
		case !here && !ours.blank(p):
			out = append(out, "missing here: "+p)
		case here && o != k && !soft(o) && !soft(k):
			out = append(out, fmt.Sprintf("%s: %s here, %s there", p, o, k))
		}
	}
	if !subset {
		for p := range ours {
			if _, there := theirs[p]; !there && !theirs.blank(p) && !slices.Contains(loose, p) {
				out = append(out, "only here: "+p)
			}
		}
	}
	slices.Sort(out)
	return out
}

// At is the value at a path of object fields ("a.b") in a decoded JSON
// value, nil where there is none.
func At(v any, path string) any {
	for _, k := range strings.Split(path, ".") {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	return v
}
