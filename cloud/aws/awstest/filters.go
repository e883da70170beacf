package awstest

import (
	"fmt"
	"strconv"
	"strings"
)

// filter is one DescribeInstances Filter.N: an instance matches when one
// of its values matches (EC2's wildcards * and ?, \ escaping); an instance
// must match every filter.
type filter struct {
	name   string
	values []string
	// field lists what the filter looks at in an instance: nothing when
	// the instance has no such thing (a tag it lacks).
	field func(in Instance, wire xmlInstance) []string
}

// newFilter knows the filters mooring's code uses and a few neighbours:
// instance-id, instance-state-name, instance-state-code, private-dns-name,
// private-ip-address, availability-zone, instance-type, tag-key, tag-value
// and tag:<key>.
func newFilter(name string, values []string) (filter, *apiError) {
	f := filter{name: name, values: values}
	if len(values) == 0 {
		return f, invalidParameter(fmt.Sprintf("The filter '%s' has no values", name))
	}
	one := func(get func(in Instance, wire xmlInstance) string) func(Instance, xmlInstance) []string {
		return func(in Instance, wire xmlInstance) []string { return []string{get(in, wire)} }
	}
	switch name {
	case "instance-id":
		f.field = one(func(in Instance, _ xmlInstance) string { return in.ID })
	case "instance-state-name":
		f.field = one(func(in Instance, _ xmlInstance) string { return in.State })
	case "instance-state-code":
		f.field = one(func(in Instance, _ xmlInstance) string { return strconv.Itoa(stateCodes[in.State]) })
	case "private-dns-name":
		f.field = one(func(_ Instance, wire xmlInstance) string { return wire.PrivateDNSName })
	case "private-ip-address":
		f.field = one(func(_ Instance, wire xmlInstance) string { return wire.PrivateIP })
	case "availability-zone":
		f.field = one(func(in Instance, _ xmlInstance) string { return in.Zone })
	case "instance-type":
		f.field = one(func(in Instance, _ xmlInstance) string { return in.InstanceType })
	case "tag-key":
		f.field = func(in Instance, _ xmlInstance) []string {
			keys := make([]string, 0, len(in.Tags))
			for k := range in.Tags {
				keys = append(keys, k)
			}
			return keys
		}
	case "tag-value":
		f.field = func(in Instance, _ xmlInstance) []string {
			vals := make([]string, 0, len(in.Tags))
			for _, v := range in.Tags {
				vals = append(vals, v)
			}
			return vals
		}
	default:
		key, ok := strings.CutPrefix(name, "tag:")
		if !ok || key == "" {
			return f, invalidParameter(fmt.Sprintf("The filter '%s' is invalid", name))
		}
		f.field = func(in Instance, _ xmlInstance) []string {
			if v, ok := in.Tags[key]; ok {
				return []string{v}
			}
			return nil
		}
	}
	return f, nil
}

func (f filter) matches(in Instance, wire xmlInstance) bool {
	for _, got := range f.field(in, wire) {
		for _, want := range f.values {
			if wildcardMatch(want, got) {
				return true
			}
		}
	}
	return false
}

func matchesAll(filters []filter, in Instance, wire xmlInstance) bool {
	for _, f := range filters {
		if !f.matches(in, wire) {
			return false
		}
	}
	return true
}

// patternRune is one element of a filter value: a literal rune, or a
// wildcard (* any run of characters, ? any one).
type patternRune struct {
	r        rune
	wildcard bool
}

func compilePattern(p string) []patternRune {
	var out []patternRune
	escaped := false
	for _, r := range p {
		switch {
		case escaped:
			out = append(out, patternRune{r: r})
			escaped = false
		case r == '\\':
			escaped = true
		case r == '*' || r == '?':
			out = append(out, patternRune{r: r, wildcard: true})
		default:
			out = append(out, patternRune{r: r})
		}
	}
	if escaped {
		out = append(out, patternRune{r: '\\'})
	}
	return out
}

// wildcardMatch matches s against an EC2 filter value: greedy matching of
// *, backtracking to the last star on a mismatch.
func wildcardMatch(pattern, s string) bool {
	p := compilePattern(pattern)
	str := []rune(s)
	pi, si := 0, 0
	star, mark := -1, 0
	for si < len(str) {
		switch {
		case pi < len(p) && p[pi].wildcard && p[pi].r == '*':
			star, mark = pi, si
			pi++
		case pi < len(p) && ((p[pi].wildcard && p[pi].r == '?') || (!p[pi].wildcard && p[pi].r == str[si])):
			pi++
			si++
		case star >= 0:
			pi = star + 1
			mark++
			si = mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi].wildcard && p[pi].r == '*' {
		pi++
	}
	return pi == len(p)
}
