package ocitest

import (
	"cmp"
	"crypto/md5"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base32"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// Defaults.
const (
	DefaultRegion = "us-ashburn-1"
	// DefaultRegionKey is what Compute says of an instance's region in
	// us-ashburn-1 (its short key: OCI answers iad and phx for its first
	// two regions, the full name for others).
	DefaultRegionKey = "iad"
	// DefaultAvailabilityDomain is an AD name with its tenancy prefix.
	DefaultAvailabilityDomain = "Uocm:US-ASHBURN-AD-1"
	DefaultFaultDomain        = "FAULT-DOMAIN-1"
	DefaultShape              = "VM.Standard.E4.Flex"
	// DefaultCertLifetime and DefaultRotateEvery: OCI rotates instance
	// certificates "multiple times a day" (its documentation); a genuine
	// one seen was valid 2 h 1 min (Teleport's RFD 231 prints one). Here
	// each is valid that long and replaced after an hour.
	DefaultCertLifetime = 2*time.Hour + time.Minute
	DefaultRotateEvery  = time.Hour
	// MaxPageSize is the largest limit a list accepts.
	MaxPageSize = 1000
	// DefaultPageSize is a list's page without a limit.
	DefaultPageSize = 100
	// DefaultWorkRequestTime is how long a work request runs.
	DefaultWorkRequestTime = 20 * time.Millisecond
)

// Options configure a Cloud.
type Options struct {
	// Tenancy is the tenancy's OCID (default: made up).
	Tenancy string
	// Compartment is Put's default compartment (default: made up).
	Compartment string
	// Region (default us-ashburn-1) and RegionKey (default iad).
	Region, RegionKey string
	// MaxPageSize lowers the largest page of the lists.
	MaxPageSize int
	// CertLifetime and RotateEvery: instance certificates' validity and
	// how old they get before the metadata service serves a new one.
	CertLifetime, RotateEvery time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// WorkRequestTime is how long a load balancer's work request runs
	// before it finishes (default DefaultWorkRequestTime); see
	// HoldWorkRequests and Settle.
	WorkRequestTime time.Duration
}

// Instance is one OCI instance.
type Instance struct {
	// ID is assigned by Put when "".
	ID          string
	DisplayName string
	Compartment string
	// AvailabilityDomain and FaultDomain (defaults above); Shape.
	AvailabilityDomain, FaultDomain, Shape string
	// State: RUNNING (Put's default), STOPPED, TERMINATED, ...
	State string
	// PrivateIP and PublicIP (optional) of its primary VNIC: IPv4
	// loopback addresses; IPv6 its IPv6 address (::1, the only IPv6
	// loopback address). An IPv6-only instance has IPv6 and no PrivateIP.
	PrivateIP, PublicIP, IPv6 string
	FreeformTags              map[string]string
	DefinedTags               map[string]map[string]any
	// Created is set by Put (now) when zero, kept from the instance it
	// replaces.
	Created time.Time
	// VnicID is assigned by Put.
	VnicID string
}

// Cloud is the endpoint.
type Cloud struct {
	opts Options

	// Servers: the API, metadata services by instance OCID; Close, Calls,
	// Fail (of ListInstances, GetInstance, ListVnicAttachments, GetVnic,
	// identity) and BeforePage (run before a page's faults are taken) are
	// these pieces'.
	cloudtest.Base[string]
	cloudtest.Pages

	// The API key the endpoint accepts signatures of (its private half
	// only goes into the config file WriteAPIConfig writes).
	user, fingerprint string
	apiKey            *rsa.PrivateKey

	// instances: c.mu is taken before their lock where both are held, so
	// that an instance and its certificates go together.
	instances cloudtest.Store[string, Instance]

	mu         sync.Mutex
	identities map[string]Identity // current certificate per instance
	// roots are the published roots' CAs, oldest first: the last one
	// issues new intermediates.
	roots []*CA
	// devices are the intermediates instances' certificates come from.
	devices map[string]*CA
	// lbs are the load balancers of both kinds (loadbalancers.go).
	lbs lbStore
	// vcn is Virtual Network's subnets, security lists and NSGs (vcn.go).
	vcn vcnState
}

// New makes a Cloud with its CA and API key; Start starts it.
func New(opts Options) (*Cloud, error) {
	opts.Now = cloudtest.Clock(opts.Now)
	if opts.Tenancy == "" {
		opts.Tenancy = "ocid1.tenancy.oc1.." + uniqueID()
	}
	if opts.Compartment == "" {
		opts.Compartment = "ocid1.compartment.oc1.." + uniqueID()
	}
	if opts.Region == "" {
		opts.Region, opts.RegionKey = DefaultRegion, DefaultRegionKey
	}
	opts.RegionKey = cmp.Or(opts.RegionKey, opts.Region)
	opts.MaxPageSize = cloudtest.AtMost(opts.MaxPageSize, MaxPageSize)
	opts.CertLifetime = cloudtest.Positive(opts.CertLifetime, DefaultCertLifetime)
	opts.RotateEvery = cloudtest.Positive(opts.RotateEvery, DefaultRotateEvery)
	opts.WorkRequestTime = cloudtest.Positive(opts.WorkRequestTime, DefaultWorkRequestTime)
	ca, err := NewCA("ocitest", opts.Now())
	if err != nil {
		return nil, err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	sum := md5.Sum(der) // OCI's API key fingerprint: MD5 of the public key's DER, colon hex
	fp := make([]string, len(sum))
	for i, b := range sum {
		fp[i] = fmt.Sprintf("%02x", b)
	}
	return &Cloud{opts: opts, roots: []*CA{ca}, user: "ocid1.user.oc1.." + uniqueID(), fingerprint: strings.Join(fp, ":"), apiKey: key,
		identities: map[string]Identity{}, devices: map[string]*CA{},
		instances: cloudtest.Store[string, Instance]{
			Key:     func(in *Instance) *string { return &in.ID },
			NewKey:  func(int) string { return "ocid1.instance.oc1." + opts.RegionKey + "." + uniqueID() },
			Created: func(in *Instance) *time.Time { return &in.Created },
			Now:     func() time.Time { return opts.Now().UTC().Truncate(time.Millisecond) },
			// In creation order (then id).
			Order:   func(a, b *Instance) int { return a.Created.Compare(b.Created) },
			Missing: "ocitest: no instance",
		}}, nil
}

// NewStarted makes and starts a Cloud that the test's cleanup closes.
func NewStarted(t testing.TB, opts Options) *Cloud {
	t.Helper()
	c, err := New(opts)
	return cloudtest.Started(t, c, err)
}

// Start listens on 127.0.0.1 for the API.
func (c *Cloud) Start() error { return c.Servers.Serve(c.apiHandler()) }

// Endpoint is the Core Services API's base URL (the config's
// computeEndpoint and networkEndpoint).
func (c *Cloud) Endpoint() string { return "http://" + c.Servers.Addr() }

// AuthEndpoint is the auth service's base URL (the config's
// authEndpoint), on the API's listener.
func (c *Cloud) AuthEndpoint() string { return c.Endpoint() }

// Tenancy, Compartment, Region and RegionKey are the Cloud's.
func (c *Cloud) Tenancy() string     { return c.opts.Tenancy }
func (c *Cloud) Compartment() string { return c.opts.Compartment }
func (c *Cloud) Region() string      { return c.opts.Region }
func (c *Cloud) RegionKey() string   { return c.opts.RegionKey }

// CA is the instance identity CA of the newest root, with an
// intermediate of its own (not an instance's).
func (c *Cloud) CA() *CA {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.roots[len(c.roots)-1]
}

// Roots are the roots the auth service publishes, oldest first.
func (c *Cloud) Roots() []*x509.Certificate {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*x509.Certificate, len(c.roots))
	for i, ca := range c.roots {
		out[i] = ca.Root
	}
	return out
}

// RotateRoots makes a new root, of the same name as the others and a new
// key, and publishes it beside them; intermediates made from now on are
// its (instances keep theirs until RotateIntermediates). How Oracle rolls
// its roots is not documented; this models an overlap.
func (c *Cloud) RotateRoots() (*x509.Certificate, error) {
	ca, err := NewCA("ocitest", c.opts.Now())
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.roots = append(c.roots, ca)
	return ca.Root, nil
}

// RetireRoots stops publishing every root but the newest: chains to the
// others no longer verify against what the auth service answers.
func (c *Cloud) RetireRoots() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.roots = c.roots[len(c.roots)-1:]
}

// RotateIntermediates moves every instance to a new device: its next
// certificate, issued at once, comes from a new intermediate of the
// newest root (OCI serves one instance certificates of different
// intermediates a week apart).
func (c *Cloud) RotateIntermediates() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.devices = map[string]*CA{}
	c.identities = map[string]Identity{}
}

// device is the intermediate the instance's certificates come from: made
// on first use under the newest root.
func (c *Cloud) device(id string, now time.Time) (*CA, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d, ok := c.devices[id]; ok {
		return d, nil
	}
	d, err := c.roots[len(c.roots)-1].NewDevice(now)
	if err != nil {
		return nil, err
	}
	c.devices[id] = d
	return d, nil
}

// KeyID is the keyId of the API key's signatures: tenancy/user/fingerprint.
func (c *Cloud) KeyID() string { return c.opts.Tenancy + "/" + c.user + "/" + c.fingerprint }

// WriteAPIConfig writes, in dir, the API key (PEM, 0600) and an OCI config
// file naming it under the DEFAULT profile; it returns the config file's
// path.
func (c *Cloud) WriteAPIConfig(dir string) (string, error) {
	keyPath := filepath.Join(dir, "oci_api_key.pem")
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(c.apiKey)})
	if err := os.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "oci_config")
	cfg := fmt.Sprintf("[DEFAULT]\nuser=%s\nfingerprint=%s\nkey_file=%s\ntenancy=%s\nregion=%s\n",
		c.user, c.fingerprint, keyPath, c.opts.Tenancy, c.opts.Region)
	return path, os.WriteFile(path, []byte(cfg), 0o600)
}

// WriteRootCA writes the published roots, PEM, to dir/oci-roots.pem (a
// config's rootCAFile) and returns the path.
func (c *Cloud) WriteRootCA(dir string) (string, error) {
	path := filepath.Join(dir, "oci-roots.pem")
	var data []byte
	for _, r := range c.Roots() {
		data = append(data, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.Raw})...)
	}
	return path, os.WriteFile(path, data, 0o600)
}

// uniqueID is the unique part of a made-up OCID: 60 lower-case base32
// characters, as OCI's are.
func uniqueID() string {
	b := make([]byte, 38)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))[:60]
}

// Put adds or replaces an instance; it fills in defaults and returns it.
func (c *Cloud) Put(in Instance) Instance {
	cloudtest.MustLoopback("ocitest", true, in.PrivateIP, in.PublicIP)
	cloudtest.MustLoopback("ocitest", false, in.IPv6)
	in.Compartment = cmp.Or(in.Compartment, c.opts.Compartment)
	in.AvailabilityDomain = cmp.Or(in.AvailabilityDomain, DefaultAvailabilityDomain)
	in.FaultDomain = cmp.Or(in.FaultDomain, DefaultFaultDomain)
	in.Shape = cmp.Or(in.Shape, DefaultShape)
	in.State = cmp.Or(in.State, "RUNNING")
	return c.instances.Put(in, func(in, old *Instance) {
		if old != nil {
			if in.Created.IsZero() {
				in.Created = old.Created
			}
			in.VnicID = cmp.Or(in.VnicID, old.VnicID)
		}
		if in.VnicID == "" {
			in.VnicID = "ocid1.vnic.oc1." + c.opts.RegionKey + "." + uniqueID()
		}
	})
}

// Get returns an instance.
func (c *Cloud) Get(id string) (Instance, bool) { return c.instances.Get(id) }

// SetState sets an instance's lifecycle state (TERMINATED: it is listed
// terminated, its VNIC detached).
func (c *Cloud) SetState(id, state string) error {
	return c.instances.Update(id, func(in *Instance) { in.State = state })
}

// Delete removes an instance (OCI's record of a terminated instance
// expires).
func (c *Cloud) Delete(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.instances.Delete(id)
	delete(c.identities, id)
	delete(c.devices, id)
}

// sorted are the instances of a compartment in creation order (then id).
func (c *Cloud) sorted(compartment string) []Instance {
	return c.instances.List(func(in *Instance) bool { return in.Compartment == compartment })
}

// CurrentIdentity is the certificate the instance's metadata service
// serves now: issued on first use, and again once the current one is
// RotateEvery old (OCI rotates instance certificates on its own).
func (c *Cloud) CurrentIdentity(id string) (Identity, error) {
	c.mu.Lock()
	inst, ok := c.instances.Get(id)
	cur, have := c.identities[id]
	c.mu.Unlock()
	if !ok {
		return Identity{}, fmt.Errorf("ocitest: no instance %s", id)
	}
	now := c.opts.Now()
	if have && now.Sub(cur.Certificate.NotBefore) < c.opts.RotateEvery {
		return cur, nil
	}
	return c.rotate(inst, now)
}

// Rotate replaces the instance's certificate and key now, as OCI does on
// its own schedule; it returns the new identity.
func (c *Cloud) Rotate(id string) (Identity, error) {
	in, ok := c.Get(id)
	if !ok {
		return Identity{}, fmt.Errorf("ocitest: no instance %s", id)
	}
	return c.rotate(in, c.opts.Now())
}

func (c *Cloud) rotate(in Instance, now time.Time) (Identity, error) {
	dev, err := c.device(in.ID, now)
	if err != nil {
		return Identity{}, err
	}
	ident, err := dev.Issue(c.Subject(in), now.Add(-time.Second).UTC().Truncate(time.Second), c.opts.CertLifetime)
	if err != nil {
		return Identity{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.instances.Check(in.ID); err != nil {
		return Identity{}, err
	}
	c.identities[in.ID] = ident
	return ident, nil
}

// Subject is what the instance's certificates name.
func (c *Cloud) Subject(in Instance) Subject {
	return Subject{Instance: in.ID, Compartment: in.Compartment, Tenancy: c.opts.Tenancy}
}

// MetadataURL starts (once) the instance's metadata service and returns
// its base URL (the agent's metadataURL).
func (c *Cloud) MetadataURL(id string) (string, error) {
	addr, err := c.Servers.Instance(id, c.metadataHandler(id))
	if err != nil {
		return "", err
	}
	return "http://" + addr, nil
}

// count counts a call and takes an injected fault's status (0: none).
func (c *Cloud) count(method string, page int) int {
	return c.Counter.Call(&c.Faults, method, page).Answer()
}
