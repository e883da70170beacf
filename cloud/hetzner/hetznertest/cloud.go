package hetznertest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"sync"
	"testing"
	"time"
)

// Defaults.
const (
	// DefaultToken is the API token the endpoint accepts unless
	// Options.Token says otherwise (64 characters, as Hetzner's).
	DefaultToken = "hztestTOKENhztestTOKENhztestTOKENhztestTOKENhztestTOKENhztest0064"
	// DefaultLocation and DefaultServerType are those of Put.
	DefaultLocation   = "fsn1"
	DefaultServerType = "cx22"
	// DefaultNetworkID is the private network tests attach servers to.
	DefaultNetworkID = 4711
	// DefaultRateLimit is the project's request budget per hour.
	DefaultRateLimit = 3600
	// MaxPerPage is the API's largest page.
	MaxPerPage = 50
	// DefaultPerPage is the page size without per_page.
	DefaultPerPage = 25
)

// Options configure a Cloud.
type Options struct {
	// Token is the bearer token the API accepts (default DefaultToken).
	Token string
	// PageLimit lowers the largest page the API serves (default
	// MaxPerPage): a per_page over it is served as PageLimit, and the
	// answer's per_page says so.
	PageLimit int
	// RateLimit is the request budget per hour (default 3600), refilled
	// evenly over the hour.
	RateLimit int
	// Now is the endpoint's clock (default time.Now).
	Now func() time.Time
}

// PrivateNet is a server's attachment to a private network.
type PrivateNet struct {
	Network int64
	IP      string
}

// Server is one Hetzner Cloud server.
type Server struct {
	// ID is assigned by Put when 0.
	ID   int64
	Name string
	// Status: running (Put's default), off, stopping, deleting, ...
	Status     string
	ServerType string
	Location   string
	// PublicIPv4 (a loopback address) and PublicIPv6 (the server's /64
	// network: only "::/64" is accepted, whose host address is ::1) are
	// optional.
	PublicIPv4, PublicIPv6 string
	// PrivateNets are loopback addresses too.
	PrivateNets []PrivateNet
	Labels      map[string]string
	// Created defaults to the endpoint's now.
	Created time.Time
	// UserData is served at the metadata service's userdata path.
	UserData string
}

// Cloud is the endpoint.
type Cloud struct {
	opts Options

	mu       sync.Mutex
	api      *http.Server
	apiAddr  string
	servers  map[int64]*Server
	metadata map[int64]*mdServer
	nextID   int64
	calls    map[string]int
	faults   []*fault
	down     bool
	noMeta   bool
	onList   func(page int)
	budget   float64 // requests left
	refilled time.Time
	closed   bool
}

type fault struct {
	method string
	page   int // list only; 0: any
	n      int
	status int
	code   string
}

type mdServer struct {
	id   int64
	srv  *http.Server
	addr string
}

// New makes a Cloud; Start starts it.
func New(opts Options) *Cloud {
	if opts.Token == "" {
		opts.Token = DefaultToken
	}
	if opts.PageLimit <= 0 || opts.PageLimit > MaxPerPage {
		opts.PageLimit = MaxPerPage
	}
	if opts.RateLimit <= 0 {
		opts.RateLimit = DefaultRateLimit
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Cloud{opts: opts, servers: map[int64]*Server{}, metadata: map[int64]*mdServer{}, nextID: 10_000_001,
		calls: map[string]int{}, budget: float64(opts.RateLimit), refilled: opts.Now()}
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

// Start listens on 127.0.0.1 for the API.
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
	c.metadata = map[int64]*mdServer{}
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

// Endpoint is the API's base URL (hcloud.WithEndpoint, the config's
// endpoint).
func (c *Cloud) Endpoint() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return "http://" + c.apiAddr + "/v1"
}

// Token is the bearer token the API accepts.
func (c *Cloud) Token() string { return c.opts.Token }

// Put adds or replaces a server (defaults: status running, server type
// cx22, location fsn1, created now, an id) and returns it. It panics on an
// address outside loopback: nodes are reached at their addresses.
func (c *Cloud) Put(s Server) Server {
	if s.Status == "" {
		s.Status = "running"
	}
	if s.ServerType == "" {
		s.ServerType = DefaultServerType
	}
	if s.Location == "" {
		s.Location = DefaultLocation
	}
	for _, a := range append([]string{s.PublicIPv4}, ips(s.PrivateNets)...) {
		if a == "" {
			continue
		}
		if ip, err := netip.ParseAddr(a); err != nil || !ip.Is4() || !ip.IsLoopback() {
			panic(fmt.Sprintf("hetznertest: address %q is not an IPv4 loopback address", a))
		}
	}
	if s.PublicIPv6 != "" && s.PublicIPv6 != "::/64" {
		panic(fmt.Sprintf("hetznertest: IPv6 network %q: only ::/64 (host address ::1) is allowed", s.PublicIPv6))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.ID == 0 {
		for _, old := range c.servers {
			if old.Name == s.Name {
				s.ID = old.ID
			}
		}
	}
	if s.ID == 0 {
		s.ID = c.nextID
		c.nextID += 17
	}
	if s.Created.IsZero() {
		s.Created = c.opts.Now()
	}
	s.Labels = maps.Clone(s.Labels)
	s.PrivateNets = append([]PrivateNet(nil), s.PrivateNets...)
	cp := s
	c.servers[s.ID] = &cp
	return s
}

func ips(nets []PrivateNet) []string {
	var out []string
	for _, n := range nets {
		out = append(out, n.IP)
	}
	return out
}

// Get returns a server.
func (c *Cloud) Get(id int64) (Server, bool) {
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
	out.Labels = maps.Clone(s.Labels)
	out.PrivateNets = append([]PrivateNet(nil), s.PrivateNets...)
	return out
}

// SetStatus changes a server's status.
func (c *Cloud) SetStatus(id int64, status string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.servers[id]
	if !ok {
		return fmt.Errorf("hetznertest: no server %d", id)
	}
	s.Status = status
	return nil
}

// Delete removes a server.
func (c *Cloud) Delete(id int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.servers, id)
}

// MetadataURL starts (once) the server's metadata service on its own
// loopback listener and returns its base URL, .../hetzner/v1/metadata (the
// agent's metadataURL).
func (c *Cloud) MetadataURL(id int64) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return "", errors.New("hetznertest: closed")
	}
	if _, ok := c.servers[id]; !ok {
		return "", fmt.Errorf("hetznertest: no server %d", id)
	}
	if m, ok := c.metadata[id]; ok {
		return "http://" + m.addr + metadataBase, nil
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
	return "http://" + m.addr + metadataBase, nil
}

// Fail makes the next n calls of method (list, get, metadata) answer HTTP
// status with the error code (Hetzner's error JSON; metadata answers
// plain text).
func (c *Cloud) Fail(method string, n, status int, code string) {
	c.FailPage(method, 0, n, status, code)
}

// FailPage is Fail for one page of the list only (page 0: any).
func (c *Cloud) FailPage(method string, page, n, status int, code string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults = append(c.faults, &fault{method: method, page: page, n: n, status: status, code: code})
}

// SetDown makes the API close every connection unanswered (an outage), or
// answer again.
func (c *Cloud) SetDown(down bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down = down
}

// OmitPagination makes list answers lack meta.pagination (a broken proxy
// or API), or have it again.
func (c *Cloud) OmitPagination(omit bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.noMeta = omit
}

// OnList calls f(page) before each list page is served (nil: none), so a
// test can change servers between pages, as other API clients do.
func (c *Cloud) OnList(f func(page int)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onList = f
}

// Calls counts the calls of method: list, get, metadata, and
// unauthorized (calls refused for their token).
func (c *Cloud) Calls(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[method]
}

// count counts a call and returns the fault it is to answer, if any.
func (c *Cloud) count(method string, page int) *fault {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[method]++
	for _, f := range c.faults {
		if f.method == method && f.n > 0 && (f.page == 0 || f.page == page) {
			f.n--
			return f
		}
	}
	return nil
}

// sortedLocked lists the servers by id.
func (c *Cloud) sortedLocked() []Server {
	out := make([]Server, 0, len(c.servers))
	for _, s := range c.servers {
		out = append(out, s.clone())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
