package kit

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// pagedStore is a list read in pages of size by offset, as a cloud's
// numbered pages are: what changes between two page reads moves the
// items after it. before runs before each page is read.
type pagedStore struct {
	items  []string
	size   int
	before func(page int)
	reads  int
}

// read reads every page once; a reading that sees an item twice is
// ErrListChanged (what the backends check).
func (s *pagedStore) read() ([]string, int, error) {
	s.reads++
	var out []string
	seen := map[string]bool{}
	for page := 1; ; page++ {
		if s.before != nil {
			s.before(page)
		}
		from := (page - 1) * s.size
		if from >= len(s.items) {
			return out, page, nil
		}
		for _, it := range s.items[from:min(from+s.size, len(s.items))] {
			if seen[it] {
				return nil, page, fmt.Errorf("%w: %s listed twice", ErrListChanged, it)
			}
			seen[it] = true
			out = append(out, it)
		}
		if from+s.size >= len(s.items) {
			return out, page, nil
		}
	}
}

func id(s string) string { return s }

// A deletion between two pages shifts an item that was there throughout
// onto the page already read: one reading misses it, with nothing in the
// pages to say so. With key, ReadWhole takes a list of more than one page
// only when the next reading holds the same items, so the item is never
// missed; without (the bug it prevents), the shifted list is the answer.
func TestReadWholeShiftedList(t *testing.T) {
	newStore := func() *pagedStore {
		s := &pagedStore{items: []string{"a", "b", "c", "d", "e"}, size: 2}
		deleted := false
		s.before = func(page int) {
			if page == 2 && !deleted {
				deleted = true
				s.items = slices.Delete(s.items, 0, 1) // "a" goes; "c" moves onto page 1
			}
		}
		return s
	}
	s := newStore()
	got, err := ReadWhole("test list", ListAttempts, s.read, id)
	if err != nil || !slices.Equal(got, []string{"b", "c", "d", "e"}) {
		t.Fatalf("with key: %v %v, want [b c d e]", got, err)
	}
	if s.reads != 3 {
		t.Errorf("with key: %d readings, want 3 (the shifted one, then two that agree)", s.reads)
	}
	s = newStore()
	got, err = ReadWhole("test list", ListAttempts, s.read, nil)
	if err != nil || slices.Contains(got, "c") {
		t.Fatalf("without key the shifted list is expected to miss c (the bug key prevents): %v %v", got, err)
	}
}

// A list of one page is one answer, taken at once, with key or without.
func TestReadWholeOnePage(t *testing.T) {
	for _, key := range []func(string) string{nil, id} {
		s := &pagedStore{items: []string{"a", "b"}, size: 5}
		if got, err := ReadWhole("test list", ListAttempts, s.read, key); err != nil || len(got) != 2 || s.reads != 1 {
			t.Errorf("one page: %v %v, %d readings", got, err, s.reads)
		}
	}
	s := &pagedStore{size: 5}
	if got, err := ReadWhole("test list", ListAttempts, s.read, id); err != nil || len(got) != 0 || s.reads != 1 {
		t.Errorf("empty list: %v %v, %d readings", got, err, s.reads)
	}
}

// A list that changes at every reading is an error after attempts
// readings, one that wraps ErrListChanged and says what was read; with
// key, two readings that differ are a change too.
func TestReadWholeChangesEveryTime(t *testing.T) {
	n := 0
	_, err := ReadWhole("test list", 3, func() ([]string, int, error) {
		n++
		return nil, 2, fmt.Errorf("%w: total moved", ErrListChanged)
	}, nil)
	if !errors.Is(err, ErrListChanged) || !strings.Contains(err.Error(), "test list") || !strings.Contains(err.Error(), "total moved") || n != 3 {
		t.Fatalf("changing at every reading: %v after %d readings", err, n)
	}
	n = 0
	_, err = ReadWhole("test list", 3, func() ([]string, int, error) {
		n++
		return []string{"a", fmt.Sprint("churn-", n)}, 2, nil
	}, id)
	if !errors.Is(err, ErrListChanged) || !strings.Contains(err.Error(), "differ") || n != 3 {
		t.Fatalf("readings that never agree: %v after %d readings", err, n)
	}
	// A change, then a reading that holds an item twice, then one that
	// agrees with nothing before it: the twice-listed reading is no
	// confirmation.
	readings := [][]string{{"a", "b"}, nil, {"a", "b"}}
	n = 0
	_, err = ReadWhole("test list", 3, func() ([]string, int, error) {
		n++
		if readings[n-1] == nil {
			return nil, 2, fmt.Errorf("%w: b listed twice", ErrListChanged)
		}
		return readings[n-1], 2, nil
	}, id)
	if !errors.Is(err, ErrListChanged) || n != 3 {
		t.Fatalf("a reading that listed one twice confirmed another: %v after %d readings", err, n)
	}
}

// An error that is no change ends the reading at once: a failed page is
// never a shorter list, nor read again here (the view retries).
func TestReadWholeFailure(t *testing.T) {
	boom := errors.New("503")
	n := 0
	got, err := ReadWhole("test list", 3, func() ([]string, int, error) {
		n++
		return []string{"a"}, 1, boom
	}, id)
	if !errors.Is(err, boom) || got != nil || n != 1 {
		t.Fatalf("a failure: %v %v after %d readings", got, err, n)
	}
}
