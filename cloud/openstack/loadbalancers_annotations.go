package openstack

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/mooring-dev/mooring/cloud/kit/loadbalancer"
)

// The Service annotations of cloud-provider-openstack's load balancers
// that mooring reads (docs/openstack.md has the table). Any other under
// these prefixes is an error: mistyped, or one mooring does not support.
const (
	AnnotationPrefix       = "loadbalancer.openstack.org/"
	LegacyAnnotationPrefix = "service.beta.kubernetes.io/openstack-"

	AnnotationInternal            = LegacyAnnotationPrefix + "internal-load-balancer"
	AnnotationLoadBalancerID      = AnnotationPrefix + "load-balancer-id"
	AnnotationLoadBalancerAddress = AnnotationPrefix + "load-balancer-address"
	AnnotationHostname            = AnnotationPrefix + "hostname"
	AnnotationFloatingNetworkID   = AnnotationPrefix + "floating-network-id"
	AnnotationFloatingSubnetID    = AnnotationPrefix + "floating-subnet-id"
	AnnotationSubnetID            = AnnotationPrefix + "subnet-id"
	AnnotationNetworkID           = AnnotationPrefix + "network-id"
	AnnotationMemberSubnetID      = AnnotationPrefix + "member-subnet-id"
	AnnotationConnectionLimit     = AnnotationPrefix + "connection-limit"
	AnnotationKeepFloatingIP      = AnnotationPrefix + "keep-floatingip"
	AnnotationProxyProtocol       = AnnotationPrefix + "proxy-protocol"
	AnnotationLBMethod            = AnnotationPrefix + "lb-method"
	AnnotationTimeoutClientData   = AnnotationPrefix + "timeout-client-data"
	AnnotationTimeoutMemberConn   = AnnotationPrefix + "timeout-member-connect"
	AnnotationTimeoutMemberData   = AnnotationPrefix + "timeout-member-data"
	AnnotationTimeoutTCPInspect   = AnnotationPrefix + "timeout-tcp-inspect"
	AnnotationEnableMonitor       = AnnotationPrefix + "enable-health-monitor"
	AnnotationMonitorDelay        = AnnotationPrefix + "health-monitor-delay"
	AnnotationMonitorTimeout      = AnnotationPrefix + "health-monitor-timeout"
	AnnotationMonitorMaxRetries   = AnnotationPrefix + "health-monitor-max-retries"
	AnnotationMonitorRetriesDown  = AnnotationPrefix + "health-monitor-max-retries-down"
	AnnotationFlavorID            = AnnotationPrefix + "flavor-id"
	AnnotationAvailabilityZone    = AnnotationPrefix + "availability-zone"
)

// maxListenerTimeout is Octavia's longest listener timeout (ms).
const maxListenerTimeout = 24 * 24 * 60 * 60 * 1000

// lbSpec is an Octavia load balancer in normal form: its listeners (each
// with its default pool, members and monitor), whether a floating IP is
// on its VIP, and whether that is kept when it goes. What only a
// creation sets is in create, out of the fingerprint.
type lbSpec struct {
	Listeners []lbListener `json:"listeners"`
	Public    bool         `json:"public"`
	KeepFIP   bool         `json:"keepFloatingIP"`

	create lbCreate
}

// lbCreate is what a load balancer is made with and not changed after.
type lbCreate struct {
	SubnetID, NetworkID                 string
	FloatingNetworkID, FloatingSubnetID string
	FloatingIP                          string // spec.loadBalancerIP: an existing floating IP to use
	FlavorID, AvailabilityZone          string
	Provider                            string
	Hostname                            string
	Namespace, Service                  string
}

type lbListener struct {
	Protocol        string     `json:"protocol"` // TCP or UDP
	Port            int        `json:"port"`
	ConnectionLimit int        `json:"connectionLimit"`
	Timeouts        [4]int     `json:"timeouts"` // client data, member connect, member data, tcp inspect (ms)
	AllowedCIDRs    []string   `json:"allowedCIDRs,omitempty"`
	PoolProtocol    string     `json:"poolProtocol"` // TCP, UDP, PROXY or PROXYV2
	Algorithm       string     `json:"algorithm"`
	Persistence     string     `json:"persistence,omitempty"`
	Members         []lbMember `json:"members"`
	Monitor         *lbMonitor `json:"monitor,omitempty"`
}

type lbMember struct {
	Name        string `json:"name"`
	Address     string `json:"address"`
	Port        int    `json:"port"`
	SubnetID    string `json:"subnetID,omitempty"`
	MonitorPort int    `json:"monitorPort,omitempty"`
}

type lbMonitor struct {
	Type                                       string `json:"type"`
	Delay, Timeout, MaxRetries, MaxRetriesDown int
	HTTPMethod, URLPath, ExpectedCodes         string `json:",omitempty"`
}

func key(l lbListener) string { return fmt.Sprintf("%s/%d", l.Protocol, l.Port) }

// Desired reads svc and nodes: its ports as listeners, the nodes'
// addresses as members on each port's node port, its annotations.
func (l *lbCloud) Desired(_ context.Context, svc *v1.Service, nodes []*v1.Node) (lbSpec, error) {
	cfg := l.c.cfg.LoadBalancer
	a := loadbalancer.Read(svc, AnnotationPrefix, LegacyAnnotationPrefix)
	a.Known(AnnotationLoadBalancerID, AnnotationLoadBalancerAddress)
	var spec lbSpec
	cr := &spec.create
	cr.Namespace, cr.Service = svc.Namespace, svc.Name
	uuidOf := func(name, def string) string {
		v := a.String(name, def)
		if v != "" && !isUUID(v) {
			a.Fail(name, "a UUID")
			return ""
		}
		return v
	}
	internal := a.Bool(AnnotationInternal, cfg.Internal)
	// As the upstream CCM: a floating-network-id set empty means none.
	floating := cfg.FloatingNetworkID
	if a.Has(AnnotationFloatingNetworkID) {
		floating = uuidOf(AnnotationFloatingNetworkID, "")
	}
	cr.FloatingNetworkID = floating
	cr.FloatingSubnetID = uuidOf(AnnotationFloatingSubnetID, cfg.FloatingSubnetID)
	if cr.FloatingSubnetID != "" && floating == "" && !internal {
		a.Fail(AnnotationFloatingSubnetID, "a floating network as well (floating-network-id, or floatingNetworkID in the cloud config)")
	}
	spec.Public = !internal && floating != ""
	spec.KeepFIP = a.Bool(AnnotationKeepFloatingIP, false)
	cr.SubnetID = uuidOf(AnnotationSubnetID, cfg.SubnetID)
	cr.NetworkID = uuidOf(AnnotationNetworkID, cfg.NetworkID)
	memberSubnet := uuidOf(AnnotationMemberSubnetID, orElse(cfg.MemberSubnetID, cr.SubnetID))
	cr.FlavorID = uuidOf(AnnotationFlavorID, cfg.FlavorID)
	cr.AvailabilityZone = a.String(AnnotationAvailabilityZone, cfg.AvailabilityZone)
	cr.Provider = cfg.Provider
	cr.Hostname = a.String(AnnotationHostname, "")
	proxy := ""
	switch v := a.OneOf(AnnotationProxyProtocol, "false", "true", "v1", "v2", "false"); v {
	case "true", "v1":
		proxy = "PROXY"
	case "v2":
		proxy = "PROXYV2"
	}
	algorithm := a.OneOf(AnnotationLBMethod, cfg.LBMethod, lbMethods...)
	connLimit := a.Int(AnnotationConnectionLimit, -1, -1, 1<<31-1)
	timeouts := [4]int{a.Int(AnnotationTimeoutClientData, 50000, 0, maxListenerTimeout), a.Int(AnnotationTimeoutMemberConn, 5000, 0, maxListenerTimeout),
		a.Int(AnnotationTimeoutMemberData, 50000, 0, maxListenerTimeout), a.Int(AnnotationTimeoutTCPInspect, 0, 0, maxListenerTimeout)}
	monitorOn := a.Bool(AnnotationEnableMonitor, *cfg.CreateMonitor)
	delay := a.Int(AnnotationMonitorDelay, cfg.MonitorDelay, 1, 1<<31-1)
	timeout := a.Int(AnnotationMonitorTimeout, cfg.MonitorTimeout, 1, 1<<31-1)
	retries := a.Int(AnnotationMonitorMaxRetries, cfg.MonitorMaxRetries, 1, 10)
	retriesDown := a.Int(AnnotationMonitorRetriesDown, cfg.MonitorMaxRetriesDown, 1, 10)
	if err := a.Err(); err != nil {
		return lbSpec{}, err
	}
	name := svc.Namespace + "/" + svc.Name
	if cr.SubnetID == "" && cr.NetworkID == "" {
		return lbSpec{}, fmt.Errorf("service %s: no subnet for the load balancer's VIP: set loadBalancer.subnetID (or networkID) in the cloud config, or the annotation %s", name, AnnotationSubnetID)
	}
	if monitorOn && timeout > delay {
		return lbSpec{}, fmt.Errorf("service %s: annotation %s=%d is longer than %s=%d: a health check's timeout is at most its delay", name, AnnotationMonitorTimeout, timeout, AnnotationMonitorDelay, delay)
	}
	if ip := svc.Spec.LoadBalancerIP; ip != "" {
		if _, err := netip.ParseAddr(ip); err != nil || !spec.Public {
			return lbSpec{}, fmt.Errorf("service %s: spec.loadBalancerIP %q: want the address of a floating IP of the project, on a public load balancer", name, ip)
		}
		cr.FloatingIP = ip
	}
	ports, err := loadbalancer.Ports(svc, v1.ProtocolTCP, v1.ProtocolUDP)
	if err != nil {
		return lbSpec{}, err
	}
	ranges, err := loadbalancer.SourceRanges(svc)
	if err != nil {
		return lbSpec{}, err
	}
	hcPath, hcPort, local := loadbalancer.HealthCheckNodePort(svc)
	persistence := ""
	if svc.Spec.SessionAffinity == v1.ServiceAffinityClientIP {
		persistence = "SOURCE_IP"
	}
	targets := loadbalancer.Targets(nodes)
	for _, p := range ports {
		ln := lbListener{Protocol: string(p.Protocol), Port: int(p.Port), ConnectionLimit: connLimit, Timeouts: timeouts,
			AllowedCIDRs: ranges, PoolProtocol: string(p.Protocol), Algorithm: algorithm, Persistence: persistence}
		if proxy != "" {
			if p.Protocol != v1.ProtocolTCP {
				return lbSpec{}, fmt.Errorf("service %s: annotation %s: PROXY protocol is for TCP ports, and port %d is %s", name, AnnotationProxyProtocol, p.Port, p.Protocol)
			}
			ln.PoolProtocol = proxy
		}
		if monitorOn {
			m := &lbMonitor{Type: "TCP", Delay: delay, Timeout: timeout, MaxRetries: retries, MaxRetriesDown: retriesDown}
			if p.Protocol == v1.ProtocolUDP {
				m.Type = "UDP-CONNECT"
				if delay < 3 {
					return lbSpec{}, fmt.Errorf("service %s: annotation %s=%d: Octavia's UDP-CONNECT health monitors need a delay of at least 3 seconds", name, AnnotationMonitorDelay, delay)
				}
			}
			if local {
				m.Type, m.HTTPMethod, m.URLPath, m.ExpectedCodes = "HTTP", "GET", hcPath, "200"
			}
			ln.Monitor = m
		}
		for _, t := range targets {
			addr := t.Address()
			if addr == "" {
				continue
			}
			m := lbMember{Name: t.Node, Address: addr, Port: int(p.NodePort), SubnetID: memberSubnet}
			if monitorOn && local {
				m.MonitorPort = int(hcPort)
			}
			ln.Members = append(ln.Members, m)
		}
		sortMembers(ln.Members)
		spec.Listeners = append(spec.Listeners, ln)
	}
	return spec, nil
}

func orElse(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func sortMembers(ms []lbMember) {
	slices.SortFunc(ms, func(a, b lbMember) int {
		return strings.Compare(fmt.Sprintf("%s/%s/%05d", a.Name, a.Address, a.Port), fmt.Sprintf("%s/%s/%05d", b.Name, b.Address, b.Port))
	})
}
