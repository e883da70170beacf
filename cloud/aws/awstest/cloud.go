package awstest

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// DefaultAccount is the account of a Cloud whose Options name none.
const DefaultAccount = "123456789012"

// DefaultRegion is the region of a Cloud whose Options name none.
const DefaultRegion = "us-east-1"

// DefaultCredentialLifetime is how long instance-profile credentials live
// when Options.CredentialLifetime is zero.
const DefaultCredentialLifetime = 6 * time.Hour

// User is an IAM user's long-term access key: the identity of callers such
// as the cloud-controller-manager or the CSR approver.
type User struct{ Name, AccessKeyID, SecretAccessKey string }

// Options configure a Cloud.
type Options struct {
	// Account is the 12-digit account id; default DefaultAccount.
	Account string
	// Region is the cloud's region and the only one whose signatures it
	// accepts; default DefaultRegion.
	Region string
	// Users may sign EC2 and STS calls.
	Users []User
	// Now is the clock of signature windows, credential expiry, metadata
	// tokens and launch times; default time.Now. Responses carry it in
	// their Date header, as AWS's do, so SDK clients correct their signing
	// clock to it.
	Now func() time.Time
	// CredentialLifetime is the lifetime of instance-profile credentials;
	// default DefaultCredentialLifetime.
	CredentialLifetime time.Duration
	// NewInstanceDelay models EC2's eventual consistency: for this long
	// after its first Put, an instance is left out of DescribeInstances
	// lists and DescribeInstanceTopology, and DescribeInstances of its id
	// answers InvalidInstanceID.NotFound, as EC2 may right after
	// RunInstances. Its metadata service answers from the start. Zero (the
	// default): instances show at once. SetNewInstanceDelay changes it.
	NewInstanceDelay time.Duration
	// Throttle turns EC2's request rate limiting on from the start, with
	// DefaultBuckets (see Cloud.Throttle). Off by default.
	Throttle bool
	// Zones are the region's availability zones, as DescribeAvailabilityZones
	// lists them and as instances may be Put in; default the region and a
	// to f in us-east-1, a to c elsewhere.
	Zones []string
}

// Cloud is one AWS account in one region: EC2 instances, their instance
// profiles and metadata services, and the EC2 and STS Query APIs on one
// loopback endpoint. Its methods are safe for concurrent use.
type Cloud struct {
	account  string
	region   string
	now      func() time.Time
	lifetime time.Duration

	mu           sync.Mutex
	users        map[string]User              // by access key id
	instances    map[string]Instance          // by instance id
	order        []string                     // instance ids, sorted; nil: to be made again
	describe     DescribeStats                // DescribeInstances calls answered, by kind
	seq          uint64                       // instance ids handed out
	roleCreds    map[string]*roleCred         // every set ever issued, by access key id
	current      map[string]*roleCred         // the set IMDS serves, by instance id
	roleIDs      map[string]string            // unique ids of recreated roles, by name
	imds         map[string]*imdsServer       // by instance id
	delay        time.Duration                // NewInstanceDelay
	visibleAt    map[string]time.Time         // instances hidden until then, by id
	zones        []string                     // Options.Zones
	buckets      map[string]*cloudtest.Bucket // by action; nil: no throttling
	tables       map[string]*RouteTable       // route tables, by id (routetables.go)
	noSourceDest map[string]bool              // instances whose source/destination check is off

	servers   cloudtest.Servers[string] // the API; metadata services by instance id
	calls     cloudtest.Counter         // by action
	refusals  cloudtest.Counter         // by error code
	throttled cloudtest.Counter         // by action
	faults    cloudtest.Faults          // by action
}

// New makes a Cloud; Start serves its API. It panics on options that are a
// test's own mistake (a user without a name or key, a key given twice).
func New(opts Options) *Cloud {
	c := &Cloud{
		account:   opts.Account,
		region:    opts.Region,
		now:       opts.Now,
		lifetime:  opts.CredentialLifetime,
		users:     map[string]User{},
		instances: map[string]Instance{},
		roleCreds: map[string]*roleCred{},
		current:   map[string]*roleCred{},
		roleIDs:   map[string]string{},
		imds:      map[string]*imdsServer{},
		delay:     opts.NewInstanceDelay,
		visibleAt: map[string]time.Time{},
		zones:     slices.Clone(opts.Zones),
	}
	if c.account == "" {
		c.account = DefaultAccount
	}
	if c.region == "" {
		c.region = DefaultRegion
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.lifetime <= 0 {
		c.lifetime = DefaultCredentialLifetime
	}
	if len(c.zones) == 0 {
		letters := "abc"
		if c.region == "us-east-1" {
			letters = "abcdef"
		}
		for _, l := range letters {
			c.zones = append(c.zones, c.region+string(l))
		}
	}
	for _, z := range c.zones {
		if rest, ok := strings.CutPrefix(z, c.region); !ok || len(rest) != 1 || rest[0] < 'a' || rest[0] > 'z' {
			panic(fmt.Sprintf("awstest: zone %q is not a zone of region %s (the region and a letter)", z, c.region))
		}
	}
	for _, u := range opts.Users {
		c.AddUser(u)
	}
	if opts.Throttle {
		c.Throttle(nil)
	}
	return c
}

// NewStarted makes and starts a Cloud that is closed when the test ends.
func NewStarted(t testing.TB, opts Options) *Cloud {
	t.Helper()
	c := New(opts)
	cloudtest.Start(t, c)
	return c
}

// AddUser lets one more IAM user sign calls. It panics on a user without a
// name, access key id or secret, or on an access key id already known.
func (c *Cloud) AddUser(u User) {
	if u.Name == "" || u.AccessKeyID == "" || u.SecretAccessKey == "" {
		panic(fmt.Sprintf("awstest: user %q needs a name, an access key id and a secret access key", u.Name))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, dup := c.users[u.AccessKeyID]; dup {
		panic(fmt.Sprintf("awstest: access key id %q given twice", u.AccessKeyID))
	}
	c.users[u.AccessKeyID] = u
}

// Start serves the EC2 and STS Query APIs on 127.0.0.1 at a free port.
func (c *Cloud) Start() error {
	if err := c.servers.Serve(http.HandlerFunc(c.serveAPI)); err != nil {
		return fmt.Errorf("awstest: start: %w", err)
	}
	return nil
}

// Close stops the API and every instance metadata service. A closed Cloud
// cannot start again.
func (c *Cloud) Close() error { return c.servers.Close() }

// Endpoint is the API's base URL, "http://127.0.0.1:PORT", to be the
// BaseEndpoint of both the ec2 and the sts client; "" before Start.
func (c *Cloud) Endpoint() string {
	if addr := c.servers.Addr(); addr != "" {
		return "http://" + addr
	}
	return ""
}

// Account is the cloud's account id.
func (c *Cloud) Account() string { return c.account }

// Region is the cloud's region.
func (c *Cloud) Region() string { return c.region }

// SetNewInstanceDelay changes Options.NewInstanceDelay for instances Put
// from now on; instances already hidden keep their time.
func (c *Cloud) SetNewInstanceDelay(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.delay = d
}

// Visible reports whether the API shows the instance yet (see
// Options.NewInstanceDelay).
func (c *Cloud) Visible(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.instances[id]
	return ok && c.visibleLocked(id)
}

// visibleLocked: the instance's NewInstanceDelay is over.
func (c *Cloud) visibleLocked(id string) bool {
	at, hidden := c.visibleAt[id]
	if hidden && c.now().Before(at) {
		return false
	}
	delete(c.visibleAt, id)
	return true
}
