// Package ticket makes and checks join tickets: per-instance tokens that let
// a machine of a cloud without signed instance identity (DigitalOcean,
// Hetzner, OpenStack, bare metal) join a cluster once.
//
// User-data is written before the cloud assigns an instance id, so a ticket
// names its instance by the name the admin gives it at creation. It is a JWT
// (compact JWS, ES256, made and checked with go-jose) whose protected header
// holds exactly alg, kid and typ, and whose claims are exactly:
//
//	jti  a random id: the ticket is used once (the approver's replay key)
//	sub  the instance's name
//	aud  the cluster
//	iat  when it was issued; the instance must be created after it
//	exp  when it expires (default one hour later, at most a day)
//
// A KeySet holds the private keys (several verify, one signs, each has a kid)
// and reads and writes them as a Kubernetes Secret's data; the approver reads
// the public half through a KeyFile. A ticket cannot be bound to a CSR key in
// advance: it is a bearer token for one join of one instance name.
package ticket

import (
	"crypto/ecdsa"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/mooring-dev/mooring/internal/jwsform"
	"github.com/mooring-dev/mooring/internal/strictjson"
)

// BlockType is the PEM type of the evidence block a ticket travels in,
// after the CERTIFICATE REQUEST of the kubelet's client CSR.
const BlockType = "MOORING JOIN TICKET"

// HeaderType is the ticket's typ header: explicit typing, so that no other
// JWT signed by the same key can pass for a ticket.
const HeaderType = "mooring-join-ticket+jwt"

// Lifetimes.
const (
	DefaultLifetime = time.Hour
	MinLifetime     = time.Minute
	MaxLifetime     = 24 * time.Hour
)

// MaxSize bounds a ticket's encoded form.
const MaxSize = 4 << 10

// alg is the one signature algorithm tickets are made and checked with.
const alg = jose.ES256

// Errors Verify wraps, for machine-readable deny reasons.
var (
	ErrMalformed   = errors.New("malformed ticket")
	ErrUnknownKey  = errors.New("ticket signed by an unknown key")
	ErrSignature   = errors.New("ticket signature does not verify")
	ErrExpired     = errors.New("ticket expired")
	ErrNotYetValid = errors.New("ticket issued in the future")
	ErrLifetime    = errors.New("ticket lifetime out of bounds")
	ErrCluster     = errors.New("ticket of another cluster")
)

// Claims are what a ticket says.
type Claims struct {
	// ID is random and unique per ticket (jti).
	ID string
	// Name is the instance's name (sub), as the admin gives it at creation.
	Name string
	// Cluster is the cluster the instance joins (aud).
	Cluster string
	// IssuedAt and Expiry bound the ticket (iat, exp), in whole seconds.
	IssuedAt, Expiry time.Time
}

// namePattern: names that can become a Node name (a DNS label or name).
var namePattern = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$`)

// clusterPattern: a cluster tag of printable ASCII.
var clusterPattern = regexp.MustCompile(`^[!-~]{1,253}$`)

// idPattern: 128 random bits, base64url.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{22}$`)

// Issue signs a ticket for the instance called name, of cluster, valid for
// lifetime from now (0: DefaultLifetime), with the set's signing key.
func (s *KeySet) Issue(name, cluster string, now time.Time, lifetime time.Duration) (string, Claims, error) {
	if lifetime == 0 {
		lifetime = DefaultLifetime
	}
	switch {
	case !namePattern.MatchString(name):
		return "", Claims{}, fmt.Errorf("instance name %q: want 1-253 letters, digits, dots and dashes, starting and ending with a letter or digit", name)
	case !clusterPattern.MatchString(cluster):
		return "", Claims{}, fmt.Errorf("cluster %q: want 1-253 printable ASCII characters", cluster)
	case lifetime < MinLifetime || lifetime > MaxLifetime:
		return "", Claims{}, fmt.Errorf("lifetime %s: want %s to %s", lifetime, MinLifetime, MaxLifetime)
	}
	key := s.signingKey()
	if key == nil {
		return "", Claims{}, errors.New("the key set has no signing key")
	}
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", Claims{}, err
	}
	c := Claims{
		ID: base64.RawURLEncoding.EncodeToString(id[:]), Name: name, Cluster: cluster,
		IssuedAt: now.Truncate(time.Second).UTC(), Expiry: now.Truncate(time.Second).Add(lifetime).UTC(),
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: *key},
		(&jose.SignerOptions{}).WithType(HeaderType))
	if err != nil {
		return "", Claims{}, err
	}
	tok, err := jwt.Signed(signer).Claims(jwt.Claims{
		ID: c.ID, Subject: c.Name, Audience: jwt.Audience{c.Cluster},
		IssuedAt: jwt.NewNumericDate(c.IssuedAt), Expiry: jwt.NewNumericDate(c.Expiry),
	}).Serialize()
	if err != nil {
		return "", Claims{}, err
	}
	return tok, c, nil
}

// Expect is what Verify checks a ticket against.
type Expect struct {
	// Cluster the ticket must name.
	Cluster string
	// Now is the time of the check.
	Now time.Time
	// Skew is tolerated on iat and exp.
	Skew time.Duration
}

// Verify checks a ticket: its form and its claims as stated (Check),
// then its signature by the key its kid names among keys, then its claims
// as signed. The errors wrap the package's Err values.
func Verify(data []byte, keys map[string]*ecdsa.PublicKey, want Expect) (Claims, error) {
	p, _, err := check(data, want)
	if err != nil {
		return Claims{}, err
	}
	key, ok := keys[p.kid]
	if !ok || key == nil {
		return Claims{}, fmt.Errorf("%w: kid %.64q", ErrUnknownKey, p.kid)
	}
	payload, err := p.jws.Verify(key)
	if err != nil {
		return Claims{}, fmt.Errorf("%w: %v", ErrSignature, err)
	}
	c, err := readClaims(payload)
	if err != nil {
		return Claims{}, err
	}
	if err := checkClaims(c, want); err != nil {
		return Claims{}, err
	}
	return c, nil
}

// Check checks what can be checked without a key: the ticket's form and
// its claims as it states them (lifetime, cluster, times). It verifies no
// signature: a ticket that fails it can be refused before the keys are
// read; one that passes proves nothing.
func Check(data []byte, want Expect) (Claims, error) {
	_, c, err := check(data, want)
	return c, err
}

func check(data []byte, want Expect) (parsed, Claims, error) {
	p, err := parse(data)
	if err != nil {
		return parsed{}, Claims{}, err
	}
	c, err := readClaims(p.jws.UnsafePayloadWithoutVerification())
	if err != nil {
		return parsed{}, Claims{}, err
	}
	if err := checkClaims(c, want); err != nil {
		return parsed{}, Claims{}, err
	}
	return p, c, nil
}

func checkClaims(c Claims, want Expect) error {
	switch life := c.Expiry.Sub(c.IssuedAt); {
	case life < MinLifetime || life > MaxLifetime:
		return fmt.Errorf("%w: it lives %s, accepted %s to %s", ErrLifetime, life, MinLifetime, MaxLifetime)
	case c.Cluster != want.Cluster:
		return fmt.Errorf("%w: it is for cluster %q, this is %q", ErrCluster, c.Cluster, want.Cluster)
	case want.Now.After(c.Expiry.Add(want.Skew)):
		return fmt.Errorf("%w at %s", ErrExpired, c.Expiry.Format(time.RFC3339))
	case c.IssuedAt.After(want.Now.Add(want.Skew)):
		return fmt.Errorf("%w: issued at %s", ErrNotYetValid, c.IssuedAt.Format(time.RFC3339))
	}
	return nil
}

// Peek reads a ticket's claims without verifying its signature: only for
// indexing the CSRs that carry it.
func Peek(data []byte) (Claims, error) {
	p, err := parse(data)
	if err != nil {
		return Claims{}, err
	}
	return readClaims(p.jws.UnsafePayloadWithoutVerification())
}

// parsed is a ticket whose form was checked, not its signature.
type parsed struct {
	jws *jose.JSONWebSignature
	kid string
}

// header is the whole protected header a ticket may carry.
type header struct {
	Alg string `json:"alg"`
	Kid string `json:"kid"`
	Typ string `json:"typ"`
}

// parse checks the form: three non-empty parts in canonical base64url, a
// protected header of exactly alg (ES256), kid and typ (HeaderType), each
// once, one signature. Anything else in the header (a key or where to
// fetch one: jwk, jku, x5c, x5u; crit; b64) is refused (internal/jwsform)
// before go-jose reads it.
func parse(data []byte) (parsed, error) {
	if len(data) == 0 {
		return parsed{}, fmt.Errorf("%w: empty", ErrMalformed)
	}
	parts, err := jwsform.Parse(string(data), MaxSize, "alg", "kid", "typ")
	if err != nil {
		return parsed{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if len(parts.Header) == 0 || len(parts.Payload) == 0 || len(parts.Signature) == 0 {
		return parsed{}, fmt.Errorf("%w: a part is empty", ErrMalformed)
	}
	var h header
	if err := strictjson.UnmarshalKnown(parts.Header, &h); err != nil {
		return parsed{}, fmt.Errorf("%w: header: %v", ErrMalformed, err)
	}
	switch {
	case h.Alg != string(alg):
		return parsed{}, fmt.Errorf("%w: alg %q, only %s is accepted", ErrSignature, h.Alg, alg)
	case h.Kid == "":
		return parsed{}, fmt.Errorf("%w: no kid", ErrMalformed)
	case h.Typ != HeaderType:
		return parsed{}, fmt.Errorf("%w: typ %q, want %q", ErrMalformed, h.Typ, HeaderType)
	}
	jws, err := jose.ParseSignedCompact(string(data), []jose.SignatureAlgorithm{alg})
	if err != nil {
		return parsed{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if len(jws.Signatures) != 1 || jws.Signatures[0].Protected.KeyID != h.Kid {
		return parsed{}, fmt.Errorf("%w: want one signature by kid %q", ErrMalformed, h.Kid)
	}
	return parsed{jws: jws, kid: h.Kid}, nil
}

// claimNames are exactly the claims a ticket holds.
var claimNames = []string{"aud", "exp", "iat", "jti", "sub"}

// readClaims decodes the payload: exactly the claims of claimNames, each
// well-formed, one audience.
func readClaims(payload []byte) (Claims, error) {
	var names map[string]json.RawMessage
	if err := json.Unmarshal(payload, &names); err != nil {
		return Claims{}, fmt.Errorf("%w: claims: %v", ErrMalformed, err)
	}
	got := make([]string, 0, len(names))
	for n := range names {
		got = append(got, n)
	}
	slices.Sort(got)
	if !slices.Equal(got, claimNames) {
		return Claims{}, fmt.Errorf("%w: claims %v, want exactly %v", ErrMalformed, got, claimNames)
	}
	var jc jwt.Claims
	if err := json.Unmarshal(payload, &jc); err != nil {
		return Claims{}, fmt.Errorf("%w: claims: %v", ErrMalformed, err)
	}
	switch {
	case !idPattern.MatchString(jc.ID):
		return Claims{}, fmt.Errorf("%w: jti %.40q", ErrMalformed, jc.ID)
	case !namePattern.MatchString(jc.Subject):
		return Claims{}, fmt.Errorf("%w: sub %.60q is not an instance name", ErrMalformed, jc.Subject)
	case len(jc.Audience) != 1 || !clusterPattern.MatchString(jc.Audience[0]):
		return Claims{}, fmt.Errorf("%w: aud must be one cluster, got %d values", ErrMalformed, len(jc.Audience))
	case jc.IssuedAt == nil || jc.Expiry == nil:
		return Claims{}, fmt.Errorf("%w: iat and exp are required", ErrMalformed)
	}
	return Claims{
		ID: jc.ID, Name: jc.Subject, Cluster: jc.Audience[0],
		IssuedAt: jc.IssuedAt.Time().UTC(), Expiry: jc.Expiry.Time().UTC(),
	}, nil
}
