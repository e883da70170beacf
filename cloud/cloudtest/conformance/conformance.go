package conformance

import (
	"testing"
	"time"

	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/view"
)

// Provider is a backend's CCM provider as the suite drives it: Kubernetes'
// interface and the approver's Attester.
type Provider interface {
	cloudprovider.Interface
	cloud.Attester
}

// Backend is what the suite knows of a backend.
type Backend struct {
	// Name is the provider's registered name.
	Name string
	// New starts the backend's test endpoint and a provider over it, both
	// stopped when t ends. The provider's view lists again for a miss at
	// once (a minimum refresh interval of a millisecond or so) and retries
	// failed calls quickly, so the suite runs in seconds.
	New func(t *testing.T, o Options) Bed
	// BadProviderIDs are providerIDs of this cloud's scheme that are
	// malformed: every lookup of one is an error.
	BadProviderIDs []string
	// NameWithoutNode is an instance name the backend's node name policy
	// gives no Node name; "" is "under_score", which no policy of DNS-1123
	// Node names gives one.
	NameWithoutNode string
	// EveryNameANode: every name the cloud allows gives a Node name (the
	// suite makes no instance without one).
	EveryNameANode bool
	// UniqueNames: the cloud refuses a second instance of a name (in the
	// scope the bed makes them in).
	UniqueNames bool
	// Evidence are the types of the provider's evidence verifiers, in
	// order; none for a cloud whose machines join with join tickets.
	Evidence []string
	// Zones, LoadBalancer and Routes say which of these faces the provider
	// implements.
	Zones, LoadBalancer, Routes bool
	// RoutesForeignInstanceIsError: the provider's ListRoutes is an error
	// while the cloud's routes hold one via an instance that is no Node of
	// the cluster (the upstream AWS provider's, which names the Node of
	// every instance route): RunRoutes' Foreign checks that it is an
	// error, and that nothing is deleted, in place of the route left out.
	RoutesForeignInstanceIsError bool
	// RoutesNoBlackholes: the cloud cannot tell a route whose instance is
	// gone from a live one (RunRoutes skips Gone).
	RoutesNoBlackholes bool
	// LBAnnotationPrefixes are the prefixes of the cloud's CCM's Service
	// annotations (RunLoadBalancers: one under them that the backend does
	// not know is refused, nothing written).
	LBAnnotationPrefixes []string
	// LBUpstream: the provider's load balancers are an upstream cloud
	// provider's (a plain cloudprovider.LoadBalancer, no
	// cloud.LoadBalancerInventory): they carry no cluster tag, so the
	// cluster cannot list its own, tell another cluster's apart or find one
	// whose Service is gone, and the upstream ignores annotations it does
	// not know. RunLoadBalancers then runs Lifecycle (its checks against
	// the listed load balancer's fingerprint left out; the endpoint's copy
	// checked instead) and Failures (without ListOwnedLoadBalancers), and
	// skips Adopt, OtherCluster, BadInput and Orphan, saying why.
	LBUpstream bool
	// Config is the text of a cloud config file for the provider over b,
	// for the registry check (cloud.NewProvider builds it from the file);
	// nil skips it.
	Config func(t *testing.T, b Bed) (yaml string)
}

// Options configure a Bed.
type Options struct {
	// PageSize is the provider's page size for the instance list, on a
	// Pager bed; 0 is the backend's default.
	PageSize int
	// Routes asks for a RoutesBed: a provider whose Routes() answers, with
	// what the cloud's routes need configured (a network, a route table,
	// an upstream provider), on a backend with Backend.Routes.
	Routes bool
}

// Spec is an instance the suite asks a Bed to make.
type Spec struct {
	// Name is the cloud's name of the instance.
	Name string
	// N is a number unique in the Bed (1-250): the bed builds the
	// instance's loopback addresses from it (and only loopback addresses).
	N int
	// Foreign makes it an instance of another cluster.
	Foreign bool
	// Created is the instance's creation time as the cloud reports it
	// (whole seconds); zero leaves it to the bed (about now).
	Created time.Time
	// First asks for an instance the list gives before every other, where
	// a test can choose that (an id it may pick); otherwise ignored.
	First bool
}

// Made is an instance a Bed made.
type Made struct {
	Spec
	// ProviderID is the providerID its Node gets; ID its view.Instance.ID.
	ProviderID, ID string
	// NodeName is the Node name the backend's node name policy gives it.
	NodeName string
	// InternalIP is the address its Node gets as InternalIP ("" when the
	// cloud gives it none).
	InternalIP string
}

// Failure is a way a cloud's API fails.
type Failure string

// Failures. Outage and GetFails are required of every Bed; the others
// where the cloud has them.
const (
	// Outage: every API call is answered with a server error or not at all.
	Outage Failure = "outage"
	// Unauthorized: the provider's credentials are refused.
	Unauthorized Failure = "unauthorized"
	// Throttled: the API answers that the caller is over its rate limit.
	Throttled Failure = "throttled"
	// GetFails: only the calls that ask for one instance by its id (Call
	// Confirm) fail, with a server error; the list answers.
	GetFails Failure = "get-fails"
)

// Call is a kind of API call a Bed counts.
type Call string

// Calls.
const (
	// List is one call of the instance list (one per page).
	List Call = "list"
	// Confirm is one call that asks for one instance by its id
	// (kit.InstanceFinder's ConfirmInstance).
	Confirm Call = "confirm"
)

// Run runs every contract a backend's provider keeps, each its own
// subtest: the instances' (RunInstances), the join tickets' (RunTickets)
// for a cloud without evidence of its own, whose machines join with
// tickets, the load balancers' (RunLoadBalancers) and the routes'
// (RunRoutes) where the backend has them.
func Run(t *testing.T, b Backend) {
	t.Run("Instances", func(t *testing.T) { RunInstances(t, b) })
	if len(b.Evidence) == 0 {
		t.Run("Tickets", func(t *testing.T) { RunTickets(t, b) })
	}
	if b.LoadBalancer {
		t.Run("LoadBalancers", func(t *testing.T) { RunLoadBalancers(t, b) })
	}
	if b.Routes {
		t.Run("Routes", func(t *testing.T) { RunRoutes(t, b) })
	}
}

// Bed is a backend's test endpoint with a provider over it.
type Bed interface {
	Provider() Provider
	// Make makes an instance, running.
	Make(t testing.TB, s Spec) Made
	// Delete deletes it: the cloud no longer knows it.
	Delete(t testing.TB, m Made)
	// SetState puts it in a state of the cloud that the backend maps to s;
	// false when the cloud has none.
	SetState(t testing.TB, m Made, s view.State) bool
	// Fail makes the API fail as f until undo is called; undo is nil when
	// the bed cannot (every Bed can for Outage).
	Fail(t testing.TB, f Failure) (undo func())
	// Calls counts the API's calls of kind c so far.
	Calls(c Call) int
}

// Pager is a Bed whose instance list comes in pages.
type Pager interface {
	Bed
	// BeforePage sets f, called with the page's number (from 1) before the
	// endpoint answers each page of the instance list, outside its locks,
	// so f may make, delete and fail; nil clears it.
	BeforePage(f func(page int))
}

// PageSizer is a Pager whose pages hold more than Options.PageSize asks
// (a cloud with a smallest page): the suite makes enough instances for
// several pages of PageSize.
type PageSizer interface {
	// PageSize is how many of the cluster's instances a page holds.
	PageSize() int
}
