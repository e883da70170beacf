package digitaloceantest

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
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
	// DefaultLBLimit is the load balancers an account may hold.
	DefaultLBLimit = 10
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
	// LBBuildTime is how long a new load balancer stays "new" (without
	// an IP) before it is active; 0 keeps it new until
	// SettleLoadBalancers.
	LBBuildTime time.Duration
	// HealthCheckSecond is how long one second of a load balancer's health
	// check intervals and timeouts lasts in the data plane (default 1s;
	// tests make checks quicker with less).
	HealthCheckSecond time.Duration
	// LBLimit is the account's load balancer limit (default 10); a create
	// beyond it answers 403.
	LBLimit int
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

	// Servers: the API, metadata services by droplet id; Close, Calls,
	// Fail, SetOutage and BeforePage are these pieces'.
	cloudtest.Base[int]
	cloudtest.Outage
	cloudtest.Pages

	droplets cloudtest.Store[int, Droplet]
	pageFail cloudtest.Table[int, int] // page -> status
	short    cloudtest.Table[int, bool]

	mu     sync.Mutex
	window cloudtest.Window // the hourly rate limit

	lb lbState
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
	opts.MaxPerPage = cloudtest.AtMost(opts.MaxPerPage, MaxPerPage)
	opts.HourlyLimit = cloudtest.Positive(opts.HourlyLimit, DefaultHourlyLimit)
	opts.Now = cloudtest.Clock(opts.Now)
	opts.HealthCheckSecond = cloudtest.Positive(opts.HealthCheckSecond, time.Second)
	opts.LBLimit = cloudtest.Positive(opts.LBLimit, DefaultLBLimit)
	return &Cloud{opts: opts,
		droplets: cloudtest.Store[int, Droplet]{
			Key:     func(d *Droplet) *int { return &d.ID },
			NewKey:  func(n int) int { return 500000001 + 7919*n },
			Created: func(d *Droplet) *time.Time { return &d.Created },
			Now:     opts.Now,
			Clone:   func(d Droplet) Droplet { d.Tags = slices.Clone(d.Tags); return d },
			Missing: "digitaloceantest: no droplet",
		},
		window: cloudtest.Window{Limit: opts.HourlyLimit, Period: time.Hour}}, nil
}

// NewStarted makes and starts a Cloud that the test's cleanup closes.
func NewStarted(t testing.TB, opts Options) *Cloud {
	t.Helper()
	c, err := New(opts)
	return cloudtest.Started(t, c, err)
}

// Close stops every server and every load balancer's data plane.
func (c *Cloud) Close() error {
	err := c.Base.Close()
	if perr := c.lb.plane.Close(); err == nil {
		err = perr
	}
	return err
}

// Start listens on 127.0.0.1 for the API.
func (c *Cloud) Start() error { return c.Servers.Serve(http.HandlerFunc(c.serveAPI)) }

// Endpoint is the API's base URL (the config's apiEndpoint).
func (c *Cloud) Endpoint() string {
	return "http://" + c.Servers.Addr() + "/"
}

// Token is the API token requests must carry.
func (c *Cloud) Token() string { return c.opts.Token }

// Put adds or replaces a droplet (defaults: region nyc3, size
// s-2vcpu-4gb, status active, an id, created now) and returns it. It
// panics on an address outside 127.0.0.0/8 (or ::1): nodes are reached at
// their addresses.
func (c *Cloud) Put(d Droplet) Droplet {
	d.Region = cmp.Or(d.Region, DefaultRegion)
	d.Size = cmp.Or(d.Size, DefaultSize)
	d.Status = cmp.Or(d.Status, StatusActive)
	cloudtest.MustLoopback("digitaloceantest", true, d.PrivateIP, d.PublicIP)
	cloudtest.MustIPv6Loopback("digitaloceantest", d.PublicIPv6)
	return c.droplets.Put(d, nil)
}

// Get returns a droplet.
func (c *Cloud) Get(id int) (Droplet, bool) { return c.droplets.Get(id) }

// SetStatus changes a droplet's status.
func (c *Cloud) SetStatus(id int, status string) error {
	return c.droplets.Update(id, func(d *Droplet) { d.Status = status })
}

// Delete destroys a droplet; load balancers drop it from their targets.
func (c *Cloud) Delete(id int) {
	c.droplets.Delete(id)
	c.dropletGone(id)
}

// MetadataURL starts (once) the droplet's metadata service and returns its
// base URL (the agent's metadataURL).
func (c *Cloud) MetadataURL(id int) (string, error) {
	return c.Servers.URL("digitaloceantest", id, c.droplets.Check, c.serveMetadata)
}

// FailPage makes every request of that page of the droplet list answer
// status (0 clears it).
func (c *Cloud) FailPage(page, status int) { c.pageFail.Set(page, status) }

// ShortPage makes that page of the droplet list leave out its last
// droplet while still linking to the next page (an incomplete answer).
func (c *Cloud) ShortPage(page int, on bool) { c.short.Set(page, on) }

// count counts a call and says which status a fault makes it answer (0:
// none).
func (c *Cloud) count(method string) int { return c.Counter.Call(&c.Faults, method, 0).Answer() }

// sorted lists the droplets in ascending id (creation) order, filtered by
// tag when tag is not "".
func (c *Cloud) sorted(tag string) []Droplet {
	return c.droplets.List(func(d *Droplet) bool { return tag == "" || slices.Contains(d.Tags, tag) })
}

// Droplets lists every droplet in ascending id order.
func (c *Cloud) Droplets() []Droplet { return c.droplets.List(nil) }
