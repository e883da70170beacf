package store

import (
	"errors"
	"path/filepath"
	"testing"
)

type rec struct {
	Name string
	N    int
}

func TestPutLoadDeleteAcrossReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(Instances, "b", rec{"b", 2}); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(Instances, "a", rec{"a", 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(Routes, "r", rec{"r", 3}); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(Routes, "r"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got []rec
	if err := Load(s, Instances, func(_ string, v *rec) error { got = append(got, *v); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "a" || got[1].N != 2 {
		t.Fatalf("loaded %v, want a then b", got)
	}
	var routes int
	_ = Load(s, Routes, func(string, *rec) error { routes++; return nil })
	if routes != 0 {
		t.Fatalf("%d routes after delete", routes)
	}
}

func TestUpdateIsAllOrNothing(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	boom := errors.New("boom")
	err = s.Update(func(tx *Tx) error {
		if err := tx.Put(Instances, "x", rec{"x", 1}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	var n int
	_ = Load(s, Instances, func(string, *rec) error { n++; return nil })
	if n != 0 {
		t.Fatal("a failed transaction left a record")
	}
}

func TestSecondOpenRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// bbolt's flock is per open file description, so a second open in the
	// same process is refused like one from another process.
	if s2, err := Open(path); err == nil {
		s2.Close()
		t.Fatal("second open of a held file succeeded")
	}
}
