package hetznertest

import (
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
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
	// ActionTime is how long an action runs before it is "success" (0:
	// it has finished by the first read after the answer that started it).
	ActionTime time.Duration
	// IPv6 gives load balancers the public IPv6 ::1 (not served by the
	// data plane); without it they have none.
	IPv6 bool
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

	// Servers: the API, metadata services by server id; Close and Calls
	// (of list, get, metadata, and unauthorized: calls refused for their
	// token) are Base's.
	cloudtest.Base[int64]

	servers cloudtest.Store[int64, Server]
	onList  cloudtest.Hook[int]
	down    atomic.Bool
	noMeta  atomic.Bool

	mu     sync.Mutex
	budget cloudtest.Bucket // the hourly rate limit

	acts actions       // actions.go
	nets networks      // networks.go
	lbs  loadBalancers // loadbalancers.go
}

// New makes a Cloud; Start starts it.
func New(opts Options) *Cloud {
	opts.Token = cmp.Or(opts.Token, DefaultToken)
	opts.PageLimit = cloudtest.AtMost(opts.PageLimit, MaxPerPage)
	opts.RateLimit = cloudtest.Positive(opts.RateLimit, DefaultRateLimit)
	opts.Now = cloudtest.Clock(opts.Now)
	return &Cloud{opts: opts,
		servers: cloudtest.Store[int64, Server]{
			Key:     func(s *Server) *int64 { return &s.ID },
			NewKey:  func(n int) int64 { return 10_000_001 + 17*int64(n) },
			Same:    func(s, old *Server) bool { return s.Name == old.Name },
			Created: func(s *Server) *time.Time { return &s.Created },
			Now:     opts.Now,
			Clone:   Server.clone,
			Missing: "hetznertest: no server",
		},
		budget: cloudtest.Bucket{Size: float64(opts.RateLimit), Refill: float64(opts.RateLimit) / 3600}}
}

// NewStarted makes and starts a Cloud that the test's cleanup closes.
func NewStarted(t testing.TB, opts Options) *Cloud {
	t.Helper()
	return cloudtest.Started(t, New(opts), nil)
}

// Start listens on 127.0.0.1 for the API.
func (c *Cloud) Start() error { return c.Servers.Serve(http.HandlerFunc(c.serveAPI)) }

// Endpoint is the API's base URL (hcloud.WithEndpoint, the config's
// endpoint).
func (c *Cloud) Endpoint() string {
	return "http://" + c.Servers.Addr() + "/v1"
}

// Token is the bearer token the API accepts.
func (c *Cloud) Token() string { return c.opts.Token }

// Put adds or replaces a server (defaults: status running, server type
// cx22, location fsn1, created now, the id of the server of its name or a
// new one) and returns it. It panics on an
// address outside loopback: nodes are reached at their addresses.
func (c *Cloud) Put(s Server) Server {
	s.Status = cmp.Or(s.Status, "running")
	s.ServerType = cmp.Or(s.ServerType, DefaultServerType)
	s.Location = cmp.Or(s.Location, DefaultLocation)
	cloudtest.MustLoopback("hetznertest", true, append([]string{s.PublicIPv4}, ips(s.PrivateNets)...)...)
	if s.PublicIPv6 != "" && s.PublicIPv6 != "::/64" {
		panic(fmt.Sprintf("hetznertest: IPv6 network %q: only ::/64 (host address ::1) is allowed", s.PublicIPv6))
	}
	return c.servers.Put(s, nil)
}

func ips(nets []PrivateNet) []string {
	var out []string
	for _, n := range nets {
		out = append(out, n.IP)
	}
	return out
}

// Get returns a server.
func (c *Cloud) Get(id int64) (Server, bool) { return c.servers.Get(id) }

func (s Server) clone() Server {
	s.Labels = maps.Clone(s.Labels)
	s.PrivateNets = append([]PrivateNet(nil), s.PrivateNets...)
	return s
}

// SetStatus changes a server's status.
func (c *Cloud) SetStatus(id int64, status string) error {
	return c.servers.Update(id, func(s *Server) { s.Status = status })
}

// Delete removes a server.
func (c *Cloud) Delete(id int64) { c.servers.Delete(id) }

// MetadataURL starts (once) the server's metadata service on its own
// loopback listener and returns its base URL, .../hetzner/v1/metadata (the
// agent's metadataURL).
func (c *Cloud) MetadataURL(id int64) (string, error) {
	u, err := c.Servers.URL("hetznertest", id, c.servers.Check, c.serveMetadata)
	if err != nil {
		return "", err
	}
	return u + metadataBase, nil
}

// Fail makes the next n calls of method (list, get, metadata) answer HTTP
// status with the error code (Hetzner's error JSON; metadata answers
// plain text).
func (c *Cloud) Fail(method string, n, status int, code string) {
	c.FailPage(method, 0, n, status, code)
}

// FailPage is Fail for one page of the list only (page 0: any).
func (c *Cloud) FailPage(method string, page, n, status int, code string) {
	if n > 0 {
		c.Faults.Add(method, cloudtest.Fault{Page: page, Left: n, Status: status, Code: code})
	}
}

// ClearFaults drops what Fail and FailPage left of method's faults, so a
// test can make a method fail until it says otherwise (Fail with a large n)
// and then answer again.
func (c *Cloud) ClearFaults(method string) { c.Faults.Clear(method) }

// SetDown makes the API close every connection unanswered (an outage), or
// answer again.
func (c *Cloud) SetDown(down bool) { c.down.Store(down) }

// OmitPagination makes list answers lack meta.pagination (a broken proxy
// or API), or have it again.
func (c *Cloud) OmitPagination(omit bool) { c.noMeta.Store(omit) }

// OnList calls f(page) before each list page is served (nil: none), so a
// test can change servers between pages, as other API clients do.
func (c *Cloud) OnList(f func(page int)) { c.onList.Set(f) }

// count counts a call and returns the fault it is to answer, if any.
func (c *Cloud) count(method string, page int) *cloudtest.Fault {
	return c.Counter.Call(&c.Faults, method, page)
}
