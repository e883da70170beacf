package conformance

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

// LBBed is a Bed whose cloud has Service load balancers
// (Backend.LoadBalancer): its provider's LoadBalancer is a
// cloud.LoadBalancerInventory, and its endpoint's load balancers carry
// traffic on loopback (cloudtest.DataPlane).
type LBBed interface {
	Bed
	// LBs are the load balancers the cloud holds, all of them (its
	// API's list, read by the endpoint itself, not through the provider).
	LBs(t testing.TB) []LB
	// MadeByCloudCCM makes the load balancer the cloud's own CCM would
	// have made for svc (its name for it, its tags or none of ours,
	// forwarding svc's ports to their node ports on nodes), as a cluster
	// switching to mooring has it, ready; it returns it.
	MadeByCloudCCM(t testing.TB, svc *v1.Service, nodes []*v1.Node) LB
	// MadeForOtherCluster makes a load balancer of the name svc's would
	// get, tagged for another cluster's Service.
	MadeForOtherCluster(t testing.TB, svc *v1.Service) LB
	// Tamper changes the load balancer out of band (drops a target or
	// changes a port), so that it no longer does what its Service calls
	// for.
	Tamper(t testing.TB, lb LB)
	// Settle finishes building every load balancer the cloud is still
	// building (a cloud whose load balancers are asynchronous); a no-op
	// for one whose are ready at once.
	Settle(t testing.TB)
}

// LB is one load balancer as a test endpoint holds it.
type LB struct {
	ID, Name string
	// IP is its address on loopback ("" while it has none); Hostname its
	// name, where the cloud gives one.
	IP, Hostname string
	// Ports are its listeners' ports.
	Ports []int32
	// Targets are how many backends (nodes) it forwards to.
	Targets int
}

// LB calls a Bed counts (Bed.Calls), besides List and Confirm.
const (
	LBList   Call = "lb-list"
	LBGet    Call = "lb-get"
	LBCreate Call = "lb-create"
	// LBUpdate counts every call that changes a load balancer (one, or
	// more where the cloud changes targets, listeners and settings with
	// calls of their own).
	LBUpdate Call = "lb-update"
	LBDelete Call = "lb-delete"
)
