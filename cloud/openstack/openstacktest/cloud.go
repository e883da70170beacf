package openstacktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
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

	serial int64
}

// Cloud is the endpoint.
type Cloud struct {
	opts Options

	mu       sync.Mutex
	api      *http.Server
	apiAddr  string
	servers  map[string]*Server
	metadata map[string]*mdServer
	serial   int64
	tokens   map[string]time.Time // token -> expiry
	revoked  bool
	calls    map[string]int
	faults   []*fault
	down     bool
	onList   func(marker string)
	lastMV   string
	closed   bool
}

type fault struct {
	method string
	n      int
	status int
}

type mdServer struct {
	id   string
	srv  *http.Server
	addr string
}

// New makes a Cloud; Start starts it.
func New(opts Options) *Cloud {
	if opts.CredentialID == "" {
		opts.CredentialID = DefaultCredentialID
	}
	if opts.CredentialName == "" {
		opts.CredentialName = DefaultCredentialName
	}
	if opts.CredentialSecret == "" {
		opts.CredentialSecret = DefaultCredentialSecret
	}
	if opts.Region == "" {
		opts.Region = DefaultRegion
	}
	if opts.TokenTTL <= 0 {
		opts.TokenTTL = DefaultTokenTTL
	}
	if opts.MaxLimit <= 0 {
		opts.MaxLimit = DefaultMaxLimit
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Cloud{opts: opts, servers: map[string]*Server{}, metadata: map[string]*mdServer{},
		tokens: map[string]time.Time{}, calls: map[string]int{}}
}

// NewStarted makes and starts a Cloud that the test's cleanup closes.
func NewStarted(t testing.TB, opts Options) *Cloud {
	t.Helper()
	c := New(opts)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Start listens on 127.0.0.1 for Keystone and Nova.
func (c *Cloud) Start() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.HandlerFunc(c.serveAPI), ReadHeaderTimeout: 10 * time.Second}
	c.mu.Lock()
	c.api, c.apiAddr = srv, ln.Addr().String()
	c.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
	return nil
}

// Close stops every listener.
func (c *Cloud) Close() error {
	c.mu.Lock()
	c.closed = true
	var servers []*http.Server
	if c.api != nil {
		servers = append(servers, c.api)
	}
	for _, m := range c.metadata {
		servers = append(servers, m.srv)
	}
	c.metadata = map[string]*mdServer{}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var errs []error
	for _, s := range servers {
		if err := s.Shutdown(ctx); err != nil {
			errs = append(errs, s.Close())
		}
	}
	return errors.Join(errs...)
}

// AuthURL is Keystone's v3 URL (the provider config's authURL).
func (c *Cloud) AuthURL() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return "http://" + c.apiAddr + identityBase
}

// ComputeURL is Nova's endpoint as the catalog gives it.
func (c *Cloud) ComputeURL() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return "http://" + c.apiAddr + computeBase
}

// Credential is the application credential's id and secret.
func (c *Cloud) Credential() (id, secret string) { return c.opts.CredentialID, c.opts.CredentialSecret }

// Region is the catalog's region.
func (c *Cloud) Region() string { return c.opts.Region }

// Put adds or replaces a server (defaults: status ACTIVE, flavor
// m1.small, zone nova, created now, a UUID; a server of the same name
// keeps its id) and returns it. It panics on an address outside loopback:
// nodes are reached at their addresses.
func (c *Cloud) Put(s Server) Server {
	if s.Status == "" {
		s.Status = StatusActive
	}
	if s.Flavor == "" {
		s.Flavor = DefaultFlavor
	}
	if s.AvailabilityZone == "" {
		s.AvailabilityZone = DefaultZone
	}
	for i, a := range s.Addresses {
		if a.Network == "" {
			s.Addresses[i].Network = DefaultNetwork
		}
	}
	for _, a := range append(addrs(s.Addresses), s.AccessIPv4) {
		if a == "" {
			continue
		}
		if ip, err := netip.ParseAddr(a); err != nil || !ip.IsLoopback() {
			panic(fmt.Sprintf("openstacktest: address %q is not a loopback address", a))
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.ID == "" {
		for _, old := range c.servers {
			if old.Name == s.Name {
				s.ID = old.ID
			}
		}
	}
	if s.ID == "" {
		s.ID = uuid.NewString()
	}
	if old, ok := c.servers[s.ID]; ok {
		s.serial = old.serial
	} else {
		c.serial++
		s.serial = c.serial
	}
	if s.Created.IsZero() {
		s.Created = c.opts.Now()
	}
	cp := s.clone()
	c.servers[s.ID] = &cp
	return s.clone()
}

func addrs(as []Address) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.Addr)
	}
	return out
}

// Get returns a server.
func (c *Cloud) Get(id string) (Server, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.servers[id]
	if !ok {
		return Server{}, false
	}
	return s.clone(), true
}

func (s *Server) clone() Server {
	out := *s
	out.Tags = slices.Clone(s.Tags)
	out.Metadata = maps.Clone(s.Metadata)
	out.Addresses = slices.Clone(s.Addresses)
	return out
}

// SetStatus changes a server's status.
func (c *Cloud) SetStatus(id, status string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.servers[id]
	if !ok {
		return fmt.Errorf("openstacktest: no server %s", id)
	}
	s.Status = status
	return nil
}

// Delete removes a server (Nova no longer lists it).
func (c *Cloud) Delete(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.servers, id)
}

// MetadataURL starts (once) the server's metadata service on its own
// loopback listener and returns its base URL, http://127.0.0.1:port (the
// agent's metadataURL).
func (c *Cloud) MetadataURL(id string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return "", errors.New("openstacktest: closed")
	}
	if _, ok := c.servers[id]; !ok {
		return "", fmt.Errorf("openstacktest: no server %s", id)
	}
	if m, ok := c.metadata[id]; ok {
		return "http://" + m.addr, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	m := &mdServer{id: id, addr: ln.Addr().String()}
	m.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { c.serveMetadata(m, w, r) }),
		ReadHeaderTimeout: 10 * time.Second}
	c.metadata[id] = m
	go func() { _ = m.srv.Serve(ln) }()
	return "http://" + m.addr, nil
}

// Fail makes the next n calls of method (auth, list, get, metadata)
// answer HTTP status with the service's error body.
func (c *Cloud) Fail(method string, n, status int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults = append(c.faults, &fault{method: method, n: n, status: status})
}

// SetDown makes Keystone and Nova close every connection unanswered (an
// outage), or answer again.
func (c *Cloud) SetDown(down bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down = down
}

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
func (c *Cloud) OnList(f func(marker string)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onList = f
}

// Calls counts the calls of method: auth, list, get, metadata, and
// unauthorized (Nova calls refused for their token).
func (c *Cloud) Calls(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[method]
}

// LastMicroversion is the microversion the last Nova call was served at.
func (c *Cloud) LastMicroversion() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastMV
}

// count counts a call and returns the fault it is to answer, if any.
func (c *Cloud) count(method string) *fault {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[method]++
	for _, f := range c.faults {
		if f.method == method && f.n > 0 {
			f.n--
			return f
		}
	}
	return nil
}

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

// hangUp closes the connection unanswered.
func hangUp(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	w.WriteHeader(http.StatusServiceUnavailable)
}
