package identity

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// KeySet is the active signing key and the retired keys whose tokens may
// still be valid. All keys are published; only the active one signs.
// It is safe for concurrent use.
type KeySet struct {
	mu       sync.RWMutex
	active   *Key
	previous []*Key // newest first
}

// NewKeySet makes a set that signs with active and still publishes previous.
func NewKeySet(active *Key, previous ...*Key) *KeySet {
	s := &KeySet{active: active}
	s.setPrevious(previous)
	return s
}

func (s *KeySet) setPrevious(keys []*Key) {
	prev := make([]*Key, 0, len(keys))
	for _, k := range keys {
		if k != nil && k.ID != s.active.ID {
			prev = append(prev, k)
		}
	}
	slices.SortStableFunc(prev, func(a, b *Key) int { return b.Created.Compare(a.Created) })
	s.previous = prev
}

// Active is the key that signs new tokens.
func (s *KeySet) Active() *Key {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.active
}

// Keys lists every published key, the active one first, then newest first.
func (s *KeySet) Keys() []*Key {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append([]*Key{s.active}, s.previous...)
}

// Rotate makes a new active key; the old one stays published until pruned.
func (s *KeySet) Rotate(now time.Time) (*Key, error) {
	k, err := NewKey(now)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := append([]*Key{s.active}, s.previous...)
	s.active = k
	s.setPrevious(old)
	return k, nil
}

// Prune drops retired keys that retired before cutoff. A key retires when
// the next newer key is made, so a token it signed expires at most one token
// lifetime after that; callers pass now minus that lifetime (plus skew).
func (s *KeySet) Prune(cutoff time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keep := s.previous[:0:0]
	newer := s.active
	for _, k := range s.previous {
		if !newer.Created.Before(cutoff) {
			keep = append(keep, k)
		}
		newer = k
	}
	s.previous = keep
}

// JWKS is the JSON Web Key Set of every published key: their public
// halves only, each with its kid, "alg":"ES256" and "use":"sig".
func (s *KeySet) JWKS() ([]byte, error) {
	var set jose.JSONWebKeySet
	for _, k := range s.Keys() {
		set.Keys = append(set.Keys, publicJWK(k))
	}
	data, err := json.Marshal(set)
	if err != nil {
		return nil, fmt.Errorf("identity JWKS: %w", err)
	}
	return data, nil
}

// Sign signs claims with the active key.
func (s *KeySet) Sign(c Claims) (string, error) {
	return sign(s.Active(), c)
}
