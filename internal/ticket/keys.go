package ticket

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/mooring-dev/mooring/internal/atomicfile"
)

// The Secret's data keys (and the files of a mounted Secret or a key
// directory).
const (
	// KeysFile is a JSON Web Key Set of the private keys (EC P-256, alg
	// ES256, use sig, each with its kid).
	KeysFile = "keys.json"
	// PublicKeysFile is a JSON Web Key Set of the same keys' public halves:
	// what the approver mounts, since it only verifies.
	PublicKeysFile = "public-keys.json"
	// SigningKeyFile names the kid that signs new tickets.
	SigningKeyFile = "signing-kid"
)

// KeySet is the issuer's keys: every key verifies, one signs. A key's kid
// is the first 16 bytes of its RFC 7638 thumbprint (SHA-256) in hex, so
// kids do not collide, and never begin with "-": an operator passes one to
// "keys sign" or "keys retire" as an argument, where a base64url thumbprint
// could read as a flag.
type KeySet struct {
	keys    []jose.JSONWebKey
	signing string
}

// AddKey makes a new key and adds it to the set, verifying only; the first
// key of an empty set also signs. It returns the new kid.
func (s *KeySet) AddKey() (string, error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	k := jose.JSONWebKey{Key: priv, Algorithm: string(alg), Use: "sig"}
	thumb, err := k.Thumbprint(crypto.SHA256)
	if err != nil {
		return "", err
	}
	k.KeyID = hex.EncodeToString(thumb[:16])
	s.keys = append(s.keys, k)
	if s.signing == "" {
		s.signing = k.KeyID
	}
	return k.KeyID, nil
}

// Sign makes kid the key that signs new tickets.
func (s *KeySet) Sign(kid string) error {
	if s.key(kid) == nil {
		return fmt.Errorf("no key %q in the set (keys: %v)", kid, s.IDs())
	}
	s.signing = kid
	return nil
}

// Retire removes a key that no longer signs: tickets it signed stop
// verifying once the approvers read the new set.
func (s *KeySet) Retire(kid string) error {
	switch {
	case s.key(kid) == nil:
		return fmt.Errorf("no key %q in the set (keys: %v)", kid, s.IDs())
	case kid == s.signing:
		return fmt.Errorf("key %q signs new tickets: make another key sign first", kid)
	}
	s.keys = slices.DeleteFunc(s.keys, func(k jose.JSONWebKey) bool { return k.KeyID == kid })
	return nil
}

// SigningKey is the kid that signs new tickets ("" in an empty set).
func (s *KeySet) SigningKey() string { return s.signing }

// IDs lists the kids, oldest first.
func (s *KeySet) IDs() []string {
	ids := make([]string, len(s.keys))
	for i, k := range s.keys {
		ids[i] = k.KeyID
	}
	return ids
}

// PublicKeys are the keys tickets are verified with, by kid.
func (s *KeySet) PublicKeys() map[string]*ecdsa.PublicKey {
	out := make(map[string]*ecdsa.PublicKey, len(s.keys))
	for _, k := range s.keys {
		out[k.KeyID] = &k.Key.(*ecdsa.PrivateKey).PublicKey
	}
	return out
}

func (s *KeySet) key(kid string) *jose.JSONWebKey {
	for i := range s.keys {
		if s.keys[i].KeyID == kid {
			return &s.keys[i]
		}
	}
	return nil
}

func (s *KeySet) signingKey() *jose.JSONWebKey { return s.key(s.signing) }

// Data encodes the set as a Secret's data: KeysFile, PublicKeysFile and
// SigningKeyFile.
func (s *KeySet) Data() (map[string][]byte, error) {
	if s.signingKey() == nil {
		return nil, errors.New("the key set has no signing key")
	}
	jwks, err := json.MarshalIndent(jose.JSONWebKeySet{Keys: s.keys}, "", "  ")
	if err != nil {
		return nil, err
	}
	public := make([]jose.JSONWebKey, len(s.keys))
	for i, k := range s.keys {
		public[i] = k.Public()
	}
	pub, err := json.MarshalIndent(jose.JSONWebKeySet{Keys: public}, "", "  ")
	if err != nil {
		return nil, err
	}
	return map[string][]byte{KeysFile: append(jwks, '\n'), PublicKeysFile: append(pub, '\n'), SigningKeyFile: []byte(s.signing + "\n")}, nil
}

// ParseKeySet decodes a Secret's data (or a key directory's files) into the
// issuer's key set. The signing kid must name one of the keys; the public
// keys are derived again, not read.
func ParseKeySet(data map[string][]byte) (*KeySet, error) {
	keys, err := parseKeys(data[KeysFile], true)
	if err != nil {
		return nil, err
	}
	s := &KeySet{keys: keys}
	if err := s.Sign(strings.TrimSpace(string(data[SigningKeyFile]))); err != nil {
		return nil, fmt.Errorf("%s: %w", SigningKeyFile, err)
	}
	return s, nil
}

// ParsePublicKeys reads the verifying keys out of a key set document
// (PublicKeysFile, or KeysFile: its keys may be private or public).
func ParsePublicKeys(jwks []byte) (map[string]*ecdsa.PublicKey, error) {
	keys, err := parseKeys(jwks, false)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*ecdsa.PublicKey, len(keys))
	for _, k := range keys {
		switch key := k.Key.(type) {
		case *ecdsa.PrivateKey:
			out[k.KeyID] = &key.PublicKey
		case *ecdsa.PublicKey:
			out[k.KeyID] = key
		}
	}
	return out, nil
}

// parseKeys decodes a JWK set of at least one key, each EC P-256 for ES256
// signatures with a unique kid; private ones only when wantPrivate. Its
// errors name KeysFile when wantPrivate, else the key set in general.
func parseKeys(jwks []byte, wantPrivate bool) ([]jose.JSONWebKey, error) {
	name := "key set"
	if wantPrivate {
		name = KeysFile
	}
	if len(jwks) == 0 {
		return nil, fmt.Errorf("%s: missing or empty", name)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(jwks, &set); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(set.Keys) == 0 {
		return nil, fmt.Errorf("%s: no keys", name)
	}
	seen := map[string]bool{}
	for i, k := range set.Keys {
		var curve elliptic.Curve
		switch key := k.Key.(type) {
		case *ecdsa.PrivateKey:
			curve = key.Curve
		case *ecdsa.PublicKey:
			if wantPrivate {
				return nil, fmt.Errorf("%s: key %q is public; the issuer needs the private key", name, k.KeyID)
			}
			curve = key.Curve
		default:
			return nil, fmt.Errorf("%s: key %d is a %T, want an EC P-256 key", name, i, k.Key)
		}
		switch {
		case curve != elliptic.P256():
			return nil, fmt.Errorf("%s: key %q is not on P-256", name, k.KeyID)
		case k.KeyID == "" || seen[k.KeyID]:
			return nil, fmt.Errorf("%s: key %d has an empty or repeated kid %q", name, i, k.KeyID)
		case k.Algorithm != string(alg) || k.Use != "sig":
			return nil, fmt.Errorf("%s: key %q is for alg %q use %q, want %s sig", name, k.KeyID, k.Algorithm, k.Use, alg)
		}
		seen[k.KeyID] = true
	}
	return set.Keys, nil
}

// ReadDir reads a key set from a directory holding KeysFile and
// SigningKeyFile (a mounted Secret, say).
func ReadDir(dir string) (*KeySet, error) {
	data := map[string][]byte{}
	for _, name := range []string{KeysFile, SigningKeyFile} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		data[name] = b
	}
	return ParseKeySet(data)
}

// WriteDir writes the key set into dir (made if missing, mode 0700), each
// file mode 0600 and replaced whole (internal/atomicfile).
func (s *KeySet) WriteDir(dir string) error {
	data, err := s.Data()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// The keys first: a reader between the two never finds a signing kid
	// that is not among the keys.
	// Each file is synced before its rename and the directory after it, so a
	// crash leaves a whole old file or a whole new one, never an empty one.
	for _, name := range []string{KeysFile, PublicKeysFile, SigningKeyFile} {
		if err := atomicfile.Write(filepath.Join(dir, name), data[name], 0o600); err != nil {
			return err
		}
	}
	return nil
}

// HoldsPrivateKeys reports whether a key set document holds a private key:
// the approver warns when it was given KeysFile instead of PublicKeysFile.
func HoldsPrivateKeys(jwks []byte) bool {
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(jwks, &set); err != nil {
		return false
	}
	for _, k := range set.Keys {
		if !k.IsPublic() {
			return true
		}
	}
	return false
}
