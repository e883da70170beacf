package oci

// Mode NSG: the Service's frontend NSG (found by name and tags, or made),
// its rules, and the Service's rules in the backend NSGs.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/oracle/oci-go-sdk/v65/common"
	"github.com/oracle/oci-go-sdk/v65/core"
	"k8s.io/klog/v2"
)

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
