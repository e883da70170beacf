package cloudtest

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Store is what a test endpoint keeps of its instances: values of type V
// by a key of type K that each value holds (its id) or makes of its
// fields, copied in and out so that a caller never shares a stored
// value's slices or maps. An endpoint sets its fields before first use
// (Key or KeyOf at least) and never after; its methods are safe for
// concurrent use.
type Store[K cmp.Ordered, V any] struct {
	// Key is where a value holds its key.
	Key func(*V) *K
	// KeyOf, instead of Key, makes a value's key of its fields (such as
	// project/zone/name): Put then neither makes nor takes one.
	KeyOf func(*V) K
	// NewKey is the key Put gives the n-th value (n from 0) it stores
	// with a zero key that Same does not match; nil leaves the key zero.
	NewKey func(n int) K
	// Same, when set, says whether v, stored with a zero key, is the
	// stored old (a server of the same name): v then takes old's key and
	// replaces it.
	Same func(v, old *V) bool
	// Created, when set, is where a value holds its creation time: Put
	// sets a zero one to Now() (default time.Now).
	Created func(*V) *time.Time
	Now     func() time.Time
	// Clone copies a value, its slices and maps too (nil: a plain copy).
	Clone func(V) V
	// Order is List's order (nil: by key); values it finds equal are
	// ordered by key.
	Order func(a, b *V) int
	// Missing begins the error of a key that is not stored, which goes
	// on with the key: "digitaloceantest: no droplet" gives
	// "digitaloceantest: no droplet 42".
	Missing string

	mu   sync.Mutex
	m    map[K]*V
	made int // keys made by NewKey
}

// Put adds v, or replaces the value of its key, and returns a copy of
// what it stored. Under the store's lock, in this order: a zero key (of
// Key) is taken from the value Same matches or made by NewKey; keep, when not
// nil, sees v and the value it replaces (nil when none), to carry over
// what a replacement keeps, such as the old creation time (keep must not
// call the store); a zero creation time is set to now.
func (s *Store[K, V]) Put(v V, keep func(v, old *V)) V {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Key != nil {
		key := s.Key(&v)
		var zero K
		if *key == zero && s.Same != nil {
			for k, old := range s.m {
				if s.Same(&v, old) {
					*key = k
				}
			}
		}
		if *key == zero && s.NewKey != nil {
			*key = s.NewKey(s.made)
			s.made++
		}
	}
	key := s.key(&v)
	old := s.m[key]
	if keep != nil {
		keep(&v, old)
	}
	if s.Created != nil {
		if t := s.Created(&v); t.IsZero() {
			now := time.Now
			if s.Now != nil {
				now = s.Now
			}
			*t = now()
		}
	}
	cp := s.clone(v)
	if s.m == nil {
		s.m = map[K]*V{}
	}
	s.m[key] = &cp
	return s.clone(cp)
}

// Get returns a copy of the value of k.
func (s *Store[K, V]) Get(k K) (V, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[k]
	if !ok {
		var zero V
		return zero, false
	}
	return s.clone(*v), true
}

// Check is nil when k is stored, else the error that says it is not.
func (s *Store[K, V]) Check(k K) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[k]; !ok {
		return s.missing(k)
	}
	return nil
}

// Update changes the value of k with f (f must not call the store); an
// error when k is not stored.
func (s *Store[K, V]) Update(k K, f func(*V)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[k]
	if !ok {
		return s.missing(k)
	}
	f(v)
	return nil
}

// Delete removes the value of k, if any.
func (s *Store[K, V]) Delete(k K) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, k)
}

// List is a copy of every value that match says so of (nil: every
// value), in Order, one snapshot.
func (s *Store[K, V]) List(match func(*V) bool) []V {
	s.mu.Lock()
	var out []V
	for _, v := range s.m {
		if match == nil || match(v) {
			out = append(out, s.clone(*v))
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b V) int {
		if s.Order != nil {
			if d := s.Order(&a, &b); d != 0 {
				return d
			}
		}
		return cmp.Compare(s.key(&a), s.key(&b))
	})
	return out
}

func (s *Store[K, V]) key(v *V) K {
	if s.Key != nil {
		return *s.Key(v)
	}
	return s.KeyOf(v)
}

func (s *Store[K, V]) clone(v V) V {
	if s.Clone == nil {
		return v
	}
	return s.Clone(v)
}

func (s *Store[K, V]) missing(k K) error { return fmt.Errorf("%s %v", s.Missing, k) }

// Hook is a function a test sets for an endpoint to run at a point of its
// work, such as before each page of a list is answered (where the test
// changes the instances between pages), given that page's number or
// marker. The zero value is ready (no function); it is safe for
// concurrent use.
type Hook[T any] struct {
	mu sync.Mutex
	f  func(T)
}

// Set sets the function (nil: none).
func (h *Hook[T]) Set(f func(T)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.f = f
}

// Run runs the function, if one is set, outside the hook's lock.
func (h *Hook[T]) Run(v T) {
	h.mu.Lock()
	f := h.f
	h.mu.Unlock()
	if f != nil {
		f(v)
	}
}
