// Package api holds the types of the local cloud's HTTP/JSON API, version v1,
// shared by the daemon, its Go client and its CLI. docs/localcloud.md
// documents every endpoint.
package api

import (
	"math"
	"time"
)

// Version is the path prefix of every API endpoint.
const Version = "v1"

// InstanceState is an instance's lifecycle state.
type InstanceState string

// Lifecycle states. pending -> running <-> stopped; any -> terminated.
const (
	StatePending    InstanceState = "pending"
	StateRunning    InstanceState = "running"
	StateStopped    InstanceState = "stopped"
	StateTerminated InstanceState = "terminated"
)

// AddressType names an instance address, as Kubernetes names node addresses.
type AddressType string

// Address types an instance has.
const (
	InternalIP  AddressType = "InternalIP"
	ExternalIP  AddressType = "ExternalIP"
	InternalDNS AddressType = "InternalDNS"
	Hostname    AddressType = "Hostname"
)

// Address is one address of an instance.
type Address struct {
	Type    AddressType `json:"type"`
	Address string      `json:"address"`
}

// Instance is a machine of the local cloud.
type Instance struct {
	ID           string            `json:"id"`
	Name         string            `json:"name"`
	Zone         string            `json:"zone"`
	Region       string            `json:"region"`
	InstanceType string            `json:"instanceType"`
	Cluster      string            `json:"cluster,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	State        InstanceState     `json:"state"`
	Addresses    []Address         `json:"addresses"`
	// MetadataEndpoint says whether the instance's metadata service is
	// served; empty (a record of an earlier version) means enabled.
	MetadataEndpoint MetadataEndpoint `json:"metadataEndpoint,omitempty"`
	// MetadataURL is the base URL of the instance's own metadata service,
	// served while the instance runs with its endpoint enabled.
	MetadataURL string    `json:"metadataURL,omitempty"`
	CreatedAt   time.Time `json:"createdAt"`
	// StateChangedAt is when State last changed.
	StateChangedAt time.Time `json:"stateChangedAt"`
}

// CreateInstanceRequest asks for a new instance.
type CreateInstanceRequest struct {
	Name string `json:"name"`
	// Zone defaults to the cloud's first zone; the region is the zone's.
	Zone string `json:"zone,omitempty"`
	// InstanceType defaults to the cloud's default type.
	InstanceType string            `json:"instanceType,omitempty"`
	Cluster      string            `json:"cluster,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	// MetadataEndpoint defaults to enabled.
	MetadataEndpoint MetadataEndpoint `json:"metadataEndpoint,omitempty"`
}

// MetadataEndpoint says whether an instance's metadata service is served,
// as a cloud lets an instance's metadata endpoint be turned off. A disabled
// endpoint has no listener: connections to it are refused.
type MetadataEndpoint string

// Metadata endpoint settings.
const (
	MetadataEnabled  MetadataEndpoint = "enabled"
	MetadataDisabled MetadataEndpoint = "disabled"
)

// SetMetadataEndpointRequest turns an instance's metadata service on or off.
type SetMetadataEndpointRequest struct {
	Endpoint MetadataEndpoint `json:"endpoint"`
}

// InstanceList is one page of instances, ordered by ID.
type InstanceList struct {
	Items []Instance `json:"items"`
	// NextPageToken, when not empty, fetches the next page.
	NextPageToken string `json:"nextPageToken,omitempty"`
}

// Protocol of a load balancer listener or health check.
type Protocol string

// Protocols.
const (
	TCP  Protocol = "TCP"
	UDP  Protocol = "UDP"
	HTTP Protocol = "HTTP" // health checks only
)

// Backend is a target of a load balancer listener.
type Backend struct {
	Address string `json:"address"`
	Port    int    `json:"port"`
	// Healthy is the data plane's view (read only).
	Healthy *bool `json:"healthy,omitempty"`
}

// HealthCheck probes each backend of a listener.
type HealthCheck struct {
	Protocol Protocol `json:"protocol"`
	// Port on the backend's address; 0 means the backend's port.
	Port int `json:"port,omitempty"`
	// Path of an HTTP check; default "/".
	Path string `json:"path,omitempty"`
	// IntervalSeconds between checks; default 2.
	IntervalSeconds int `json:"intervalSeconds,omitempty"`
}

// Listener is a port and protocol on the load balancer's VIP.
type Listener struct {
	Port        int          `json:"port"`
	Protocol    Protocol     `json:"protocol"`
	Backends    []Backend    `json:"backends"`
	HealthCheck *HealthCheck `json:"healthCheck,omitempty"`
}

// LoadBalancerSpec is what a caller asks for.
type LoadBalancerSpec struct {
	Cluster   string     `json:"cluster,omitempty"`
	Listeners []Listener `json:"listeners"`
	// SourceRanges are the CIDRs allowed to connect; empty allows any.
	SourceRanges []string          `json:"sourceRanges,omitempty"`
	Tags         map[string]string `json:"tags,omitempty"`
}

// LoadBalancer is an L4 load balancer with a virtual IP.
type LoadBalancer struct {
	Name string `json:"name"`
	LoadBalancerSpec
	VIP       string    `json:"vip"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// LoadBalancerList is one page of load balancers, ordered by name.
type LoadBalancerList struct {
	Items         []LoadBalancer `json:"items"`
	NextPageToken string         `json:"nextPageToken,omitempty"`
}

// Route sends a destination CIDR to an instance, in the cloud's route table.
type Route struct {
	Name            string    `json:"name"`
	Cluster         string    `json:"cluster,omitempty"`
	DestinationCIDR string    `json:"destinationCIDR"`
	InstanceID      string    `json:"instanceID"`
	CreatedAt       time.Time `json:"createdAt"`
}

// RouteList is one page of routes, ordered by name.
type RouteList struct {
	Items         []Route `json:"items"`
	NextPageToken string  `json:"nextPageToken,omitempty"`
}

// Faults are injected into API calls, for tests of callers' error handling.
type Faults struct {
	// Latency is added to every API call.
	Latency Duration `json:"latency,omitempty"`
	// ErrorRate (0..1) is the share of API calls that fail with 503,
	// spread evenly rather than drawn: the first call since the faults
	// were set fails, then that share of the calls (0.5: every other one).
	ErrorRate float64 `json:"errorRate,omitempty"`
	// Operations override the above per operation name (see Stats).
	Operations map[string]OperationFault `json:"operations,omitempty"`
	// StaleList names instances (by id) that ListInstances leaves out while
	// GetInstance still serves them: a list that lags the cloud's record.
	StaleList []string `json:"staleList,omitempty"`
}

// OperationFault is the fault of one operation.
type OperationFault struct {
	Latency   Duration `json:"latency,omitempty"`
	ErrorRate float64  `json:"errorRate,omitempty"`
	// Status of injected failures; default 503.
	Status int `json:"status,omitempty"`
}

// RateLimit bounds the API calls of the cloud (metadata calls excluded): a
// token bucket over all of them; an excess call gets 429 Throttled with a
// Retry-After.
type RateLimit struct {
	// Limit in calls per second; 0 means unlimited.
	Limit float64 `json:"limit"`
	// Burst is how many calls are allowed at once; 0 with a Limit means the
	// limit rounded down, at least 1.
	Burst int `json:"burst"`
}

// EffectiveBurst is Burst when set or when there is no limit (including a
// NaN one), else the limit rounded down, at least 1 and at most MaxInt32.
// The local cloud's server and its provider's client-side limit share it.
func (l RateLimit) EffectiveBurst() int {
	if !(l.Limit > 0) || l.Burst != 0 {
		return l.Burst
	}
	if l.Limit >= math.MaxInt32 {
		return math.MaxInt32
	}
	return max(1, int(l.Limit))
}

// Stats counts API calls per operation since start (or the last reset).
type Stats struct {
	Calls map[string]int64 `json:"calls"`
	// Throttled counts calls refused by the rate limit.
	Throttled int64 `json:"throttled"`
	// Faulted counts calls failed by fault injection.
	Faulted int64 `json:"faulted"`
	// StaleListed counts instances that lists left out because of
	// Faults.StaleList (one per instance per list call).
	StaleListed int64 `json:"staleListed"`
}

// InstanceIdentity is what an instance's metadata service says about it.
type InstanceIdentity struct {
	ID           string    `json:"id"`
	Name         string    `json:"name"`
	Zone         string    `json:"zone"`
	Region       string    `json:"region"`
	InstanceType string    `json:"instanceType"`
	Cluster      string    `json:"cluster,omitempty"`
	Addresses    []Address `json:"addresses"`
}

// MetadataHeader must be sent, with value "true", to an instance metadata
// service; it keeps a server-side request forgery on the instance from
// reaching the metadata through a plain GET.
const MetadataHeader = "Mooring-Metadata"
