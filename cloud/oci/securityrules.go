package oci

// The seam of security rules: RuleSet and SecurityRules, the modes and
// the annotations that choose them, the checks of a RuleSet, Ensure and
// Remove (which dispatch to the security lists of securitylists.go or the
// NSGs of securitygroups.go under one lock), and the TCP rule helpers
// both share.

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/oracle/oci-go-sdk/v65/common"
	"github.com/oracle/oci-go-sdk/v65/core"
	v1 "k8s.io/api/core/v1"
)

// Security rule modes of a Service's load balancer, as OCI's CCM names
// them (its security-list-management-mode values; NSG from
// security-rule-management-mode).
const (
	// RuleModeAll: the LB subnets' security list admits the sources on the
	// listener ports and lets the LB reach the node subnets on the node
	// ports and the health check port; the node subnets' list admits the
	// LB subnets on those ports.
	RuleModeAll = "All"
	// RuleModeFrontend: only the LB subnets' ingress from the sources.
	RuleModeFrontend = "Frontend"
	// RuleModeNSG: a frontend NSG per Service (attached to the LB) and
	// rules in it and in the backend NSGs; no security list is touched.
	RuleModeNSG = "NSG"
	// RuleModeNone: nothing is managed.
	RuleModeNone = "None"
)

// The annotations that choose a Service's mode (OCI's CCM's).
const (
	AnnotationRuleMode    = "oci.oraclecloud.com/security-rule-management-mode"
	AnnotationLBListMode  = "service.beta.kubernetes.io/oci-load-balancer-security-list-management-mode"
	AnnotationNLBListMode = "oci-network-load-balancer.oraclecloud.com/security-list-management-mode"
	// AnnotationBackendNSGs names the backend (node) NSGs whose ingress
	// rules mode NSG manages: OCIDs, comma separated.
	AnnotationBackendNSGs = "oci.oraclecloud.com/oci-backend-network-security-group"
)

// RulePort is one port of a Service: its listener (Service) port, its
// node port and its protocol (TCP or UDP).
type RulePort struct {
	Listener, NodePort int32
	Protocol           string
}

// RuleSet is what a Service's load balancer needs of the network's
// security rules.
type RuleSet struct {
	// UID is the Service's UID: NSG rules carry it in their description
	// (service-uid-<UID>), the frontend NSG in its tags.
	UID string
	// Mode is one of the RuleMode* values (RuleMode maps the annotations).
	Mode string
	// LBSubnets are the load balancer's subnets' OCIDs; NodeSubnets the
	// nodes' subnets' OCIDs (modes All and Frontend).
	LBSubnets, NodeSubnets []string
	// SourceCIDRs are the sources the listeners admit (the Service's
	// loadBalancerSourceRanges; 0.0.0.0/0 when it has none).
	SourceCIDRs []string
	// Ports are the Service's ports.
	Ports []RulePort
	// HealthCheckPort is the port the LB's health checks reach on the
	// nodes (10256, or the Service's healthCheckNodePort).
	HealthCheckPort int32
	// BackendNSGs are the backend NSGs of AnnotationBackendNSGs (mode NSG).
	BackendNSGs []string
	// FrontendNSG is the Service's frontend NSG when known (one of the
	// LB's NSGs); "" lets Ensure find it by name or make it.
	FrontendNSG string

	// Namespace and Name are the Service's: the frontend NSG's display
	// name is <Namespace>/<Name>/<UID>/nsg, as OCI's CCM names it.
	Namespace, Name string
	// Compartment is where the frontend NSG is made (the LB's).
	Compartment string
	// PreserveSource: the NLB keeps clients' addresses, so the nodes
	// admit SourceCIDRs on the node ports too.
	PreserveSource bool
	// HeldPorts and HeldHealthCheckPort are what the load balancer holds
	// now (its listeners' ports, its backends' node ports, its health
	// checks' port), when it differs from Ports: modes All and Frontend
	// remove the rules of those the Service no longer has (security list
	// rules carry no owner; NSG rules carry the Service's UID and need
	// none of this).
	HeldPorts           []RulePort
	HeldHealthCheckPort int32
}

// SecurityRules manages the security list and NSG rules of Services'
// load balancers, as OCI's CCM does, through Virtual Network. One process
// makes one: its changes are serialised.
type SecurityRules struct {
	network *core.VirtualNetworkClient
	// services lists the cluster's Services, to tell whether a shared
	// rule (a listener port or the health check port) is still another
	// Service's; nil or failing: such rules are kept.
	services func(ctx context.Context) ([]*v1.Service, error)
	mu       sync.Mutex
}

// NewSecurityRules manages rules through network (a client NewWithClients
// configured); services lists the cluster's Services (may be nil: shared
// rules are then never removed).
func NewSecurityRules(network *core.VirtualNetworkClient, services func(ctx context.Context) ([]*v1.Service, error)) *SecurityRules {
	return &SecurityRules{network: network, services: services}
}

// SetServices sets the lister of the cluster's Services (see
// NewSecurityRules).
func (s *SecurityRules) SetServices(services func(ctx context.Context) ([]*v1.Service, error)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.services = services
}

// RuleMode maps a Service's mode annotation to a RuleMode* value:
// annotation is the value of AnnotationRuleMode (SL-All, SL-Frontend, NSG,
// None: case-insensitive as OCI's CCM reads them) or, when that is not
// set, of the type's security-list annotation (All, Frontend, None), ""
// when neither is set; lbType is "lb" or "nlb". The defaults are OCI's
// CCM's: All for lb, None for nlb. A value of neither set is an error
// (OCI's CCM takes an unknown LB value as All; mooring says so instead).
func RuleMode(annotation, lbType string) (string, error) {
	nlb := strings.EqualFold(lbType, "nlb")
	switch v := strings.TrimSpace(annotation); {
	case v == "" && nlb:
		return RuleModeNone, nil
	case v == "":
		return RuleModeAll, nil
	case strings.EqualFold(v, "SL-All") || v == RuleModeAll:
		return RuleModeAll, nil
	case strings.EqualFold(v, "SL-Frontend") || v == RuleModeFrontend:
		return RuleModeFrontend, nil
	case strings.EqualFold(v, RuleModeNSG):
		return RuleModeNSG, nil
	case v == RuleModeNone:
		return RuleModeNone, nil
	}
	return "", fmt.Errorf("security rule mode %q: want SL-All, SL-Frontend, NSG or None (%s), or All, Frontend or None (the security-list-management-mode annotations)", annotation, AnnotationRuleMode)
}

// RuleModeOf reads a Service's mode from its annotations (AnnotationRuleMode,
// else the type's security-list annotation) with RuleMode; the error names
// the annotation.
func RuleModeOf(annotations map[string]string, lbType string) (string, error) {
	key := AnnotationLBListMode
	if strings.EqualFold(lbType, "nlb") {
		key = AnnotationNLBListMode
	}
	if v, ok := annotations[AnnotationRuleMode]; ok {
		t := strings.TrimSpace(v)
		if !strings.EqualFold(t, "SL-All") && !strings.EqualFold(t, "SL-Frontend") && !strings.EqualFold(t, RuleModeNSG) && t != RuleModeNone {
			return "", fmt.Errorf("%s %q: want SL-All, SL-Frontend, NSG or None", AnnotationRuleMode, v)
		}
		return RuleMode(t, lbType)
	}
	v, ok := annotations[key]
	if !ok {
		return RuleMode("", lbType)
	}
	if t := strings.TrimSpace(v); t != RuleModeAll && t != RuleModeFrontend && t != RuleModeNone {
		return "", fmt.Errorf("%s %q: want All, Frontend or None", key, v)
	}
	return RuleMode(v, lbType)
}

// BackendNSGsOf reads AnnotationBackendNSGs as OCI's CCM does: spaces
// dropped, duplicates dropped, an empty item an error.
func BackendNSGsOf(annotations map[string]string) ([]string, error) {
	v := annotations[AnnotationBackendNSGs]
	if v == "" {
		return nil, nil
	}
	var out []string
	for _, id := range strings.Split(strings.ReplaceAll(v, " ", ""), ",") {
		switch {
		case id == "":
			return nil, fmt.Errorf("%s %q: an empty NSG OCID", AnnotationBackendNSGs, v)
		case !strings.HasPrefix(id, "ocid1.networksecuritygroup."):
			return nil, fmt.Errorf("%s: %q is not an NSG's OCID", AnnotationBackendNSGs, id)
		case !slices.Contains(out, id):
			out = append(out, id)
		}
	}
	return out, nil
}

// Rule facts of OCI's CCM.
const (
	// protocolTCP is the IANA number of TCP, as rules name it: OCI's CCM
	// makes TCP rules only.
	protocolTCP = "6"
	// nsgBatch is how many NSG rules one add or remove sends.
	nsgBatch = 25
	// maxNSGName is the longest NSG display name.
	maxNSGName = 255
	// listAttempts bounds the read-modify-writes of one security list
	// that lose to a concurrent writer (412 NoEtagMatch).
	listAttempts = 4
)

// rulesMu serialises every change of security rules in the process (OCI's
// CCM holds one lock over them too): two Services' read-modify-writes of
// one list never race here; other writers are caught by the ETag.
var rulesMu sync.Mutex

// ProtocolErr refuses a port other than TCP in a mode that manages rules:
// OCI's CCM makes TCP rules only, and refuses UDP ports unless the mode is
// None; so does mooring, before anything is made (call it where the
// Service is read).
func (rs RuleSet) ProtocolErr() error {
	if rs.Mode == RuleModeNone {
		return nil
	}
	for _, p := range rs.Ports {
		if !isTCP(p) {
			return fmt.Errorf("port %d is %s: security rule mode %s manages TCP rules only, as OCI's CCM; a UDP port needs mode None (%s)",
				p.Listener, p.Protocol, rs.Mode, AnnotationRuleMode)
		}
	}
	return nil
}

func isTCP(p RulePort) bool {
	return p.Protocol == "" || strings.EqualFold(p.Protocol, string(v1.ProtocolTCP))
}

func (rs RuleSet) check() error {
	var errs []error
	switch rs.Mode {
	case RuleModeAll, RuleModeFrontend, RuleModeNSG, RuleModeNone:
	default:
		errs = append(errs, fmt.Errorf("mode %q: want %s, %s, %s or %s", rs.Mode, RuleModeAll, RuleModeFrontend, RuleModeNSG, RuleModeNone))
	}
	if rs.UID == "" {
		errs = append(errs, errors.New("the Service's UID is required"))
	}
	if rs.Mode == RuleModeNone {
		return errors.Join(errs...)
	}
	if err := rs.ProtocolErr(); err != nil {
		errs = append(errs, err)
	}
	for _, p := range append(slices.Clone(rs.Ports), rs.HeldPorts...) {
		if p.Listener < 1 || p.Listener > 65535 || p.NodePort < 0 || p.NodePort > 65535 {
			errs = append(errs, fmt.Errorf("port %d (node port %d): out of range", p.Listener, p.NodePort))
		}
	}
	for _, c := range rs.SourceCIDRs {
		if _, err := netip.ParsePrefix(c); err != nil {
			errs = append(errs, fmt.Errorf("source %q: not a CIDR block", c))
		}
	}
	switch rs.Mode {
	case RuleModeAll:
		if len(rs.LBSubnets) == 0 || len(rs.NodeSubnets) == 0 {
			errs = append(errs, errors.New("mode All needs the load balancer's and the nodes' subnets"))
		}
	case RuleModeFrontend:
		if len(rs.LBSubnets) == 0 {
			errs = append(errs, errors.New("mode Frontend needs the load balancer's subnets"))
		}
	case RuleModeNSG:
		if rs.FrontendNSG == "" && (len(rs.LBSubnets) == 0 || rs.Compartment == "") {
			errs = append(errs, errors.New("mode NSG needs the load balancer's subnet (its VCN) and compartment to find or make the frontend NSG"))
		}
	}
	return errors.Join(errs...)
}

// Ensure makes the rules of rs's mode and removes this Service's rules it
// no longer needs (of HeldPorts, of sources it no longer has; NSG rules by
// their description); it answers the frontend NSG in mode NSG (made when
// there is none), to attach to the load balancer, else "". It fails
// closed: everything is read before anything is written, an error stops
// it, and a rule another Service may still need (a listener port or the
// health check port another LoadBalancer Service has) is kept.
func (s *SecurityRules) Ensure(ctx context.Context, rs RuleSet) (frontendNSG string, err error) {
	if err := rs.check(); err != nil {
		return "", fmt.Errorf("oci security rules of Service %s/%s: %w", rs.Namespace, rs.Name, err)
	}
	rulesMu.Lock()
	defer rulesMu.Unlock()
	switch rs.Mode {
	case RuleModeAll, RuleModeFrontend:
		return "", s.syncLists(ctx, rs, false)
	case RuleModeNSG:
		return s.ensureNSG(ctx, rs)
	}
	return "", nil
}

// Remove removes the rules of rs's mode that are this Service's (those of
// Ports and HeldPorts; in mode NSG those of its description, and its
// frontend NSG, which the load balancer must no longer hold). Shared rules
// another LoadBalancer Service may need stay.
func (s *SecurityRules) Remove(ctx context.Context, rs RuleSet) error {
	if err := rs.check(); err != nil {
		return fmt.Errorf("oci security rules of Service %s/%s: %w", rs.Namespace, rs.Name, err)
	}
	rulesMu.Lock()
	defer rulesMu.Unlock()
	switch rs.Mode {
	case RuleModeAll, RuleModeFrontend:
		return s.syncLists(ctx, rs, true)
	case RuleModeNSG:
		return s.removeNSG(ctx, rs)
	}
	return nil
}

// DefaultHealthCheckPort is kube-proxy's health port, which load
// balancers of Services of externalTrafficPolicy Cluster check.
const DefaultHealthCheckPort = 10256

// tcpPort is the port of a TCP rule to one destination port from any
// source port, as OCI's CCM makes them; ok false for any other rule.
func tcpPort(protocol *string, tcp *core.TcpOptions) (int, bool) {
	if deref(protocol) != protocolTCP || tcp == nil || tcp.SourcePortRange != nil || tcp.DestinationPortRange == nil ||
		tcp.DestinationPortRange.Min == nil || tcp.DestinationPortRange.Max == nil || *tcp.DestinationPortRange.Min != *tcp.DestinationPortRange.Max {
		return 0, false
	}
	return *tcp.DestinationPortRange.Min, true
}

func portRange(port int) *core.TcpOptions {
	return &core.TcpOptions{DestinationPortRange: &core.PortRange{Min: common.Int(port), Max: common.Int(port)}}
}
