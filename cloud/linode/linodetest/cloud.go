package linodetest

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
	DefaultRegion = "us-east"
	DefaultType   = "g6-standard-2"
	// DefaultListLimit is the documented limit of GET requests for a
	// collection (data): 100 per minute per user.
	DefaultListLimit = 100
	// DefaultLimit is the documented limit of every other operation: 800
	// requests per minute per user.
	DefaultLimit = 800
	// MinPageSize and MaxPageSize bound page_size; DefaultPageSize is a
	// page's size when the request names none.
	MinPageSize     = 25
	MaxPageSize     = 500
	DefaultPageSize = 100
)

// Statuses of a Linode (the documented ones).
const (
	StatusRunning      = "running"
	StatusOffline      = "offline"
	StatusBooting      = "booting"
	StatusRebooting    = "rebooting"
	StatusShuttingDown = "shutting_down"
	StatusProvisioning = "provisioning"
	StatusDeleting     = "deleting"
	StatusMigrating    = "migrating"
	StatusRebuilding   = "rebuilding"
	StatusCloning      = "cloning"
	StatusRestoring    = "restoring"
	StatusStopped      = "stopped"
	StatusResizing     = "resizing"
)

// Methods, for Calls and Fail.
const (
	MethodList     = "list"     // GET /v4/linode/instances
	MethodGet      = "get"      // GET /v4/linode/instances/{id}
	MethodToken    = "token"    // PUT /v1/token on a Linode's Metadata service
	MethodInstance = "instance" // GET /v1/instance
	MethodNetwork  = "network"  // GET /v1/network
	MethodUserData = "userdata" // GET /v1/user-data
	// MethodThrottled counts the API requests answered 429.
	MethodThrottled = "throttled"
)

// Options configure a Cloud.
type Options struct {
	// Token is the personal access token requests must carry
	// (Authorization: Bearer); "" makes a random one (Cloud.Token).
	Token string
	// ListLimit is how many list requests a minute allows (default
	// 100); Limit the other API requests' (default 800). A request beyond
	// answers 429 with Retry-After.
	ListLimit, Limit int
	// Now is the clock of creation times and the rate limits (default
	// time.Now).
	Now func() time.Time
}

// Instance is one Linode.
type Instance struct {
	// ID is assigned by Put when 0.
	ID     int
	Label  string
	Region string // default us-east
	Type   string // default g6-standard-2
	// Status: running (Put's default), or another of the documented
	// statuses.
	Status string
	// PublicIP and PrivateIP (in 192.168.128.0/17 on Linode) must be
	// loopback IPv4 addresses here; IPv6 is "" or ::1 (its SLAAC address).
	PublicIP, PrivateIP, IPv6 string
	Tags                      []string
	// Created defaults to Put's time (the API shows it to the second).
	Created time.Time
	// UserData is what the Metadata service's /v1/user-data serves
	// (base64-encoded there).
	UserData string
}

// Cloud is the endpoint.
type Cloud struct {
	opts Options

	// Servers: the API, Metadata services by Linode id; Close, Calls,
	// Fail, SetOutage and BeforePage are these pieces'.
	cloudtest.Base[int]
	cloudtest.Outage
	cloudtest.Pages

	instances cloudtest.Store[int, Instance]
	short     cloudtest.Table[int, bool]

	mu       sync.Mutex
	listRate cloudtest.Window
	rate     cloudtest.Window
	tokens   map[string]mdToken // metadata tokens
	nb       nbState            // NodeBalancers, under mu
}

// mdToken is a Metadata service token: the Linode it was given to and when
// it expires.
type mdToken struct {
	id      int
	expires time.Time
}

// New makes a Cloud; Start starts it.
func New(opts Options) (*Cloud, error) {
	if opts.Token == "" {
		var b [32]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		opts.Token = hex.EncodeToString(b[:])
	}
	opts.ListLimit = cloudtest.Positive(opts.ListLimit, DefaultListLimit)
	opts.Limit = cloudtest.Positive(opts.Limit, DefaultLimit)
	opts.Now = cloudtest.Clock(opts.Now)
	return &Cloud{opts: opts,
		instances: cloudtest.Store[int, Instance]{
			Key:     func(in *Instance) *int { return &in.ID },
			NewKey:  func(n int) int { return 70000001 + 6421*n },
			Created: func(in *Instance) *time.Time { return &in.Created },
			// The API shows creation times to the second.
			Now:     func() time.Time { return opts.Now().UTC().Truncate(time.Second) },
			Clone:   func(in Instance) Instance { in.Tags = slices.Clone(in.Tags); return in },
			Missing: "linodetest: no Linode",
		},
		listRate: cloudtest.Window{Limit: opts.ListLimit, Period: time.Minute},
		rate:     cloudtest.Window{Limit: opts.Limit, Period: time.Minute},
		tokens:   map[string]mdToken{},
		nb:       nbState{byID: map[int]*NodeBalancer{}, plane: cloudtest.DataPlane{Prefix: DataPlanePrefix}}}, nil
}

// Close stops the servers and the NodeBalancers' data plane.
func (c *Cloud) Close() error {
	err := c.Base.Close()
	if perr := c.nb.plane.Close(); err == nil {
		err = perr
	}
	return err
}

// NewStarted makes and starts a Cloud that the test's cleanup closes.
func NewStarted(t testing.TB, opts Options) *Cloud {
	t.Helper()
	c, err := New(opts)
	return cloudtest.Started(t, c, err)
}

// Start listens on 127.0.0.1 for the API.
func (c *Cloud) Start() error { return c.Servers.Serve(http.HandlerFunc(c.serveAPI)) }

// Endpoint is the API's base URL without its version (the config's
// apiEndpoint).
func (c *Cloud) Endpoint() string { return "http://" + c.Servers.Addr() }

// Token is the personal access token requests must carry.
func (c *Cloud) Token() string { return c.opts.Token }

// Put adds or replaces a Linode (defaults: region us-east, type
// g6-standard-2, status running, an id, created now) and returns it. It
// panics on an address outside 127.0.0.0/8 (or ::1): nodes are reached at
// their addresses.
func (c *Cloud) Put(in Instance) Instance {
	in.Region = cmp.Or(in.Region, DefaultRegion)
	in.Type = cmp.Or(in.Type, DefaultType)
	in.Status = cmp.Or(in.Status, StatusRunning)
	cloudtest.MustLoopback("linodetest", true, in.PublicIP, in.PrivateIP)
	cloudtest.MustIPv6Loopback("linodetest", in.IPv6)
	in.Created = in.Created.UTC().Truncate(time.Second)
	return c.instances.Put(in, nil)
}

// Get returns a Linode.
func (c *Cloud) Get(id int) (Instance, bool) { return c.instances.Get(id) }

// SetStatus changes a Linode's status.
func (c *Cloud) SetStatus(id int, status string) error {
	return c.instances.Update(id, func(in *Instance) { in.Status = status })
}

// SetTags replaces a Linode's tags.
func (c *Cloud) SetTags(id int, tags ...string) error {
	return c.instances.Update(id, func(in *Instance) { in.Tags = slices.Clone(tags) })
}

// Delete deletes a Linode.
func (c *Cloud) Delete(id int) { c.instances.Delete(id) }

// MetadataURL starts (once) the Linode's Metadata service and returns its
// base URL (the agent's metadataURL).
func (c *Cloud) MetadataURL(id int) (string, error) {
	return c.Servers.URL("linodetest", id, c.instances.Check, c.serveMetadata)
}

// FailPage makes the next n requests of that page of the list answer
// status.
func (c *Cloud) FailPage(page, n, status int) {
	c.Faults.Add(MethodList, cloudtest.Fault{Page: page, Left: n, Status: status})
}

// ShortPage makes that page of the list leave out its last Linode while
// the answer still counts it in results (an incomplete answer).
func (c *Cloud) ShortPage(page int, on bool) { c.short.Set(page, on) }

// count counts a call and says which status a fault makes it answer (0:
// none).
func (c *Cloud) count(method string, page int) int {
	return c.Counter.Call(&c.Faults, method, page).Answer()
}

// sorted lists the Linodes in ascending id order, those carrying tag when
// tag is not "".
func (c *Cloud) sorted(tag string) []Instance {
	return c.instances.List(func(in *Instance) bool { return tag == "" || slices.Contains(in.Tags, tag) })
}

// Instances lists every Linode in ascending id order.
func (c *Cloud) Instances() []Instance { return c.instances.List(nil) }
