package oci

// Modes All and Frontend: the Service's rules in the security lists of its
// load balancer's and nodes' subnets, read-modify-written under ETags, and
// the checks that keep a port's rules another Service still uses.

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/oracle/oci-go-sdk/v65/common"
	"github.com/oracle/oci-go-sdk/v65/core"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

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

// ruleKey is a TCP single-port rule: its peer (source or destination)
// and port.
type ruleKey struct {
	peer string
	port int
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
