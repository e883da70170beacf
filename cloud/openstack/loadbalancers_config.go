package openstack

import (
	"fmt"
	"strings"

	"github.com/google/uuid"
)

// LoadBalancerConfig is the cloud config's loadBalancer block: the
// defaults of the Octavia load balancers made for Services (the upstream
// CCM's [LoadBalancer] section; a Service's annotations override most).
// docs/openstack.md, Load balancers.
type LoadBalancerConfig struct {
	// Disabled turns Service load balancers off (a cluster that runs
	// MetalLB or the like): the provider then has none.
	Disabled bool `json:"disabled,omitempty"`
	// SubnetID is the subnet the load balancers' VIPs are on (the upstream
	// CCM's subnet-id); NetworkID the network, when Octavia may pick the
	// subnet (network-id). One is needed, here or in each Service's
	// subnet-id / network-id annotation.
	SubnetID  string `json:"subnetID,omitempty"`
	NetworkID string `json:"networkID,omitempty"`
	// MemberSubnetID is the subnet of the members (the nodes' addresses);
	// default SubnetID.
	MemberSubnetID string `json:"memberSubnetID,omitempty"`
	// FloatingNetworkID is the external network public load balancers get
	// a floating IP from (floating-network-id); FloatingSubnetID a subnet
	// of it. Without FloatingNetworkID (and the Service's
	// floating-network-id annotation) a load balancer has its VIP alone,
	// as an internal one.
	FloatingNetworkID string `json:"floatingNetworkID,omitempty"`
	FloatingSubnetID  string `json:"floatingSubnetID,omitempty"`
	// Internal makes every load balancer internal by default (internal-lb).
	Internal bool `json:"internal,omitempty"`
	// ClusterName is the upstream CCM's --cluster-name, which its load
	// balancers' names carry (kube_service_<clusterName>_<namespace>_<name>),
	// so that one it made is found and adopted. Default kubernetes.
	ClusterName string `json:"clusterName,omitempty"`
	// LBMethod is the pools' lb_algorithm (lb-method): ROUND_ROBIN (the
	// default), LEAST_CONNECTIONS, SOURCE_IP or SOURCE_IP_PORT.
	LBMethod string `json:"lbMethod,omitempty"`
	// Provider is the Octavia provider driver (lb-provider), such as
	// amphora or ovn; "" leaves Octavia's default.
	Provider string `json:"provider,omitempty"`
	// FlavorID and AvailabilityZone are the defaults of the flavor-id and
	// availability-zone annotations.
	FlavorID         string `json:"flavorID,omitempty"`
	AvailabilityZone string `json:"availabilityZone,omitempty"`
	// CreateMonitor gives each pool a health monitor (create-monitor);
	// default true (the upstream CCM's default is false: a Service with
	// externalTrafficPolicy Local needs one). MonitorDelay, MonitorTimeout
	// (seconds), MonitorMaxRetries and MonitorMaxRetriesDown are its
	// settings (defaults 5, 3, 1 and 3, the upstream CCM's).
	CreateMonitor         *bool `json:"createMonitor,omitempty"`
	MonitorDelay          int   `json:"monitorDelay,omitempty"`
	MonitorTimeout        int   `json:"monitorTimeout,omitempty"`
	MonitorMaxRetries     int   `json:"monitorMaxRetries,omitempty"`
	MonitorMaxRetriesDown int   `json:"monitorMaxRetriesDown,omitempty"`
}

// Load balancer defaults.
const (
	DefaultLBClusterName = "kubernetes"
	DefaultLBMethod      = "ROUND_ROBIN"
)

var lbMethods = []string{"ROUND_ROBIN", "LEAST_CONNECTIONS", "SOURCE_IP", "SOURCE_IP_PORT"}

func (c *LoadBalancerConfig) defaults() {
	if c.ClusterName == "" {
		c.ClusterName = DefaultLBClusterName
	}
	if c.LBMethod == "" {
		c.LBMethod = DefaultLBMethod
	}
	if c.CreateMonitor == nil {
		on := true
		c.CreateMonitor = &on
	}
	for _, d := range []struct {
		v   *int
		def int
	}{{&c.MonitorDelay, 5}, {&c.MonitorTimeout, 3}, {&c.MonitorMaxRetries, 1}, {&c.MonitorMaxRetriesDown, 3}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
}

func (c *LoadBalancerConfig) validate() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("loadBalancer."+format, args...)) }
	for _, f := range []struct{ name, v string }{{"subnetID", c.SubnetID}, {"networkID", c.NetworkID}, {"memberSubnetID", c.MemberSubnetID},
		{"floatingNetworkID", c.FloatingNetworkID}, {"floatingSubnetID", c.FloatingSubnetID}, {"flavorID", c.FlavorID}} {
		if f.v != "" && !isUUID(f.v) {
			bad("%s %q: want a UUID", f.name, f.v)
		}
	}
	if c.FloatingSubnetID != "" && c.FloatingNetworkID == "" {
		bad("floatingSubnetID needs floatingNetworkID (the network the subnet is of)")
	}
	if strings.ContainsAny(c.ClusterName, " \t\n/") || len(c.ClusterName) > 200 {
		bad("clusterName %q: want the upstream CCM's --cluster-name, without white space or '/'", c.ClusterName)
	}
	if !contains(lbMethods, c.LBMethod) {
		bad("lbMethod %q: want one of %s", c.LBMethod, strings.Join(lbMethods, ", "))
	}
	if strings.ContainsFunc(c.Provider, isSpaceOrControl) || strings.ContainsFunc(c.AvailabilityZone, isSpaceOrControl) {
		bad("provider and availabilityZone: no white space")
	}
	if c.MonitorDelay < 1 || c.MonitorTimeout < 1 || c.MonitorTimeout > c.MonitorDelay {
		bad("monitorDelay %d, monitorTimeout %d: want seconds, at least 1, the timeout at most the delay", c.MonitorDelay, c.MonitorTimeout)
	}
	if c.MonitorMaxRetries < 1 || c.MonitorMaxRetries > 10 || c.MonitorMaxRetriesDown < 1 || c.MonitorMaxRetriesDown > 10 {
		bad("monitorMaxRetries %d, monitorMaxRetriesDown %d: want 1 to 10 (Octavia's range)", c.MonitorMaxRetries, c.MonitorMaxRetriesDown)
	}
	return errs
}

func isUUID(s string) bool {
	_, err := uuid.Parse(s)
	return err == nil && len(s) == 36
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
