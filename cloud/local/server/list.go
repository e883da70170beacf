package server

import (
	"encoding/base64"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// Page sizes of list calls.
const (
	defaultPageSize = 500
	maxPageSize     = 1000
)

// paginate sorts items by key and returns the page that the request's
// pageSize and pageToken select, and the token of the next page. A page token
// is the opaque form of the last key of the previous page. Items at or before
// the token are dropped before the sort, and items may be pointers (as
// listInstances passes them): a List of tens of thousands of instances pages
// through them without sorting every one of them, copied, for every page.
func paginate[T any](r *http.Request, items []T, key func(T) string) ([]T, string, error) {
	size := defaultPageSize
	if v := r.URL.Query().Get("pageSize"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPageSize {
			return nil, "", invalid("pageSize %q is not a number from 1 to %d", v, maxPageSize)
		}
		size = n
	}
	if tok := r.URL.Query().Get("pageToken"); tok != "" {
		b, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || len(b) == 0 {
			return nil, "", invalid("pageToken %q is not a token this API returned", tok)
		}
		after := string(b)
		items = slices.DeleteFunc(items, func(it T) bool { return key(it) <= after })
	}
	slices.SortFunc(items, func(a, b T) int { return strings.Compare(key(a), key(b)) })
	next := ""
	if len(items) > size {
		items = items[:size]
		next = base64.RawURLEncoding.EncodeToString([]byte(key(items[size-1])))
	}
	return items, next, nil
}

// filter reads a repeatable query parameter as a set; nil when absent.
func filter(r *http.Request, name string) map[string]bool {
	vals := r.URL.Query()[name]
	if len(vals) == 0 {
		return nil
	}
	set := make(map[string]bool, len(vals))
	for _, v := range vals {
		set[v] = true
	}
	return set
}

// match reports whether v passes a filter from filter().
func match(set map[string]bool, v string) bool { return set == nil || set[v] }
