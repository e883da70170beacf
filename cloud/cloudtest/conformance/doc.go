// Package conformance is the test suite every cloud backend's CCM provider
// passes against its own test endpoint: what the kit promises every cloud
// (cloud/kit), asked through the backend's SDK and wire format.
//
// A backend describes itself in a Backend and gives the suite a Bed: its
// test endpoint started with a provider over it, able to make an instance
// (a name, cluster membership, a creation time), delete one, put one in a
// state, make the API fail, and count the API's calls (a Bed over an
// endpoint built on cloudtest.Base takes those three from an embedded
// Endpoint). Each contract is one Run function with its own subtests:
// RunInstances the instances' (InstancesV2, the provider's faces, the
// view's lists), RunTickets the join tickets' (the approver over the
// cloud's record of the instance a ticket names), for the clouds whose
// machines join with tickets, RunLoadBalancers the Service load balancers'
// (an LBBed), RunRoutes the pod ranges' routes (a RoutesBed, made with
// Options.Routes). Run runs those that apply to a backend.
//
// A backend's own tests keep only what is its own: its config, auth, how
// its records map onto view.Instance, its evidence.
package conformance
