package kit

import (
	"errors"
	"fmt"

	"k8s.io/klog/v2"
)

// ErrListChanged is wrapped by the error of one reading of a paged list
// whose items changed while its pages were read (a total that moved
// between pages, an item listed twice): ReadWhole reads the list again.
var ErrListChanged = errors.New("the list changed between its pages")

// ListAttempts is how many readings of a paged list the backends make at
// most before the list is an error.
const ListAttempts = 3

// ReadWhole reads a paged list whole, for a view's source: the view
// believes that an instance a fresh list lacks may be gone, so a list is
// whole or an error, never shorter. read reads every page once and says
// how many it read; when its error wraps ErrListChanged the list is read
// again, at most attempts readings in all, and then that is the error
// (prefixed with what); any other error ends ReadWhole at once.
//
// A page number, offset or token is no snapshot: an item made or deleted
// between two page requests moves the items after it. Where the pages say
// so themselves (a total that moves, an item listed twice, which read
// reports as ErrListChanged), key is nil and a reading without error is
// the list. Where a deletion can go unseen (it shifts an item that was
// there throughout onto a page already read, and the item is missed), key
// gives an item's identity and a list of more than one page is taken only
// when the next reading holds the same items (the deleted one is gone from
// both); a list of one page is one answer, taken at once.
func ReadWhole[T any](what string, attempts int, read func() (items []T, pages int, err error), key func(T) string) ([]T, error) {
	var (
		last []T
		why  = ErrListChanged
	)
	for attempt := 1; attempt <= attempts; attempt++ {
		got, pages, err := read()
		switch {
		case errors.Is(err, ErrListChanged):
			last, why = nil, err
		case err != nil:
			return nil, err
		case key == nil || pages <= 1 || (last != nil && sameKeys(last, got, key)):
			return got, nil
		default:
			if last != nil {
				why = fmt.Errorf("%w: two readings in a row differ", ErrListChanged)
			} else {
				why = fmt.Errorf("%w: a list of %d pages is taken when the next reading holds the same items", ErrListChanged, pages)
			}
			last = got
		}
		klog.V(2).InfoS("Reading a paged list again", "list", what, "attempt", attempt, "pages", pages, "why", why)
	}
	return nil, fmt.Errorf("%s: %w (%d readings)", what, why, attempts)
}

// sameKeys reports whether a and b hold the same items by key (neither
// holds one twice: read reports that as ErrListChanged).
func sameKeys[T any](a, b []T, key func(T) string) bool {
	if len(a) != len(b) {
		return false
	}
	keys := make(map[string]bool, len(a))
	for _, it := range a {
		keys[key(it)] = true
	}
	for _, it := range b {
		if !keys[key(it)] {
			return false
		}
	}
	return true
}
