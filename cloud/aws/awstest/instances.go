package awstest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Instance is an EC2 instance as a test describes it.
type Instance struct {
	// ID is "i-" and 17 (or, for old instances, 8) lower-case hex digits;
	// Put assigns one when empty.
	ID string
	// Zone is the availability zone, the region and a letter; default
	// Region+"a".
	Zone string
	// InstanceType defaults to "m5.large".
	InstanceType string
	// State is pending, running, shutting-down, terminated, stopping or
	// stopped; default running.
	State string
	// PrivateIP is required and inside 127.0.0.0/8.
	PrivateIP string
	// PublicIP is empty or inside 127.0.0.0/8.
	PublicIP string
	// PrivateDNSName defaults to ip-A-B-C-D.ec2.internal in us-east-1 and
	// ip-A-B-C-D.<region>.compute.internal elsewhere.
	PrivateDNSName string
	// PublicDNSName has no default.
	PublicDNSName string
	// Tags are the instance's tags.
	Tags map[string]string
	// Role is the role of the instance profile, whose credentials the
	// metadata service serves; "" is none.
	Role string
	// InstanceProfile is the name of the instance profile the instance is
	// associated with, which DescribeInstances shows. It defaults to Role
	// (the IAM console names the profile it makes for a role after the
	// role; other tools need not). A profile without a role is allowed: its
	// instance gets no credentials.
	InstanceProfile string
	// MetadataTags is whether the metadata service serves tags/instance/
	// (instance metadata tags enabled).
	MetadataTags bool
	// LaunchTime is when the instance last started (EC2's launchTime). At
	// the first Put it defaults to Created, or to Now rounded down to the
	// second when both are zero; later Puts that leave it zero keep it; a
	// start from stopped moves it to Now, as on AWS.
	LaunchTime time.Time
	// Created is when the instance was first launched, which EC2 shows as
	// the attachment time of its primary network interface and which a
	// stop and start leaves alone. At the first Put it defaults to
	// LaunchTime; later Puts that leave it zero keep it. It may not be
	// after LaunchTime. EC2's XML carries milliseconds.
	Created time.Time
	// ImageID defaults to ami- and 17 hex digits derived from the region.
	ImageID string
	// NitroTPM, when set, is the instance's NitroTPM: DescribeInstances
	// shows tpmSupport v2.0 and GetInstanceTpmEkPub serves its endorsement
	// keys. nil: an instance without NitroTPM.
	NitroTPM *NitroTPM
}

// Instance states, with the codes EC2 gives them.
var stateCodes = map[string]int{
	"pending":       0,
	"running":       16,
	"shutting-down": 32,
	"terminated":    48,
	"stopping":      64,
	"stopped":       80,
}

const stateRunning = "running"

var instanceIDPattern = regexp.MustCompile(`^i-([0-9a-f]{8}|[0-9a-f]{17})$`)

var loopback = netip.MustParsePrefix("127.0.0.0/8")

// Put adds an instance or replaces the one with its ID, and returns it as
// stored, defaults filled in. It panics when the instance is one AWS could
// not have (a malformed id or state, a zone outside the region) or one this
// package refuses (an address outside 127.0.0.0/8).
func (c *Cloud) Put(in Instance) Instance {
	c.mu.Lock()
	defer c.mu.Unlock()
	in = cloneInstance(in)
	if in.ID == "" {
		in.ID = c.newInstanceIDLocked()
	}
	if !instanceIDPattern.MatchString(in.ID) {
		panic(fmt.Sprintf("awstest: instance id %q: want i- and 17 lower-case hex digits", in.ID))
	}
	if in.Zone == "" {
		in.Zone = c.region + "a"
	}
	if !slices.Contains(c.zones, in.Zone) {
		panic(fmt.Sprintf("awstest: instance %s: zone %q is not a zone of region %s (%v)", in.ID, in.Zone, c.region, c.zones))
	}
	if in.InstanceType == "" {
		in.InstanceType = "m5.large"
	}
	if in.State == "" {
		in.State = stateRunning
	}
	if _, ok := stateCodes[in.State]; !ok {
		panic(fmt.Sprintf("awstest: instance %s: state %q is not an EC2 instance state", in.ID, in.State))
	}
	if !isLoopback(in.PrivateIP) {
		panic(fmt.Sprintf("awstest: instance %s: private IP %q: want an IPv4 address inside 127.0.0.0/8", in.ID, in.PrivateIP))
	}
	if in.PublicIP != "" && !isLoopback(in.PublicIP) {
		panic(fmt.Sprintf("awstest: instance %s: public IP %q: want \"\" or an IPv4 address inside 127.0.0.0/8", in.ID, in.PublicIP))
	}
	if in.PrivateDNSName == "" {
		in.PrivateDNSName = c.defaultPrivateDNSName(in.PrivateIP)
	}
	if in.InstanceProfile == "" {
		in.InstanceProfile = in.Role
	}
	if err := checkProfile(in.InstanceProfile, in.Role); err != nil {
		panic(fmt.Sprintf("awstest: instance %s: %v", in.ID, err))
	}
	if in.ImageID == "" {
		in.ImageID = fakeID("ami", c.region)
	}
	if in.NitroTPM != nil {
		if err := in.NitroTPM.check(); err != nil {
			panic(fmt.Sprintf("awstest: instance %s: NitroTPM: %v", in.ID, err))
		}
	}
	prev, existed := c.instances[in.ID]
	if existed && in.LaunchTime.IsZero() {
		in.LaunchTime = prev.LaunchTime
	}
	if existed && in.Created.IsZero() {
		in.Created = prev.Created
	}
	switch {
	case in.LaunchTime.IsZero() && in.Created.IsZero():
		in.LaunchTime = c.now().UTC().Truncate(time.Second)
		in.Created = in.LaunchTime
	case in.LaunchTime.IsZero():
		in.LaunchTime = in.Created
	case in.Created.IsZero():
		in.Created = in.LaunchTime
	}
	if in.Created.After(in.LaunchTime) {
		panic(fmt.Sprintf("awstest: instance %s: created at %s, after its launch time %s", in.ID, in.Created, in.LaunchTime))
	}
	if existed && in.State != stateRunning {
		c.forgetTokensLocked(in.ID)
	}
	if !existed && c.delay > 0 {
		c.visibleAt[in.ID] = c.now().Add(c.delay)
	}
	if !existed {
		c.order = nil
	}
	c.instances[in.ID] = in
	return cloneInstance(in)
}

// Get returns the instance with the id as stored.
func (c *Cloud) Get(id string) (Instance, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	in, ok := c.instances[id]
	return cloneInstance(in), ok
}

// SetState moves an instance to a state. A start from stopped or stopping
// moves its launch time to Now (its creation time stays); leaving running
// invalidates its metadata tokens (the machine stopped). A terminated
// instance cannot change state.
func (c *Cloud) SetState(id, state string) error {
	if _, ok := stateCodes[state]; !ok {
		return fmt.Errorf("awstest: set state of %s: %q is not an EC2 instance state", id, state)
	}
	return c.update(id, "set state of", func(in *Instance) error {
		if in.State == "terminated" && state != "terminated" {
			return fmt.Errorf("awstest: set state of %s to %s: the instance is terminated", id, state)
		}
		if (in.State == "stopped" || in.State == "stopping") && (state == "pending" || state == stateRunning) {
			in.LaunchTime = c.now().UTC().Truncate(time.Second)
		}
		if state != stateRunning {
			c.forgetTokensLocked(id)
		}
		in.State = state
		return nil
	})
}

// SetInstanceProfile associates the instance with another instance
// profile, whose role is role, as EC2's
// ReplaceIamInstanceProfileAssociation does (profile "" and role "":
// DisassociateIamInstanceProfile). DescribeInstances shows the new profile,
// and the metadata service serves the new role's credentials from then on;
// sets issued under the old role stay valid until they expire, as on AWS.
func (c *Cloud) SetInstanceProfile(id, profile, role string) error {
	if err := checkProfile(profile, role); err != nil {
		return fmt.Errorf("awstest: set the instance profile of %s: %w", id, err)
	}
	return c.update(id, "set the instance profile of", func(in *Instance) error {
		in.InstanceProfile, in.Role = profile, role
		return nil
	})
}

// update changes the stored instance of the id with change, under the
// lock; what names the change in the error for an unknown id.
func (c *Cloud) update(id, what string, change func(*Instance) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	in, ok := c.instances[id]
	if !ok {
		return fmt.Errorf("awstest: %s %s: no such instance", what, id)
	}
	if err := change(&in); err != nil {
		return err
	}
	c.instances[id] = in
	return nil
}

// IAM's name rules (the IAM API reference): role names 1-64 and instance
// profile names 1-128 of letters, digits and +=,.@_-.
var (
	roleNamePattern    = regexp.MustCompile(`^[A-Za-z0-9+=,.@_-]{1,64}$`)
	profileNamePattern = regexp.MustCompile(`^[A-Za-z0-9+=,.@_-]{1,128}$`)
)

// checkProfile checks an instance profile name and its role's name; both
// may be empty, but a role needs a profile.
func checkProfile(profile, role string) error {
	switch {
	case profile == "" && role != "":
		return fmt.Errorf("role %q without an instance profile", role)
	case profile != "" && !profileNamePattern.MatchString(profile):
		return fmt.Errorf("instance profile %q is not an IAM instance profile name", profile)
	case role != "" && !roleNamePattern.MatchString(role):
		return fmt.Errorf("role %q is not an IAM role name", role)
	}
	return nil
}

// Delete removes an instance altogether: DescribeInstances no longer shows
// it (as AWS stops showing a terminated instance after a while) and its
// metadata service stops answering. Credentials issued to it stay valid
// until they expire, as on AWS.
func (c *Cloud) Delete(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.instances, id)
	c.order = nil
	delete(c.visibleAt, id)
	c.forgetTokensLocked(id)
}

// newInstanceIDLocked hands out a deterministic id no instance has.
func (c *Cloud) newInstanceIDLocked() string {
	for {
		c.seq++
		sum := sha256.Sum256(fmt.Appendf(nil, "instance/%s/%s/%d", c.account, c.region, c.seq))
		id := "i-0" + hex.EncodeToString(sum[:8])
		if _, taken := c.instances[id]; !taken {
			return id
		}
	}
}

func (c *Cloud) defaultPrivateDNSName(ip string) string {
	host := "ip-" + strings.ReplaceAll(ip, ".", "-")
	if c.region == "us-east-1" {
		return host + ".ec2.internal"
	}
	return host + "." + c.region + ".compute.internal"
}

func isLoopback(ip string) bool {
	a, err := netip.ParseAddr(ip)
	return err == nil && a.Is4() && loopback.Contains(a)
}

func cloneInstance(in Instance) Instance {
	in.Tags = maps.Clone(in.Tags)
	in.NitroTPM = cloneNitroTPM(in.NitroTPM)
	return in
}

// fakeID is a resource id (prefix, "-0" and 16 hex digits) derived from a
// seed, so that describing the same thing twice gives the same id.
func fakeID(prefix, seed string) string {
	sum := sha256.Sum256([]byte(prefix + "/" + seed))
	return prefix + "-0" + hex.EncodeToString(sum[:8])
}

// orderLocked is every instance id, sorted (kept until an instance comes
// or goes).
func (c *Cloud) orderLocked() []string {
	if c.order == nil {
		c.order = slices.Sorted(maps.Keys(c.instances))
	}
	return c.order
}
