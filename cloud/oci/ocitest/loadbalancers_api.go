package ocitest

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/oracle/oci-go-sdk/v65/common"
	"github.com/oracle/oci-go-sdk/v65/loadbalancer"
	"github.com/oracle/oci-go-sdk/v65/networkloadbalancer"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// The Load Balancer API (20170115): load balancers with their listeners,
// backend sets and certificates, and their work requests.

// Endpoint methods of the Load Balancer API (Calls, Fail).
const (
	MethodCreateLB        = "CreateLoadBalancer"
	MethodGetLB           = "GetLoadBalancer"
	MethodListLB          = "ListLoadBalancers"
	MethodUpdateLB        = "UpdateLoadBalancer"
	MethodDeleteLB        = "DeleteLoadBalancer"
	MethodUpdateLBShape   = "UpdateLoadBalancerShape"
	MethodUpdateLBNSGs    = "UpdateNetworkSecurityGroups"
	MethodCreateLBSet     = "CreateBackendSet"
	MethodUpdateLBSet     = "UpdateBackendSet"
	MethodDeleteLBSet     = "DeleteBackendSet"
	MethodCreateLBListen  = "CreateListener"
	MethodUpdateLBListen  = "UpdateListener"
	MethodDeleteLBListen  = "DeleteListener"
	MethodCreateLBCert    = "CreateCertificate"
	MethodListLBCerts     = "ListCertificates"
	MethodGetLBWork       = "GetLoadBalancerWorkRequest"
	MethodListLBWork      = "ListLoadBalancerWorkRequests"
	notFoundMessage       = "Authorization failed or requested resource not found."
	maxDisplayName        = 1024
	maxNSGs               = 5
	lbHealthIntervalMin   = 1000
	lbHealthIntervalMax   = 1800000
	nlbHealthIntervalMin  = 10000
	flexMinMbps           = 10
	flexMaxMbps           = 8000
	defaultHealthRetries  = 3
	defaultHealthTimeout  = 3000
	defaultHealthInterval = 10000
)

var (
	lbShapes   = []string{"10Mbps", "100Mbps", "400Mbps", "8000Mbps", "flexible"}
	lbPolicies = []string{"ROUND_ROBIN", "LEAST_CONNECTIONS", "IP_HASH"}
	lbProtos   = []string{"TCP", "HTTP", "HTTP2", "GRPC"}
)

// badRequest is a 400 of the Load Balancer or NLB API.
type badRequest struct{ code, msg string }

func (e *badRequest) Error() string { return e.msg }

func missing(field string) error {
	return &badRequest{"MissingParameter", field + " is required"}
}

func invalid(format string, args ...any) error {
	return &badRequest{"InvalidParameter", fmt.Sprintf(format, args...)}
}

// answerErr answers an error of a handler: a badRequest as its 400, any
// other as 500.
func answerErr(w http.ResponseWriter, err error) {
	if b, ok := err.(*badRequest); ok {
		ociError(w, http.StatusBadRequest, b.code, b.msg)
		return
	}
	ociError(w, http.StatusInternalServerError, "InternalServerError", err.Error())
}

// decode reads a strict JSON body into v.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if field, err := cloudtest.DecodeStrict(r.Body, v); err != nil {
		if field != "" {
			ociError(w, http.StatusBadRequest, "InvalidParameter", fmt.Sprintf("unknown field %q", field))
		} else {
			ociError(w, http.StatusBadRequest, "CannotParseRequest", err.Error())
		}
		return false
	}
	return true
}

func (c *Cloud) serveLB(w http.ResponseWriter, r *http.Request, path string) {
	parts := strings.Split(strings.TrimSuffix(path, "/"), "/")
	m := r.Method
	switch {
	case len(parts) == 1 && parts[0] == "loadBalancers" && m == http.MethodPost:
		c.lbCreate(w, r)
	case len(parts) == 1 && parts[0] == "loadBalancers" && m == http.MethodGet:
		c.lbList(w, r, KindLB)
	case len(parts) == 2 && parts[0] == "loadBalancerWorkRequests" && m == http.MethodGet:
		c.getWork(w, KindLB, parts[1])
	case len(parts) >= 2 && parts[0] == "loadBalancers":
		c.lbItem(w, r, parts[1], parts[2:])
	default:
		ociError(w, http.StatusNotFound, "NotFound", "path not modelled")
	}
}

// lbItem serves the paths of one load balancer.
func (c *Cloud) lbItem(w http.ResponseWriter, r *http.Request, id string, rest []string) {
	m := r.Method
	key := func(verb string) string { return verb + "/" + strings.Join(rest[:min(len(rest), 1)], "/") }
	method := map[string]string{
		"GET/": MethodGetLB, "PUT/": MethodUpdateLB, "DELETE/": MethodDeleteLB, "PUT/updateShape": MethodUpdateLBShape,
		"PUT/networkSecurityGroups": MethodUpdateLBNSGs, "POST/backendSets": MethodCreateLBSet, "PUT/backendSets": MethodUpdateLBSet,
		"DELETE/backendSets": MethodDeleteLBSet, "POST/listeners": MethodCreateLBListen, "PUT/listeners": MethodUpdateLBListen,
		"DELETE/listeners": MethodDeleteLBListen, "POST/certificates": MethodCreateLBCert, "GET/certificates": MethodListLBCerts,
		"GET/workRequests": MethodListLBWork,
	}[key(m)]
	coll := len(rest) > 0 && (rest[0] == "backendSets" || rest[0] == "listeners")
	named := coll && len(rest) == 2
	if method == "" || len(rest) > 2 || len(rest) == 2 && !named || coll && named == (m == http.MethodPost) {
		ociError(w, http.StatusNotFound, "NotFound", "path not modelled")
		return
	}
	if st := c.count(method, 0); st != 0 {
		ociError(w, st, codeOf(st), "injected fault")
		return
	}
	c.mu.Lock()
	b, ok := c.lbs.balancers[id]
	if !ok || b.Kind != KindLB {
		c.mu.Unlock()
		ociError(w, http.StatusNotFound, "NotAuthorizedOrNotFound", notFoundMessage)
		return
	}
	switch method {
	case MethodGetLB:
		out := lbWire(b)
		c.mu.Unlock()
		cloudtest.WriteJSON(w, http.StatusOK, out)
		return
	case MethodListLBCerts:
		var out []loadbalancer.Certificate
		for _, name := range slices.Sorted(maps.Keys(b.Certificates)) {
			out = append(out, loadbalancer.Certificate{CertificateName: common.String(name), PublicCertificate: common.String(b.Certificates[name]),
				CaCertificate: common.String("")})
		}
		c.mu.Unlock()
		if out == nil {
			out = []loadbalancer.Certificate{}
		}
		cloudtest.WriteJSON(w, http.StatusOK, out)
		return
	case MethodListLBWork:
		var out []loadbalancer.WorkRequest
		for _, wid := range c.lbs.order {
			if wr := c.lbs.work[wid]; wr.Balancer == id {
				out = append(out, lbWorkWire(wr))
			}
		}
		c.mu.Unlock()
		if out == nil {
			out = []loadbalancer.WorkRequest{}
		}
		cloudtest.WriteJSON(w, http.StatusOK, out)
		return
	}
	c.mu.Unlock()
	// A write: read and check the body before the state.
	var apply func(*Balancer)
	var err error
	del := false
	switch method {
	case MethodDeleteLB:
		del = true
	case MethodUpdateLB:
		var d loadbalancer.UpdateLoadBalancerDetails
		if !decode(w, r, &d) {
			return
		}
		if d.ReservedIps != nil || d.IpMode != "" || d.Ipv6SubnetCidr != nil || d.DefinedTags != nil || d.SecurityAttributes != nil {
			err = invalid("only displayName and freeformTags are modelled")
		} else if d.DisplayName != nil && (*d.DisplayName == "" || len(*d.DisplayName) > maxDisplayName) {
			err = invalid("displayName: 1 to %d characters", maxDisplayName)
		}
		apply = func(b *Balancer) {
			if d.DisplayName != nil {
				b.DisplayName = *d.DisplayName
			}
			if d.FreeformTags != nil {
				b.FreeformTags = maps.Clone(d.FreeformTags)
			}
		}
	case MethodUpdateLBShape:
		var d loadbalancer.UpdateLoadBalancerShapeDetails
		if !decode(w, r, &d) {
			return
		}
		var shape string
		var lo, hi int
		if shape, lo, hi, err = checkShape(d.ShapeName, d.ShapeDetails); err == nil && shape != "flexible" && b.Shape == "flexible" {
			err = invalid("a flexible shape cannot become a fixed one")
		}
		apply = func(b *Balancer) { b.Shape, b.FlexMin, b.FlexMax = shape, lo, hi }
	case MethodUpdateLBNSGs:
		var d loadbalancer.UpdateNetworkSecurityGroupsDetails
		if !decode(w, r, &d) {
			return
		}
		err = checkNSGs(d.NetworkSecurityGroupIds)
		apply = func(b *Balancer) { b.NSGs = slices.Clone(d.NetworkSecurityGroupIds) }
	case MethodCreateLBSet:
		var d loadbalancer.CreateBackendSetDetails
		if !decode(w, r, &d) {
			return
		}
		var set BackendSet
		if d.Name == nil || *d.Name == "" {
			err = missing("name")
		} else if set, err = lbSetFrom(*d.Name, loadbalancer.BackendSetDetails{Policy: d.Policy, HealthChecker: d.HealthChecker,
			Backends: d.Backends, SslConfiguration: d.SslConfiguration, BackendMaxConnections: d.BackendMaxConnections,
			SessionPersistenceConfiguration: d.SessionPersistenceConfiguration, LbCookieSessionPersistenceConfiguration: d.LbCookieSessionPersistenceConfiguration}); err == nil {
			if _, dup := c.snapshot(id).BackendSets[set.Name]; dup {
				err = &badRequest{"InvalidParameter", fmt.Sprintf("backend set %s exists", set.Name)}
			}
		}
		apply = func(b *Balancer) { b.BackendSets[set.Name] = set }
	case MethodUpdateLBSet:
		var d loadbalancer.UpdateBackendSetDetails
		if !decode(w, r, &d) {
			return
		}
		name := rest[1]
		if _, ok := c.snapshot(id).BackendSets[name]; !ok {
			ociError(w, http.StatusNotFound, "NotAuthorizedOrNotFound", notFoundMessage)
			return
		}
		var set BackendSet
		if d.Backends == nil {
			err = missing("backends")
		} else {
			set, err = lbSetFrom(name, loadbalancer.BackendSetDetails{Policy: d.Policy, HealthChecker: d.HealthChecker, Backends: d.Backends,
				SslConfiguration: d.SslConfiguration, BackendMaxConnections: d.BackendMaxConnections,
				SessionPersistenceConfiguration: d.SessionPersistenceConfiguration, LbCookieSessionPersistenceConfiguration: d.LbCookieSessionPersistenceConfiguration})
		}
		apply = func(b *Balancer) { b.BackendSets[name] = set }
	case MethodDeleteLBSet, MethodDeleteLBListen:
		name := rest[1]
		snap := c.snapshot(id)
		if method == MethodDeleteLBSet {
			if _, ok := snap.BackendSets[name]; !ok {
				ociError(w, http.StatusNotFound, "NotAuthorizedOrNotFound", notFoundMessage)
				return
			}
			for _, l := range snap.Listeners {
				if l.BackendSet == name {
					err = invalid("backend set %s is the default backend set of listener %s", name, l.Name)
				}
			}
			apply = func(b *Balancer) { delete(b.BackendSets, name) }
		} else {
			if _, ok := snap.Listeners[name]; !ok {
				ociError(w, http.StatusNotFound, "NotAuthorizedOrNotFound", notFoundMessage)
				return
			}
			apply = func(b *Balancer) { delete(b.Listeners, name) }
		}
	case MethodCreateLBListen, MethodUpdateLBListen:
		var d loadbalancer.ListenerDetails
		var name string
		if method == MethodCreateLBListen {
			var cd loadbalancer.CreateListenerDetails
			if !decode(w, r, &cd) {
				return
			}
			name = strOf(cd.Name)
			d = loadbalancer.ListenerDetails{DefaultBackendSetName: cd.DefaultBackendSetName, Port: cd.Port, Protocol: cd.Protocol,
				HostnameNames: cd.HostnameNames, PathRouteSetName: cd.PathRouteSetName, SslConfiguration: cd.SslConfiguration,
				ConnectionConfiguration: cd.ConnectionConfiguration, RoutingPolicyName: cd.RoutingPolicyName, RuleSetNames: cd.RuleSetNames}
			if name == "" {
				err = missing("name")
			} else if _, dup := c.snapshot(id).Listeners[name]; dup {
				err = invalid("listener %s exists", name)
			}
		} else {
			var ud loadbalancer.UpdateListenerDetails
			if !decode(w, r, &ud) {
				return
			}
			name = rest[1]
			if _, ok := c.snapshot(id).Listeners[name]; !ok {
				ociError(w, http.StatusNotFound, "NotAuthorizedOrNotFound", notFoundMessage)
				return
			}
			d = loadbalancer.ListenerDetails{DefaultBackendSetName: ud.DefaultBackendSetName, Port: ud.Port, Protocol: ud.Protocol,
				HostnameNames: ud.HostnameNames, PathRouteSetName: ud.PathRouteSetName, SslConfiguration: ud.SslConfiguration,
				ConnectionConfiguration: ud.ConnectionConfiguration, RoutingPolicyName: ud.RoutingPolicyName, RuleSetNames: ud.RuleSetNames}
		}
		var l Listener
		if err == nil {
			snap := c.snapshot(id)
			l, err = lbListenerFrom(name, d, snap.BackendSets, snap.Certificates)
		}
		apply = func(b *Balancer) { b.Listeners[name] = l }
	case MethodCreateLBCert:
		var d loadbalancer.CreateCertificateDetails
		if !decode(w, r, &d) {
			return
		}
		var pub string
		pub, err = checkCertificate(loadbalancer.CertificateDetails(d))
		if _, dup := c.snapshot(id).Certificates[strOf(d.CertificateName)]; err == nil && dup {
			err = invalid("certificate %s exists", strOf(d.CertificateName))
		}
		apply = func(b *Balancer) { b.Certificates[strOf(d.CertificateName)] = pub }
	}
	if err != nil {
		answerErr(w, err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok = c.lbs.balancers[id]
	switch {
	case !ok:
		ociError(w, http.StatusNotFound, "NotAuthorizedOrNotFound", notFoundMessage)
		return
	case c.busy(id) || b.State != StateActive && !(del && b.State == StateFailed):
		ociError(w, http.StatusConflict, "IncorrectState", fmt.Sprintf("load balancer %s is %s with a work request in progress; retry once it is done", id, b.State))
		return
	}
	wr := c.accept(KindLB, id, method, false, del, apply)
	w.Header().Set("opc-work-request-id", wr.ID)
	w.Header().Set("opc-request-id", "ocitest")
	w.WriteHeader(http.StatusOK)
}

// snapshot is a copy of the load balancer of id (zero when gone).
func (c *Cloud) snapshot(id string) Balancer {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b, ok := c.lbs.balancers[id]; ok {
		return b.clone()
	}
	return Balancer{Listeners: map[string]Listener{}, BackendSets: map[string]BackendSet{}, Certificates: map[string]string{}}
}

// lbCreate serves CreateLoadBalancer: the whole tree in one request.
func (c *Cloud) lbCreate(w http.ResponseWriter, r *http.Request) {
	if st := c.count(MethodCreateLB, 0); st != 0 {
		ociError(w, st, codeOf(st), "injected fault")
		return
	}
	var d loadbalancer.CreateLoadBalancerDetails
	if !decode(w, r, &d) {
		return
	}
	b, err := c.lbFromCreate(d)
	if err != nil {
		answerErr(w, err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lbs.init()
	if wid, ok := c.retried(w, r); ok {
		if _, ok := c.lbs.balancers[c.lbs.work[wid].Balancer]; !ok {
			ociError(w, http.StatusConflict, "InvalidatedRetryToken", "the retry token's load balancer is gone")
			return
		}
		w.Header().Set("opc-work-request-id", wid)
		w.WriteHeader(http.StatusOK)
		return
	}
	c.lbs.balancers[b.ID] = b
	wr := c.accept(KindLB, b.ID, MethodCreateLB, true, false, nil)
	c.remember(r, wr.ID)
	w.Header().Set("opc-work-request-id", wr.ID)
	w.Header().Set("opc-request-id", "ocitest")
	w.WriteHeader(http.StatusOK)
}

// retried answers the work request of an earlier create of the same
// opc-retry-token (c.mu held).
func (c *Cloud) retried(w http.ResponseWriter, r *http.Request) (string, bool) {
	tok := r.Header.Get("opc-retry-token")
	wid, ok := c.lbs.tokens[tok]
	return wid, ok && tok != ""
}

func (c *Cloud) remember(r *http.Request, wid string) {
	if tok := r.Header.Get("opc-retry-token"); tok != "" {
		c.lbs.tokens[tok] = wid
	}
}

// checkCompartment: the endpoint's compartment, or one of an instance.
func (c *Cloud) checkCompartment(id *string) error {
	if id == nil || *id == "" {
		return missing("compartmentId")
	}
	if *id != c.opts.Compartment && len(c.sorted(*id)) == 0 {
		return &badRequest{"RelatedResourceNotAuthorizedOrNotFound", fmt.Sprintf("compartment %s not found", *id)}
	}
	return nil
}

func (c *Cloud) lbFromCreate(d loadbalancer.CreateLoadBalancerDetails) (*Balancer, error) {
	if err := c.checkCompartment(d.CompartmentId); err != nil {
		return nil, err
	}
	if err := checkDisplayName(d.DisplayName); err != nil {
		return nil, err
	}
	shape, lo, hi, err := checkShape(d.ShapeName, d.ShapeDetails)
	if err != nil {
		return nil, err
	}
	switch {
	case len(d.SubnetIds) == 0:
		return nil, missing("subnetIds")
	case len(d.SubnetIds) > 2:
		return nil, invalid("subnetIds: one (regional) or two subnets")
	case d.ReservedIps != nil || d.Hostnames != nil || d.PathRouteSets != nil || d.RuleSets != nil || d.SslCipherSuites != nil || d.IpMode == "IPV6":
		return nil, invalid("reservedIps, hostnames, pathRouteSets, ruleSets, sslCipherSuites and IPv6 are not modelled")
	}
	for _, s := range d.SubnetIds {
		if !strings.HasPrefix(s, "ocid1.subnet.") {
			return nil, invalid("subnetIds: %q is not a subnet's OCID", s)
		}
	}
	if err := checkNSGs(d.NetworkSecurityGroupIds); err != nil {
		return nil, err
	}
	b := &Balancer{ID: c.newID(KindLB), Kind: KindLB, Compartment: *d.CompartmentId, DisplayName: *d.DisplayName, Shape: shape,
		FlexMin: lo, FlexMax: hi, Private: d.IsPrivate != nil && *d.IsPrivate, Subnets: slices.Clone(d.SubnetIds),
		NSGs: slices.Clone(d.NetworkSecurityGroupIds), Listeners: map[string]Listener{}, BackendSets: map[string]BackendSet{},
		Certificates: map[string]string{}, FreeformTags: maps.Clone(d.FreeformTags), Created: c.opts.Now().UTC().Truncate(time.Millisecond)}
	for name, cd := range d.Certificates {
		if cd.CertificateName == nil || *cd.CertificateName != name {
			return nil, invalid("certificates[%s]: certificateName must be its key", name)
		}
		pub, err := checkCertificate(cd)
		if err != nil {
			return nil, err
		}
		b.Certificates[name] = pub
	}
	for name, sd := range d.BackendSets {
		set, err := lbSetFrom(name, sd)
		if err != nil {
			return nil, err
		}
		b.BackendSets[name] = set
	}
	for name, ld := range d.Listeners {
		l, err := lbListenerFrom(name, ld, b.BackendSets, b.Certificates)
		if err != nil {
			return nil, err
		}
		b.Listeners[name] = l
	}
	return b, nil
}

func checkDisplayName(n *string) error {
	switch {
	case n == nil || *n == "":
		return missing("displayName")
	case len(*n) > maxDisplayName:
		return invalid("displayName: longer than %d characters", maxDisplayName)
	}
	return nil
}

// checkShape: a fixed shape, or flexible with 10 <= min <= max <= 8000.
func checkShape(name *string, d *loadbalancer.ShapeDetails) (string, int, int, error) {
	if name == nil || *name == "" {
		return "", 0, 0, missing("shapeName")
	}
	if !slices.Contains(lbShapes, *name) {
		return "", 0, 0, invalid("shapeName %q: want one of %s", *name, strings.Join(lbShapes, ", "))
	}
	if *name != "flexible" {
		if d != nil {
			return "", 0, 0, invalid("shapeDetails are for the flexible shape")
		}
		return *name, 0, 0, nil
	}
	if d == nil || d.MinimumBandwidthInMbps == nil || d.MaximumBandwidthInMbps == nil {
		return "", 0, 0, missing("shapeDetails.minimumBandwidthInMbps and maximumBandwidthInMbps (flexible)")
	}
	lo, hi := *d.MinimumBandwidthInMbps, *d.MaximumBandwidthInMbps
	if lo < flexMinMbps || hi > flexMaxMbps || lo > hi {
		return "", 0, 0, invalid("shapeDetails: want %d <= minimum <= maximum <= %d Mbps", flexMinMbps, flexMaxMbps)
	}
	return *name, lo, hi, nil
}

func checkNSGs(ids []string) error {
	if len(ids) > maxNSGs {
		return invalid("networkSecurityGroupIds: at most %d", maxNSGs)
	}
	for _, id := range ids {
		if !strings.HasPrefix(id, "ocid1.networksecuritygroup.") {
			return invalid("networkSecurityGroupIds: %q is not an NSG's OCID", id)
		}
	}
	return nil
}

// checkCertificate: a certificate name, a PEM certificate and, when
// given, its private key; the public certificate is kept.
func checkCertificate(d loadbalancer.CertificateDetails) (string, error) {
	if d.CertificateName == nil || *d.CertificateName == "" {
		return "", missing("certificateName")
	}
	pub := strOf(d.PublicCertificate)
	block, _ := pem.Decode([]byte(pub))
	if block == nil {
		return "", invalid("certificate %s: publicCertificate is not PEM", *d.CertificateName)
	}
	if _, err := x509.ParseCertificate(block.Bytes); err != nil {
		return "", invalid("certificate %s: publicCertificate: %v", *d.CertificateName, err)
	}
	if d.PrivateKey != nil {
		if _, err := tls.X509KeyPair([]byte(pub), []byte(*d.PrivateKey)); err != nil {
			return "", invalid("certificate %s: the private key does not match: %v", *d.CertificateName, err)
		}
	}
	return pub, nil
}

// lbSetFrom checks a backend set of the Load Balancer API.
func lbSetFrom(name string, d loadbalancer.BackendSetDetails) (BackendSet, error) {
	set := BackendSet{Name: name}
	switch {
	case d.Policy == nil:
		return set, missing("backendSets[" + name + "].policy")
	case !slices.Contains(lbPolicies, *d.Policy):
		return set, invalid("backendSets[%s].policy %q: want one of %s", name, *d.Policy, strings.Join(lbPolicies, ", "))
	case d.HealthChecker == nil || d.HealthChecker.Protocol == nil:
		return set, missing("backendSets[" + name + "].healthChecker.protocol")
	case d.SslConfiguration != nil || d.SessionPersistenceConfiguration != nil || d.LbCookieSessionPersistenceConfiguration != nil:
		return set, invalid("backendSets[%s]: SSL and session persistence are not modelled", name)
	}
	set.Policy = *d.Policy
	hc := d.HealthChecker
	set.Check = HealthCheck{Protocol: *hc.Protocol, Path: strOf(hc.UrlPath), Port: derefInt(hc.Port, 0), ReturnCode: derefInt(hc.ReturnCode, 200),
		Retries: derefInt(hc.Retries, defaultHealthRetries), TimeoutMs: derefInt(hc.TimeoutInMillis, defaultHealthTimeout),
		Interval: derefInt(hc.IntervalInMillis, defaultHealthInterval)}
	if err := checkHealth(name, set.Check, []string{"HTTP", "TCP"}, lbHealthIntervalMin); err != nil {
		return set, err
	}
	for _, bd := range d.Backends {
		if bd.IpAddress == nil || bd.Port == nil {
			return set, missing("backendSets[" + name + "].backends[].ipAddress and port")
		}
		be := Backend{IP: *bd.IpAddress, Port: *bd.Port, Weight: derefInt(bd.Weight, 1)}
		if err := checkBackend(name, be); err != nil {
			return set, err
		}
		set.Backends = append(set.Backends, be)
	}
	return set, nil
}

func checkHealth(set string, hc HealthCheck, protos []string, minInterval int) error {
	switch {
	case !slices.Contains(protos, hc.Protocol):
		return invalid("backendSets[%s].healthChecker.protocol %q: want one of %s", set, hc.Protocol, strings.Join(protos, ", "))
	case hc.Port < 0 || hc.Port > 65535:
		return invalid("backendSets[%s].healthChecker.port %d", set, hc.Port)
	case hc.Protocol == "HTTP" && !strings.HasPrefix(hc.Path, "/"):
		return missing("backendSets[" + set + "].healthChecker.urlPath (HTTP)")
	case hc.Interval < minInterval || hc.Interval > lbHealthIntervalMax:
		return invalid("backendSets[%s].healthChecker.intervalInMillis %d: want %d to %d", set, hc.Interval, minInterval, lbHealthIntervalMax)
	case hc.TimeoutMs < 1 || hc.Retries < 1:
		return invalid("backendSets[%s].healthChecker: timeoutInMillis and retries must be positive", set)
	}
	return nil
}

func checkBackend(set string, be Backend) error {
	if _, err := netip.ParseAddr(be.IP); err != nil {
		return invalid("backendSets[%s]: backend ipAddress %q", set, be.IP)
	}
	if be.Port < 0 || be.Port > 65535 || be.Weight < 0 {
		return invalid("backendSets[%s]: backend %s: bad port or weight", set, be.Name())
	}
	return nil
}

// lbListenerFrom checks a listener of the Load Balancer API against the
// backend sets and certificates it will have.
func lbListenerFrom(name string, d loadbalancer.ListenerDetails, sets map[string]BackendSet, certs map[string]string) (Listener, error) {
	l := Listener{Name: name}
	switch {
	case d.DefaultBackendSetName == nil || d.Port == nil || d.Protocol == nil:
		return l, missing("listeners[" + name + "]: defaultBackendSetName, port and protocol")
	case !slices.Contains(lbProtos, *d.Protocol):
		return l, invalid("listeners[%s].protocol %q: want one of %s", name, *d.Protocol, strings.Join(lbProtos, ", "))
	case *d.Port < 1 || *d.Port > 65535:
		return l, invalid("listeners[%s].port %d", name, *d.Port)
	case d.HostnameNames != nil || d.PathRouteSetName != nil || d.RoutingPolicyName != nil || len(d.RuleSetNames) > 0:
		return l, invalid("listeners[%s]: hostnames, path route sets, routing policies and rule sets are not modelled", name)
	}
	if _, ok := sets[*d.DefaultBackendSetName]; !ok {
		return l, invalid("listeners[%s].defaultBackendSetName %s: no such backend set", name, *d.DefaultBackendSetName)
	}
	l.BackendSet, l.Port, l.Protocol = *d.DefaultBackendSetName, *d.Port, *d.Protocol
	if s := d.SslConfiguration; s != nil {
		l.Certificate = strOf(s.CertificateName)
		if _, ok := certs[l.Certificate]; !ok {
			return l, invalid("listeners[%s].sslConfiguration.certificateName %q: no such certificate", name, l.Certificate)
		}
	}
	if cc := d.ConnectionConfiguration; cc != nil {
		if cc.IdleTimeout == nil {
			return l, missing("listeners[" + name + "].connectionConfiguration.idleTimeout")
		}
		l.IdleTimeout = *cc.IdleTimeout
		l.ProxyProtocol = derefInt(cc.BackendTcpProxyProtocolVersion, 0)
		if l.ProxyProtocol != 0 && l.ProxyProtocol != 1 && l.ProxyProtocol != 2 {
			return l, invalid("listeners[%s]: backendTcpProxyProtocolVersion %d: want 1 or 2", name, l.ProxyProtocol)
		}
	}
	return l, nil
}

// lbWire is a load balancer in the Load Balancer API's JSON (c.mu held).
func lbWire(b *Balancer) loadbalancer.LoadBalancer {
	out := loadbalancer.LoadBalancer{Id: common.String(b.ID), CompartmentId: common.String(b.Compartment), DisplayName: common.String(b.DisplayName),
		LifecycleState: loadbalancer.LoadBalancerLifecycleStateEnum(b.State), TimeCreated: &common.SDKTime{Time: b.Created},
		ShapeName: common.String(b.Shape), IsPrivate: common.Bool(b.Private), SubnetIds: slices.Clone(b.Subnets),
		NetworkSecurityGroupIds: slices.Clone(b.NSGs), FreeformTags: maps.Clone(b.FreeformTags), IpAddresses: []loadbalancer.IpAddress{},
		Listeners: map[string]loadbalancer.Listener{}, BackendSets: map[string]loadbalancer.BackendSet{},
		Certificates: map[string]loadbalancer.Certificate{}, IpMode: loadbalancer.LoadBalancerIpModeIpv4}
	if b.Shape == "flexible" {
		out.ShapeDetails = &loadbalancer.ShapeDetails{MinimumBandwidthInMbps: common.Int(b.FlexMin), MaximumBandwidthInMbps: common.Int(b.FlexMax)}
	}
	if b.IP != "" {
		out.IpAddresses = append(out.IpAddresses, loadbalancer.IpAddress{IpAddress: common.String(b.IP), IsPublic: common.Bool(!b.Private)})
	}
	for name, l := range b.Listeners {
		wl := loadbalancer.Listener{Name: common.String(name), DefaultBackendSetName: common.String(l.BackendSet), Port: common.Int(l.Port),
			Protocol: common.String(l.Protocol)}
		if l.Certificate != "" {
			wl.SslConfiguration = &loadbalancer.SslConfiguration{CertificateName: common.String(l.Certificate), VerifyDepth: common.Int(0),
				VerifyPeerCertificate: common.Bool(false)}
		}
		if l.IdleTimeout != 0 || l.ProxyProtocol != 0 {
			wl.ConnectionConfiguration = &loadbalancer.ConnectionConfiguration{IdleTimeout: common.Int64(l.IdleTimeout)}
			if l.ProxyProtocol != 0 {
				wl.ConnectionConfiguration.BackendTcpProxyProtocolVersion = common.Int(l.ProxyProtocol)
			}
		}
		out.Listeners[name] = wl
	}
	for name, s := range b.BackendSets {
		hc := s.Check
		ws := loadbalancer.BackendSet{Name: common.String(name), Policy: common.String(s.Policy), Backends: []loadbalancer.Backend{},
			HealthChecker: &loadbalancer.HealthChecker{Protocol: common.String(hc.Protocol), Port: common.Int(hc.Port),
				ReturnCode: common.Int(hc.ReturnCode), ResponseBodyRegex: common.String(""), Retries: common.Int(hc.Retries),
				TimeoutInMillis: common.Int(hc.TimeoutMs), IntervalInMillis: common.Int(hc.Interval)}}
		if hc.Path != "" {
			ws.HealthChecker.UrlPath = common.String(hc.Path)
		}
		for _, be := range s.Backends {
			ws.Backends = append(ws.Backends, loadbalancer.Backend{Name: common.String(be.Name()), IpAddress: common.String(be.IP),
				Port: common.Int(be.Port), Weight: common.Int(be.Weight), Drain: common.Bool(false), Backup: common.Bool(false), Offline: common.Bool(false)})
		}
		out.BackendSets[name] = ws
	}
	for name, pub := range b.Certificates {
		out.Certificates[name] = loadbalancer.Certificate{CertificateName: common.String(name), PublicCertificate: common.String(pub), CaCertificate: common.String("")}
	}
	return out
}

func lbWorkWire(w *workRequest) loadbalancer.WorkRequest {
	out := loadbalancer.WorkRequest{Id: common.String(w.ID), LoadBalancerId: common.String(w.Balancer), Type: common.String(w.Op),
		LifecycleState: loadbalancer.WorkRequestLifecycleStateEnum(w.State), Message: common.String(cmp.Or(w.Error, w.State)),
		TimeAccepted: &common.SDKTime{Time: w.Accepted}, ErrorDetails: []loadbalancer.WorkRequestError{}, CompartmentId: common.String(w.compartment)}
	if !w.Finished.IsZero() {
		out.TimeFinished = &common.SDKTime{Time: w.Finished}
	}
	if w.Error != "" {
		out.ErrorDetails = append(out.ErrorDetails, loadbalancer.WorkRequestError{ErrorCode: loadbalancer.WorkRequestErrorErrorCodeBadInput,
			Message: common.String(w.Error)})
	}
	return out
}

// getWork serves GetWorkRequest of either API.
func (c *Cloud) getWork(w http.ResponseWriter, kind, id string) {
	method := MethodGetLBWork
	if kind == KindNLB {
		method = MethodGetNLBWork
	}
	if st := c.count(method, 0); st != 0 {
		ociError(w, st, codeOf(st), "injected fault")
		return
	}
	c.mu.Lock()
	wr, ok := c.lbs.work[id]
	if !ok || wr.Kind != kind {
		c.mu.Unlock()
		ociError(w, http.StatusNotFound, "NotAuthorizedOrNotFound", notFoundMessage)
		return
	}
	var out any = lbWorkWire(wr)
	if kind == KindNLB {
		out = nlbWorkWire(wr)
	}
	c.mu.Unlock()
	cloudtest.WriteJSON(w, http.StatusOK, out)
}

// lbList serves ListLoadBalancers and ListNetworkLoadBalancers:
// compartmentId required, displayName and lifecycleState exact filters,
// in creation order, paged.
func (c *Cloud) lbList(w http.ResponseWriter, r *http.Request, kind string) {
	q := r.URL.Query()
	comp := q.Get("compartmentId")
	if comp == "" {
		ociError(w, http.StatusBadRequest, "MissingParameter", "compartmentId is required")
		return
	}
	method, pageKind := MethodListLB, "loadBalancers"
	if kind == KindNLB {
		method, pageKind = MethodListNLB, "networkLoadBalancers"
	}
	offset, limit, ok := c.page(w, r, pageKind, comp)
	if !ok {
		return
	}
	c.Before.Run(offset/max(limit, 1) + 1)
	if st := c.count(method, offset/max(limit, 1)+1); st != 0 {
		ociError(w, st, codeOf(st), "injected fault")
		return
	}
	var all []Balancer
	for _, b := range c.Balancers() {
		if b.Kind == kind && b.Compartment == comp && (q.Get("displayName") == "" || b.DisplayName == q.Get("displayName")) &&
			(q.Get("lifecycleState") == "" || b.State == q.Get("lifecycleState")) {
			all = append(all, b)
		}
	}
	from, to := min(offset, len(all)), min(offset+limit, len(all))
	nextPage(w, pageKind, comp, to, len(all))
	if kind == KindNLB {
		items := []networkloadbalancer.NetworkLoadBalancerSummary{}
		for i := range all[from:to] {
			items = append(items, nlbSummary(&all[from+i]))
		}
		cloudtest.WriteJSON(w, http.StatusOK, map[string]any{"items": items})
		return
	}
	items := []loadbalancer.LoadBalancer{}
	for i := range all[from:to] {
		items = append(items, lbWire(&all[from+i]))
	}
	cloudtest.WriteJSON(w, http.StatusOK, items)
}

func strOf(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func derefInt(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}
