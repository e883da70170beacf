package azuretest

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
	"github.com/mooring-dev/mooring/cloud/local/lb"
)

// Azure's load balancers (Microsoft.Network/loadBalancers), public IPs
// (publicips.go), network security groups (networksecuritygroups.go) and
// the NICs' backend pool membership (nics.go), as the network resource
// provider documents them, written through ARM (arm.go):
//
//   - a load balancer of SKU Standard holds frontend IP configurations
//     (a public IP of the resource group's, or a subnet's private address,
//     which the endpoint gives), backend address pools whose members are
//     the NIC IP configurations that name them (read-only in the load
//     balancer: written on the NICs), probes (Tcp, Http, Https) and
//     load-balancing rules that name a frontend, a pool and a probe of
//     the same load balancer; sub-resources get their ids;
//   - a reference to what does not exist, a public IP used by two
//     frontends, two rules on one frontend port and protocol, a probe
//     interval under 5 s or an idle timeout outside 4-100 minutes are 400s
//     with the resource provider's codes;
//   - the data plane (cloudtest.DataPlane, 127.87.0.0/16): each frontend
//     listens on its address (its public IP's, or its private one) and
//     forwards each rule's port to the pool members' private addresses at
//     the backend port, checked by the rule's probe; where the resource
//     group has network security groups, only the sources their Allow
//     rules for the frontend's address let in reach it.

// DataPlanePrefix holds the addresses of the endpoint's load balancer
// frontends (public IPs and private frontend addresses).
var DataPlanePrefix = netip.MustParsePrefix("127.87.0.0/16")

// Network resource types.
const (
	TypeLoadBalancer  = "Microsoft.Network/loadBalancers"
	TypePublicIP      = "Microsoft.Network/publicIPAddresses"
	TypeSecurityGroup = "Microsoft.Network/networkSecurityGroups"
)

// lbState is the endpoint's network state besides ARM's store: the NICs'
// pool membership and the data plane.
type lbState struct {
	mu     sync.Mutex
	pools  map[string][]string // lower NIC id -> backend pool ids of its ipconfig1
	etags  map[string]string   // lower NIC id -> etag
	served map[string][]string // lower LB id -> data plane ids it serves
	dp     cloudtest.DataPlane
	apply  sync.Mutex // one applyDataPlane at a time
}

func (c *Cloud) registerNetwork() {
	c.lbs.pools, c.lbs.etags, c.lbs.served = map[string][]string{}, map[string]string{}, map[string][]string{}
	c.lbs.dp.Prefix = DataPlanePrefix
	c.Register(ARMKind{Type: TypeLoadBalancer, Op: "LoadBalancer", Check: checkLB, Show: showLB,
		Built: func(c *Cloud, id string, body map[string]any) { c.applyDataPlane() }})
	c.Register(ARMKind{Type: TypePublicIP, Op: "PublicIP", Check: checkPIP, CanDelete: canDeletePIP,
		Built: func(c *Cloud, id string, body map[string]any) {
			if body == nil {
				c.lbs.dp.Remove(strings.ToLower(id))
			}
		},
		ListExtra: vmPublicIPs})
	c.Register(ARMKind{Type: TypeSecurityGroup, Op: "SecurityGroup", Check: checkNSG,
		Built: func(c *Cloud, id string, body map[string]any) { c.applyDataPlane() }})
}

// DataPlane is the endpoint's data plane (its frontends' health).
func (c *Cloud) DataPlane() *cloudtest.DataPlane { return &c.lbs.dp }

// m is a JSON object's member object (nil when absent).
func m(v map[string]any, key string) map[string]any {
	o, _ := v[key].(map[string]any)
	return o
}

// list is a JSON object's member list of objects.
func list(v map[string]any, key string) []map[string]any {
	var out []map[string]any
	l, _ := v[key].([]any)
	for _, it := range l {
		if o, ok := it.(map[string]any); ok {
			out = append(out, o)
		}
	}
	return out
}

func str(v map[string]any, key string) string {
	s, _ := v[key].(string)
	return s
}

// num is a JSON number member (0 when absent).
func num(v map[string]any, key string) int {
	f, _ := v[key].(float64)
	return int(f)
}

func refID(v map[string]any, key string) string { return str(m(v, key), "id") }

// allowed checks that o's keys are among keys.
func allowed(what string, o map[string]any, keys ...string) *ARMError {
	for k := range o {
		if !slices.Contains(keys, k) {
			return BadRequest("InvalidRequestFormat", "Could not find member '%s' on object of type '%s'.", k, what)
		}
	}
	return nil
}

var (
	lbProps       = []string{"frontendIPConfigurations", "backendAddressPools", "loadBalancingRules", "probes", "inboundNatRules", "inboundNatPools", "outboundRules", "provisioningState", "resourceGuid"}
	subKeys       = []string{"id", "name", "etag", "type", "properties", "zones"}
	frontendProps = []string{"publicIPAddress", "subnet", "privateIPAddress", "privateIPAllocationMethod", "privateIPAddressVersion", "provisioningState", "loadBalancingRules", "inboundNatRules", "outboundRules"}
	poolProps     = []string{"backendIPConfigurations", "loadBalancerBackendAddresses", "loadBalancingRules", "provisioningState"}
	ruleProps     = []string{"frontendIPConfiguration", "backendAddressPool", "backendAddressPools", "probe", "protocol", "frontendPort", "backendPort", "idleTimeoutInMinutes", "enableFloatingIP", "enableTcpReset", "disableOutboundSnat", "loadDistribution", "provisioningState"}
	probeProps    = []string{"protocol", "port", "requestPath", "intervalInSeconds", "numberOfProbes", "probeThreshold", "loadBalancingRules", "provisioningState", "noHealthyBackendsBehavior"}
)

// checkLB checks a load balancer's PUT and gives its sub-resources their
// ids and its frontends their private addresses.
func checkLB(c *Cloud, id string, body, old map[string]any) *ARMError {
	if sku := str(m(body, "sku"), "name"); sku != "Standard" {
		return BadRequest("InvalidLoadBalancerSku", "Load balancer %s: SKU %q; this endpoint models Standard load balancers only.", id, sku)
	}
	props := m(body, "properties")
	if props == nil {
		props = map[string]any{}
		body["properties"] = props
	}
	if e := allowed("LoadBalancerPropertiesFormat", props, lbProps...); e != nil {
		return e
	}
	subs := map[string]map[string]bool{} // collection -> lower ids
	for _, coll := range []string{"frontendIPConfigurations", "backendAddressPools", "loadBalancingRules", "probes"} {
		subs[coll] = map[string]bool{}
		for _, s := range list(props, coll) {
			if e := allowed(coll, s, subKeys...); e != nil {
				return e
			}
			name := str(s, "name")
			if name == "" {
				return BadRequest("InvalidRequestFormat", "A %s of load balancer %s has no name.", coll, id)
			}
			sid := id + "/" + coll + "/" + name
			if subs[coll][strings.ToLower(sid)] {
				return BadRequest("DuplicateResourceName", "Load balancer %s has two %s named %s.", id, coll, name)
			}
			subs[coll][strings.ToLower(sid)] = true
			s["id"] = sid
			if m(s, "properties") == nil {
				s["properties"] = map[string]any{}
			}
		}
	}
	oldFrontends := map[string]map[string]any{}
	for _, f := range list(m(old, "properties"), "frontendIPConfigurations") {
		oldFrontends[strings.ToLower(str(f, "id"))] = m(f, "properties")
	}
	pips := map[string]bool{}
	for _, f := range list(props, "frontendIPConfigurations") {
		fp := m(f, "properties")
		if e := allowed("FrontendIPConfigurationPropertiesFormat", fp, frontendProps...); e != nil {
			return e
		}
		pip, subnet := refID(fp, "publicIPAddress"), refID(fp, "subnet")
		switch {
		case pip != "" && subnet != "", pip == "" && subnet == "":
			return BadRequest("InvalidFrontendIPConfiguration", "Frontend IP configuration %s must name either a public IP address or a subnet.", str(f, "id"))
		case pip != "":
			if _, ok := c.ARMGet(pip); !ok {
				return BadRequest("InvalidResourceReference", "Resource %s referenced by resource %s was not found.", pip, str(f, "id"))
			}
			if pips[strings.ToLower(pip)] {
				return BadRequest("PublicIPReferencedByMultipleIPConfigs", "Public IP address %s is referenced by multiple IP configurations.", pip)
			}
			if user := c.pipUser(pip); user != "" && !strings.EqualFold(user, str(f, "id")) {
				return BadRequest("PublicIPAddressInUse", "Public IP address %s is in use by %s.", pip, user)
			}
			pips[strings.ToLower(pip)] = true
			delete(fp, "privateIPAddress")
		default:
			addr := str(fp, "privateIPAddress")
			if str(fp, "privateIPAllocationMethod") != "Static" {
				addr = str(oldFrontends[strings.ToLower(str(f, "id"))], "privateIPAddress")
			}
			if addr == "" {
				var err error
				if addr, err = c.lbs.dp.Serve(strings.ToLower(str(f, "id")), nil, nil); err != nil {
					return &ARMError{Status: http.StatusInternalServerError, Code: "InternalServerError", Message: err.Error()}
				}
			}
			fp["privateIPAddress"] = addr
			if fp["privateIPAllocationMethod"] == nil {
				fp["privateIPAllocationMethod"] = "Dynamic"
			}
		}
	}
	for _, p := range list(props, "backendAddressPools") {
		if e := allowed("BackendAddressPoolPropertiesFormat", m(p, "properties"), poolProps...); e != nil {
			return e
		}
		if len(list(m(p, "properties"), "loadBalancerBackendAddresses")) > 0 {
			return BadRequest("InvalidRequestFormat", "Backend pool %s: this endpoint models pools of NIC IP configurations only.", str(p, "id"))
		}
	}
	for _, p := range list(props, "probes") {
		pp := m(p, "properties")
		if e := allowed("ProbePropertiesFormat", pp, probeProps...); e != nil {
			return e
		}
		switch proto := str(pp, "protocol"); {
		case proto == "Http" || proto == "Https":
			if str(pp, "requestPath") == "" {
				return BadRequest("InvalidProbeRequestPath", "Probe %s of protocol %s needs a requestPath.", str(p, "id"), proto)
			}
		case proto == "Tcp":
		default:
			return BadRequest("InvalidProbeProtocol", "Probe %s: protocol %q is not Tcp, Http or Https.", str(p, "id"), proto)
		}
		if port := num(pp, "port"); port < 1 || port > 65535 {
			return BadRequest("InvalidProbePort", "Probe %s: port %d is not 1-65535.", str(p, "id"), port)
		}
		if iv, ok := pp["intervalInSeconds"]; ok && iv.(float64) < 5 {
			return BadRequest("InvalidProbeInterval", "Probe %s: intervalInSeconds must be at least 5.", str(p, "id"))
		}
	}
	seen := map[string]bool{}
	for _, r := range list(props, "loadBalancingRules") {
		rp := m(r, "properties")
		if e := allowed("LoadBalancingRulePropertiesFormat", rp, ruleProps...); e != nil {
			return e
		}
		for coll, key := range map[string]string{"frontendIPConfigurations": "frontendIPConfiguration", "backendAddressPools": "backendAddressPool", "probes": "probe"} {
			ref := refID(rp, key)
			if ref == "" && key == "probe" {
				continue
			}
			if !subs[coll][strings.ToLower(ref)] {
				return BadRequest("InvalidResourceReference", "Resource %s referenced by resource %s was not found.", ref, str(r, "id"))
			}
		}
		proto := str(rp, "protocol")
		if proto != "Tcp" && proto != "Udp" && proto != "All" {
			return BadRequest("InvalidLoadBalancingRuleProtocol", "Load balancing rule %s: protocol %q is not Tcp, Udp or All.", str(r, "id"), proto)
		}
		fport, bport := num(rp, "frontendPort"), num(rp, "backendPort")
		if fport < 1 || fport > 65535 || bport < 1 || bport > 65535 {
			return BadRequest("InvalidLoadBalancingRulePort", "Load balancing rule %s: ports %d and %d must be 1-65535.", str(r, "id"), fport, bport)
		}
		if it, ok := rp["idleTimeoutInMinutes"]; ok && (it.(float64) < 4 || it.(float64) > 100) {
			return BadRequest("InvalidIdleTimeoutInMinutes", "Load balancing rule %s: idleTimeoutInMinutes must be 4 to 100.", str(r, "id"))
		}
		key := strings.ToLower(refID(rp, "frontendIPConfiguration")) + "/" + proto + "/" + fmt.Sprint(fport)
		if seen[key] {
			return BadRequest("LoadBalancingRulesWithSameFrontendPortAndProtocol", "Load balancing rules of load balancer %s use the same frontend IP configuration, protocol and port %d.", id, fport)
		}
		seen[key] = true
	}
	return nil
}

// showLB writes each pool's members: the NIC IP configurations that name
// it.
func showLB(c *Cloud, body map[string]any) {
	c.lbs.mu.Lock()
	defer c.lbs.mu.Unlock()
	for _, p := range list(m(body, "properties"), "backendAddressPools") {
		var members []any
		for _, nic := range sortedKeys(c.lbs.pools) {
			for _, pool := range c.lbs.pools[nic] {
				if strings.EqualFold(pool, str(p, "id")) {
					members = append(members, map[string]any{"id": c.nicIDByLower(nic) + "/ipConfigurations/ipconfig1"})
				}
			}
		}
		if members != nil {
			m(p, "properties")["backendIPConfigurations"] = members
		} else {
			delete(m(p, "properties"), "backendIPConfigurations")
		}
	}
}

func sortedKeys[V any](mp map[string]V) []string {
	keys := make([]string, 0, len(mp))
	for k := range mp {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// nicIDByLower is the NIC's id as ARM spells it.
func (c *Cloud) nicIDByLower(lower string) string {
	for _, vm := range c.sortedVMs() {
		if id := c.nicID(vm); strings.ToLower(id) == lower {
			return id
		}
	}
	return lower
}

// memberAddresses are the private addresses of pool's members.
func (c *Cloud) memberAddresses(pool string) []string {
	c.lbs.mu.Lock()
	nics := map[string]bool{}
	for nic, pools := range c.lbs.pools {
		for _, p := range pools {
			if strings.EqualFold(p, pool) {
				nics[nic] = true
			}
		}
	}
	c.lbs.mu.Unlock()
	var out []string
	for _, vm := range c.sortedVMs() {
		if nics[strings.ToLower(c.nicID(vm))] && vm.PrivateIP != "" {
			out = append(out, vm.PrivateIP)
		}
	}
	return out
}

// applyDataPlane makes the data plane do what every load balancer, the
// NICs' pools and the security groups say.
func (c *Cloud) applyDataPlane() {
	c.lbs.apply.Lock()
	defer c.lbs.apply.Unlock()
	nsgs := c.ARMList(TypeSecurityGroup)
	lbs := c.ARMList(TypeLoadBalancer)
	c.lbs.mu.Lock()
	served := c.lbs.served
	c.lbs.served = map[string][]string{}
	c.lbs.mu.Unlock()
	now := map[string]bool{}
	for _, l := range lbs {
		props := m(l, "properties")
		if str(props, "provisioningState") != "Succeeded" {
			// Still being written: it serves as it did.
			for _, id := range served[strings.ToLower(str(l, "id"))] {
				now[id] = true
			}
			c.lbs.mu.Lock()
			c.lbs.served[strings.ToLower(str(l, "id"))] = served[strings.ToLower(str(l, "id"))]
			c.lbs.mu.Unlock()
			continue
		}
		probes := map[string]map[string]any{}
		for _, p := range list(props, "probes") {
			probes[strings.ToLower(str(p, "id"))] = m(p, "properties")
		}
		var ids []string
		for _, f := range list(props, "frontendIPConfigurations") {
			fp := m(f, "properties")
			dpID, addr := strings.ToLower(str(f, "id")), str(fp, "privateIPAddress")
			if pip := refID(fp, "publicIPAddress"); pip != "" {
				dpID = strings.ToLower(pip)
				body, _ := c.ARMGet(pip)
				addr = str(m(body, "properties"), "ipAddress")
			}
			var listeners []lb.Listener
			for _, r := range list(props, "loadBalancingRules") {
				rp := m(r, "properties")
				if !strings.EqualFold(refID(rp, "frontendIPConfiguration"), str(f, "id")) {
					continue
				}
				protos := map[string][]lb.Protocol{"Tcp": {lb.TCP}, "Udp": {lb.UDP}, "All": {lb.TCP, lb.UDP}}[str(rp, "protocol")]
				for _, proto := range protos {
					l := lb.Listener{Port: num(rp, "frontendPort"), Protocol: proto}
					for _, a := range c.memberAddresses(refID(rp, "backendAddressPool")) {
						l.Backends = append(l.Backends, lb.Backend{Address: a, Port: num(rp, "backendPort")})
					}
					if pp := probes[strings.ToLower(refID(rp, "probe"))]; pp != nil {
						hc := &lb.HealthCheck{Protocol: lb.TCP, Port: num(pp, "port"), Interval: 500 * time.Millisecond}
						if p := str(pp, "protocol"); p == "Http" || p == "Https" {
							hc.Protocol, hc.Path = lb.HTTP, str(pp, "requestPath")
						}
						l.HealthCheck = hc
					}
					listeners = append(listeners, l)
				}
			}
			if _, err := c.lbs.dp.Serve(dpID, listeners, sourceRanges(nsgs, addr, listeners)); err != nil {
				c.count("DataPlaneError")
			}
			ids = append(ids, dpID)
			now[dpID] = true
		}
		c.lbs.mu.Lock()
		c.lbs.served[strings.ToLower(str(l, "id"))] = ids
		c.lbs.mu.Unlock()
	}
	for _, ids := range served {
		for _, id := range ids {
			if !now[id] {
				// A public IP keeps its address while it exists.
				if _, ok := c.ARMGet(id); ok {
					_, _ = c.lbs.dp.Serve(id, nil, nil)
					continue
				}
				c.lbs.dp.Remove(id)
			}
		}
	}
}

// denyAll is a source range no client is in.
var denyAll = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/32")}

// sourceRanges are the clients the security groups let reach addr: every
// client when there is no group; else the sources of the Allow Inbound
// rules whose destination is addr (or any) and whose ports take a
// listener's, none when no rule does.
func sourceRanges(nsgs []map[string]any, addr string, listeners []lb.Listener) []netip.Prefix {
	if len(nsgs) == 0 {
		return nil
	}
	var out []netip.Prefix
	for _, g := range nsgs {
		for _, r := range list(m(g, "properties"), "securityRules") {
			rp := m(r, "properties")
			if str(rp, "access") != "Allow" || str(rp, "direction") != "Inbound" {
				continue
			}
			dests := append(strs(rp["destinationAddressPrefixes"]), str(rp, "destinationAddressPrefix"))
			if !slices.Contains(dests, addr) && !slices.Contains(dests, "*") {
				continue
			}
			ports := append(strs(rp["destinationPortRanges"]), str(rp, "destinationPortRange"))
			hit := false
			for _, l := range listeners {
				if slices.Contains(ports, "*") || slices.Contains(ports, fmt.Sprint(l.Port)) {
					hit = true
				}
			}
			if !hit {
				continue
			}
			for _, s := range append(strs(rp["sourceAddressPrefixes"]), str(rp, "sourceAddressPrefix")) {
				switch s {
				case "":
				case "*", "Internet":
					return nil
				default:
					if p, err := netip.ParsePrefix(s); err == nil {
						out = append(out, p)
					} else if a, err := netip.ParseAddr(s); err == nil {
						out = append(out, netip.PrefixFrom(a, a.BitLen()))
					}
				}
			}
		}
	}
	if len(out) == 0 {
		return denyAll
	}
	return out
}

func strs(v any) []string {
	l, _ := v.([]any)
	var out []string
	for _, it := range l {
		if s, ok := it.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// LoadBalancers are the load balancers ARM holds, as answered (pools'
// members included).
func (c *Cloud) LoadBalancers() []map[string]any {
	out := c.ARMList(TypeLoadBalancer)
	for _, l := range out {
		showLB(c, l)
	}
	return out
}

// PutLoadBalancer stores a load balancer as another tool made it (its
// sub-resources' ids filled in), Succeeded; it fails on what ARM would
// refuse.
func (c *Cloud) PutLoadBalancer(rg, name string, body map[string]any) error {
	id := c.ResourceID(rg, TypeLoadBalancer, name)
	body = cloneJSON(body)
	if e := checkLB(c, id, body, nil); e != nil {
		return e
	}
	c.ARMPut(TypeLoadBalancer, id, body)
	return nil
}
