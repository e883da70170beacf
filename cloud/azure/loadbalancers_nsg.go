package azure

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
)

// Security rules: in the config's security group, a Service's frontend
// gets one Allow Inbound rule per port and protocol,
// "<frontend>-<TCP|UDP>-<port>", from its source ranges
// (loadBalancerSourceRanges, else Internet; * for an internal one) to its
// frontend address, at the lowest free priority from 500 (the range
// cloud-provider-azure uses for its rules).

const (
	rulePriorityMin = 500
	rulePriorityMax = 4096
)

// securityRanges are the sources of frontend's rules in nsg, sorted.
func securityRanges(nsg *armnetwork.SecurityGroup, frontend string) []string {
	if nsg == nil || nsg.Properties == nil {
		return nil
	}
	var out []string
	for _, r := range nsg.Properties.SecurityRules {
		if r == nil || r.Properties == nil || !strings.HasPrefix(deref(r.Name), frontend+"-") {
			continue
		}
		if r.Properties.SourceAddressPrefix != nil {
			out = append(out, *r.Properties.SourceAddressPrefix)
		}
		for _, p := range r.Properties.SourceAddressPrefixes {
			out = append(out, deref(p))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// writeSecurityRules makes frontend's rules in the security group allow
// spec's ports from spec's ranges to addr (none for an empty spec).
func (l *lbCloud) writeSecurityRules(ctx context.Context, frontend, addr string, spec lbSpec) error {
	cfg := l.c.cfg
	if cfg.SecurityGroupName == "" {
		return nil
	}
	for try := 0; ; try++ {
		resp, err := l.nsgs.Get(ctx, cfg.nsgGroup(), cfg.SecurityGroupName, nil)
		if err != nil {
			return fmt.Errorf("security group %s: %w", cfg.SecurityGroupName, err)
		}
		nsg := resp.SecurityGroup
		if nsg.Properties == nil {
			nsg.Properties = &armnetwork.SecurityGroupPropertiesFormat{}
		}
		if st := state(nsg.Properties.ProvisioningState); st != "" && st != string(armnetwork.ProvisioningStateSucceeded) && st != string(armnetwork.ProvisioningStateFailed) {
			return pending(cfg.SecurityGroupName, st)
		}
		old := nsg.Properties.SecurityRules
		kept := slices.DeleteFunc(slices.Clone(old), func(r *armnetwork.SecurityRule) bool {
			return r == nil || strings.HasPrefix(deref(r.Name), frontend+"-")
		})
		used := map[int32]bool{}
		for _, r := range kept {
			if r.Properties != nil && r.Properties.Priority != nil && state2(r.Properties.Direction) == string(armnetwork.SecurityRuleDirectionInbound) {
				used[*r.Properties.Priority] = true
			}
		}
		var mine []*armnetwork.SecurityRule
		for _, rule := range spec.Rules {
			if addr == "" {
				break
			}
			proto, port, _, _ := parseRule(rule)
			prio := int32(rulePriorityMin)
			for used[prio] && prio <= rulePriorityMax {
				prio++
			}
			if prio > rulePriorityMax {
				return fmt.Errorf("security group %s: no free priority from %d to %d for frontend %s", cfg.SecurityGroupName, rulePriorityMin, rulePriorityMax, frontend)
			}
			used[prio] = true
			rp := &armnetwork.SecurityRulePropertiesFormat{Protocol: to.Ptr(armnetwork.SecurityRuleProtocol(proto)),
				Access: to.Ptr(armnetwork.SecurityRuleAccessAllow), Direction: to.Ptr(armnetwork.SecurityRuleDirectionInbound),
				Priority: to.Ptr(prio), SourcePortRange: to.Ptr("*"), DestinationAddressPrefix: to.Ptr(addr),
				DestinationPortRange: to.Ptr(strconv.Itoa(int(port)))}
			if len(spec.Ranges) == 1 {
				rp.SourceAddressPrefix = to.Ptr(spec.Ranges[0])
			} else {
				rp.SourceAddressPrefixes = to.SliceOfPtrs(spec.Ranges...)
			}
			mine = append(mine, &armnetwork.SecurityRule{Name: to.Ptr(fmt.Sprintf("%s-%s-%d", frontend, strings.ToUpper(proto), port)), Properties: rp})
		}
		if sameRules(old, kept, mine) {
			return nil
		}
		nsg.Properties.SecurityRules = append(kept, mine...)
		etag := nsg.Etag
		nsg.Etag = nil
		_, err = l.nsgs.BeginCreateOrUpdate(ifMatch(ctx, etag), cfg.nsgGroup(), cfg.SecurityGroupName, nsg, nil)
		if isStale(err) && try < lbWrites {
			continue
		}
		if isBusy(err) {
			return pending(cfg.SecurityGroupName, "Updating")
		}
		if err != nil {
			return fmt.Errorf("security group %s: %w", cfg.SecurityGroupName, err)
		}
		return nil
	}
}

// sameRules reports whether old already is kept and mine (mine compared
// by name, source, destination and port).
func sameRules(old, kept, mine []*armnetwork.SecurityRule) bool {
	if len(old) != len(kept)+len(mine) {
		return false
	}
	have := map[string]string{}
	for _, r := range old {
		if r != nil && r.Properties != nil {
			have[deref(r.Name)] = ruleText(r)
		}
	}
	for _, r := range mine {
		if have[deref(r.Name)] != ruleText(r) {
			return false
		}
	}
	return true
}

func ruleText(r *armnetwork.SecurityRule) string {
	p := r.Properties
	var src []string
	if p.SourceAddressPrefix != nil {
		src = append(src, *p.SourceAddressPrefix)
	}
	for _, s := range p.SourceAddressPrefixes {
		src = append(src, deref(s))
	}
	slices.Sort(src)
	return fmt.Sprint(state2(p.Protocol), "|", strings.Join(src, ","), "|", deref(p.DestinationAddressPrefix), "|", deref(p.DestinationPortRange), "|", state2(p.Access))
}
