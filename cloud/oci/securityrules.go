package oci

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/oracle/oci-go-sdk/v65/common"
	"github.com/oracle/oci-go-sdk/v65/core"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
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

// NSGDisplayName is a Service's frontend NSG's display name:
// <namespace>/<name>/<uid>/nsg, cut to 255 characters, as OCI's CCM names
// it (so one it made is found).
func NSGDisplayName(namespace, name, uid string) string {
	n := fmt.Sprintf("%s/%s/%s/nsg", namespace, name, uid)
	if len(n) > maxNSGName {
		n = n[:maxNSGName]
	}
	return n
}

// ruleDescription is the description of a Service's NSG rules, as OCI's
// CCM writes it.
func ruleDescription(uid string) string { return "service-uid-" + uid }

// frontendTags are the freeform tags of a Service's frontend NSG, as OCI's
// CCM tags it: exactly these mark it the Service's.
func frontendTags(uid string) map[string]string {
	return map[string]string{"CreatedBy": "CCM", "ServiceUid": uid}
}

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

// ownedPorts are the Service's ports and the TCP ones the load balancer
// holds (a UDP port the Service had made no rule).
func (rs RuleSet) ownedPorts() []RulePort {
	out := slices.Clone(rs.Ports)
	for _, p := range rs.HeldPorts {
		if isTCP(p) {
			out = append(out, p)
		}
	}
	return out
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

// inUse is what other LoadBalancer Services use: listener ports, and the
// health check ports their load balancers reach the nodes on. known false
// when it could not be told: then every shared rule counts as used.
type inUse struct {
	known             bool
	listeners, health map[int32]bool
}

func (u inUse) listener(p int32) bool   { return !u.known || u.listeners[p] }
func (u inUse) healthPort(p int32) bool { return !u.known || u.health[p] }

// othersInUse asks the Services lister, as OCI's CCM asks its informer.
func (s *SecurityRules) othersInUse(ctx context.Context, uid string) inUse {
	s.mu.Lock()
	list := s.services
	s.mu.Unlock()
	if list == nil {
		return inUse{}
	}
	svcs, err := list(ctx)
	if err != nil {
		klog.ErrorS(err, "Listing Services to tell shared security rules: keeping them")
		return inUse{}
	}
	u := inUse{known: true, listeners: map[int32]bool{}, health: map[int32]bool{}}
	for _, svc := range svcs {
		if string(svc.UID) == uid || svc.DeletionTimestamp != nil || svc.Spec.Type != v1.ServiceTypeLoadBalancer {
			continue
		}
		for _, p := range svc.Spec.Ports {
			u.listeners[p.Port] = true
		}
		if svc.Spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal && svc.Spec.HealthCheckNodePort != 0 {
			u.health[svc.Spec.HealthCheckNodePort] = true
		} else {
			u.health[DefaultHealthCheckPort] = true
		}
	}
	return u
}

// DefaultHealthCheckPort is kube-proxy's health port, which load
// balancers of Services of externalTrafficPolicy Cluster check.
const DefaultHealthCheckPort = 10256

// ruleKey is a TCP single-port rule: its peer (source or destination)
// and port.
type ruleKey struct {
	peer string
	port int
}

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

// listPlan is what one security list is to hold of a Service: the rules
// wanted, and the ports whose other rules are this Service's to remove
// (false: a shared port whose rules stay).
type listPlan struct {
	wantIn, wantOut map[ruleKey]bool
	ownsIn, ownsOut map[int]bool
}

func newPlan() *listPlan {
	return &listPlan{wantIn: map[ruleKey]bool{}, wantOut: map[ruleKey]bool{}, ownsIn: map[int]bool{}, ownsOut: map[int]bool{}}
}

// own marks port's rules this Service's to remove, unless shared says
// another Service uses it (then they stay).
func own(m map[int]bool, port int32, shared bool) {
	if port <= 0 {
		return
	}
	if _, set := m[int(port)]; shared || !set {
		m[int(port)] = !shared && (!set || m[int(port)])
	}
}

// syncLists makes (or, with remove, takes away) a Service's rules in the
// security lists of its LB and node subnets (modes All and Frontend).
func (s *SecurityRules) syncLists(ctx context.Context, rs RuleSet, remove bool) error {
	lbSubnets, err := s.subnets(ctx, rs.LBSubnets, remove)
	if err != nil {
		return err
	}
	var nodeSubnets []core.Subnet
	if rs.Mode == RuleModeAll {
		if nodeSubnets, err = s.subnets(ctx, rs.NodeSubnets, remove); err != nil {
			return err
		}
	}
	used := s.othersInUse(ctx, rs.UID)
	plans := map[string]*listPlan{}
	planOf := func(sub core.Subnet) (*listPlan, error) {
		id, err := s.listOf(ctx, sub)
		if err != nil {
			return nil, err
		}
		if plans[id] == nil {
			plans[id] = newPlan()
		}
		return plans[id], nil
	}
	health := []int32{rs.HealthCheckPort, rs.HeldHealthCheckPort}
	for _, sub := range lbSubnets {
		p, err := planOf(sub)
		if err != nil {
			return err
		}
		for _, port := range rs.ownedPorts() {
			own(p.ownsIn, port.Listener, used.listener(port.Listener))
		}
		if !remove {
			for _, port := range rs.Ports {
				for _, src := range rs.SourceCIDRs {
					p.wantIn[ruleKey{src, int(port.Listener)}] = true
				}
			}
		}
		if rs.Mode != RuleModeAll {
			continue
		}
		for _, port := range rs.ownedPorts() {
			own(p.ownsOut, port.NodePort, false)
		}
		for _, h := range health {
			own(p.ownsOut, h, used.healthPort(h))
		}
		if !remove {
			for _, n := range nodeSubnets {
				for _, port := range rs.Ports {
					p.wantOut[ruleKey{deref(n.CidrBlock), int(port.NodePort)}] = true
				}
				if rs.HealthCheckPort > 0 {
					p.wantOut[ruleKey{deref(n.CidrBlock), int(rs.HealthCheckPort)}] = true
				}
			}
		}
	}
	for _, sub := range nodeSubnets {
		p, err := planOf(sub)
		if err != nil {
			return err
		}
		for _, port := range rs.ownedPorts() {
			own(p.ownsIn, port.NodePort, false)
		}
		for _, h := range health {
			own(p.ownsIn, h, used.healthPort(h))
		}
		if remove {
			continue
		}
		for _, lb := range lbSubnets {
			for _, port := range rs.Ports {
				p.wantIn[ruleKey{deref(lb.CidrBlock), int(port.NodePort)}] = true
			}
			if rs.HealthCheckPort > 0 {
				p.wantIn[ruleKey{deref(lb.CidrBlock), int(rs.HealthCheckPort)}] = true
			}
		}
		if rs.PreserveSource {
			for _, port := range rs.Ports {
				for _, src := range rs.SourceCIDRs {
					p.wantIn[ruleKey{src, int(port.NodePort)}] = true
				}
			}
		}
	}
	ids := make([]string, 0, len(plans))
	for id := range plans {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if err := s.applyList(ctx, id, plans[id], rs); err != nil {
			return err
		}
	}
	return nil
}

// subnets reads subnets; with gone (a removal), one OCI no longer has is
// left out (its rules went with it or are no longer reachable by it).
func (s *SecurityRules) subnets(ctx context.Context, ids []string, gone bool) ([]core.Subnet, error) {
	var out []core.Subnet
	for _, id := range ids {
		resp, err := s.network.GetSubnet(ctx, core.GetSubnetRequest{SubnetId: common.String(id)})
		if se, ok := common.IsServiceError(err); ok && gone && se.GetHTTPStatusCode() == http.StatusNotFound {
			klog.InfoS("Subnet not found: no security rules to remove there", "subnet", id)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("oci GetSubnet %s: %w", id, err)
		}
		if resp.CidrBlock == nil || len(resp.SecurityListIds) == 0 {
			return nil, fmt.Errorf("oci subnet %s: no IPv4 CIDR block or no security list", id)
		}
		out = append(out, resp.Subnet)
	}
	return out, nil
}

// listOf is the security list of a subnet whose rules are managed: the
// oldest one attached to it, as OCI's CCM picks it (of two made in the
// same millisecond, the lesser OCID).
func (s *SecurityRules) listOf(ctx context.Context, sub core.Subnet) (string, error) {
	if len(sub.SecurityListIds) == 1 {
		return sub.SecurityListIds[0], nil
	}
	var (
		best    string
		bestAge time.Time
	)
	for _, id := range sub.SecurityListIds {
		resp, err := s.network.GetSecurityList(ctx, core.GetSecurityListRequest{SecurityListId: common.String(id)})
		if err != nil {
			return "", fmt.Errorf("oci GetSecurityList %s (of subnet %s): %w", id, deref(sub.Id), err)
		}
		t := time.Time{}
		if resp.TimeCreated != nil {
			t = resp.TimeCreated.Time
		}
		if best == "" || t.Before(bestAge) || t.Equal(bestAge) && id < best {
			best, bestAge = id, t
		}
	}
	return best, nil
}

// applyList read-modify-writes one security list with p: the rules of
// p's owned ports that p does not want go, those it wants that are not
// there come; every other rule stays as it was. A write that loses to
// another writer (412 NoEtagMatch) is done again on the list as it is
// now.
func (s *SecurityRules) applyList(ctx context.Context, id string, p *listPlan, rs RuleSet) error {
	for attempt := 1; ; attempt++ {
		resp, err := s.network.GetSecurityList(ctx, core.GetSecurityListRequest{SecurityListId: common.String(id)})
		if err != nil {
			return fmt.Errorf("oci GetSecurityList %s: %w", id, err)
		}
		in, inChanged := planIngress(resp.IngressSecurityRules, p)
		out, outChanged := planEgress(resp.EgressSecurityRules, p)
		if !inChanged && !outChanged {
			return nil
		}
		_, err = s.network.UpdateSecurityList(ctx, core.UpdateSecurityListRequest{SecurityListId: common.String(id), IfMatch: resp.Etag,
			UpdateSecurityListDetails: core.UpdateSecurityListDetails{IngressSecurityRules: in, EgressSecurityRules: out}})
		se, isSE := common.IsServiceError(err)
		switch {
		case err == nil:
			klog.InfoS("Security list rules updated", "securityList", id, "service", rs.Namespace+"/"+rs.Name, "uid", rs.UID,
				"ingress", len(in), "egress", len(out))
			return nil
		case isSE && se.GetHTTPStatusCode() == http.StatusPreconditionFailed && attempt < listAttempts:
			klog.V(2).InfoS("Security list changed under the update: reading it again", "securityList", id, "attempt", attempt)
			continue
		}
		return fmt.Errorf("oci UpdateSecurityList %s: %w", id, err)
	}
}

func planIngress(rules []core.IngressSecurityRule, p *listPlan) ([]core.IngressSecurityRule, bool) {
	have := map[ruleKey]bool{}
	out := make([]core.IngressSecurityRule, 0, len(rules))
	changed := false
	for _, r := range rules {
		port, ok := tcpPort(r.Protocol, r.TcpOptions)
		k := ruleKey{deref(r.Source), port}
		if ok && r.SourceType != core.IngressSecurityRuleSourceTypeServiceCidrBlock && p.ownsIn[port] && !p.wantIn[k] {
			changed = true
			continue
		}
		if ok {
			have[k] = true
		}
		out = append(out, r)
	}
	for _, k := range sortedKeys(p.wantIn) {
		if !have[k] {
			changed = true
			out = append(out, core.IngressSecurityRule{Source: common.String(k.peer), Protocol: common.String(protocolTCP),
				TcpOptions: portRange(k.port), IsStateless: common.Bool(false)})
		}
	}
	return out, changed
}

func planEgress(rules []core.EgressSecurityRule, p *listPlan) ([]core.EgressSecurityRule, bool) {
	have := map[ruleKey]bool{}
	out := make([]core.EgressSecurityRule, 0, len(rules))
	changed := false
	for _, r := range rules {
		port, ok := tcpPort(r.Protocol, r.TcpOptions)
		k := ruleKey{deref(r.Destination), port}
		if ok && r.DestinationType != core.EgressSecurityRuleDestinationTypeServiceCidrBlock && p.ownsOut[port] && !p.wantOut[k] {
			changed = true
			continue
		}
		if ok {
			have[k] = true
		}
		out = append(out, r)
	}
	for _, k := range sortedKeys(p.wantOut) {
		if !have[k] {
			changed = true
			out = append(out, core.EgressSecurityRule{Destination: common.String(k.peer), Protocol: common.String(protocolTCP),
				TcpOptions: portRange(k.port), IsStateless: common.Bool(false)})
		}
	}
	return out, changed
}

func sortedKeys(m map[ruleKey]bool) []ruleKey {
	out := make([]ruleKey, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b ruleKey) int {
		if a.port != b.port {
			return a.port - b.port
		}
		return strings.Compare(a.peer, b.peer)
	})
	return out
}

// ensureNSG finds or makes the Service's frontend NSG, marks its backend
// NSGs managed, and makes the rules of both match rs (mode NSG).
func (s *SecurityRules) ensureNSG(ctx context.Context, rs RuleSet) (string, error) {
	front, err := s.frontendNSG(ctx, rs)
	if err != nil {
		return "", err
	}
	if front == "" {
		if front, err = s.createNSG(ctx, rs); err != nil {
			return "", err
		}
	}
	// Every backend NSG is read before any rule is written: one that is
	// not there is an error, with nothing changed.
	for _, b := range rs.BackendNSGs {
		if err := s.markManaged(ctx, b); err != nil {
			return "", err
		}
	}
	desc := ruleDescription(rs.UID)
	var frontRules []core.AddSecurityRuleDetails
	for _, p := range rs.Ports {
		for _, src := range rs.SourceCIDRs {
			frontRules = append(frontRules, nsgRule(core.AddSecurityRuleDetailsDirectionIngress, src, false, int(p.Listener), desc))
		}
	}
	for _, b := range rs.BackendNSGs {
		for _, port := range nodePorts(rs) {
			frontRules = append(frontRules, nsgRule(core.AddSecurityRuleDetailsDirectionEgress, b, true, port, desc))
		}
	}
	var backRules []core.AddSecurityRuleDetails
	for _, port := range nodePorts(rs) {
		backRules = append(backRules, nsgRule(core.AddSecurityRuleDetailsDirectionIngress, front, true, port, desc))
	}
	if rs.PreserveSource {
		for _, p := range rs.Ports {
			for _, src := range rs.SourceCIDRs {
				backRules = append(backRules, nsgRule(core.AddSecurityRuleDetailsDirectionIngress, src, false, int(p.NodePort), desc))
			}
		}
	}
	if err := s.reconcileNSG(ctx, front, desc, frontRules, ""); err != nil {
		return front, err
	}
	for _, b := range rs.BackendNSGs {
		if err := s.reconcileNSG(ctx, b, desc, backRules, core.ListNetworkSecurityGroupSecurityRulesDirectionIngress); err != nil {
			return front, err
		}
	}
	// A backend NSG no longer named (the annotation changed) keeps none of
	// the Service's rules.
	tagged, err := s.taggedBackends(ctx, rs)
	if err != nil {
		return front, err
	}
	for _, b := range tagged {
		if b != front && !slices.Contains(rs.BackendNSGs, b) {
			if err := s.reconcileNSG(ctx, b, desc, nil, core.ListNetworkSecurityGroupSecurityRulesDirectionIngress); err != nil {
				return front, err
			}
		}
	}
	return front, nil
}

// taggedBackends are the NSGs of the load balancer's VCN (of its first
// subnet) in its compartment that carry ManagedBy=CCM: the backend NSGs
// whose rules mode NSG manages (OCI's CCM tags them so). Through them a
// Service's rules leave a backend NSG no longer named, and go on a delete
// that knows the load balancer only. Without subnet or compartment: none.
func (s *SecurityRules) taggedBackends(ctx context.Context, rs RuleSet) ([]string, error) {
	if len(rs.LBSubnets) == 0 || rs.Compartment == "" {
		return nil, nil
	}
	sub, err := s.network.GetSubnet(ctx, core.GetSubnetRequest{SubnetId: common.String(rs.LBSubnets[0])})
	if err != nil {
		return nil, fmt.Errorf("oci GetSubnet %s (the backend NSGs' VCN): %w", rs.LBSubnets[0], err)
	}
	var out []string
	var page *string
	for range maxPages {
		resp, err := s.network.ListNetworkSecurityGroups(ctx, core.ListNetworkSecurityGroupsRequest{CompartmentId: common.String(rs.Compartment),
			VcnId: sub.VcnId, Page: page, Limit: common.Int(pageSize)})
		if err != nil {
			return nil, fmt.Errorf("oci ListNetworkSecurityGroups of VCN %s: %w", deref(sub.VcnId), err)
		}
		for _, n := range resp.Items {
			if n.FreeformTags["ManagedBy"] == "CCM" && n.LifecycleState == core.NetworkSecurityGroupLifecycleStateAvailable {
				out = append(out, deref(n.Id))
			}
		}
		if page = resp.OpcNextPage; page == nil {
			return out, nil
		}
	}
	return nil, fmt.Errorf("oci ListNetworkSecurityGroups of VCN %s: more than %d pages", deref(sub.VcnId), maxPages)
}

// nodePorts are the node ports of rs and its health check port, once each.
func nodePorts(rs RuleSet) []int {
	var out []int
	for _, p := range rs.Ports {
		if p.NodePort > 0 && !slices.Contains(out, int(p.NodePort)) {
			out = append(out, int(p.NodePort))
		}
	}
	if rs.HealthCheckPort > 0 && !slices.Contains(out, int(rs.HealthCheckPort)) {
		out = append(out, int(rs.HealthCheckPort))
	}
	return out
}

// nsgRule is a stateful TCP rule to one port, from (ingress) or to
// (egress) a CIDR block or, with isNSG, an NSG.
func nsgRule(dir core.AddSecurityRuleDetailsDirectionEnum, peer string, isNSG bool, port int, desc string) core.AddSecurityRuleDetails {
	r := core.AddSecurityRuleDetails{Direction: dir, Protocol: common.String(protocolTCP), Description: common.String(desc),
		TcpOptions: portRange(port), IsStateless: common.Bool(false)}
	if dir == core.AddSecurityRuleDetailsDirectionIngress {
		r.Source, r.SourceType = common.String(peer), core.AddSecurityRuleDetailsSourceTypeCidrBlock
		if isNSG {
			r.SourceType = core.AddSecurityRuleDetailsSourceTypeNetworkSecurityGroup
		}
	} else {
		r.Destination, r.DestinationType = common.String(peer), core.AddSecurityRuleDetailsDestinationTypeCidrBlock
		if isNSG {
			r.DestinationType = core.AddSecurityRuleDetailsDestinationTypeNetworkSecurityGroup
		}
	}
	return r
}

// sameRule: an NSG's rule is the one wanted (its peer, port, direction,
// protocol and description; as OCI's CCM compares them).
func sameRule(have core.SecurityRule, want core.AddSecurityRuleDetails) bool {
	hp, ok1 := tcpPort(have.Protocol, have.TcpOptions)
	wp, ok2 := tcpPort(want.Protocol, want.TcpOptions)
	return ok1 && ok2 && hp == wp && string(have.Direction) == string(want.Direction) && deref(have.Description) == deref(want.Description) &&
		strings.EqualFold(deref(have.Source), deref(want.Source)) && string(have.SourceType) == string(want.SourceType) &&
		strings.EqualFold(deref(have.Destination), deref(want.Destination)) && string(have.DestinationType) == string(want.DestinationType)
}

// nsgRules lists an NSG's rules (of one direction, or both with "").
func (s *SecurityRules) nsgRules(ctx context.Context, nsg string, dir core.ListNetworkSecurityGroupSecurityRulesDirectionEnum) ([]core.SecurityRule, error) {
	var out []core.SecurityRule
	var page *string
	for range maxPages {
		resp, err := s.network.ListNetworkSecurityGroupSecurityRules(ctx, core.ListNetworkSecurityGroupSecurityRulesRequest{
			NetworkSecurityGroupId: common.String(nsg), Direction: dir, Page: page, Limit: common.Int(pageSize)})
		if err != nil {
			return nil, fmt.Errorf("oci ListNetworkSecurityGroupSecurityRules %s: %w", nsg, err)
		}
		out = append(out, resp.Items...)
		if page = resp.OpcNextPage; page == nil {
			return out, nil
		}
	}
	return nil, fmt.Errorf("oci ListNetworkSecurityGroupSecurityRules %s: more than %d pages", nsg, maxPages)
}

// reconcileNSG makes the rules of desc in nsg (of direction dir, or both)
// be want: the missing ones added, the others of desc removed; rules of
// any other description are never touched. Additions go first, so that
// an error between the two leaves more open than wanted rather than a
// Service cut off.
func (s *SecurityRules) reconcileNSG(ctx context.Context, nsg, desc string, want []core.AddSecurityRuleDetails,
	dir core.ListNetworkSecurityGroupSecurityRulesDirectionEnum) error {
	have, err := s.nsgRules(ctx, nsg, dir)
	if err != nil {
		return err
	}
	var add []core.AddSecurityRuleDetails
	for _, w := range want {
		if !slices.ContainsFunc(have, func(h core.SecurityRule) bool { return sameRule(h, w) }) &&
			!slices.ContainsFunc(add, func(a core.AddSecurityRuleDetails) bool { return sameRule(asRule(a), w) }) {
			add = append(add, w)
		}
	}
	var drop []string
	for _, h := range have {
		if deref(h.Description) == desc && h.Id != nil && !slices.ContainsFunc(want, func(w core.AddSecurityRuleDetails) bool { return sameRule(h, w) }) {
			drop = append(drop, *h.Id)
		}
	}
	for batch := range slices.Chunk(add, nsgBatch) {
		if _, err := s.network.AddNetworkSecurityGroupSecurityRules(ctx, core.AddNetworkSecurityGroupSecurityRulesRequest{
			NetworkSecurityGroupId:                      common.String(nsg),
			AddNetworkSecurityGroupSecurityRulesDetails: core.AddNetworkSecurityGroupSecurityRulesDetails{SecurityRules: batch}}); err != nil {
			return fmt.Errorf("oci AddNetworkSecurityGroupSecurityRules %s: %w", nsg, err)
		}
	}
	if err := s.dropNSGRules(ctx, nsg, drop); err != nil {
		return err
	}
	if len(add)+len(drop) > 0 {
		klog.InfoS("NSG rules updated", "nsg", nsg, "description", desc, "added", len(add), "removed", len(drop))
	}
	return nil
}

func asRule(a core.AddSecurityRuleDetails) core.SecurityRule {
	return core.SecurityRule{Direction: core.SecurityRuleDirectionEnum(a.Direction), Protocol: a.Protocol, Description: a.Description,
		Source: a.Source, SourceType: core.SecurityRuleSourceTypeEnum(a.SourceType), Destination: a.Destination,
		DestinationType: core.SecurityRuleDestinationTypeEnum(a.DestinationType), TcpOptions: a.TcpOptions}
}

func (s *SecurityRules) dropNSGRules(ctx context.Context, nsg string, ids []string) error {
	for batch := range slices.Chunk(ids, nsgBatch) {
		if _, err := s.network.RemoveNetworkSecurityGroupSecurityRules(ctx, core.RemoveNetworkSecurityGroupSecurityRulesRequest{
			NetworkSecurityGroupId:                         common.String(nsg),
			RemoveNetworkSecurityGroupSecurityRulesDetails: core.RemoveNetworkSecurityGroupSecurityRulesDetails{SecurityRuleIds: batch}}); err != nil {
			return fmt.Errorf("oci RemoveNetworkSecurityGroupSecurityRules %s: %w", nsg, err)
		}
	}
	return nil
}

// isFrontend: the NSG is the Service's frontend NSG (its tags exactly
// OCI's CCM's: CreatedBy=CCM, ServiceUid=<uid>).
func isFrontend(n core.NetworkSecurityGroup, uid string) bool {
	return maps.Equal(n.FreeformTags, frontendTags(uid))
}

// frontendNSG finds the Service's frontend NSG: rs.FrontendNSG when it is
// the Service's, else the one of its display name and tags in its
// compartment and VCN (a leftover of a create that failed); "" when there
// is none.
func (s *SecurityRules) frontendNSG(ctx context.Context, rs RuleSet) (string, error) {
	if rs.FrontendNSG != "" {
		resp, err := s.network.GetNetworkSecurityGroup(ctx, core.GetNetworkSecurityGroupRequest{NetworkSecurityGroupId: common.String(rs.FrontendNSG)})
		se, isSE := common.IsServiceError(err)
		switch {
		case err == nil && isFrontend(resp.NetworkSecurityGroup, rs.UID):
			return rs.FrontendNSG, nil
		case err == nil:
			return "", fmt.Errorf("oci NSG %s is not Service %s/%s's frontend NSG (its tags are not CreatedBy=CCM, ServiceUid=%s)", rs.FrontendNSG, rs.Namespace, rs.Name, rs.UID)
		case !isSE || se.GetHTTPStatusCode() != http.StatusNotFound:
			return "", fmt.Errorf("oci GetNetworkSecurityGroup %s: %w", rs.FrontendNSG, err)
		}
	}
	if len(rs.LBSubnets) == 0 || rs.Compartment == "" {
		return "", nil
	}
	sub, err := s.network.GetSubnet(ctx, core.GetSubnetRequest{SubnetId: common.String(rs.LBSubnets[0])})
	if err != nil {
		return "", fmt.Errorf("oci GetSubnet %s (the frontend NSG's VCN): %w", rs.LBSubnets[0], err)
	}
	name := NSGDisplayName(rs.Namespace, rs.Name, rs.UID)
	var page *string
	for range maxPages {
		resp, err := s.network.ListNetworkSecurityGroups(ctx, core.ListNetworkSecurityGroupsRequest{CompartmentId: common.String(rs.Compartment),
			VcnId: sub.VcnId, DisplayName: common.String(name), Page: page, Limit: common.Int(pageSize),
			SortBy: core.ListNetworkSecurityGroupsSortByTimecreated, SortOrder: core.ListNetworkSecurityGroupsSortOrderDesc})
		if err != nil {
			return "", fmt.Errorf("oci ListNetworkSecurityGroups %q: %w", name, err)
		}
		for _, n := range resp.Items {
			if deref(n.DisplayName) == name && isFrontend(n, rs.UID) && n.LifecycleState != core.NetworkSecurityGroupLifecycleStateTerminated &&
				n.LifecycleState != core.NetworkSecurityGroupLifecycleStateTerminating {
				return deref(n.Id), nil
			}
		}
		if page = resp.OpcNextPage; page == nil {
			return "", nil
		}
	}
	return "", fmt.Errorf("oci ListNetworkSecurityGroups %q: more than %d pages", name, maxPages)
}

// createNSG makes the Service's frontend NSG in its LB subnet's VCN, named
// and tagged as OCI's CCM makes it, with the Service's UID as the retry
// token (a retried create answers the same NSG); a token OCI says was
// spent on an NSG since deleted is replaced by a new one.
func (s *SecurityRules) createNSG(ctx context.Context, rs RuleSet) (string, error) {
	sub, err := s.network.GetSubnet(ctx, core.GetSubnetRequest{SubnetId: common.String(rs.LBSubnets[0])})
	if err != nil {
		return "", fmt.Errorf("oci GetSubnet %s (the frontend NSG's VCN): %w", rs.LBSubnets[0], err)
	}
	req := core.CreateNetworkSecurityGroupRequest{OpcRetryToken: common.String(rs.UID),
		CreateNetworkSecurityGroupDetails: core.CreateNetworkSecurityGroupDetails{CompartmentId: common.String(rs.Compartment), VcnId: sub.VcnId,
			DisplayName: common.String(NSGDisplayName(rs.Namespace, rs.Name, rs.UID)), FreeformTags: frontendTags(rs.UID)}}
	resp, err := s.network.CreateNetworkSecurityGroup(ctx, req)
	if se, ok := common.IsServiceError(err); ok && se.GetCode() == "InvalidatedRetryToken" {
		req.OpcRetryToken = nil // the SDK makes a new one
		resp, err = s.network.CreateNetworkSecurityGroup(ctx, req)
	}
	if err != nil {
		return "", fmt.Errorf("oci CreateNetworkSecurityGroup %q: %w", deref(req.DisplayName), err)
	}
	klog.InfoS("Frontend NSG made", "nsg", deref(resp.Id), "service", rs.Namespace+"/"+rs.Name, "uid", rs.UID)
	return deref(resp.Id), nil
}

// markManaged reads a backend NSG and tags it ManagedBy=CCM, as OCI's CCM
// marks the backend NSGs whose rules it manages (keeping its other tags).
func (s *SecurityRules) markManaged(ctx context.Context, nsg string) error {
	for attempt := 1; ; attempt++ {
		resp, err := s.network.GetNetworkSecurityGroup(ctx, core.GetNetworkSecurityGroupRequest{NetworkSecurityGroupId: common.String(nsg)})
		if err != nil {
			return fmt.Errorf("oci GetNetworkSecurityGroup %s (a backend NSG): %w", nsg, err)
		}
		if _, ok := resp.FreeformTags["ManagedBy"]; ok {
			return nil
		}
		tags := maps.Clone(resp.FreeformTags)
		if tags == nil {
			tags = map[string]string{}
		}
		tags["ManagedBy"] = "CCM"
		_, err = s.network.UpdateNetworkSecurityGroup(ctx, core.UpdateNetworkSecurityGroupRequest{NetworkSecurityGroupId: common.String(nsg),
			IfMatch: resp.Etag, UpdateNetworkSecurityGroupDetails: core.UpdateNetworkSecurityGroupDetails{FreeformTags: tags}})
		if se, ok := common.IsServiceError(err); ok && se.GetHTTPStatusCode() == http.StatusPreconditionFailed && attempt < listAttempts {
			continue
		}
		if err != nil {
			return fmt.Errorf("oci UpdateNetworkSecurityGroup %s (tag ManagedBy): %w", nsg, err)
		}
		return nil
	}
}

// removeNSG removes the Service's rules from its backend NSGs (those
// named and those tagged ManagedBy=CCM in the load balancer's VCN; rules
// of its description only), then deletes its frontend NSG (the load balancer
// must no longer hold it: OCI refuses, and the error says so).
func (s *SecurityRules) removeNSG(ctx context.Context, rs RuleSet) error {
	desc := ruleDescription(rs.UID)
	tagged, err := s.taggedBackends(ctx, rs)
	if se, ok := common.IsServiceError(errors.Unwrap(err)); ok && se.GetHTTPStatusCode() == http.StatusNotFound {
		tagged, err = nil, nil // no subnet: only the NSGs named
	}
	if err != nil {
		return err
	}
	backends := slices.Clone(rs.BackendNSGs)
	for _, b := range tagged {
		if !slices.Contains(backends, b) {
			backends = append(backends, b)
		}
	}
	for _, b := range backends {
		if b == rs.FrontendNSG {
			continue
		}
		have, err := s.nsgRules(ctx, b, core.ListNetworkSecurityGroupSecurityRulesDirectionIngress)
		if se, ok := common.IsServiceError(errors.Unwrap(err)); ok && se.GetHTTPStatusCode() == http.StatusNotFound {
			continue // no NSG, no rules
		}
		if err != nil {
			return err
		}
		var drop []string
		for _, h := range have {
			if deref(h.Description) == desc && h.Id != nil {
				drop = append(drop, *h.Id)
			}
		}
		if err := s.dropNSGRules(ctx, b, drop); err != nil {
			return err
		}
	}
	front, err := s.frontendNSG(ctx, rs)
	if err != nil || front == "" {
		return err
	}
	resp, err := s.network.GetNetworkSecurityGroup(ctx, core.GetNetworkSecurityGroupRequest{NetworkSecurityGroupId: common.String(front)})
	if err != nil {
		return fmt.Errorf("oci GetNetworkSecurityGroup %s: %w", front, err)
	}
	_, err = s.network.DeleteNetworkSecurityGroup(ctx, core.DeleteNetworkSecurityGroupRequest{NetworkSecurityGroupId: common.String(front), IfMatch: resp.Etag})
	if se, ok := common.IsServiceError(err); ok && se.GetHTTPStatusCode() == http.StatusNotFound {
		return nil
	}
	if err != nil {
		return fmt.Errorf("oci DeleteNetworkSecurityGroup %s (Service %s/%s's frontend NSG): %w", front, rs.Namespace, rs.Name, err)
	}
	klog.InfoS("Frontend NSG deleted", "nsg", front, "service", rs.Namespace+"/"+rs.Name, "uid", rs.UID)
	return nil
}
