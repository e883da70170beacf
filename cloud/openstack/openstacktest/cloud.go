package openstacktest

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// Defaults.
const (
	// DefaultCredentialID and DefaultCredentialSecret are the application
	// credential the endpoint accepts unless Options say otherwise.
	DefaultCredentialID     = "aa0d5a1b4b1c4e5d8f0a7b6c5d4e3f21"
	DefaultCredentialName   = "mooring-reader"
	DefaultCredentialSecret = "osTestSecret-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUV"
	// DefaultUserID and DefaultProjectID are the credential's user and
	// project.
	DefaultUserID    = "5f6a7b8c9d0e4f1a2b3c4d5e6f7a8b9c"
	DefaultProjectID = "0c4e939acacf4376bdcd1129f1a054ad"
	// DefaultRegion is the catalog's region.
	DefaultRegion = "RegionOne"
	// DefaultZone and DefaultFlavor are those of Put.
	DefaultZone   = "nova"
	DefaultFlavor = "m1.small"
	// DefaultNetwork is the network of a server's fixed addresses.
	DefaultNetwork = "private"
	// DefaultTokenTTL is a token's life (Keystone's default: one hour).
	DefaultTokenTTL = time.Hour
	// DefaultMaxLimit is Nova's max_limit: the largest page.
	DefaultMaxLimit = 1000
	// MaxMicroversion is the highest Compute microversion served.
	MaxMicroversion = "2.96"
)

// Server statuses (Nova's).
const (
	StatusActive      = "ACTIVE"
	StatusBuild       = "BUILD"
	StatusShutoff     = "SHUTOFF"
	StatusSoftDeleted = "SOFT_DELETED"
)

// Options configure a Cloud.
type Options struct {
	// CredentialID, CredentialName and CredentialSecret are the
	// application credential Keystone accepts (defaults above).
	CredentialID, CredentialName, CredentialSecret string
	// Region is the catalog's region (default RegionOne).
	Region string
	// TokenTTL is a token's life (default one hour).
	TokenTTL time.Duration
	// MaxLimit is Nova's max_limit (default 1000): the largest page, and
	// the page size without limit.
	MaxLimit int
	// LinkBase, when set, is the base Nova writes its links with (such as
	// http://nova-api.internal:8774/v2.1, as a Nova behind a proxy without
	// compute_link_prefix does) instead of the compute endpoint.
	LinkBase string
	// Now is the endpoint's clock (default time.Now).
	Now func() time.Time
	// MaxRoutes is Neutron's max_routes: the most extra routes a router
	// holds (default 30).
	MaxRoutes int
	// NoAtomicExtraRoutes leaves extraroute-atomic out of Neutron's
	// extensions (add_extraroutes and remove_extraroutes answer 404), as
	// on clouds older than Stein.
	NoAtomicExtraRoutes bool
	// NoAllowedAddressPairs leaves allowed-address-pairs and
	// port-security out of Neutron's extensions (ports.go still serves).
	NoAllowedAddressPairs bool
	// LB configures Octavia and the floating IPs (octavia.go).
	LB LBOptions
}

// Address is one of a server's addresses.
type Address struct {
	// Network is the network's name (default DefaultNetwork).
	Network string
	// Addr is a loopback address (IPv4 127/8 or ::1).
	Addr string
	// Floating: a floating IP (OS-EXT-IPS:type floating) rather than a
	// fixed one.
	Floating bool
}

// Server is one Nova server.
type Server struct {
	// ID is a UUID, assigned by Put when "".
	ID   string
	Name string
	// Status: ACTIVE (Put's default), SHUTOFF, BUILD, ...
	Status           string
	Flavor           string
	AvailabilityZone string
	Addresses        []Address
	// AccessIPv4 (loopback) is optional.
	AccessIPv4 string
	Tags       []string
	Metadata   map[string]string
	// Created defaults to the endpoint's now.
	Created time.Time
	// UserData is served at the metadata service's user_data path.
	UserData string
	// NoMetadataService: the server's metadata service answers nothing (a
	// cloud that offers only config drives); WriteConfigDrive writes its
	// record.
	NoMetadataService bool
	// DHCP: the server's subnets have DHCP, so network_data.json gives no
	// IPv4 address (ipv4_dhcp networks, as Nova writes them); local-ipv4
	// still does.
	DHCP bool

	serial int64
}

// Cloud is the endpoint.
type Cloud struct {
	opts Options
	// Servers: Keystone and Nova, metadata services by server id; Close
	// and Calls (of auth, list, get, metadata, and unauthorized: Nova
	// calls refused for their token) are Base's.
	cloudtest.Base[string]

	servers cloudtest.Store[string, Server]
	serial  int64 // the last server's serial; under the store's lock
	onList  cloudtest.Hook[string]
	down    atomic.Bool

	mu      sync.Mutex
	tokens  map[string]time.Time // token -> expiry
	revoked bool
	lastMV  string

	neutron neutron // routers and subnets (routers.go)
	octavia octavia // load balancers and floating IPs (octavia.go)
}

// New makes a Cloud; Start starts it.
func New(opts Options) *Cloud {
	opts.CredentialID = cmp.Or(opts.CredentialID, DefaultCredentialID)
	opts.CredentialName = cmp.Or(opts.CredentialName, DefaultCredentialName)
	opts.CredentialSecret = cmp.Or(opts.CredentialSecret, DefaultCredentialSecret)
	opts.Region = cmp.Or(opts.Region, DefaultRegion)
	opts.TokenTTL = cloudtest.Positive(opts.TokenTTL, DefaultTokenTTL)
	opts.MaxLimit = cloudtest.Positive(opts.MaxLimit, DefaultMaxLimit)
	opts.Now = cloudtest.Clock(opts.Now)
	opts.MaxRoutes = cloudtest.Positive(opts.MaxRoutes, DefaultMaxRoutes)
	return &Cloud{opts: opts, tokens: map[string]time.Time{},
		servers: cloudtest.Store[string, Server]{
			Key:     func(s *Server) *string { return &s.ID },
			NewKey:  func(int) string { return uuid.NewString() },
			Same:    func(s, old *Server) bool { return s.Name == old.Name },
			Created: func(s *Server) *time.Time { return &s.Created },
			Now:     opts.Now,
			Clone:   Server.clone,
			Missing: "openstacktest: no server",
		}}
}

// NewStarted makes and starts a Cloud that the test's cleanup closes.
func NewStarted(t testing.TB, opts Options) *Cloud {
	t.Helper()
	return cloudtest.Started(t, New(opts), nil)
}

// Start listens on 127.0.0.1 for Keystone and Nova.
func (c *Cloud) Start() error { return c.Servers.Serve(http.HandlerFunc(c.serveAPI)) }

// AuthURL is Keystone's v3 URL (the provider config's authURL).
func (c *Cloud) AuthURL() string { return "http://" + c.Servers.Addr() + identityBase }

// NetworkURL is Neutron's endpoint as the catalog gives it.
func (c *Cloud) NetworkURL() string { return "http://" + c.Servers.Addr() + networkBase }

// ComputeURL is Nova's endpoint as the catalog gives it.
func (c *Cloud) ComputeURL() string { return "http://" + c.Servers.Addr() + computeBase }

// Credential is the application credential's id and secret.
func (c *Cloud) Credential() (id, secret string) { return c.opts.CredentialID, c.opts.CredentialSecret }

// Region is the catalog's region.
func (c *Cloud) Region() string { return c.opts.Region }

// Put adds or replaces a server (defaults: status ACTIVE, flavor
// m1.small, zone nova, created now, a UUID; a server of the same name
// keeps its id) and returns it. It panics on an address outside loopback:
// nodes are reached at their addresses.
func (c *Cloud) Put(s Server) Server {
	s.Status = cmp.Or(s.Status, StatusActive)
	s.Flavor = cmp.Or(s.Flavor, DefaultFlavor)
	s.AvailabilityZone = cmp.Or(s.AvailabilityZone, DefaultZone)
	for i, a := range s.Addresses {
		if a.Network == "" {
			s.Addresses[i].Network = DefaultNetwork
		}
	}
	cloudtest.MustLoopback("openstacktest", false, append(addrs(s.Addresses), s.AccessIPv4)...)
	return c.servers.Put(s, func(s, old *Server) {
		if old != nil {
			s.serial = old.serial
		} else {
			c.serial++
			s.serial = c.serial
		}
	})
}

func addrs(as []Address) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.Addr)
	}
	return out
}

// Get returns a server.
func (c *Cloud) Get(id string) (Server, bool) { return c.servers.Get(id) }

func (s Server) clone() Server {
	s.Tags = slices.Clone(s.Tags)
	s.Metadata = maps.Clone(s.Metadata)
	s.Addresses = slices.Clone(s.Addresses)
	return s
}

// SetStatus changes a server's status.
func (c *Cloud) SetStatus(id, status string) error {
	return c.servers.Update(id, func(s *Server) { s.Status = status })
}

// Delete removes a server (Nova no longer lists it).
func (c *Cloud) Delete(id string) { c.servers.Delete(id) }

// MetadataURL starts (once) the server's metadata service on its own
// loopback listener and returns its base URL, http://127.0.0.1:port (the
// agent's metadataURL).
func (c *Cloud) MetadataURL(id string) (string, error) {
	return c.Servers.URL("openstacktest", id, c.servers.Check, c.serveMetadata)
}

// Fail makes the next n calls of method (auth, list, get, metadata)
// answer HTTP status with the service's error body.
func (c *Cloud) Fail(method string, n, status int) {
	if n > 0 {
		c.Faults.Add(method, cloudtest.Fault{Left: n, Status: status})
	}
}

// SetDown makes Keystone and Nova close every connection unanswered (an
// outage), or answer again.
func (c *Cloud) SetDown(down bool) { c.down.Store(down) }

// ExpireTokens makes every token issued so far expire now.
func (c *Cloud) ExpireTokens() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.opts.Now()
	for tok := range c.tokens {
		c.tokens[tok] = now
	}
}

// Revoke deletes the application credential: authentication fails, and its
// tokens are no longer valid (as Keystone revokes them).
func (c *Cloud) Revoke() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.revoked = true
	c.tokens = map[string]time.Time{}
}

// OnList calls f(marker) before each list page is served (nil: none; the
// first page has marker ""), so a test can change servers between pages,
// as other API clients do.
func (c *Cloud) OnList(f func(marker string)) { c.onList.Set(f) }

// LastMicroversion is the microversion the last Nova call was served at.
func (c *Cloud) LastMicroversion() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastMV
}

// count counts a call and returns the fault it is to answer, if any.
func (c *Cloud) count(method string) *cloudtest.Fault { return c.Counter.Call(&c.Faults, method, 0) }

// newToken issues a token and returns it with its times.
func (c *Cloud) newToken() (tok string, issued, expires time.Time) {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	tok = "gAAAAA" + hex.EncodeToString(b)
	c.mu.Lock()
	defer c.mu.Unlock()
	issued = c.opts.Now().UTC()
	expires = issued.Add(c.opts.TokenTTL)
	c.tokens[tok] = expires
	return tok, issued, expires
}

// validToken reports whether tok was issued and has not expired.
func (c *Cloud) validToken(tok string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	exp, ok := c.tokens[tok]
	return ok && c.opts.Now().Before(exp)
}
