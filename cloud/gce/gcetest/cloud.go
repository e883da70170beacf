package gcetest

import (
	"cmp"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"fmt"
	"maps"
	"math/big"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// Defaults.
const (
	DefaultProject     = "mooring-test"
	DefaultZone        = "us-central1-a"
	DefaultMachineType = "e2-standard-2"
	DefaultIssuer      = "https://accounts.google.com"
	// ServiceAccountID is the default service account's unique id (sub and
	// azp of its tokens).
	ServiceAccountID = "104729110000000000001"
	// TokenLifetime is an identity token's lifetime.
	TokenLifetime = time.Hour
)

// Options configure a Cloud.
type Options struct {
	// Issuer of the identity tokens; default https://accounts.google.com.
	Issuer string
	// MaxPageSize lowers aggregatedList's largest page (default 500).
	MaxPageSize int
	// Now is the clock of tokens and of the certs' Expires (default
	// time.Now).
	Now func() time.Time
	// CertsMaxAge is the max-age of the certs endpoint's Cache-Control
	// (default DefaultCertsMaxAge).
	CertsMaxAge time.Duration
	// OperationDelay is how long a Compute API operation runs before it is
	// DONE (default DefaultOperationDelay; operations.go).
	OperationDelay time.Duration
}

// DefaultCertsMaxAge is the certs endpoint's default max-age: Google's is
// hours, and varies from answer to answer.
const DefaultCertsMaxAge = 6 * time.Hour

// Instance is one GCE instance.
type Instance struct {
	Project, Zone, Name string
	// ID is assigned by Put when 0.
	ID          uint64
	MachineType string
	// Status: RUNNING (Put's default), TERMINATED, STOPPING, ...
	Status string
	// InternalIP (required) and ExternalIP (optional, the NAT IP) must be
	// loopback addresses.
	InternalIP, ExternalIP string
	// Hostname is a custom hostname, if any.
	Hostname string
	Labels   map[string]string
	// Created is the instance's creationTimestamp (written with
	// milliseconds, in Created's zone); Put sets it to Now when zero,
	// keeping the one of the instance it replaces.
	Created time.Time
	// Shielded is the instance's shieldedInstanceConfig (nil: the record
	// has none); ProvisionVTPM sets it (shielded.go).
	Shielded *Shielded
}

// Cloud is the endpoint.
type Cloud struct {
	opts Options

	// Servers: the API, metadata servers by project/zone/name; Close,
	// Calls (and NextPage) and Fail (of aggregatedList, get, identity,
	// certs) are Base's.
	cloudtest.Base[string]

	instances cloudtest.Store[string, Instance] // by project/zone/name
	nextID    uint64                            // the next new id; under the store's lock

	mu      sync.Mutex
	keys    []*signingKey // published, in publication order
	signing string        // the kid that signs
	unreach map[string]bool

	// net holds the networking resources and their operations
	// (operations.go).
	net netState
	// rt holds the routes, instance groups, backend services and health
	// checks, under net.mu (routes.go).
	rt routing
	// tpm is the EK/AK CA and the vTPMs it provisioned (shielded.go).
	tpm tpmCA
}

type signingKey struct {
	kid  string
	priv *rsa.PrivateKey
	cert []byte // DER, self-signed
}

// New makes a Cloud with one signing key; Start starts it.
func New(opts Options) (*Cloud, error) {
	opts.Issuer = cmp.Or(opts.Issuer, DefaultIssuer)
	opts.MaxPageSize = cloudtest.AtMost(opts.MaxPageSize, maxPageSize)
	opts.Now = cloudtest.Clock(opts.Now)
	opts.CertsMaxAge = cloudtest.Positive(opts.CertsMaxAge, DefaultCertsMaxAge)
	opts.OperationDelay = cloudtest.Positive(opts.OperationDelay, DefaultOperationDelay)
	c := &Cloud{opts: opts, nextID: 4242000000000000001, unreach: map[string]bool{},
		instances: cloudtest.Store[string, Instance]{
			KeyOf:   func(in *Instance) string { return instanceKey(in.Project, in.Zone, in.Name) },
			Created: func(in *Instance) *time.Time { return &in.Created },
			Now:     opts.Now,
			Clone: func(in Instance) Instance {
				in.Labels = maps.Clone(in.Labels)
				if in.Shielded != nil {
					sh := *in.Shielded
					in.Shielded = &sh
				}
				return in
			},
			Order: func(a, b *Instance) int {
				return cmp.Or(strings.Compare(a.Zone, b.Zone), strings.Compare(a.Name, b.Name))
			},
			Missing: "gcetest: no instance",
		}}
	if _, err := c.Rotate(); err != nil {
		return nil, err
	}
	return c, nil
}

// NewStarted makes and starts a Cloud that the test's cleanup closes.
func NewStarted(t testing.TB, opts Options) *Cloud {
	t.Helper()
	c, err := New(opts)
	return cloudtest.Started(t, c, err)
}

// Start listens on 127.0.0.1 for the API and the published keys.
func (c *Cloud) Start() error { return c.Servers.Serve(http.HandlerFunc(c.serveAPI)) }

// Endpoint is the Compute API's base URL (option.WithEndpoint).
func (c *Cloud) Endpoint() string {
	return "http://" + c.Servers.Addr() + "/compute/v1/"
}

// CertsURL publishes the signing keys as a JWK set (Google's
// oauth2/v3/certs).
func (c *Cloud) CertsURL() string {
	return "http://" + c.Servers.Addr() + "/oauth2/v3/certs"
}

// PEMCertsURL publishes them as key ids to PEM certificates (Google's
// oauth2/v1/certs).
func (c *Cloud) PEMCertsURL() string {
	return "http://" + c.Servers.Addr() + "/oauth2/v1/certs"
}

// Issuer is the tokens' iss.
func (c *Cloud) Issuer() string { return c.opts.Issuer }

// Google's order of a rotation: Publish a new key while the current one
// still signs, Activate it (the old one stays published, so tokens it
// signed still verify), then Retire the old one. Rotate does all but the
// retirement at once, as Google does not: a key that signs before anyone
// could have fetched it.

// Publish makes a new key and publishes it without signing with it yet;
// it returns its key id.
func (c *Cloud) Publish() (string, error) {
	k, err := newSigningKey(c.opts.Now())
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keys = append(c.keys, k)
	if c.signing == "" {
		c.signing = k.kid
	}
	return k.kid, nil
}

// Activate makes the published key kid sign from now on.
func (c *Cloud) Activate(kid string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range c.keys {
		if k.kid == kid {
			c.signing = kid
			return nil
		}
	}
	return fmt.Errorf("gcetest: key %q is not published", kid)
}

// Rotate publishes a new key and signs with it at once; it returns its
// key id.
func (c *Cloud) Rotate() (string, error) {
	kid, err := c.Publish()
	if err != nil {
		return "", err
	}
	return kid, c.Activate(kid)
}

// Retire stops publishing the key kid. If it was signing, the newest key
// still published signs (none left: signing fails).
func (c *Cloud) Retire(kid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, k := range c.keys {
		if k.kid == kid {
			c.keys = append(c.keys[:i], c.keys[i+1:]...)
			break
		}
	}
	if c.signing == kid {
		c.signing = ""
		if len(c.keys) > 0 {
			c.signing = c.keys[len(c.keys)-1].kid
		}
	}
}

// SigningKeyID is the key id that signs tokens now.
func (c *Cloud) SigningKeyID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.signing
}

// SetUnreachable makes a zone unreachable to aggregatedList (or reachable
// again): its instances are left out and the answer says so.
func (c *Cloud) SetUnreachable(zone string, unreachable bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if unreachable {
		c.unreach[zone] = true
	} else {
		delete(c.unreach, zone)
	}
}

// KeyIDs are the published key ids in publication order (the signing one
// last unless Publish was used: see SigningKeyID).
func (c *Cloud) KeyIDs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, k := range c.keys {
		out = append(out, k.kid)
	}
	return out
}

func newSigningKey(now time.Time) (*signingKey, error) {
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	var id [20]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	kid := hex.EncodeToString(id[:])
	tmpl := &x509.Certificate{
		SerialNumber: new(big.Int).SetBytes(id[:8]),
		Subject:      pkix.Name{CommonName: "mooring gcetest signer " + kid[:8]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(14 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		return nil, err
	}
	return &signingKey{kid: kid, priv: priv, cert: der}, nil
}

func instanceKey(project, zone, name string) string { return project + "/" + zone + "/" + name }

// Put adds or replaces an instance (defaults: project mooring-test, zone
// us-central1-a, machine type e2-standard-2, status RUNNING, an id) and
// returns it. It panics on an address outside 127.0.0.0/8: nodes are
// reached at their addresses.
func (c *Cloud) Put(in Instance) Instance {
	in.Project = cmp.Or(in.Project, DefaultProject)
	in.Zone = cmp.Or(in.Zone, DefaultZone)
	in.MachineType = cmp.Or(in.MachineType, DefaultMachineType)
	in.Status = cmp.Or(in.Status, "RUNNING")
	cloudtest.MustLoopback("gcetest", false, in.InternalIP, in.ExternalIP)
	if in.InternalIP == "" {
		panic("gcetest: an instance needs an InternalIP")
	}
	return c.instances.Put(in, func(in, old *Instance) {
		if old != nil && in.ID == 0 {
			in.ID = old.ID
		}
		if in.ID == 0 {
			in.ID = c.nextID
			c.nextID += 7919
		}
		if old != nil && in.Created.IsZero() {
			in.Created = old.Created
		}
	})
}

// Get returns an instance.
func (c *Cloud) Get(project, zone, name string) (Instance, bool) {
	return c.instances.Get(instanceKey(project, zone, name))
}

// SetStatus changes an instance's status.
func (c *Cloud) SetStatus(project, zone, name, status string) error {
	return c.instances.Update(instanceKey(project, zone, name), func(in *Instance) { in.Status = status })
}

// Delete removes an instance.
func (c *Cloud) Delete(project, zone, name string) {
	c.instances.Delete(instanceKey(project, zone, name))
}

// MetadataHost starts (once) the instance's metadata server and returns
// its host:port, for GCE_METADATA_HOST.
func (c *Cloud) MetadataHost(project, zone, name string) (string, error) {
	u, err := c.MetadataURL(project, zone, name)
	return strings.TrimPrefix(u, "http://"), err
}

// MetadataURL is MetadataHost as an http URL (the agent's metadataURL).
func (c *Cloud) MetadataURL(project, zone, name string) (string, error) {
	return c.Servers.URL("gcetest", instanceKey(project, zone, name), c.instances.Check, c.serveMetadata)
}

// NextPage is the name under which Calls counts the aggregatedList calls
// that asked for a page after the first (with a pageToken); they count
// under "aggregatedList" too.
const NextPage = "aggregatedList next page"

// count counts a call and says which status a fault makes it answer (0:
// none).
func (c *Cloud) count(method string) int { return c.Counter.Call(&c.Faults, method, 0).Answer() }

// projectNumber is a stable number of a project id.
func projectNumber(project string) int64 {
	var n int64 = 100000000000
	for _, r := range project {
		n = (n*31 + int64(r)) % 900000000000
	}
	return 100000000000 + n
}

// project lists a project's instances in (zone, name) order, and whether
// the project is known: it has instances, or it is the default one.
func (c *Cloud) project(project string) ([]Instance, bool) {
	all := c.instances.List(func(in *Instance) bool { return in.Project == project })
	return all, len(all) > 0 || project == DefaultProject
}
