// Package store persists the local cloud's state in one bbolt file. Every
// write is one transaction, committed (and fsynced) before the caller's
// in-memory state changes, so a kill -9 leaves either the old or the new
// state, never a part of a change.
package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// Bucket names a kind of record.
type Bucket string

// The buckets of the local cloud.
const (
	Instances     Bucket = "instances"
	LoadBalancers Bucket = "loadbalancers"
	Routes        Bucket = "routes"
	IdentityKeys  Bucket = "identity-keys"
)

var buckets = []Bucket{Instances, LoadBalancers, Routes, IdentityKeys}

// Store is an open state file.
type Store struct {
	db *bolt.DB
}

// Open opens (creating if needed) the state file at path. A file another
// process holds open is refused after a short wait.
func Open(path string) (*Store, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("store: %s is in use by another process", path)
		}
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range buckets {
			if _, err := tx.CreateBucketIfNotExists([]byte(b)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("store: init %s: %w", path, err)
	}
	return &Store{db: db}, nil
}

// Close closes the file.
func (s *Store) Close() error { return s.db.Close() }

// Tx is a write transaction: its puts and deletes commit together or not at all.
type Tx struct {
	tx *bolt.Tx
}

// Put stores v as JSON under key.
func (t *Tx) Put(b Bucket, key string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("store: encode %s/%s: %w", b, key, err)
	}
	return t.tx.Bucket([]byte(b)).Put([]byte(key), data)
}

// Delete removes key; a missing key is not an error.
func (t *Tx) Delete(b Bucket, key string) error {
	return t.tx.Bucket([]byte(b)).Delete([]byte(key))
}

// Update runs fn in one write transaction, committed when fn returns nil.
func (s *Store) Update(fn func(*Tx) error) error {
	return s.db.Update(func(tx *bolt.Tx) error { return fn(&Tx{tx: tx}) })
}

// Put stores one record in its own transaction.
func (s *Store) Put(b Bucket, key string, v any) error {
	return s.Update(func(t *Tx) error { return t.Put(b, key, v) })
}

// Delete removes one record in its own transaction.
func (s *Store) Delete(b Bucket, key string) error {
	return s.Update(func(t *Tx) error { return t.Delete(b, key) })
}

// Load decodes every record of a bucket, in key order, into a new T and
// passes it to fn.
func Load[T any](s *Store, b Bucket, fn func(key string, v *T) error) error {
	return s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(b)).ForEach(func(k, data []byte) error {
			v := new(T)
			if err := json.Unmarshal(data, v); err != nil {
				return fmt.Errorf("store: decode %s/%s: %w", b, k, err)
			}
			return fn(string(k), v)
		})
	})
}
