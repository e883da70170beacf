package gcetest

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"strconv"
	"strings"
)

// The lists of the networking resources (routes, instance groups and their
// instances, backend services, health checks) answer as the Compute API's
// do: a filter of either of the API's two forms, maxResults (1-500, default
// 500, lowered by Options.MaxPageSize), pageToken (a cursor tied to the
// list and its filter), items in name order.
//
// Filters, as the API documents them (both forms cannot be mixed in one
// filter):
//   - regular expressions: "FIELD eq LITERAL" or "FIELD ne LITERAL", alone
//     and unparenthesized, or several each in parentheses, separated by
//     spaces, all of which must hold: "(name eq k-.*) (network eq URL)".
//     LITERAL (quoted or not) is an RE2 expression that must match the
//     whole field.
//   - comparisons (AIP-160): "FIELD = VALUE", "FIELD != VALUE" (the whole
//     value, quoted or not), joined by AND or by spaces.
//
// FIELD is a field of the resource's JSON form (a nested one with dots);
// one the resource has not is a 400 invalid filter. Other operators, OR,
// NOT and orderBy are refused (400), where the API would serve them: no
// client of mooring's sends them.

// listFilter is a parsed filter; nil matches everything.
type listFilter struct {
	preds []filterPred
}

type filterPred struct {
	path []string
	neg  bool
	re   *regexp.Regexp // regular expression form
	val  string         // comparison form
}

var (
	regexpTerm     = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9_.]*)\s+(eq|ne)\s+(.+)$`)
	comparisonTerm = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9_.]*)\s*(=|!=)\s*("(?:[^"\\]|\\.)*"|[^\s"()]+)`)
)

// parseListFilter parses a filter for items of type t (the wire struct).
func parseListFilter(s string, t reflect.Type) (*listFilter, *apiError) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	bad := func(why string) *apiError {
		return invalidField("filter", s, "Invalid list filter expression: "+why+".")
	}
	f := &listFilter{}
	add := func(field string, neg bool, re *regexp.Regexp, val string) *apiError {
		path := strings.Split(field, ".")
		if !hasJSONField(t, path) {
			return bad("unknown field " + field)
		}
		f.preds = append(f.preds, filterPred{path: path, neg: neg, re: re, val: val})
		return nil
	}
	regexpPred := func(term string) *apiError {
		m := regexpTerm.FindStringSubmatch(strings.TrimSpace(term))
		if m == nil {
			return bad("expected FIELD eq|ne LITERAL")
		}
		lit := unquote(strings.TrimSpace(m[3]))
		re, err := regexp.Compile(`^(?:` + lit + `)$`)
		if err != nil {
			return bad("invalid regular expression " + lit)
		}
		return add(m[1], m[2] == "ne", re, "")
	}
	switch {
	case strings.HasPrefix(s, "("):
		// Several regular expression terms, each parenthesized.
		rest := s
		for rest != "" {
			if rest[0] != '(' {
				return nil, bad("expected a parenthesized expression")
			}
			end := closingParen(rest)
			if end < 0 {
				return nil, bad("unbalanced parentheses")
			}
			if err := regexpPred(rest[1:end]); err != nil {
				return nil, err
			}
			rest = strings.TrimSpace(rest[end+1:])
		}
		return f, nil
	case regexpTerm.MatchString(s) && !strings.ContainsAny(strings.SplitN(s, " ", 2)[0], "=!"):
		return f, regexpPred(s)
	}
	rest := s
	for first := true; rest != ""; first = false {
		if !first {
			if r, ok := strings.CutPrefix(rest, "AND "); ok {
				rest = strings.TrimSpace(r)
			}
		}
		m := comparisonTerm.FindStringSubmatch(rest)
		if m == nil {
			if strings.Contains(rest, " eq ") || strings.Contains(rest, " ne ") {
				return nil, bad("eq and ne cannot be mixed with other operators")
			}
			return nil, bad("expected FIELD = VALUE or FIELD != VALUE, joined by AND")
		}
		if err := add(m[1], m[2] == "!=", nil, unquote(m[3])); err != nil {
			return nil, err
		}
		rest = strings.TrimSpace(rest[len(m[0]):])
	}
	return f, nil
}

// closingParen is the index of the parenthesis that closes s[0] (-1: none),
// skipping quoted text.
func closingParen(s string) int {
	depth, quoted := 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case quoted:
		case c == '(':
			depth++
		case c == ')':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

func unquote(s string) string {
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		if u, err := strconv.Unquote(s); err == nil {
			return u
		}
		return s[1 : len(s)-1]
	}
	return s
}

// hasJSONField says whether the struct type t has the JSON field path.
func hasJSONField(t reflect.Type, path []string) bool {
	for _, name := range path {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		if t.Kind() == reflect.Map {
			t = t.Elem()
			continue
		}
		if t.Kind() != reflect.Struct {
			return false
		}
		found := false
		for i := range t.NumField() {
			sf := t.Field(i)
			if tag, _, _ := strings.Cut(sf.Tag.Get("json"), ","); tag == name {
				t, found = sf.Type, true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// match says whether the filter holds for v (a wire struct).
func (f *listFilter) match(v any) bool {
	if f == nil {
		return true
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return false
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return false
	}
	for _, p := range f.preds {
		got := fieldText(doc, p.path)
		ok := got == p.val
		if p.re != nil {
			ok = p.re.MatchString(got)
		}
		if ok == p.neg {
			return false
		}
	}
	return true
}

// fieldText is a field of a JSON document as a filter compares it: a
// string as it is, a number or boolean as written, an absent field empty.
func fieldText(doc any, path []string) string {
	for _, name := range path {
		m, ok := doc.(map[string]any)
		if !ok {
			return ""
		}
		doc = m[name]
	}
	switch x := doc.(type) {
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	}
	return ""
}

// listQuery is a list call's filter and page.
type listQuery struct {
	filter *listFilter
	size   int
	after  string // the last name of the page before
	tag    string // ties page tokens to the list and filter
}

// parseListQuery reads a list call's query for items of wire type t; list
// names the list (its path) for the page tokens.
func (c *Cloud) parseListQuery(r *http.Request, list string, t reflect.Type) (listQuery, *apiError) {
	q := r.URL.Query()
	invalid := func(msg string) *apiError {
		return &apiError{status: http.StatusBadRequest, reason: "invalid", msg: msg}
	}
	for k := range q {
		switch k {
		case "filter", "maxResults", "pageToken", "alt", "prettyPrint", "returnPartialSuccess":
		default:
			return listQuery{}, invalid(fmt.Sprintf("Invalid parameter %q", k))
		}
	}
	f, ferr := parseListFilter(q.Get("filter"), t)
	if ferr != nil {
		return listQuery{}, ferr
	}
	lq := listQuery{filter: f, size: c.opts.MaxPageSize}
	if s := q.Get("maxResults"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > maxPageSize {
			return listQuery{}, invalid("Invalid value for field 'maxResults': '" + s + "'. Must be in the range [0, 500].")
		}
		if n > 0 {
			lq.size = min(n, c.opts.MaxPageSize)
		}
	}
	digest := sha256.Sum256([]byte(list + "\x00" + q.Get("filter")))
	lq.tag = hex.EncodeToString(digest[:6])
	if tok := q.Get("pageToken"); tok != "" {
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		tag, cursor, ok := strings.Cut(string(raw), ":")
		if err != nil || !ok || tag != lq.tag {
			return listQuery{}, invalid("Invalid value for field 'pageToken': '" + tok + "'.")
		}
		lq.after = cursor
	}
	return lq, nil
}

// page is the items of one page of a list (in key order, keys as key
// says) that the filter keeps, and the next page's token ("" for the
// last).
func page[T any](lq listQuery, items []T, key func(*T) string) ([]T, string) {
	out := []T{}
	for i := range items {
		k := key(&items[i])
		if lq.after != "" && k <= lq.after {
			continue
		}
		if !lq.filter.match(&items[i]) {
			continue
		}
		if len(out) == lq.size {
			last := key(&out[len(out)-1])
			return out, base64.RawURLEncoding.EncodeToString([]byte(lq.tag + ":" + last))
		}
		out = append(out, items[i])
	}
	return out, ""
}

// writeList writes a list's page in the API's form.
func writeList[T any](w http.ResponseWriter, kind, selfLink string, items []T, next string) {
	out := map[string]any{"kind": kind, "id": strings.TrimPrefix(selfLink, resourceBase), "selfLink": selfLink, "items": items}
	if next != "" {
		out["nextPageToken"] = next
	}
	writeJSON(w, http.StatusOK, out)
}
