package azuretest

import (
	"fmt"
	"slices"
	"strings"
)

// Network security groups (Microsoft.Network/networkSecurityGroups written
// through ARM): security rules with a protocol (Tcp, Udp, Icmp, *), an
// access (Allow, Deny), a direction and a priority from 100 to 4096,
// unique per direction; a source and a destination each a prefix or a
// list. The data plane lets a frontend's address be reached only from
// the sources of the Allow Inbound rules for it (loadbalancers.go).

var (
	nsgProps  = []string{"securityRules", "defaultSecurityRules", "networkInterfaces", "subnets", "provisioningState", "resourceGuid", "flushConnection"}
	ruleKeys  = []string{"description", "protocol", "sourcePortRange", "sourcePortRanges", "destinationPortRange", "destinationPortRanges", "sourceAddressPrefix", "sourceAddressPrefixes", "destinationAddressPrefix", "destinationAddressPrefixes", "access", "priority", "direction", "provisioningState", "sourceApplicationSecurityGroups", "destinationApplicationSecurityGroups"}
	protocols = []string{"Tcp", "Udp", "Icmp", "Esp", "Ah", "*"}
)

func checkNSG(c *Cloud, id string, body, old map[string]any) *ARMError {
	props := m(body, "properties")
	if props == nil {
		props = map[string]any{}
		body["properties"] = props
	}
	if e := allowed("NetworkSecurityGroupPropertiesFormat", props, nsgProps...); e != nil {
		return e
	}
	prio := map[string]string{}
	names := map[string]bool{}
	for _, r := range list(props, "securityRules") {
		if e := allowed("SecurityRule", r, subKeys...); e != nil {
			return e
		}
		name := str(r, "name")
		if name == "" || names[strings.ToLower(name)] {
			return BadRequest("InvalidRequestFormat", "Security rule names of %s must be given and unique (%q).", id, name)
		}
		names[strings.ToLower(name)] = true
		r["id"] = id + "/securityRules/" + name
		rp := m(r, "properties")
		if e := allowed("SecurityRulePropertiesFormat", rp, ruleKeys...); e != nil {
			return e
		}
		if !slices.Contains(protocols, str(rp, "protocol")) {
			return BadRequest("SecurityRuleInvalidProtocol", "Security rule %s has invalid Protocol %q.", name, str(rp, "protocol"))
		}
		if a := str(rp, "access"); a != "Allow" && a != "Deny" {
			return BadRequest("SecurityRuleInvalidAccess", "Security rule %s has invalid Access %q.", name, a)
		}
		d := str(rp, "direction")
		if d != "Inbound" && d != "Outbound" {
			return BadRequest("SecurityRuleInvalidDirection", "Security rule %s has invalid Direction %q.", name, d)
		}
		p := num(rp, "priority")
		if p < 100 || p > 4096 {
			return BadRequest("SecurityRuleInvalidPriority", "Security rule %s has invalid Priority %d: it must be 100 to 4096.", name, p)
		}
		key := fmt.Sprintf("%s/%d", d, p)
		if other, ok := prio[key]; ok {
			return BadRequest("SecurityRulesInvalidPriorityConflict", "Security rules %s and %s have the same Priority %d and Direction %s.", other, name, p, d)
		}
		prio[key] = name
		if str(rp, "sourceAddressPrefix") == "" && len(strs(rp["sourceAddressPrefixes"])) == 0 ||
			str(rp, "destinationAddressPrefix") == "" && len(strs(rp["destinationAddressPrefixes"])) == 0 {
			return BadRequest("SecurityRuleParameterContainsUnsupportedValue", "Security rule %s needs a source and a destination address prefix.", name)
		}
	}
	return nil
}

// SecurityGroup is the security group of id as ARM holds it.
func (c *Cloud) SecurityGroup(id string) (map[string]any, bool) { return c.ARMGet(id) }

// PutSecurityGroup stores an empty security group (the cluster's, made by
// its installer), Succeeded; it returns its id.
func (c *Cloud) PutSecurityGroup(rg, name string) string {
	id := c.ResourceID(rg, TypeSecurityGroup, name)
	c.ARMPut(TypeSecurityGroup, id, map[string]any{"properties": map[string]any{"securityRules": []any{}}})
	return id
}
