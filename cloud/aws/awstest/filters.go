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
	// patterns are the values compiled, in order.
	patterns []pattern
	// field lists what the filter looks at in an instance: nothing when
	// the instance has no such thing (a tag it lacks).
	field func(in Instance, addr addresses) []string
}

// addresses are an instance's private address and DNS name as
// DescribeInstances shows them: none while it is shutting down or
// terminated. Filters read them from here rather than from the whole wire
// form, which costs far more to build (a filtered call looks at every
// instance).
type addresses struct{ privateIP, privateDNSName string }

func addressesOf(in Instance) addresses {
	switch in.State {
	case "terminated", "shutting-down":
		return addresses{}
	}
	return addresses{privateIP: in.PrivateIP, privateDNSName: in.PrivateDNSName}
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
	for _, v := range values {
		f.patterns = append(f.patterns, compilePattern(v))
	}
	one := func(get func(in Instance, addr addresses) string) func(Instance, addresses) []string {
		return func(in Instance, addr addresses) []string { return []string{get(in, addr)} }
	}
	switch name {
	case "instance-id":
		f.field = one(func(in Instance, _ addresses) string { return in.ID })
	case "instance-state-name":
		f.field = one(func(in Instance, _ addresses) string { return in.State })
	case "instance-state-code":
		f.field = one(func(in Instance, _ addresses) string { return strconv.Itoa(stateCodes[in.State]) })
	case "private-dns-name":
		f.field = one(func(_ Instance, addr addresses) string { return addr.privateDNSName })
	case "private-ip-address":
		f.field = one(func(_ Instance, addr addresses) string { return addr.privateIP })
	case "availability-zone":
		f.field = one(func(in Instance, _ addresses) string { return in.Zone })
	case "instance-type":
		f.field = one(func(in Instance, _ addresses) string { return in.InstanceType })
	case "tag-key":
		f.field = func(in Instance, _ addresses) []string {
			keys := make([]string, 0, len(in.Tags))
			for k := range in.Tags {
				keys = append(keys, k)
			}
			return keys
		}
	case "tag-value":
		f.field = func(in Instance, _ addresses) []string {
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
		f.field = func(in Instance, _ addresses) []string {
			if v, ok := in.Tags[key]; ok {
				return []string{v}
			}
			return nil
		}
	}
	return f, nil
}

func (f filter) matches(in Instance, addr addresses) bool {
	for _, got := range f.field(in, addr) {
		for _, want := range f.patterns {
			if want.match(got) {
				return true
			}
		}
	}
	return false
}

func matchesAll(filters []filter, in Instance) bool {
	if len(filters) == 0 {
		return true
	}
	addr := addressesOf(in)
	for _, f := range filters {
		if !f.matches(in, addr) {
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

// pattern is a compiled filter value; literal holds it when it has no
// wildcards, to be compared as a whole.
type pattern struct {
	runes   []patternRune
	literal string
	plain   bool
}

func compilePattern(p string) pattern {
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
	pt := pattern{runes: out, plain: true}
	var sb strings.Builder
	for _, r := range out {
		if r.wildcard {
			pt.plain = false
			break
		}
		sb.WriteRune(r.r)
	}
	if pt.plain {
		pt.literal = sb.String()
	}
	return pt
}

// wildcardMatch matches s against an EC2 filter value: greedy matching of
// *, backtracking to the last star on a mismatch.
func wildcardMatch(pattern, s string) bool { return compilePattern(pattern).match(s) }

// match is wildcardMatch of a compiled pattern.
func (pt pattern) match(s string) bool {
	if pt.plain {
		return pt.literal == s
	}
	p := pt.runes
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
