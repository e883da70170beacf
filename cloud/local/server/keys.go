package server

import (
	"net/http"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/local/identity"
	"github.com/mooring-dev/mooring/cloud/local/store"
)

// storedKey is an identity key as the state file holds it.
type storedKey struct {
	PEM     string    `json:"pem"`
	Created time.Time `json:"created"`
}

// loadKeys restores the identity keys, newest active, or makes the first.
func (s *Server) loadKeys(now time.Time) error {
	var keys []*identity.Key
	err := store.Load(s.store, store.IdentityKeys, func(_ string, sk *storedKey) error {
		k, err := identity.ParseKeyPEM([]byte(sk.PEM), sk.Created)
		if err != nil {
			return err
		}
		keys = append(keys, k)
		return nil
	})
	if err != nil {
		return err
	}
	if len(keys) == 0 {
		k, err := identity.NewKey(now)
		if err != nil {
			return err
		}
		if err := s.putKey(k); err != nil {
			return err
		}
		s.keys = identity.NewKeySet(k)
		klog.InfoS("Identity key created", "kid", k.ID)
		return nil
	}
	sortNewestFirst(keys)
	s.keys = identity.NewKeySet(keys[0], keys[1:]...)
	return nil
}

func (s *Server) putKey(k *identity.Key) error {
	pem, err := k.MarshalPEM()
	if err != nil {
		return err
	}
	return s.store.Put(store.IdentityKeys, k.ID, storedKey{PEM: string(pem), Created: k.Created})
}

// rotateLocked makes a new active key (persisted first) and drops keys no
// token can still be valid under.
func (s *Server) rotateLocked(now time.Time) (*identity.Key, error) {
	k, err := identity.NewKey(now)
	if err != nil {
		return nil, err
	}
	if err := s.putKey(k); err != nil {
		return nil, err
	}
	previous := s.keys.Keys()
	s.keys = identity.NewKeySet(k, previous...)
	s.pruneKeysLocked(now)
	klog.InfoS("Identity key rotated", "kid", k.ID, "published", len(s.keys.Keys()))
	return k, nil
}

// pruneKeysLocked unpublishes retired keys once every token they signed has
// expired: a key retires when the next one is made, and tokens live TokenTTL.
func (s *Server) pruneKeysLocked(now time.Time) {
	keys := s.keys.Keys()
	sortNewestFirst(keys[1:])
	keep := []*identity.Key{keys[0]}
	for i := 1; i < len(keys); i++ {
		retired := keys[i-1].Created
		if now.Sub(retired) < s.cfg.TokenTTL+time.Minute {
			keep = append(keep, keys[i])
			continue
		}
		if err := s.store.Delete(store.IdentityKeys, keys[i].ID); err != nil {
			keep = append(keep, keys[i])
			klog.ErrorS(err, "Could not remove a retired identity key", "kid", keys[i].ID)
		}
	}
	s.keys = identity.NewKeySet(keep[0], keep[1:]...)
}

// maybeRotateKey rotates when the active key is older than KeyRotation.
func (s *Server) maybeRotateKey(now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pruneKeysLocked(now)
	if s.cfg.KeyRotation <= 0 || now.Sub(s.keys.Active().Created) < s.cfg.KeyRotation {
		return nil
	}
	_, err := s.rotateLocked(now)
	return err
}

func (s *Server) rotateKey(*http.Request) (int, any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, err := s.rotateLocked(s.cfg.Now())
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]string{"kid": k.ID}, nil
}

func (s *Server) getJWKS(*http.Request) (int, any, error) {
	s.mu.Lock()
	data, err := s.keys.JWKS()
	s.mu.Unlock()
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, rawBody{contentType: "application/json", data: data}, nil
}

func sortNewestFirst(keys []*identity.Key) {
	slices.SortFunc(keys, func(a, b *identity.Key) int { return b.Created.Compare(a.Created) })
}
