package digitaloceantest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"
)

// Defaults.
const (
	DefaultRegion = "nyc3"
	DefaultSize   = "s-2vcpu-4gb"
	// DefaultHourlyLimit is the API's documented budget: 5,000 requests
	// per hour (RateLimit-Limit).
	DefaultHourlyLimit = 5000
	// MaxPerPage is the documented largest per_page.
	MaxPerPage = 200
	// DefaultPerPage is per_page when the request names none.
	DefaultPerPage = 20
)

// Statuses of a droplet.
const (
	StatusNew     = "new"
	StatusActive  = "active"
	StatusOff     = "off"
	StatusArchive = "archive"
)

// Methods, for Calls and Fail.
const (
	MethodList     = "list"     // GET /v2/droplets
	MethodGet      = "get"      // GET /v2/droplets/{id}
	MethodMetadata = "metadata" // GET /metadata/v1.json on a droplet's metadata service
)

// Options configure a Cloud.
type Options struct {
	// Token is the API token requests must carry (Authorization: Bearer);
	// "" makes a random one (Cloud.Token).
	Token string
	// MaxPerPage lowers the largest page (default 200).
	MaxPerPage int
	// HourlyLimit is the request budget per hour (default 5,000); a
	// request beyond it answers 429.
	HourlyLimit int
	// Now is the clock of creation times and the rate limit (default
	// time.Now).
	Now func() time.Time
}

// Droplet is one droplet.
type Droplet struct {
	// ID is assigned by Put when 0.
	ID     int
	Name   string
	Region string // default nyc3
	Size   string // default s-2vcpu-4gb
	// Status: active (Put's default), new, off, archive.
	Status string
	// PrivateIP (the VPC address) and PublicIP must be loopback IPv4
	// addresses; PublicIPv6 is "" or ::1.
	PrivateIP, PublicIP, PublicIPv6 string
	Tags                            []string
	// Created defaults to Put's time.
	Created time.Time
	// UserData is served in the metadata document (user_data).
	UserData string
}

// Cloud is the endpoint.
type Cloud struct {
	opts Options

	mu       sync.Mutex
	api      *http.Server
	apiAddr  string
	droplets map[int]*Droplet
	metadata map[int]*mdServer
	nextID   int
	calls    map[string]int
	faults   map[string]*fault
	pageFail map[int]int // page -> status
	short    map[int]bool
	outage   bool
	before   func(page int)
	window   []time.Time // requests of the last hour, for the rate limit
	closed   bool
}

type fault struct{ n, status int }

type mdServer struct {
	id   int
	srv  *http.Server
	addr string
}

// New makes a Cloud; Start starts it.
func New(opts Options) (*Cloud, error) {
	if opts.Token == "" {
		var b [32]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		opts.Token = "dop_v1_" + hex.EncodeToString(b[:])
	}
	if opts.MaxPerPage <= 0 || opts.MaxPerPage > MaxPerPage {
		opts.MaxPerPage = MaxPerPage
	}
	if opts.HourlyLimit <= 0 {
		opts.HourlyLimit = DefaultHourlyLimit
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Cloud{opts: opts, droplets: map[int]*Droplet{}, metadata: map[int]*mdServer{}, nextID: 500000001,
		calls: map[string]int{}, faults: map[string]*fault{}, pageFail: map[int]int{}, short: map[int]bool{}}, nil
}

// NewStarted makes and starts a Cloud that the test's cleanup closes.
func NewStarted(t testing.TB, opts Options) *Cloud {
	t.Helper()
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
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
	c.metadata = map[int]*mdServer{}
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

// Endpoint is the API's base URL (the config's apiEndpoint).
func (c *Cloud) Endpoint() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return "http://" + c.apiAddr + "/"
}

// Token is the API token requests must carry.
func (c *Cloud) Token() string { return c.opts.Token }

// Put adds or replaces a droplet (defaults: region nyc3, size
// s-2vcpu-4gb, status active, an id, created now) and returns it. It
// panics on an address outside 127.0.0.0/8 (or ::1): nodes are reached at
// their addresses.
func (c *Cloud) Put(d Droplet) Droplet {
	if d.Region == "" {
		d.Region = DefaultRegion
	}
	if d.Size == "" {
		d.Size = DefaultSize
	}
	if d.Status == "" {
		d.Status = StatusActive
	}
	for _, a := range []string{d.PrivateIP, d.PublicIP} {
		if a == "" {
			continue
		}
		if ip, err := netip.ParseAddr(a); err != nil || !ip.Is4() || !ip.IsLoopback() {
			panic(fmt.Sprintf("digitaloceantest: address %q is not a loopback IPv4 address", a))
		}
	}
	if d.PublicIPv6 != "" && d.PublicIPv6 != "::1" {
		panic(fmt.Sprintf("digitaloceantest: IPv6 address %q: only ::1 is allowed", d.PublicIPv6))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if d.ID == 0 {
		d.ID = c.nextID
		c.nextID += 7919
	}
	if d.Created.IsZero() {
		d.Created = c.opts.Now()
	}
	d.Tags = slices.Clone(d.Tags)
	cp := d
	c.droplets[d.ID] = &cp
	return d
}

// Get returns a droplet.
func (c *Cloud) Get(id int) (Droplet, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.droplets[id]
	if !ok {
		return Droplet{}, false
	}
	out := *d
	out.Tags = slices.Clone(d.Tags)
	return out, true
}

// SetStatus changes a droplet's status.
func (c *Cloud) SetStatus(id int, status string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.droplets[id]
	if !ok {
		return fmt.Errorf("digitaloceantest: no droplet %d", id)
	}
	d.Status = status
	return nil
}

// Delete destroys a droplet.
func (c *Cloud) Delete(id int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.droplets, id)
}

// MetadataURL starts (once) the droplet's metadata service and returns its
// base URL (the agent's metadataURL).
func (c *Cloud) MetadataURL(id int) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return "", errors.New("digitaloceantest: closed")
	}
	if _, ok := c.droplets[id]; !ok {
		return "", fmt.Errorf("digitaloceantest: no droplet %d", id)
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

// Fail makes the next n calls of method (MethodList, MethodGet,
// MethodMetadata) answer HTTP status with DigitalOcean's error body.
func (c *Cloud) Fail(method string, n, status int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults[method] = &fault{n: n, status: status}
}

// FailPage makes every request of that page of the droplet list answer
// status (0 clears it).
func (c *Cloud) FailPage(page, status int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if status == 0 {
		delete(c.pageFail, page)
		return
	}
	c.pageFail[page] = status
}

// ShortPage makes that page of the droplet list leave out its last
// droplet while still linking to the next page (an incomplete answer).
func (c *Cloud) ShortPage(page int, on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.short[page] = on
}

// SetOutage makes every API request answer 503 while on.
func (c *Cloud) SetOutage(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.outage = on
}

// BeforePage sets f, called before each page of the droplet list is
// answered with its page number (nil clears it): a test changes the
// droplets between pages there.
func (c *Cloud) BeforePage(f func(page int)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.before = f
}

// Calls counts the calls of method, answered or failed.
func (c *Cloud) Calls(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[method]
}

// count counts a call and says which status a fault makes it answer (0:
// none).
func (c *Cloud) count(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[method]++
	if f := c.faults[method]; f != nil && f.n > 0 {
		f.n--
		return f.status
	}
	return 0
}

// sortedLocked lists the droplets in ascending id (creation) order,
// filtered by tag when tag is not "".
func (c *Cloud) sortedLocked(tag string) []Droplet {
	var out []Droplet
	for _, d := range c.droplets {
		if tag == "" || slices.Contains(d.Tags, tag) {
			cp := *d
			cp.Tags = slices.Clone(d.Tags)
			out = append(out, cp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Droplets lists every droplet in ascending id order.
func (c *Cloud) Droplets() []Droplet {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sortedLocked("")
}
