package cloudtest

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

type record struct {
	ID      int
	Name    string
	Status  string
	Tags    []string
	Created time.Time
	Kept    string
}

func newRecords(now time.Time) *Store[int, record] {
	return &Store[int, record]{
		Key:     func(r *record) *int { return &r.ID },
		NewKey:  func(n int) int { return 100 + 7*n },
		Created: func(r *record) *time.Time { return &r.Created },
		Now:     func() time.Time { return now },
		Clone:   func(r record) record { r.Tags = slices.Clone(r.Tags); return r },
		Missing: "storetest: no record",
	}
}

func TestStorePutGet(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := newRecords(now)
	a := s.Put(record{Name: "a", Tags: []string{"x"}}, nil)
	b := s.Put(record{Name: "b"}, nil)
	if a.ID != 100 || b.ID != 107 {
		t.Fatalf("made keys %d, %d; want 100, 107", a.ID, b.ID)
	}
	if !a.Created.Equal(now) {
		t.Fatalf("created %v, want now %v", a.Created, now)
	}
	given := now.Add(-time.Hour)
	c := s.Put(record{ID: 5, Name: "c", Created: given}, nil)
	if c.ID != 5 || !c.Created.Equal(given) {
		t.Fatalf("a given key and time were not kept: %+v", c)
	}
	if n := s.Put(record{Name: "d"}, nil); n.ID != 114 {
		t.Fatalf("after a given key, made %d; want 114", n.ID)
	}

	// Copies in and out: neither the caller's slice nor the answer's is
	// the stored one.
	a.Tags[0] = "changed"
	got, ok := s.Get(100)
	if !ok || got.Tags[0] != "x" {
		t.Fatalf("Get(100) = %+v, %v; the returned value shares its tags", got, ok)
	}
	got.Tags[0] = "changed"
	if again, _ := s.Get(100); again.Tags[0] != "x" {
		t.Fatal("a value Get returned shares its tags")
	}
	tags := []string{"y"}
	s.Put(record{ID: 6, Tags: tags}, nil)
	tags[0] = "changed"
	if r, _ := s.Get(6); r.Tags[0] != "y" {
		t.Fatal("a stored value shares the caller's tags")
	}
	if _, ok := s.Get(999); ok {
		t.Fatal("Get of a key never stored found one")
	}
}

func TestStoreSameAndKeep(t *testing.T) {
	s := newRecords(time.Now())
	s.Same = func(v, old *record) bool { return v.Name == old.Name }
	first := s.Put(record{Name: "a", Kept: "old"}, nil)
	var replaced *record
	second := s.Put(record{Name: "a", Status: "off"}, func(v, old *record) {
		if old != nil {
			cp := *old
			replaced = &cp
			v.Kept = old.Kept
		}
	})
	if second.ID != first.ID {
		t.Fatalf("a value of the same name got key %d, not %d", second.ID, first.ID)
	}
	if replaced == nil || replaced.Status != "" || second.Kept != "old" {
		t.Fatalf("keep saw %+v and kept %q", replaced, second.Kept)
	}
	if all := s.List(nil); len(all) != 1 || all[0].Status != "off" {
		t.Fatalf("after a replacement: %+v", all)
	}
	other := s.Put(record{Name: "b"}, func(v, old *record) {
		if old != nil {
			t.Errorf("a new value replaced %+v", old)
		}
	})
	if other.ID == first.ID {
		t.Fatal("a value of another name took an existing key")
	}
}

func TestStoreUpdateDeleteList(t *testing.T) {
	s := newRecords(time.Now())
	for _, r := range []record{{ID: 30, Name: "b"}, {ID: 10, Name: "c", Tags: []string{"t"}}, {ID: 20, Name: "a", Tags: []string{"t"}}} {
		s.Put(r, nil)
	}
	ids := func(rs []record) []int {
		var out []int
		for _, r := range rs {
			out = append(out, r.ID)
		}
		return out
	}
	if got := ids(s.List(nil)); !slices.Equal(got, []int{10, 20, 30}) {
		t.Fatalf("List by key: %v", got)
	}
	tagged := func(r *record) bool { return slices.Contains(r.Tags, "t") }
	if got := ids(s.List(tagged)); !slices.Equal(got, []int{10, 20}) {
		t.Fatalf("List of the tagged: %v", got)
	}
	s.Order = func(a, b *record) int { return strings.Compare(a.Name, b.Name) }
	if got := ids(s.List(nil)); !slices.Equal(got, []int{20, 30, 10}) {
		t.Fatalf("List by name: %v", got)
	}
	s.Order = func(a, b *record) int { return 0 }
	if got := ids(s.List(nil)); !slices.Equal(got, []int{10, 20, 30}) {
		t.Fatalf("List of equals is not by key: %v", got)
	}

	if err := s.Update(20, func(r *record) { r.Status = "off" }); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Get(20); r.Status != "off" {
		t.Fatalf("after Update: %+v", r)
	}
	err := s.Update(99, func(*record) { t.Error("Update ran on a key never stored") })
	if err == nil || err.Error() != "storetest: no record 99" {
		t.Fatalf("Update of a missing key: %v", err)
	}
	if err := s.Check(20); err != nil {
		t.Fatal(err)
	}
	s.Delete(20)
	s.Delete(20)
	if err := s.Check(20); err == nil || err.Error() != "storetest: no record 20" {
		t.Fatalf("Check after Delete: %v", err)
	}
	if got := ids(s.List(nil)); !slices.Equal(got, []int{10, 30}) {
		t.Fatalf("after Delete: %v", got)
	}
}

func TestStoreZeroAndConcurrent(t *testing.T) {
	// Only Key set: keys as given, no times, plain copies.
	var s Store[string, record]
	s.Key = func(r *record) *string { return &r.Name }
	if r := s.Put(record{Name: "x"}, nil); !r.Created.IsZero() {
		t.Fatalf("a store without Created set a time: %v", r.Created)
	}
	if _, ok := s.Get("x"); !ok {
		t.Fatal("not stored")
	}

	// A key of fields: Put neither makes nor takes one.
	byName := Store[string, record]{
		KeyOf:  func(r *record) string { return r.Name + "/" + r.Status },
		NewKey: func(int) string { t.Error("NewKey called with KeyOf"); return "" },
		Order:  func(a, b *record) int { return b.ID - a.ID },
	}
	byName.Put(record{ID: 1, Name: "a"}, nil)
	byName.Put(record{ID: 2, Name: "a", Status: "off"}, nil)
	byName.Put(record{ID: 3, Name: "a"}, nil)
	if r, ok := byName.Get("a/"); !ok || r.ID != 3 {
		t.Fatalf("Get(a/) = %+v, %v", r, ok)
	}
	if all := byName.List(nil); len(all) != 2 || all[0].ID != 3 {
		t.Fatalf("List by KeyOf: %+v", all)
	}

	c := newRecords(time.Now())
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				r := c.Put(record{}, nil)
				_ = c.Update(r.ID, func(r *record) { r.Status = "x" })
				c.List(nil)
				c.Delete(r.ID)
			}
		}()
	}
	wg.Wait()
	if all := c.List(nil); len(all) != 0 {
		t.Fatalf("left %d", len(all))
	}
	if r := c.Put(record{}, nil); r.ID != 100+7*400 {
		t.Fatalf("after 400 made keys, made %d", r.ID)
	}
}

func TestHook(t *testing.T) {
	var h Hook[int]
	h.Run(1) // none set
	var got []int
	h.Set(func(p int) {
		got = append(got, p)
		h.Set(nil) // the hook's lock is not held while it runs
	})
	h.Run(2)
	h.Run(3)
	if !slices.Equal(got, []int{2}) {
		t.Fatalf("ran with %v", got)
	}
}
