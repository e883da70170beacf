package oci

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

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

// Ensure makes the rules of rs (its mode's) and removes those of its
// earlier ports and sources; it answers the frontend NSG (mode NSG), to
// attach to the load balancer.
func (s *SecurityRules) Ensure(ctx context.Context, rs RuleSet) (frontendNSG string, err error) {
	return "", errors.New("oci: security rules: not built yet")
}

// Remove removes the rules of rs (its mode's) and, in mode NSG, the
// frontend NSG, once the load balancer is gone.
func (s *SecurityRules) Remove(ctx context.Context, rs RuleSet) error {
	return errors.New("oci: security rules: not built yet")
}
