package ticket

import (
	"crypto/ecdsa"
	"fmt"
	"os"
	"sync"
	"time"
)

// DefaultReload is how long a KeyFile uses what it read before reading the
// file again.
const DefaultReload = 10 * time.Second

// KeyFile is the approver's view of the verifying keys: a key set document
// (KeysFile of a mounted Secret) read again when the last read is older
// than Reload, so that keys added or retired by a rotation take effect
// without a restart. A file that cannot be read or parsed is an error, never
// an answer from older keys: a retired key must stop verifying.
type KeyFile struct {
	Path   string
	Reload time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time

	mu     sync.Mutex
	keys   map[string]*ecdsa.PublicKey
	readAt time.Time
	err    error
}

// Keys returns the verifying keys by kid.
func (f *KeyFile) Keys() (map[string]*ecdsa.PublicKey, error) {
	now := time.Now
	if f.Now != nil {
		now = f.Now
	}
	reload := f.Reload
	if reload <= 0 {
		reload = DefaultReload
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if t := now(); f.readAt.IsZero() || t.Sub(f.readAt) >= reload || t.Before(f.readAt) {
		f.keys, f.err = readPublicKeys(f.Path)
		f.readAt = t
	}
	return f.keys, f.err
}

func readPublicKeys(path string) (map[string]*ecdsa.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("join ticket keys: %w", err)
	}
	keys, err := ParsePublicKeys(data)
	if err != nil {
		return nil, fmt.Errorf("join ticket keys %s: %w", path, err)
	}
	return keys, nil
}
