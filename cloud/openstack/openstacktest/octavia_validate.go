package openstacktest

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// The request bodies Octavia takes (read strictly: a field it lacks is a
// 400), and their checks, with Octavia's messages.

type monitorBody struct {
	PoolID         string          `json:"pool_id"`
	Type           string          `json:"type"`
	Delay          *int            `json:"delay"`
	Timeout        *int            `json:"timeout"`
	MaxRetries     *int            `json:"max_retries"`
	MaxRetriesDown *int            `json:"max_retries_down"`
	URLPath        *string         `json:"url_path"`
	HTTPMethod     *string         `json:"http_method"`
	HTTPVersion    json.RawMessage `json:"http_version"`
	ExpectedCodes  *string         `json:"expected_codes"`
	DomainName     *string         `json:"domain_name"`
	Name           *string         `json:"name"`
	AdminStateUp   *bool           `json:"admin_state_up"`
	Tags           []string        `json:"tags"`
	ProjectID      string          `json:"project_id"`
	TenantID       string          `json:"tenant_id"`
}

type memberBody struct {
	Address        string   `json:"address"`
	ProtocolPort   *int     `json:"protocol_port"`
	Name           *string  `json:"name"`
	Weight         *int     `json:"weight"`
	SubnetID       *string  `json:"subnet_id"`
	AdminStateUp   *bool    `json:"admin_state_up"`
	Backup         *bool    `json:"backup"`
	MonitorAddress *string  `json:"monitor_address"`
	MonitorPort    *int     `json:"monitor_port"`
	Tags           []string `json:"tags"`
	ProjectID      string   `json:"project_id"`
}

type persistenceBody struct {
	Type       string `json:"type"`
	CookieName string `json:"cookie_name"`
}

type poolBody struct {
	LBAlgorithm        string           `json:"lb_algorithm"`
	Protocol           string           `json:"protocol"`
	LoadbalancerID     string           `json:"loadbalancer_id"`
	ListenerID         string           `json:"listener_id"`
	Name               *string          `json:"name"`
	Description        *string          `json:"description"`
	SessionPersistence *persistenceBody `json:"session_persistence"`
	AdminStateUp       *bool            `json:"admin_state_up"`
	Members            []memberBody     `json:"members"`
	HealthMonitor      *monitorBody     `json:"healthmonitor"`
	Tags               *[]string        `json:"tags"`
	ProjectID          string           `json:"project_id"`
	TLSEnabled         *bool            `json:"tls_enabled"`
}

type listenerBody struct {
	LoadbalancerID       string             `json:"loadbalancer_id"`
	Protocol             string             `json:"protocol"`
	ProtocolPort         *int               `json:"protocol_port"`
	Name                 *string            `json:"name"`
	Description          *string            `json:"description"`
	DefaultPoolID        *string            `json:"default_pool_id"`
	DefaultPool          *poolBody          `json:"default_pool"`
	ConnectionLimit      *int               `json:"connection_limit"`
	AdminStateUp         *bool              `json:"admin_state_up"`
	TimeoutClientData    *int               `json:"timeout_client_data"`
	TimeoutMemberConnect *int               `json:"timeout_member_connect"`
	TimeoutMemberData    *int               `json:"timeout_member_data"`
	TimeoutTCPInspect    *int               `json:"timeout_tcp_inspect"`
	InsertHeaders        *map[string]string `json:"insert_headers"`
	AllowedCIDRs         *[]string          `json:"allowed_cidrs"`
	Tags                 *[]string          `json:"tags"`
	ProjectID            string             `json:"project_id"`
}

type lbBody struct {
	Name             *string        `json:"name"`
	Description      *string        `json:"description"`
	VIPPortID        string         `json:"vip_port_id"`
	VIPSubnetID      string         `json:"vip_subnet_id"`
	VIPNetworkID     string         `json:"vip_network_id"`
	VIPAddress       string         `json:"vip_address"`
	VIPQoSPolicyID   *string        `json:"vip_qos_policy_id"`
	ProjectID        string         `json:"project_id"`
	AdminStateUp     *bool          `json:"admin_state_up"`
	FlavorID         string         `json:"flavor_id"`
	AvailabilityZone string         `json:"availability_zone"`
	Provider         string         `json:"provider"`
	Listeners        []listenerBody `json:"listeners"`
	Pools            []poolBody     `json:"pools"`
	Tags             *[]string      `json:"tags"`
}

// Valid values (Octavia's constants).
var (
	listenerProtocols = []string{"HTTP", "HTTPS", "TCP", "TERMINATED_HTTPS", "UDP", "SCTP", "PROMETHEUS"}
	// poolProtocols are the pool protocols each listener protocol takes.
	poolProtocols = map[string][]string{
		"TCP": {"HTTP", "HTTPS", "PROXY", "PROXYV2", "TCP"}, "HTTP": {"HTTP", "PROXY", "PROXYV2"},
		"HTTPS": {"HTTPS", "PROXY", "PROXYV2", "TCP"}, "TERMINATED_HTTPS": {"HTTP", "PROXY", "PROXYV2"},
		"UDP": {"UDP"}, "SCTP": {"SCTP"},
	}
	algorithms       = []string{"ROUND_ROBIN", "LEAST_CONNECTIONS", "SOURCE_IP", "SOURCE_IP_PORT"}
	persistenceTypes = []string{"SOURCE_IP", "HTTP_COOKIE", "APP_COOKIE"}
	monitorTypes     = []string{"HTTP", "HTTPS", "PING", "SCTP", "TCP", "TLS-HELLO", "UDP-CONNECT"}
	httpMethods      = []string{"GET", "HEAD", "POST", "PUT", "DELETE", "TRACE", "OPTIONS", "PATCH", "CONNECT"}
)

// DefaultLBFlavorID is the one Octavia flavor the endpoint has.
const DefaultLBFlavorID = "a7ae5d5a-d855-4f9a-b187-af66b53f4d04"

// maxTimeout is the longest listener timeout, in milliseconds (24 days).
const maxTimeout = 24 * 24 * 60 * 60 * 1000

// badRequest is Octavia's 400 with its message.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func invalid(format string, args ...any) *apiError {
	return &apiError{400, "Validation failure: " + fmt.Sprintf(format, args...)}
}

func notOption(value, field string) *apiError {
	return &apiError{400, fmt.Sprintf("Invalid input for field/attribute %s. Value: '%s'. Value should be one of the valid options", field, value)}
}

func checkName(what string, s *string) *apiError {
	if s != nil && len(*s) > 255 {
		return invalid("%s name is longer than 255 characters", what)
	}
	return nil
}

func checkTags(tags []string) *apiError {
	for _, t := range tags {
		if len(t) > 255 {
			return invalid("tag %q is longer than 255 characters", t)
		}
	}
	return nil
}

func intRange(field string, v *int, lo, hi int) *apiError {
	if v != nil && (*v < lo || *v > hi) {
		return &apiError{400, fmt.Sprintf("Invalid input for field/attribute %s. Value: '%d'. Value should be between %d and %d", field, *v, lo, hi)}
	}
	return nil
}

func or[T any](p *T, def T) T {
	if p != nil {
		return *p
	}
	return def
}

// monitor reads a health monitor of a pool of protocol.
func (b *monitorBody) monitor(poolProtocol string) (*Monitor, *apiError) {
	if !slices.Contains(monitorTypes, b.Type) {
		return nil, notOption(b.Type, "type")
	}
	if b.Delay == nil || b.Timeout == nil || b.MaxRetries == nil {
		return nil, invalid("a health monitor needs delay, timeout and max_retries")
	}
	for _, e := range []*apiError{intRange("delay", b.Delay, 0, 2147483647), intRange("timeout", b.Timeout, 0, 2147483647),
		intRange("max_retries", b.MaxRetries, 1, 10), intRange("max_retries_down", b.MaxRetriesDown, 1, 10), checkName("health monitor", b.Name), checkTags(b.Tags)} {
		if e != nil {
			return nil, e
		}
	}
	if poolProtocol == "UDP" && b.Type != "UDP-CONNECT" && b.Type != "HTTP" && b.Type != "TCP" {
		return nil, invalid("the pool protocol UDP takes UDP-CONNECT, HTTP or TCP health monitors")
	}
	if b.Type == "UDP-CONNECT" && poolProtocol != "UDP" {
		return nil, invalid("the health monitor type UDP-CONNECT is for UDP pools only")
	}
	if b.Type == "UDP-CONNECT" && *b.Delay < 3 {
		return nil, invalid("The request delay value 1 should be larger than 3 for UDP-CONNECT health monitor type")
	}
	m := &Monitor{Name: or(b.Name, ""), Type: b.Type, Delay: *b.Delay, Timeout: *b.Timeout, MaxRetries: *b.MaxRetries, MaxRetriesDown: or(b.MaxRetriesDown, 3)}
	if b.Type == "HTTP" || b.Type == "HTTPS" {
		m.HTTPMethod, m.URLPath, m.ExpectedCodes = or(b.HTTPMethod, "GET"), or(b.URLPath, "/"), or(b.ExpectedCodes, "200")
		if !slices.Contains(httpMethods, m.HTTPMethod) {
			return nil, notOption(m.HTTPMethod, "http_method")
		}
		if !strings.HasPrefix(m.URLPath, "/") {
			return nil, invalid("URL path %s must start with /", m.URLPath)
		}
	} else if b.URLPath != nil || b.HTTPMethod != nil || b.ExpectedCodes != nil {
		return nil, invalid("url_path, http_method and expected_codes are for HTTP and HTTPS health monitors")
	}
	return m, nil
}

// member reads a member.
func (b *memberBody) member() (Member, *apiError) {
	a, err := netip.ParseAddr(b.Address)
	if err != nil {
		return Member{}, &apiError{400, fmt.Sprintf("Invalid input for field/attribute address. Value: '%s'. Value should be IPv4 or IPv6 format", b.Address)}
	}
	if !a.IsLoopback() {
		return Member{}, invalid("openstacktest: member address %s is not a loopback address (the data plane reaches members on loopback only)", a)
	}
	if b.ProtocolPort == nil {
		return Member{}, invalid("a member needs protocol_port")
	}
	for _, e := range []*apiError{intRange("protocol_port", b.ProtocolPort, 1, 65535), intRange("weight", b.Weight, 0, 256),
		intRange("monitor_port", b.MonitorPort, 1, 65535), checkName("member", b.Name), checkTags(b.Tags)} {
		if e != nil {
			return Member{}, e
		}
	}
	if sub := or(b.SubnetID, ""); sub != "" && sub != DefaultSubnetID {
		return Member{}, &apiError{400, fmt.Sprintf("Subnet %s not found.", sub)}
	}
	if b.MonitorAddress != nil && *b.MonitorAddress != "" {
		return Member{}, invalid("openstacktest: monitor_address is not modelled")
	}
	return Member{Name: or(b.Name, ""), Address: a.String(), Port: *b.ProtocolPort, SubnetID: or(b.SubnetID, ""),
		Weight: or(b.Weight, 1), MonitorPort: or(b.MonitorPort, 0), Tags: b.Tags}, nil
}

// members reads a pool's members: no (address, port) twice.
func members(bs []memberBody) ([]Member, *apiError) {
	var out []Member
	for _, mb := range bs {
		m, err := mb.member()
		if err != nil {
			return nil, err
		}
		for _, o := range out {
			if o.Address == m.Address && o.Port == m.Port {
				return nil, &apiError{409, fmt.Sprintf("Another member on this pool is already using ip %s on protocol_port %d", m.Address, m.Port)}
			}
		}
		out = append(out, m)
	}
	return out, nil
}

// pool reads a pool of a listener of listenerProtocol ("" for a pool of
// the load balancer alone).
func (b *poolBody) pool(listenerProtocol string) (Pool, *apiError) {
	if !slices.Contains([]string{"HTTP", "HTTPS", "PROXY", "PROXYV2", "TCP", "UDP", "SCTP"}, b.Protocol) {
		return Pool{}, notOption(b.Protocol, "protocol")
	}
	if listenerProtocol != "" && !slices.Contains(poolProtocols[listenerProtocol], b.Protocol) {
		return Pool{}, invalid("The pool protocol '%s' is invalid while the listener protocol is '%s'.", b.Protocol, listenerProtocol)
	}
	if !slices.Contains(algorithms, b.LBAlgorithm) {
		return Pool{}, notOption(b.LBAlgorithm, "lb_algorithm")
	}
	if err := checkName("pool", b.Name); err != nil {
		return Pool{}, err
	}
	p := Pool{Name: or(b.Name, ""), Description: or(b.Description, ""), Protocol: b.Protocol, Algorithm: b.LBAlgorithm}
	if b.Tags != nil {
		if err := checkTags(*b.Tags); err != nil {
			return Pool{}, err
		}
		p.Tags = *b.Tags
	}
	if sp := b.SessionPersistence; sp != nil {
		if !slices.Contains(persistenceTypes, sp.Type) {
			return Pool{}, notOption(sp.Type, "session_persistence.type")
		}
		p.SessionPersistence = sp.Type
	}
	var err *apiError
	if p.Members, err = members(b.Members); err != nil {
		return Pool{}, err
	}
	if b.HealthMonitor != nil {
		if b.HealthMonitor.PoolID != "" {
			return Pool{}, invalid("a health monitor of a pool being made names no pool_id")
		}
		if p.Monitor, err = b.HealthMonitor.monitor(b.Protocol); err != nil {
			return Pool{}, err
		}
	}
	return p, nil
}

// timeouts and limits of a listener.
func checkListenerNumbers(b *listenerBody) *apiError {
	for _, e := range []*apiError{intRange("connection_limit", b.ConnectionLimit, -1, 2147483647),
		intRange("timeout_client_data", b.TimeoutClientData, 0, maxTimeout), intRange("timeout_member_connect", b.TimeoutMemberConnect, 0, maxTimeout),
		intRange("timeout_member_data", b.TimeoutMemberData, 0, maxTimeout), intRange("timeout_tcp_inspect", b.TimeoutTCPInspect, 0, maxTimeout),
		checkName("listener", b.Name)} {
		if e != nil {
			return e
		}
	}
	if b.AllowedCIDRs != nil {
		for _, s := range *b.AllowedCIDRs {
			if _, err := netip.ParsePrefix(s); err != nil {
				return &apiError{400, fmt.Sprintf("Invalid input for field/attribute allowed_cidrs. Value: '%s'. Value should be IPv4 or IPv6 CIDR format", s)}
			}
		}
	}
	if b.Tags != nil {
		if err := checkTags(*b.Tags); err != nil {
			return err
		}
	}
	if b.InsertHeaders != nil && len(*b.InsertHeaders) > 0 && b.Protocol != "" && b.Protocol != "HTTP" && b.Protocol != "TERMINATED_HTTPS" {
		return invalid("The following headers cannot be set on a %s listener: %v", b.Protocol, *b.InsertHeaders)
	}
	return nil
}

// listener reads a new listener (its default pool apart).
func (b *listenerBody) listener() (Listener, *apiError) {
	if !slices.Contains(listenerProtocols, b.Protocol) {
		return Listener{}, notOption(b.Protocol, "protocol")
	}
	if b.ProtocolPort == nil {
		return Listener{}, invalid("a listener needs protocol_port")
	}
	if err := intRange("protocol_port", b.ProtocolPort, 1, 65535); err != nil {
		return Listener{}, err
	}
	if err := checkListenerNumbers(b); err != nil {
		return Listener{}, err
	}
	ln := Listener{Name: or(b.Name, ""), Description: or(b.Description, ""), Protocol: b.Protocol, Port: *b.ProtocolPort,
		ConnectionLimit: or(b.ConnectionLimit, -1), TimeoutClientData: or(b.TimeoutClientData, 50000),
		TimeoutMemberConnect: or(b.TimeoutMemberConnect, 5000), TimeoutMemberData: or(b.TimeoutMemberData, 50000),
		TimeoutTCPInspect: or(b.TimeoutTCPInspect, 0)}
	if b.AllowedCIDRs != nil {
		ln.AllowedCIDRs = slices.Clone(*b.AllowedCIDRs)
	}
	if b.Tags != nil {
		ln.Tags = slices.Clone(*b.Tags)
	}
	return ln, nil
}

// l4 is the transport a listener protocol uses: TCP ports are shared by
// TCP, HTTP, HTTPS and TERMINATED_HTTPS.
func l4(protocol string) string {
	switch protocol {
	case "UDP", "SCTP":
		return protocol
	}
	return "TCP"
}

// portTaken is Octavia's 409 when l has a listener on protocol's
// transport and port.
func portTaken(l *LoadBalancer, protocol string, port int) *apiError {
	for _, o := range l.Listeners {
		if o.Port == port && l4(o.Protocol) == l4(protocol) {
			return &apiError{409, fmt.Sprintf("Another Listener on this Load Balancer is already using protocol %s and protocol_port %d", o.Protocol, port)}
		}
	}
	return nil
}

// graph reads a fully populated load balancer: its VIP, its listeners
// each with its (named) default pool.
func (b *lbBody) graph() (*LoadBalancer, *apiError) {
	if err := checkName("load balancer", b.Name); err != nil {
		return nil, err
	}
	switch {
	case b.VIPPortID == "" && b.VIPSubnetID == "" && b.VIPNetworkID == "":
		return nil, invalid("VIP must contain one of: vip_port_id, vip_network_id, vip_subnet_id.")
	case b.VIPPortID != "":
		return nil, invalid("openstacktest: vip_port_id is not modelled (give vip_subnet_id or vip_network_id)")
	case b.VIPSubnetID != "" && b.VIPSubnetID != DefaultSubnetID:
		return nil, &apiError{400, fmt.Sprintf("Validation failure: Subnet %s not found.", b.VIPSubnetID)}
	case b.VIPNetworkID != "" && b.VIPNetworkID != DefaultNetworkID:
		return nil, &apiError{400, fmt.Sprintf("Validation failure: Network %s not found.", b.VIPNetworkID)}
	case b.VIPAddress != "":
		return nil, invalid("openstacktest: vip_address is not modelled (the data plane picks VIPs)")
	case b.FlavorID != "" && b.FlavorID != DefaultLBFlavorID:
		return nil, invalid("Invalid flavor_id.")
	case b.AvailabilityZone != "" && b.AvailabilityZone != DefaultZone:
		return nil, invalid("Invalid availability_zone.")
	case b.Provider != "" && b.Provider != "amphora" && b.Provider != "ovn":
		return nil, &apiError{501, fmt.Sprintf("Provider '%s' is not enabled.", b.Provider)}
	case len(b.Pools) > 0:
		return nil, invalid("openstacktest: define pools as listeners' default_pool")
	}
	l := &LoadBalancer{Name: or(b.Name, ""), Description: or(b.Description, ""), VIPSubnetID: DefaultSubnetID, VIPNetworkID: DefaultNetworkID,
		FlavorID: b.FlavorID, AvailabilityZone: b.AvailabilityZone, Provider: b.Provider}
	if b.Tags != nil {
		if err := checkTags(*b.Tags); err != nil {
			return nil, err
		}
		l.Tags = slices.Clone(*b.Tags)
	}
	names := map[string]bool{}
	for _, lb := range b.Listeners {
		ln, err := lb.listener()
		if err != nil {
			return nil, err
		}
		if err := portTaken(l, ln.Protocol, ln.Port); err != nil {
			return nil, err
		}
		if lb.LoadbalancerID != "" || lb.DefaultPoolID != nil {
			return nil, invalid("a listener of a load balancer being made names no loadbalancer_id or default_pool_id")
		}
		if pb := lb.DefaultPool; pb != nil {
			if pb.Name == nil || *pb.Name == "" {
				return nil, invalid("Pools must be named when creating a fully populated loadbalancer.")
			}
			if names[*pb.Name] {
				return nil, invalid("Pool names must be unique when creating a fully populated loadbalancer.")
			}
			names[*pb.Name] = true
			p, err := pb.pool(ln.Protocol)
			if err != nil {
				return nil, err
			}
			p.ListenerID = "#" + fmt.Sprint(len(l.Listeners)) // tied once ids are given
			l.Pools = append(l.Pools, p)
		}
		l.Listeners = append(l.Listeners, ln)
	}
	return l, nil
}
