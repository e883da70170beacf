package ocitest

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/oracle/oci-go-sdk/v65/common"
	"github.com/oracle/oci-go-sdk/v65/networkloadbalancer"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// The Network Load Balancer API (20200501): network load balancers with
// their listeners and backend sets, and their work requests.

// Endpoint methods of the Network Load Balancer API (Calls, Fail).
const (
	MethodCreateNLB       = "CreateNetworkLoadBalancer"
	MethodGetNLB          = "GetNetworkLoadBalancer"
	MethodListNLB         = "ListNetworkLoadBalancers"
	MethodUpdateNLB       = "UpdateNetworkLoadBalancer"
	MethodDeleteNLB       = "DeleteNetworkLoadBalancer"
	MethodUpdateNLBNSGs   = "NLB.UpdateNetworkSecurityGroups"
	MethodCreateNLBSet    = "NLB.CreateBackendSet"
	MethodUpdateNLBSet    = "NLB.UpdateBackendSet"
	MethodDeleteNLBSet    = "NLB.DeleteBackendSet"
	MethodCreateNLBListen = "NLB.CreateListener"
	MethodUpdateNLBListen = "NLB.UpdateListener"
	MethodDeleteNLBListen = "NLB.DeleteListener"
	MethodGetNLBWork      = "NLB.GetWorkRequest"
)

var (
	nlbPolicies     = []string{"TWO_TUPLE", "THREE_TUPLE", "FIVE_TUPLE"}
	nlbProtos       = []string{"TCP", "UDP", "TCP_AND_UDP"}
	nlbHealthProtos = []string{"HTTP", "HTTPS", "TCP", "UDP"}
)

func (c *Cloud) serveNLB(w http.ResponseWriter, r *http.Request, path string) {
	parts := strings.Split(strings.TrimSuffix(path, "/"), "/")
	m := r.Method
	switch {
	case len(parts) == 1 && parts[0] == "networkLoadBalancers" && m == http.MethodPost:
		c.nlbCreate(w, r)
	case len(parts) == 1 && parts[0] == "networkLoadBalancers" && m == http.MethodGet:
		c.lbList(w, r, KindNLB)
	case len(parts) == 2 && parts[0] == "workRequests" && m == http.MethodGet:
		c.getWork(w, KindNLB, parts[1])
	case len(parts) >= 2 && parts[0] == "networkLoadBalancers":
		c.nlbItem(w, r, parts[1], parts[2:])
	default:
		ociError(w, http.StatusNotFound, "NotFound", "path not modelled")
	}
}

func (c *Cloud) nlbItem(w http.ResponseWriter, r *http.Request, id string, rest []string) {
	m := r.Method
	sub := ""
	if len(rest) > 0 {
		sub = rest[0]
	}
	method := map[string]string{
		"GET/": MethodGetNLB, "PUT/": MethodUpdateNLB, "DELETE/": MethodDeleteNLB, "PUT/networkSecurityGroups": MethodUpdateNLBNSGs,
		"POST/backendSets": MethodCreateNLBSet, "PUT/backendSets": MethodUpdateNLBSet, "DELETE/backendSets": MethodDeleteNLBSet,
		"POST/listeners": MethodCreateNLBListen, "PUT/listeners": MethodUpdateNLBListen, "DELETE/listeners": MethodDeleteNLBListen,
	}[m+"/"+sub]
	coll := sub == "backendSets" || sub == "listeners"
	named := coll && len(rest) == 2
	if method == "" || len(rest) > 2 || len(rest) == 2 && !named || coll && named == (m == http.MethodPost) {
		ociError(w, http.StatusNotFound, "NotFound", "path not modelled")
		return
	}
	if st := c.count(method, 0); st != 0 {
		ociError(w, st, codeOf(st), "injected fault")
		return
	}
	snap, ok := c.Balancer(id)
	if !ok || snap.Kind != KindNLB {
		ociError(w, http.StatusNotFound, "NotAuthorizedOrNotFound", notFoundMessage)
		return
	}
	if method == MethodGetNLB {
		c.mu.Lock()
		out := nlbWire(c.lbs.balancers[id])
		c.mu.Unlock()
		cloudtest.WriteJSON(w, http.StatusOK, out)
		return
	}
	var apply func(*Balancer)
	var err error
	del := false
	name := ""
	if named {
		name = rest[1]
		_, isSet := snap.BackendSets[name]
		_, isListener := snap.Listeners[name]
		if sub == "backendSets" && !isSet || sub == "listeners" && !isListener {
			ociError(w, http.StatusNotFound, "NotAuthorizedOrNotFound", notFoundMessage)
			return
		}
	}
	switch method {
	case MethodDeleteNLB:
		del = true
	case MethodUpdateNLB:
		var d networkloadbalancer.UpdateNetworkLoadBalancerDetails
		if !decode(w, r, &d) {
			return
		}
		if d.IsPreserveSourceDestination != nil || d.IsSymmetricHashEnabled != nil || d.NlbIpVersion != "" || d.SubnetIpv6Cidr != nil ||
			d.AssignedIpv6 != nil || d.ReservedIpv6Id != nil || d.DefinedTags != nil || d.SecurityAttributes != nil {
			err = invalid("only displayName and freeformTags are modelled")
		} else if d.DisplayName != nil {
			err = checkDisplayName(d.DisplayName)
		}
		apply = func(b *Balancer) {
			if d.DisplayName != nil {
				b.DisplayName = *d.DisplayName
			}
			if d.FreeformTags != nil {
				b.FreeformTags = maps.Clone(d.FreeformTags)
			}
		}
	case MethodUpdateNLBNSGs:
		var d networkloadbalancer.UpdateNetworkSecurityGroupsDetails
		if !decode(w, r, &d) {
			return
		}
		err = checkNSGs(d.NetworkSecurityGroupIds)
		apply = func(b *Balancer) { b.NSGs = slices.Clone(d.NetworkSecurityGroupIds) }
	case MethodCreateNLBSet:
		var d networkloadbalancer.CreateBackendSetDetails
		if !decode(w, r, &d) {
			return
		}
		var set BackendSet
		if d.Name == nil || *d.Name == "" {
			err = missing("name")
		} else if _, dup := snap.BackendSets[*d.Name]; dup {
			err = invalid("backend set %s exists", *d.Name)
		} else {
			set, err = nlbSetFrom(*d.Name, networkloadbalancer.BackendSetDetails{HealthChecker: healthFromDetails(d.HealthChecker),
				Policy: d.Policy, IpVersion: d.IpVersion, IsPreserveSource: d.IsPreserveSource, IsFailOpen: d.IsFailOpen,
				IsInstantFailoverEnabled: d.IsInstantFailoverEnabled, IsInstantFailoverTcpResetEnabled: d.IsInstantFailoverTcpResetEnabled,
				AreOperationallyActiveBackendsPreferred: d.AreOperationallyActiveBackendsPreferred, Backends: backendsFromDetails(d.Backends)})
		}
		apply = func(b *Balancer) { b.BackendSets[set.Name] = set }
	case MethodUpdateNLBSet:
		var d networkloadbalancer.UpdateBackendSetDetails
		if !decode(w, r, &d) {
			return
		}
		old := snap.BackendSets[name]
		merged := networkloadbalancer.BackendSetDetails{HealthChecker: healthFromDetails(d.HealthChecker),
			Policy: networkloadbalancer.NetworkLoadBalancingPolicyEnum(strOf(d.Policy)), IsPreserveSource: d.IsPreserveSource,
			IpVersion: d.IpVersion, IsFailOpen: d.IsFailOpen, IsInstantFailoverEnabled: d.IsInstantFailoverEnabled,
			IsInstantFailoverTcpResetEnabled:        d.IsInstantFailoverTcpResetEnabled,
			AreOperationallyActiveBackendsPreferred: d.AreOperationallyActiveBackendsPreferred, Backends: backendsFromDetails(d.Backends)}
		if merged.HealthChecker == nil {
			merged.HealthChecker = nlbHealthWire(old.Check)
		}
		if merged.Policy == "" {
			merged.Policy = networkloadbalancer.NetworkLoadBalancingPolicyEnum(old.Policy)
		}
		if merged.IsPreserveSource == nil {
			merged.IsPreserveSource = common.Bool(old.PreserveSource)
		}
		var set BackendSet
		set, err = nlbSetFrom(name, merged)
		if d.Backends == nil {
			set.Backends = old.Backends
		}
		apply = func(b *Balancer) { b.BackendSets[name] = set }
	case MethodDeleteNLBSet:
		for _, l := range snap.Listeners {
			if l.BackendSet == name {
				err = invalid("backend set %s is the default backend set of listener %s", name, l.Name)
			}
		}
		apply = func(b *Balancer) { delete(b.BackendSets, name) }
	case MethodDeleteNLBListen:
		apply = func(b *Balancer) { delete(b.Listeners, name) }
	case MethodCreateNLBListen, MethodUpdateNLBListen:
		var d networkloadbalancer.ListenerDetails
		if method == MethodCreateNLBListen {
			var cd networkloadbalancer.CreateListenerDetails
			if !decode(w, r, &cd) {
				return
			}
			d = networkloadbalancer.ListenerDetails(cd)
			name = strOf(cd.Name)
			if _, dup := snap.Listeners[name]; dup {
				err = invalid("listener %s exists", name)
			}
		} else {
			var ud networkloadbalancer.UpdateListenerDetails
			if !decode(w, r, &ud) {
				return
			}
			old := snap.Listeners[name]
			d = networkloadbalancer.ListenerDetails{Name: common.String(name), DefaultBackendSetName: ud.DefaultBackendSetName, Port: ud.Port,
				Protocol: ud.Protocol, IpVersion: ud.IpVersion, IsPpv2Enabled: ud.IsPpv2Enabled, TcpIdleTimeout: ud.TcpIdleTimeout,
				UdpIdleTimeout: ud.UdpIdleTimeout, L3IpIdleTimeout: ud.L3IpIdleTimeout}
			if d.DefaultBackendSetName == nil {
				d.DefaultBackendSetName = common.String(old.BackendSet)
			}
			if d.Port == nil {
				d.Port = common.Int(old.Port)
			}
			if d.Protocol == "" {
				d.Protocol = networkloadbalancer.ListenerProtocolsEnum(old.Protocol)
			}
			if d.IsPpv2Enabled == nil {
				d.IsPpv2Enabled = common.Bool(old.PPv2)
			}
		}
		var l Listener
		if err == nil {
			l, err = nlbListenerFrom(name, d, snap.BackendSets)
		}
		apply = func(b *Balancer) { b.Listeners[name] = l }
	}
	if err != nil {
		answerErr(w, err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.lbs.balancers[id]
	switch {
	case !ok:
		ociError(w, http.StatusNotFound, "NotAuthorizedOrNotFound", notFoundMessage)
		return
	case c.busy(id) || b.State != StateActive && b.State != StateFailed:
		ociError(w, http.StatusConflict, "Conflict", fmt.Sprintf("Invalid State Transition of NLB lifeCycle state from %s", b.State))
		return
	}
	wr := c.accept(KindNLB, id, method, false, del, apply)
	w.Header().Set("opc-work-request-id", wr.ID)
	w.Header().Set("opc-request-id", "ocitest")
	w.WriteHeader(http.StatusOK)
}

// nlbCreate serves CreateNetworkLoadBalancer: the whole tree in one
// request, answered with the NLB (CREATING) and its work request.
func (c *Cloud) nlbCreate(w http.ResponseWriter, r *http.Request) {
	if st := c.count(MethodCreateNLB, 0); st != 0 {
		ociError(w, st, codeOf(st), "injected fault")
		return
	}
	var d networkloadbalancer.CreateNetworkLoadBalancerDetails
	if !decode(w, r, &d) {
		return
	}
	b, err := c.nlbFromCreate(d)
	if err != nil {
		answerErr(w, err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lbs.init()
	if wid, ok := c.retried(w, r); ok {
		wr := c.lbs.work[wid]
		w.Header().Set("opc-work-request-id", wid)
		if old, ok := c.lbs.balancers[wr.Balancer]; ok {
			cloudtest.WriteJSON(w, http.StatusOK, nlbWire(old))
			return
		}
		ociError(w, http.StatusConflict, "InvalidatedRetryToken", "the retry token's network load balancer is gone")
		return
	}
	c.lbs.balancers[b.ID] = b
	wr := c.accept(KindNLB, b.ID, MethodCreateNLB, true, false, nil)
	c.remember(r, wr.ID)
	w.Header().Set("opc-work-request-id", wr.ID)
	w.Header().Set("opc-request-id", "ocitest")
	cloudtest.WriteJSON(w, http.StatusOK, nlbWire(b))
}

func (c *Cloud) nlbFromCreate(d networkloadbalancer.CreateNetworkLoadBalancerDetails) (*Balancer, error) {
	if err := c.checkCompartment(d.CompartmentId); err != nil {
		return nil, err
	}
	if err := checkDisplayName(d.DisplayName); err != nil {
		return nil, err
	}
	switch {
	case d.SubnetId == nil || *d.SubnetId == "":
		return nil, missing("subnetId")
	case !strings.HasPrefix(*d.SubnetId, "ocid1.subnet."):
		return nil, invalid("subnetId %q is not a subnet's OCID", *d.SubnetId)
	case d.ReservedIps != nil || d.NlbIpVersion == networkloadbalancer.NlbIpVersionIpv6 || d.SubnetIpv6Cidr != nil || d.AssignedIpv6 != nil ||
		d.AssignedPrivateIpv4 != nil || d.DefinedTags != nil || d.SecurityAttributes != nil:
		return nil, invalid("reserved IPs, assigned addresses, IPv6 and defined tags are not modelled")
	}
	if err := checkNSGs(d.NetworkSecurityGroupIds); err != nil {
		return nil, err
	}
	b := &Balancer{ID: c.newID(KindNLB), Kind: KindNLB, Compartment: *d.CompartmentId, DisplayName: *d.DisplayName,
		Private: d.IsPrivate != nil && *d.IsPrivate, Subnets: []string{*d.SubnetId}, NSGs: slices.Clone(d.NetworkSecurityGroupIds),
		Listeners: map[string]Listener{}, BackendSets: map[string]BackendSet{}, FreeformTags: maps.Clone(d.FreeformTags),
		Created: c.opts.Now().UTC().Truncate(time.Millisecond)}
	for name, sd := range d.BackendSets {
		set, err := nlbSetFrom(name, sd)
		if err != nil {
			return nil, err
		}
		b.BackendSets[name] = set
	}
	for name, ld := range d.Listeners {
		if ld.Name == nil || *ld.Name != name {
			return nil, invalid("listeners[%s].name must be its key", name)
		}
		l, err := nlbListenerFrom(name, ld, b.BackendSets)
		if err != nil {
			return nil, err
		}
		b.Listeners[name] = l
	}
	return b, nil
}

func healthFromDetails(d *networkloadbalancer.HealthCheckerDetails) *networkloadbalancer.HealthChecker {
	if d == nil {
		return nil
	}
	h := networkloadbalancer.HealthChecker(*d)
	return &h
}

func backendsFromDetails(ds []networkloadbalancer.BackendDetails) []networkloadbalancer.Backend {
	if ds == nil {
		return nil
	}
	out := []networkloadbalancer.Backend{}
	for _, d := range ds {
		out = append(out, networkloadbalancer.Backend{Port: d.Port, Name: d.Name, IpAddress: d.IpAddress, TargetId: d.TargetId,
			Weight: d.Weight, IsBackup: d.IsBackup, IsDrain: d.IsDrain, IsOffline: d.IsOffline})
	}
	return out
}

func nlbSetFrom(name string, d networkloadbalancer.BackendSetDetails) (BackendSet, error) {
	set := BackendSet{Name: name, Policy: string(d.Policy), PreserveSource: d.IsPreserveSource != nil && *d.IsPreserveSource}
	if set.Policy == "" {
		set.Policy = "FIVE_TUPLE"
	}
	switch {
	case !slices.Contains(nlbPolicies, set.Policy):
		return set, invalid("backendSets[%s].policy %q: want one of %s", name, set.Policy, strings.Join(nlbPolicies, ", "))
	case d.HealthChecker == nil || d.HealthChecker.Protocol == "":
		return set, missing("backendSets[" + name + "].healthChecker.protocol")
	case d.IpVersion == networkloadbalancer.IpVersionIpv6:
		return set, invalid("backendSets[%s]: IPv6 is not modelled", name)
	}
	hc := d.HealthChecker
	set.Check = HealthCheck{Protocol: string(hc.Protocol), Path: strOf(hc.UrlPath), Port: derefInt(hc.Port, 0), ReturnCode: derefInt(hc.ReturnCode, 200),
		Retries: derefInt(hc.Retries, defaultHealthRetries), TimeoutMs: derefInt(hc.TimeoutInMillis, defaultHealthTimeout),
		Interval: derefInt(hc.IntervalInMillis, defaultHealthInterval)}
	if err := checkHealth(name, set.Check, nlbHealthProtos, nlbHealthIntervalMin); err != nil {
		return set, err
	}
	for _, bd := range d.Backends {
		if bd.Port == nil || bd.IpAddress == nil && bd.TargetId == nil {
			return set, missing("backendSets[" + name + "].backends[]: port and ipAddress or targetId")
		}
		be := Backend{IP: strOf(bd.IpAddress), Port: *bd.Port, TargetID: strOf(bd.TargetId), Weight: derefInt(bd.Weight, 1)}
		if err := checkBackend(name, be); err != nil {
			return set, err
		}
		set.Backends = append(set.Backends, be)
	}
	return set, nil
}

func nlbListenerFrom(name string, d networkloadbalancer.ListenerDetails, sets map[string]BackendSet) (Listener, error) {
	l := Listener{Name: name}
	switch {
	case name == "":
		return l, missing("listeners[].name")
	case d.DefaultBackendSetName == nil || d.Port == nil || d.Protocol == "":
		return l, missing("listeners[" + name + "]: defaultBackendSetName, port and protocol")
	case !slices.Contains(nlbProtos, string(d.Protocol)):
		return l, invalid("listeners[%s].protocol %q: want one of %s", name, d.Protocol, strings.Join(nlbProtos, ", "))
	case *d.Port < 1 || *d.Port > 65535:
		return l, invalid("listeners[%s].port %d", name, *d.Port)
	case d.IpVersion == networkloadbalancer.IpVersionIpv6:
		return l, invalid("listeners[%s]: IPv6 is not modelled", name)
	}
	if _, ok := sets[*d.DefaultBackendSetName]; !ok {
		return l, invalid("listeners[%s].defaultBackendSetName %s: no such backend set", name, *d.DefaultBackendSetName)
	}
	l.BackendSet, l.Port, l.Protocol, l.PPv2 = *d.DefaultBackendSetName, *d.Port, string(d.Protocol), d.IsPpv2Enabled != nil && *d.IsPpv2Enabled
	return l, nil
}

func nlbHealthWire(hc HealthCheck) *networkloadbalancer.HealthChecker {
	out := &networkloadbalancer.HealthChecker{Protocol: networkloadbalancer.HealthCheckProtocolsEnum(hc.Protocol), Port: common.Int(hc.Port),
		Retries: common.Int(hc.Retries), TimeoutInMillis: common.Int(hc.TimeoutMs), IntervalInMillis: common.Int(hc.Interval),
		ReturnCode: common.Int(hc.ReturnCode)}
	if hc.Path != "" {
		out.UrlPath = common.String(hc.Path)
	}
	return out
}

// nlbWire is an NLB in the NLB API's JSON.
func nlbWire(b *Balancer) networkloadbalancer.NetworkLoadBalancer {
	return networkloadbalancer.NetworkLoadBalancer(nlbSummary(b))
}

func nlbSummary(b *Balancer) networkloadbalancer.NetworkLoadBalancerSummary {
	out := networkloadbalancer.NetworkLoadBalancerSummary{Id: common.String(b.ID), CompartmentId: common.String(b.Compartment),
		DisplayName: common.String(b.DisplayName), LifecycleState: networkloadbalancer.LifecycleStateEnum(b.State),
		TimeCreated: &common.SDKTime{Time: b.Created}, IpAddresses: []networkloadbalancer.IpAddress{}, IsPrivate: common.Bool(b.Private),
		NetworkSecurityGroupIds: slices.Clone(b.NSGs), FreeformTags: maps.Clone(b.FreeformTags), NlbIpVersion: networkloadbalancer.NlbIpVersionIpv4,
		Listeners: map[string]networkloadbalancer.Listener{}, BackendSets: map[string]networkloadbalancer.BackendSet{}}
	if len(b.Subnets) > 0 {
		out.SubnetId = common.String(b.Subnets[0])
	}
	if b.IP != "" {
		out.IpAddresses = append(out.IpAddresses, networkloadbalancer.IpAddress{IpAddress: common.String(b.IP), IsPublic: common.Bool(!b.Private),
			IpVersion: networkloadbalancer.IpVersionIpv4})
	}
	for name, l := range b.Listeners {
		out.Listeners[name] = networkloadbalancer.Listener{Name: common.String(name), DefaultBackendSetName: common.String(l.BackendSet),
			Port: common.Int(l.Port), Protocol: networkloadbalancer.ListenerProtocolsEnum(l.Protocol), IpVersion: networkloadbalancer.IpVersionIpv4,
			IsPpv2Enabled: common.Bool(l.PPv2)}
	}
	for name, s := range b.BackendSets {
		ws := networkloadbalancer.BackendSet{Name: common.String(name), Policy: networkloadbalancer.NetworkLoadBalancingPolicyEnum(s.Policy),
			HealthChecker: nlbHealthWire(s.Check), IsPreserveSource: common.Bool(s.PreserveSource), IpVersion: networkloadbalancer.IpVersionIpv4,
			Backends: []networkloadbalancer.Backend{}}
		for _, be := range s.Backends {
			wb := networkloadbalancer.Backend{Name: common.String(be.Name()), Port: common.Int(be.Port), Weight: common.Int(be.Weight),
				IsDrain: common.Bool(false), IsBackup: common.Bool(false), IsOffline: common.Bool(false)}
			if be.IP != "" {
				wb.IpAddress = common.String(be.IP)
			}
			if be.TargetID != "" {
				wb.TargetId = common.String(be.TargetID)
			}
			ws.Backends = append(ws.Backends, wb)
		}
		out.BackendSets[name] = ws
	}
	return out
}

func nlbWorkWire(w *workRequest) networkloadbalancer.WorkRequest {
	status := networkloadbalancer.OperationStatusEnum(w.State)
	pct := float32(0)
	if w.State == wrSucceeded {
		pct = 100
	}
	action := networkloadbalancer.ActionTypeUpdated
	switch {
	case w.create:
		action = networkloadbalancer.ActionTypeCreated
	case w.del:
		action = networkloadbalancer.ActionTypeDeleted
	}
	if w.running() {
		action = networkloadbalancer.ActionTypeInProgress
	}
	op := networkloadbalancer.OperationTypeUpdateNetworkLoadBalancer
	switch {
	case w.create:
		op = networkloadbalancer.OperationTypeCreateNetworkLoadBalancer
	case w.del:
		op = networkloadbalancer.OperationTypeDeleteNetworkLoadBalancer
	}
	out := networkloadbalancer.WorkRequest{OperationType: op, Status: status, Id: common.String(w.ID), CompartmentId: common.String(w.compartment),
		Resources: []networkloadbalancer.WorkRequestResource{{EntityType: common.String("NetworkLoadBalancer"), ActionType: action,
			Identifier: common.String(w.Balancer)}}, PercentComplete: &pct, TimeAccepted: &common.SDKTime{Time: w.Accepted}}
	if !w.Finished.IsZero() {
		out.TimeFinished = &common.SDKTime{Time: w.Finished}
	}
	return out
}
