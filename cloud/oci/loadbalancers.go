package oci

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/oracle/oci-go-sdk/v65/common"
	"github.com/oracle/oci-go-sdk/v65/loadbalancer"
	"github.com/oracle/oci-go-sdk/v65/networkloadbalancer"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud"
	kitlb "github.com/mooring-dev/mooring/cloud/kit/loadbalancer"
)

// OCI's flexible Load Balancers and Network Load Balancers for Services
// of type LoadBalancer, as oci-cloud-controller-manager makes them (its
// annotations, oci.oraclecloud.com/load-balancer-type choosing the kind,
// and its display names: an LB is named by the Service's UID, an NLB
// <namespace>/<name>/<UID>, so that one it made is found and adopted with
// its address): a listener and a backend set per port, the nodes'
// InternalIPs at their node ports as backends, kube-proxy's health check,
// freeform tags for the cluster and Service. Every change is a work
// request, followed until it is done; the security rules of the
// Service's mode (securityrules.go) are made once the load balancer is
// built.

// secretsGrant is what an operator enables so that mooring-ccm may read
// the Secrets that tls-secret names (docs/oci.md).
const secretsGrant = "the Helm value ccm.tlsSecrets=true, or the kustomize component deploy/components/linode-tls-secrets"

// ownerTags are mooring's freeform tags on a Service's load balancer;
// tagRules keeps its security rules' mode and hash, tagFrontendNSG the
// frontend NSG of mode NSG.
var ownerTags = kitlb.LabelTags{Prefix: "mooring"}

const (
	tagRules       = "mooring/rules"
	tagFrontendNSG = "mooring/frontend-nsg"
)

// LoadBalancer is the Service load balancers (cloud.LoadBalancerInventory
// too), shadowing kit.InstancesOnly's.
func (c *Cloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return c.lbs, true }

// Initialize takes a client of the cluster: the TLS Secrets of LB
// listeners are read with it, and the security rules tell with it which
// rules other Services still use.
func (c *Cloud) Initialize(b cloudprovider.ControllerClientBuilder, _ <-chan struct{}) {
	if b == nil {
		return
	}
	kc, err := b.Client("mooring-oci")
	if err != nil {
		klog.ErrorS(err, "No Kubernetes client for the OCI provider: TLS Secrets cannot be read, shared security rules are kept")
		return
	}
	c.SetKubeClient(kc)
}

// SetKubeClient sets the client of the cluster (Initialize's).
func (c *Cloud) SetKubeClient(kc kubernetes.Interface) {
	c.lbc.kube.Store(&kc)
	c.lbc.rules.SetServices(func(ctx context.Context) ([]*v1.Service, error) {
		list, err := kc.CoreV1().Services("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		out := make([]*v1.Service, 0, len(list.Items))
		for i := range list.Items {
			if list.Items[i].Spec.Type == v1.ServiceTypeLoadBalancer {
				out = append(out, &list.Items[i])
			}
		}
		return out, nil
	})
}

// lbCloud is kitlb.Cloud over the Load Balancer and Network Load
// Balancer clients.
type lbCloud struct {
	c     *Cloud
	lb    *loadbalancer.LoadBalancerClient
	nlb   *networkloadbalancer.NetworkLoadBalancerClient
	rules *SecurityRules
	kube  atomic.Pointer[kubernetes.Interface]
	// poll is the first wait between two reads of a work request.
	poll time.Duration
}

var (
	_ kitlb.Cloud[lbSpec]         = (*lbCloud)(nil)
	_ kitlb.IngressWorder[lbSpec] = (*lbCloud)(nil)
)

// newLBCloud makes the load balancers' clients from the Virtual Network
// client (its signer, no retries, its HTTP client).
func newLBCloud(c *Cloud) *lbCloud {
	lbc := &loadbalancer.LoadBalancerClient{BaseClient: c.network.BaseClient}
	lbc.BasePath = "20170115"
	lbc.SetRegion(c.cfg.Region)
	if ep := c.cfg.LoadBalancerEndpoint; ep != "" {
		lbc.Host = ep
	} else if c.cfg.NetworkEndpoint != "" {
		lbc.Host = c.cfg.NetworkEndpoint
	}
	nlbc := &networkloadbalancer.NetworkLoadBalancerClient{BaseClient: c.network.BaseClient}
	nlbc.BasePath = "20200501"
	nlbc.SetRegion(c.cfg.Region)
	if ep := c.cfg.NetworkLoadBalancerEndpoint; ep != "" {
		nlbc.Host = ep
	}
	return &lbCloud{c: c, lb: lbc, nlb: nlbc, rules: NewSecurityRules(c.network, nil), poll: 100 * time.Millisecond}
}

// call bounds one API call by the request timeout.
func (l *lbCloud) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, l.c.cfg.RequestTimeout.Duration)
}

// Name is the display name OCI's CCM gives svc's load balancer.
func (l *lbCloud) Name(svc *v1.Service) string {
	name := string(svc.UID)
	if lbType(svc) == TypeNLB {
		name = svc.Namespace + "/" + svc.Name + "/" + string(svc.UID)
	} else if p := l.c.cfg.LoadBalancer.NamePrefix; p != "" {
		name = strings.TrimSuffix(p, "-") + "-" + name
	}
	if len(name) > 1024 {
		name = name[:1024]
	}
	return name
}

// ID: OCI's CCM writes no id annotation.
func (l *lbCloud) ID(*v1.Service) string { return "" }

// busy maps OCI's 409 (a work request runs, the load balancer is not
// ACTIVE) to the kit's wait.
func busy(name string, err error) error {
	var se common.ServiceError
	if errors.As(err, &se) && se.GetHTTPStatusCode() == http.StatusConflict {
		return &cloud.PendingError{LoadBalancer: name, State: "busy (" + se.GetCode() + ": a work request runs)", After: 5 * time.Second}
	}
	return err
}

// invalidatedToken: OCI refuses a create's opc-retry-token whose earlier
// load balancer was deleted since (409 InvalidatedRetryToken).
func invalidatedToken(err error) bool {
	var se common.ServiceError
	return errors.As(err, &se) && se.GetHTTPStatusCode() == http.StatusConflict && se.GetCode() == "InvalidatedRetryToken"
}

func notFound(err error) bool {
	var se common.ServiceError
	return errors.As(err, &se) && se.GetHTTPStatusCode() == http.StatusNotFound
}

// List lists the load balancers and NLBs of every configured compartment.
func (l *lbCloud) List(ctx context.Context) ([]kitlb.Held[lbSpec], error) {
	ctx, cancel := l.call(ctx)
	defer cancel()
	var out []kitlb.Held[lbSpec]
	for _, comp := range l.c.cfg.Compartments {
		req := loadbalancer.ListLoadBalancersRequest{CompartmentId: common.String(comp), Limit: common.Int64(100)}
		for {
			resp, err := l.lb.ListLoadBalancers(ctx, req)
			if err != nil {
				return nil, fmt.Errorf("ListLoadBalancers: %w", err)
			}
			for _, b := range resp.Items {
				if b.LifecycleState != loadbalancer.LoadBalancerLifecycleStateDeleted {
					out = append(out, heldLB(b))
				}
			}
			if resp.OpcNextPage == nil {
				break
			}
			req.Page = resp.OpcNextPage
		}
		nreq := networkloadbalancer.ListNetworkLoadBalancersRequest{CompartmentId: common.String(comp), Limit: common.Int(100)}
		for {
			resp, err := l.nlb.ListNetworkLoadBalancers(ctx, nreq)
			if err != nil {
				return nil, fmt.Errorf("ListNetworkLoadBalancers: %w", err)
			}
			for _, b := range resp.Items {
				if b.LifecycleState != networkloadbalancer.LifecycleStateDeleted {
					out = append(out, heldNLB(networkloadbalancer.NetworkLoadBalancer(b)))
				}
			}
			if resp.OpcNextPage == nil {
				break
			}
			nreq.Page = resp.OpcNextPage
		}
	}
	return out, nil
}

// Get gets a load balancer by OCID: its kind says which API.
func (l *lbCloud) Get(ctx context.Context, id string) (kitlb.Held[lbSpec], bool, error) {
	ctx, cancel := l.call(ctx)
	defer cancel()
	switch {
	case strings.HasPrefix(id, "ocid1.loadbalancer."):
		resp, err := l.lb.GetLoadBalancer(ctx, loadbalancer.GetLoadBalancerRequest{LoadBalancerId: common.String(id)})
		if notFound(err) || err == nil && resp.LifecycleState == loadbalancer.LoadBalancerLifecycleStateDeleted {
			return kitlb.Held[lbSpec]{}, false, nil
		}
		if err != nil {
			return kitlb.Held[lbSpec]{}, false, err
		}
		return heldLB(resp.LoadBalancer), true, nil
	case strings.HasPrefix(id, "ocid1.networkloadbalancer."):
		resp, err := l.nlb.GetNetworkLoadBalancer(ctx, networkloadbalancer.GetNetworkLoadBalancerRequest{NetworkLoadBalancerId: common.String(id)})
		if notFound(err) || err == nil && resp.LifecycleState == networkloadbalancer.LifecycleStateDeleted {
			return kitlb.Held[lbSpec]{}, false, nil
		}
		if err != nil {
			return kitlb.Held[lbSpec]{}, false, err
		}
		return heldNLB(resp.NetworkLoadBalancer), true, nil
	}
	return kitlb.Held[lbSpec]{}, false, nil
}

func str(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func num(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// heldLB is an LB in normal form.
func heldLB(b loadbalancer.LoadBalancer) kitlb.Held[lbSpec] {
	spec := lbSpec{Type: TypeLB, Shape: str(b.ShapeName), Internal: b.IsPrivate != nil && *b.IsPrivate, Subnets: slices.Clone(b.SubnetIds),
		Compartment: str(b.CompartmentId), tags: b.FreeformTags, Rules: b.FreeformTags[tagRules]}
	if d := b.ShapeDetails; d != nil && spec.Shape == "flexible" {
		spec.FlexMin, spec.FlexMax = num(d.MinimumBandwidthInMbps), num(d.MaximumBandwidthInMbps)
	}
	spec.NSGs, spec.attached = userNSGs(b.NetworkSecurityGroupIds, b.FreeformTags), slices.Clone(b.NetworkSecurityGroupIds)
	for name, ln := range b.Listeners {
		out := lbListener{Name: name, Protocol: str(ln.Protocol), BackendSet: str(ln.DefaultBackendSetName), Port: num(ln.Port)}
		if s := ln.SslConfiguration; s != nil {
			out.Certificate = str(s.CertificateName)
		}
		if cc := ln.ConnectionConfiguration; cc != nil {
			if cc.IdleTimeout != nil {
				out.IdleTimeout = *cc.IdleTimeout
			}
			out.ProxyProtocol = num(cc.BackendTcpProxyProtocolVersion)
		}
		spec.Listeners = append(spec.Listeners, out)
	}
	for name, s := range b.BackendSets {
		set := lbBackendSet{Name: name, Policy: str(s.Policy)}
		if hc := s.HealthChecker; hc != nil {
			set.Check = lbCheck{Protocol: str(hc.Protocol), Path: str(hc.UrlPath), Port: num(hc.Port), ReturnCode: num(hc.ReturnCode),
				Retries: num(hc.Retries), TimeoutMs: num(hc.TimeoutInMillis), IntervalMs: num(hc.IntervalInMillis)}
		}
		for _, be := range s.Backends {
			set.Backends = append(set.Backends, fmt.Sprintf("%s:%d", str(be.IpAddress), num(be.Port)))
		}
		slices.Sort(set.Backends)
		spec.BackendSets = append(spec.BackendSets, set)
	}
	spec.Certificates = slices.Sorted(maps.Keys(b.Certificates))
	if len(spec.Certificates) == 0 {
		spec.Certificates = nil
	}
	normal(&spec)
	h := kitlb.Held[lbSpec]{ID: str(b.Id), Name: str(b.DisplayName), Owner: ownerTags.Owner(b.FreeformTags), Spec: spec}
	for _, ip := range b.IpAddresses {
		if ip.IpAddress != nil {
			h.Ingress = append(h.Ingress, kitlb.Ingress(*ip.IpAddress, "", false, false)...)
		}
	}
	switch b.LifecycleState {
	case loadbalancer.LoadBalancerLifecycleStateActive:
	case loadbalancer.LoadBalancerLifecycleStateFailed:
		h.Failed = string(b.LifecycleState)
	default:
		h.Pending = string(b.LifecycleState)
	}
	return h
}

// heldNLB is an NLB in normal form.
func heldNLB(b networkloadbalancer.NetworkLoadBalancer) kitlb.Held[lbSpec] {
	spec := lbSpec{Type: TypeNLB, Internal: b.IsPrivate != nil && *b.IsPrivate, Compartment: str(b.CompartmentId), tags: b.FreeformTags,
		Rules: b.FreeformTags[tagRules]}
	if b.SubnetId != nil {
		spec.Subnets = []string{*b.SubnetId}
	}
	spec.NSGs, spec.attached = userNSGs(b.NetworkSecurityGroupIds, b.FreeformTags), slices.Clone(b.NetworkSecurityGroupIds)
	for name, ln := range b.Listeners {
		spec.Listeners = append(spec.Listeners, lbListener{Name: name, Protocol: string(ln.Protocol), BackendSet: str(ln.DefaultBackendSetName),
			Port: num(ln.Port), PPv2: ln.IsPpv2Enabled != nil && *ln.IsPpv2Enabled})
	}
	for name, s := range b.BackendSets {
		set := lbBackendSet{Name: name, Policy: string(s.Policy), PreserveSource: s.IsPreserveSource != nil && *s.IsPreserveSource}
		if hc := s.HealthChecker; hc != nil {
			set.Check = lbCheck{Protocol: string(hc.Protocol), Path: str(hc.UrlPath), Port: num(hc.Port), ReturnCode: num(hc.ReturnCode),
				Retries: num(hc.Retries), TimeoutMs: num(hc.TimeoutInMillis), IntervalMs: num(hc.IntervalInMillis)}
		}
		for _, be := range s.Backends {
			set.Backends = append(set.Backends, fmt.Sprintf("%s:%d", str(be.IpAddress), num(be.Port)))
		}
		slices.Sort(set.Backends)
		spec.BackendSets = append(spec.BackendSets, set)
	}
	normal(&spec)
	h := kitlb.Held[lbSpec]{ID: str(b.Id), Name: str(b.DisplayName), Owner: ownerTags.Owner(b.FreeformTags), Spec: spec}
	for _, ip := range b.IpAddresses {
		if ip.IpAddress != nil {
			h.Ingress = append(h.Ingress, kitlb.Ingress(*ip.IpAddress, "", false, false)...)
		}
	}
	switch b.LifecycleState {
	case networkloadbalancer.LifecycleStateActive:
	case networkloadbalancer.LifecycleStateFailed:
		// An NLB goes FAILED when a work request fails; OCI's CCM goes on
		// with one that has an address.
		if len(h.Ingress) == 0 {
			h.Failed = string(b.LifecycleState)
		}
	default:
		h.Pending = string(b.LifecycleState)
	}
	return h
}

// userNSGs are the NSGs the Service asked for: the LB's, less the
// frontend NSG of mode NSG.
func userNSGs(ids []string, tags map[string]string) []string {
	var out []string
	for _, id := range ids {
		if id != tags[tagFrontendNSG] {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// normal sorts a spec's parts and drops empty lists.
func normal(s *lbSpec) {
	slices.SortFunc(s.Listeners, func(a, b lbListener) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(s.BackendSets, func(a, b lbBackendSet) int { return strings.Compare(a.Name, b.Name) })
	if len(s.NSGs) == 0 {
		s.NSGs = nil
	}
}

// Ingress words h's status: ipMode Proxy where the Service asks for it
// (ingress-ip-mode), speaks PROXY protocol or ends TLS.
func (l *lbCloud) Ingress(h kitlb.Held[lbSpec], spec lbSpec) []v1.LoadBalancerIngress {
	var out []v1.LoadBalancerIngress
	for _, in := range h.Ingress {
		out = append(out, kitlb.Ingress(in.IP, "", spec.Proxy, false)...)
	}
	return out
}

// tagsFor are a load balancer's freeform tags: its own (or the Service's
// initial ones), the owner's, and the rules' when they are made.
func tagsFor(have map[string]string, o kitlb.Owner, rules, frontend string) map[string]string {
	out := maps.Clone(have)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, ownerTags.Labels(o))
	delete(out, tagRules)
	if rules != "" {
		out[tagRules] = rules
	}
	delete(out, tagFrontendNSG)
	if frontend != "" {
		out[tagFrontendNSG] = frontend
	}
	return out
}

// Create makes the load balancer with its whole tree in one call. Its
// security rules are made once it is built (the rules tag is left out
// then, so that the kit updates it), except in mode None.
func (l *lbCloud) Create(ctx context.Context, name string, o kitlb.Owner, spec lbSpec) (kitlb.Held[lbSpec], error) {
	ctx, cancel := l.call(ctx)
	defer cancel()
	rules := ""
	if spec.rules.Mode == RuleModeNone {
		rules = spec.Rules
	}
	tags := tagsFor(spec.tags, o, rules, "")
	if spec.Type == TypeNLB {
		d := networkloadbalancer.CreateNetworkLoadBalancerDetails{CompartmentId: common.String(spec.Compartment), DisplayName: common.String(name),
			SubnetId: common.String(spec.Subnets[0]), IsPrivate: common.Bool(spec.Internal), NetworkSecurityGroupIds: spec.NSGs,
			FreeformTags: tags, Listeners: map[string]networkloadbalancer.ListenerDetails{}, BackendSets: map[string]networkloadbalancer.BackendSetDetails{}}
		for _, s := range spec.BackendSets {
			d.BackendSets[s.Name] = networkloadbalancer.BackendSetDetails{HealthChecker: nlbCheck(s.Check),
				Policy: networkloadbalancer.NetworkLoadBalancingPolicyEnum(s.Policy), IsPreserveSource: common.Bool(s.PreserveSource), Backends: nlbBackends(s)}
		}
		for _, ln := range spec.Listeners {
			d.Listeners[ln.Name] = networkloadbalancer.ListenerDetails{Name: common.String(ln.Name), DefaultBackendSetName: common.String(ln.BackendSet),
				Port: common.Int(ln.Port), Protocol: networkloadbalancer.ListenerProtocolsEnum(ln.Protocol), IsPpv2Enabled: common.Bool(ln.PPv2)}
		}
		resp, err := l.nlb.CreateNetworkLoadBalancer(ctx, networkloadbalancer.CreateNetworkLoadBalancerRequest{CreateNetworkLoadBalancerDetails: d,
			OpcRetryToken: common.String(retryToken(o.UID))})
		if invalidatedToken(err) {
			// The Service's earlier load balancer was deleted: a new token.
			resp, err = l.nlb.CreateNetworkLoadBalancer(ctx, networkloadbalancer.CreateNetworkLoadBalancerRequest{CreateNetworkLoadBalancerDetails: d})
		}
		if err != nil {
			return kitlb.Held[lbSpec]{}, busy(name, err)
		}
		return heldNLB(resp.NetworkLoadBalancer), nil
	}
	d := loadbalancer.CreateLoadBalancerDetails{CompartmentId: common.String(spec.Compartment), DisplayName: common.String(name),
		ShapeName: common.String(spec.Shape), SubnetIds: spec.Subnets, IsPrivate: common.Bool(spec.Internal), NetworkSecurityGroupIds: spec.NSGs,
		FreeformTags: tags, Listeners: map[string]loadbalancer.ListenerDetails{}, BackendSets: map[string]loadbalancer.BackendSetDetails{}}
	if spec.Shape == "flexible" {
		d.ShapeDetails = &loadbalancer.ShapeDetails{MinimumBandwidthInMbps: common.Int(spec.FlexMin), MaximumBandwidthInMbps: common.Int(spec.FlexMax)}
	}
	for name, ck := range spec.certs {
		if d.Certificates == nil {
			d.Certificates = map[string]loadbalancer.CertificateDetails{}
		}
		d.Certificates[name] = certDetails(name, ck)
	}
	for _, s := range spec.BackendSets {
		d.BackendSets[s.Name] = loadbalancer.BackendSetDetails{Policy: common.String(s.Policy), HealthChecker: lbHealth(s.Check), Backends: lbBackends(s)}
	}
	for _, ln := range spec.Listeners {
		d.Listeners[ln.Name] = listenerDetails(ln)
	}
	resp, err := l.lb.CreateLoadBalancer(ctx, loadbalancer.CreateLoadBalancerRequest{CreateLoadBalancerDetails: d,
		OpcRetryToken: common.String(retryToken(o.UID))})
	if invalidatedToken(err) {
		resp, err = l.lb.CreateLoadBalancer(ctx, loadbalancer.CreateLoadBalancerRequest{CreateLoadBalancerDetails: d})
	}
	if err != nil {
		return kitlb.Held[lbSpec]{}, busy(name, err)
	}
	wr, err := l.lb.GetWorkRequest(ctx, loadbalancer.GetWorkRequestRequest{WorkRequestId: resp.OpcWorkRequestId})
	if err != nil {
		return kitlb.Held[lbSpec]{}, fmt.Errorf("work request %s of the create: %w", str(resp.OpcWorkRequestId), err)
	}
	if wr.LifecycleState == loadbalancer.WorkRequestLifecycleStateFailed {
		return kitlb.Held[lbSpec]{}, fmt.Errorf("work request %s of the create failed: %s", str(wr.Id), lbWorkError(wr.WorkRequest))
	}
	h, ok, err := l.Get(ctx, str(wr.LoadBalancerId))
	if err == nil && !ok {
		err = fmt.Errorf("load balancer %s of work request %s is not there", str(wr.LoadBalancerId), str(wr.Id))
	}
	if err == nil && h.Pending == "" && rules == "" {
		// Built already: the kit asks nothing more of a built load
		// balancer, so its security rules (and frontend NSG) are made now.
		return l.Update(ctx, h, o, spec)
	}
	return h, err
}

// retryToken is the create's opc-retry-token: the Service's UID, as OCI's
// CCM sends it (tokens are at most 64 characters).
func retryToken(uid string) string {
	if len(uid) > 64 {
		return uid[:64]
	}
	return uid
}

func lbHealth(c lbCheck) *loadbalancer.HealthCheckerDetails {
	return &loadbalancer.HealthCheckerDetails{Protocol: common.String(c.Protocol), UrlPath: common.String(c.Path), Port: common.Int(c.Port),
		ReturnCode: common.Int(c.ReturnCode), Retries: common.Int(c.Retries), TimeoutInMillis: common.Int(c.TimeoutMs),
		IntervalInMillis: common.Int(c.IntervalMs)}
}

func nlbCheck(c lbCheck) *networkloadbalancer.HealthChecker {
	return &networkloadbalancer.HealthChecker{Protocol: networkloadbalancer.HealthCheckProtocolsEnum(c.Protocol), UrlPath: common.String(c.Path),
		Port: common.Int(c.Port), ReturnCode: common.Int(c.ReturnCode), Retries: common.Int(c.Retries), TimeoutInMillis: common.Int(c.TimeoutMs),
		IntervalInMillis: common.Int(c.IntervalMs)}
}

func splitBackend(be string) (string, int) {
	i := strings.LastIndex(be, ":")
	var port int
	fmt.Sscanf(be[i+1:], "%d", &port)
	return be[:i], port
}

func lbBackends(s lbBackendSet) []loadbalancer.BackendDetails {
	out := []loadbalancer.BackendDetails{}
	for _, be := range s.Backends {
		ip, port := splitBackend(be)
		out = append(out, loadbalancer.BackendDetails{IpAddress: common.String(ip), Port: common.Int(port), Weight: common.Int(1)})
	}
	return out
}

func nlbBackends(s lbBackendSet) []networkloadbalancer.Backend {
	out := []networkloadbalancer.Backend{}
	for _, be := range s.Backends {
		ip, port := splitBackend(be)
		b := networkloadbalancer.Backend{IpAddress: common.String(ip), Port: common.Int(port), Weight: common.Int(1)}
		if id := s.targets[be]; id != "" {
			b.TargetId = common.String(id)
		}
		out = append(out, b)
	}
	return out
}

func listenerDetails(ln lbListener) loadbalancer.ListenerDetails {
	d := loadbalancer.ListenerDetails{DefaultBackendSetName: common.String(ln.BackendSet), Port: common.Int(ln.Port), Protocol: common.String(ln.Protocol)}
	if ln.Certificate != "" {
		d.SslConfiguration = &loadbalancer.SslConfigurationDetails{CertificateName: common.String(ln.Certificate), VerifyDepth: common.Int(0),
			VerifyPeerCertificate: common.Bool(false)}
	}
	if ln.IdleTimeout != 0 || ln.ProxyProtocol != 0 {
		d.ConnectionConfiguration = &loadbalancer.ConnectionConfiguration{IdleTimeout: common.Int64(ln.IdleTimeout)}
		if ln.ProxyProtocol != 0 {
			d.ConnectionConfiguration.BackendTcpProxyProtocolVersion = common.Int(ln.ProxyProtocol)
		}
	}
	return d
}

func certDetails(name string, ck certKey) loadbalancer.CertificateDetails {
	d := loadbalancer.CertificateDetails{CertificateName: common.String(name), PublicCertificate: common.String(ck.cert), PrivateKey: common.String(ck.key)}
	if ck.ca != "" {
		d.CaCertificate = common.String(ck.ca)
	}
	if ck.passphrase != "" {
		d.Passphrase = common.String(ck.passphrase)
	}
	return d
}

func lbWorkError(wr loadbalancer.WorkRequest) string {
	var msgs []string
	for _, e := range wr.ErrorDetails {
		msgs = append(msgs, string(e.ErrorCode)+": "+str(e.Message))
	}
	if len(msgs) == 0 {
		return str(wr.Message)
	}
	return strings.Join(msgs, "; ")
}

// whenFree makes a write, and makes it again while OCI answers 409 (a
// work request of another runs on the load balancer: OCI takes one at a
// time), within loadBalancer.workRequestWait; then the 409 is the
// caller's (the kit's wait). Waiting here, not in the controller, keeps a
// change from being lost where a controller takes the wait for done (the
// library's, whose node sync takes a load balancer still being built as
// updated).
func (l *lbCloud) whenFree(ctx context.Context, call func(ctx context.Context) (*string, error)) (*string, error) {
	deadline := time.Now().Add(l.c.cfg.LoadBalancer.WorkRequestWait.Duration)
	pause := l.poll
	for {
		cctx, cancel := l.call(ctx)
		id, err := call(cctx)
		cancel()
		var se common.ServiceError
		if err == nil || !errors.As(err, &se) || se.GetHTTPStatusCode() != http.StatusConflict || time.Now().After(deadline) {
			return id, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(pause):
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// waitWork follows a work request of either API until it is done: nil
// when it SUCCEEDED, an error when it FAILED, a *cloud.PendingError when
// it still runs after loadBalancer.workRequestWait.
func (l *lbCloud) waitWork(ctx context.Context, kind, name, what string, id *string) error {
	if id == nil {
		return nil
	}
	deadline := time.Now().Add(l.c.cfg.LoadBalancer.WorkRequestWait.Duration)
	pause := l.poll
	for {
		cctx, cancel := l.call(ctx)
		var state, msg string
		var err error
		if kind == TypeNLB {
			var resp networkloadbalancer.GetWorkRequestResponse
			resp, err = l.nlb.GetWorkRequest(cctx, networkloadbalancer.GetWorkRequestRequest{WorkRequestId: id})
			state, msg = string(resp.Status), fmt.Sprintf("%.0f%% done", float32OrZero(resp.PercentComplete))
		} else {
			var resp loadbalancer.GetWorkRequestResponse
			resp, err = l.lb.GetWorkRequest(cctx, loadbalancer.GetWorkRequestRequest{WorkRequestId: id})
			state, msg = string(resp.LifecycleState), lbWorkError(resp.WorkRequest)
		}
		cancel()
		switch {
		case err != nil:
			return fmt.Errorf("%s: work request %s: %w", what, *id, err)
		case state == "SUCCEEDED":
			return nil
		case state == "FAILED" || state == "CANCELED":
			return fmt.Errorf("%s: work request %s %s: %s", what, *id, state, msg)
		case time.Now().After(deadline):
			return &cloud.PendingError{LoadBalancer: name, State: what + ": work request " + state, After: 5 * time.Second}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, 2*time.Second)
	}
}

func float32OrZero(p *float32) float32 {
	if p == nil {
		return 0
	}
	return *p
}

// certificate reads the TLS Secret ref (namespace/name or name, in svc's
// namespace): tls.crt and tls.key that match, ca.crt and passphrase if
// present.
func (l *lbCloud) certificate(ctx context.Context, svc *v1.Service, ref string) (certKey, error) {
	ns, name := svc.Namespace, ref
	if a, b, ok := strings.Cut(ref, "/"); ok {
		ns, name = a, b
	}
	what := fmt.Sprintf("service %s/%s: Secret %s/%s (%s)", svc.Namespace, svc.Name, ns, name, AnnLBTLSSecret)
	p := l.kube.Load()
	if p == nil {
		return certKey{}, fmt.Errorf("%s: the OCI provider has no Kubernetes client to read it with", what)
	}
	ctx, cancel := l.call(ctx)
	defer cancel()
	s, err := (*p).CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return certKey{}, fmt.Errorf("%s does not exist", what)
	case apierrors.IsForbidden(err):
		return certKey{}, fmt.Errorf("%s: mooring-ccm may not read Secrets; enable it with %s", what, secretsGrant)
	case err != nil:
		return certKey{}, fmt.Errorf("%s: %w", what, err)
	case len(s.Data[v1.TLSCertKey]) == 0 || len(s.Data[v1.TLSPrivateKeyKey]) == 0:
		return certKey{}, fmt.Errorf("%s lacks %s or %s", what, v1.TLSCertKey, v1.TLSPrivateKeyKey)
	}
	if _, err := tls.X509KeyPair(s.Data[v1.TLSCertKey], s.Data[v1.TLSPrivateKeyKey]); err != nil {
		return certKey{}, fmt.Errorf("%s: %s and %s are not a certificate and its key: %v", what, v1.TLSCertKey, v1.TLSPrivateKeyKey, err)
	}
	return certKey{cert: string(s.Data[v1.TLSCertKey]), key: string(s.Data[v1.TLSPrivateKeyKey]), ca: string(s.Data["ca.crt"]),
		passphrase: string(s.Data["passphrase"])}, nil
}

// heldRules is the RuleSet of what h holds: for Remove, and as the ports
// an Ensure leaves behind.
func (l *lbCloud) heldRules(h kitlb.Held[lbSpec]) RuleSet {
	mode, _, _ := strings.Cut(h.Spec.Rules, "-")
	rs := RuleSet{UID: h.Owner.UID, Mode: mode, LBSubnets: h.Spec.Subnets, NodeSubnets: l.c.cfg.LoadBalancer.NodeSubnets,
		FrontendNSG: h.Spec.tags[tagFrontendNSG], Namespace: h.Owner.Namespace, Name: h.Owner.Service, Compartment: h.Spec.Compartment}
	sets := map[string]lbBackendSet{}
	for _, s := range h.Spec.BackendSets {
		sets[s.Name] = s
		rs.HealthCheckPort = int32(s.Check.Port)
	}
	for _, ln := range h.Spec.Listeners {
		p := RulePort{Listener: int32(ln.Port), Protocol: "TCP"}
		if ln.Protocol == "UDP" {
			p.Protocol = "UDP"
		}
		if s := sets[ln.BackendSet]; len(s.Backends) > 0 {
			_, port := splitBackend(s.Backends[0])
			p.NodePort = int32(port)
		}
		rs.Ports = append(rs.Ports, p)
	}
	return rs
}

// Update makes h what spec says, one call (and its work request, waited
// for) for each difference, in the order OCI's CCM keeps: the shape, new
// certificates, backend sets before the listeners that use them, the
// listeners and backend sets that go; then the security rules, the NSGs
// (with mode NSG's frontend NSG) and the tags (adopting it). Its name,
// subnets and address stay. A 409 (a work request of another runs) and a
// work request still running after workRequestWait answer the kit's wait.
func (l *lbCloud) Update(ctx context.Context, h kitlb.Held[lbSpec], o kitlb.Owner, spec lbSpec) (kitlb.Held[lbSpec], error) {
	if h.Spec.Type != spec.Type {
		return h, fmt.Errorf("load balancer %s (%s) is an %s, the Service asks for an %s (%s): OCI cannot change it; delete the Service's load balancer to have it made again",
			h.Name, h.ID, strings.ToUpper(h.Spec.Type), strings.ToUpper(spec.Type), AnnType)
	}
	nlb := spec.Type == TypeNLB
	step := func(what string, call func(ctx context.Context) (*string, error)) error {
		id, err := l.whenFree(ctx, call)
		if err != nil {
			return busy(h.Name, fmt.Errorf("%s: %w", what, err))
		}
		kind := TypeLB
		if nlb {
			kind = TypeNLB
		}
		return l.waitWork(ctx, kind, h.Name, what, id)
	}
	lbID := common.String(h.ID)
	if !nlb && (spec.Shape != h.Spec.Shape || spec.FlexMin != h.Spec.FlexMin || spec.FlexMax != h.Spec.FlexMax) {
		if h.Spec.Shape == "flexible" && spec.Shape != "flexible" {
			return h, fmt.Errorf("load balancer %s (%s) is flexible: OCI does not make a flexible shape fixed (%s)", h.Name, h.ID, AnnLBShape)
		}
		d := loadbalancer.UpdateLoadBalancerShapeDetails{ShapeName: common.String(spec.Shape)}
		if spec.Shape == "flexible" {
			d.ShapeDetails = &loadbalancer.ShapeDetails{MinimumBandwidthInMbps: common.Int(spec.FlexMin), MaximumBandwidthInMbps: common.Int(spec.FlexMax)}
		}
		if err := step("update shape", func(ctx context.Context) (*string, error) {
			r, err := l.lb.UpdateLoadBalancerShape(ctx, loadbalancer.UpdateLoadBalancerShapeRequest{LoadBalancerId: lbID, UpdateLoadBalancerShapeDetails: d})
			return r.OpcWorkRequestId, err
		}); err != nil {
			return h, err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(spec.certs)) {
		if slices.Contains(h.Spec.Certificates, name) {
			continue // OCI's CCM never replaces a certificate of the same name
		}
		d := certDetails(name, spec.certs[name])
		if err := step("create certificate "+name, func(ctx context.Context) (*string, error) {
			r, err := l.lb.CreateCertificate(ctx, loadbalancer.CreateCertificateRequest{LoadBalancerId: lbID,
				CreateCertificateDetails: loadbalancer.CreateCertificateDetails(d)})
			return r.OpcWorkRequestId, err
		}); err != nil {
			return h, err
		}
	}
	haveSets := map[string]lbBackendSet{}
	for _, s := range h.Spec.BackendSets {
		haveSets[s.Name] = s
	}
	for _, s := range spec.BackendSets {
		old, ok := haveSets[s.Name]
		if ok && kitlb.Fingerprint(old) == kitlb.Fingerprint(s) {
			continue
		}
		if err := step("backend set "+s.Name, func(ctx context.Context) (*string, error) {
			switch {
			case nlb && ok:
				r, err := l.nlb.UpdateBackendSet(ctx, networkloadbalancer.UpdateBackendSetRequest{NetworkLoadBalancerId: lbID, BackendSetName: common.String(s.Name),
					UpdateBackendSetDetails: networkloadbalancer.UpdateBackendSetDetails{Policy: common.String(s.Policy),
						IsPreserveSource: common.Bool(s.PreserveSource), Backends: nlbBackendDetails(s), HealthChecker: nlbCheckDetails(s.Check)}})
				return r.OpcWorkRequestId, err
			case nlb:
				r, err := l.nlb.CreateBackendSet(ctx, networkloadbalancer.CreateBackendSetRequest{NetworkLoadBalancerId: lbID,
					CreateBackendSetDetails: networkloadbalancer.CreateBackendSetDetails{Name: common.String(s.Name),
						Policy: networkloadbalancer.NetworkLoadBalancingPolicyEnum(s.Policy), HealthChecker: nlbCheckDetails(s.Check),
						IsPreserveSource: common.Bool(s.PreserveSource), Backends: nlbBackendDetails(s)}})
				return r.OpcWorkRequestId, err
			case ok:
				r, err := l.lb.UpdateBackendSet(ctx, loadbalancer.UpdateBackendSetRequest{LoadBalancerId: lbID, BackendSetName: common.String(s.Name),
					UpdateBackendSetDetails: loadbalancer.UpdateBackendSetDetails{Policy: common.String(s.Policy), Backends: lbBackends(s),
						HealthChecker: lbHealth(s.Check)}})
				return r.OpcWorkRequestId, err
			default:
				r, err := l.lb.CreateBackendSet(ctx, loadbalancer.CreateBackendSetRequest{LoadBalancerId: lbID,
					CreateBackendSetDetails: loadbalancer.CreateBackendSetDetails{Name: common.String(s.Name), Policy: common.String(s.Policy),
						HealthChecker: lbHealth(s.Check), Backends: lbBackends(s)}})
				return r.OpcWorkRequestId, err
			}
		}); err != nil {
			return h, err
		}
	}
	haveListeners := map[string]lbListener{}
	for _, ln := range h.Spec.Listeners {
		haveListeners[ln.Name] = ln
	}
	for _, ln := range spec.Listeners {
		old, ok := haveListeners[ln.Name]
		if ok && old == ln {
			continue
		}
		if err := step("listener "+ln.Name, func(ctx context.Context) (*string, error) {
			switch {
			case nlb && ok:
				r, err := l.nlb.UpdateListener(ctx, networkloadbalancer.UpdateListenerRequest{NetworkLoadBalancerId: lbID, ListenerName: common.String(ln.Name),
					UpdateListenerDetails: networkloadbalancer.UpdateListenerDetails{DefaultBackendSetName: common.String(ln.BackendSet), Port: common.Int(ln.Port),
						Protocol: networkloadbalancer.ListenerProtocolsEnum(ln.Protocol), IsPpv2Enabled: common.Bool(ln.PPv2)}})
				return r.OpcWorkRequestId, err
			case nlb:
				r, err := l.nlb.CreateListener(ctx, networkloadbalancer.CreateListenerRequest{NetworkLoadBalancerId: lbID,
					CreateListenerDetails: networkloadbalancer.CreateListenerDetails{Name: common.String(ln.Name), DefaultBackendSetName: common.String(ln.BackendSet),
						Port: common.Int(ln.Port), Protocol: networkloadbalancer.ListenerProtocolsEnum(ln.Protocol), IsPpv2Enabled: common.Bool(ln.PPv2)}})
				return r.OpcWorkRequestId, err
			case ok:
				d := listenerDetails(ln)
				r, err := l.lb.UpdateListener(ctx, loadbalancer.UpdateListenerRequest{LoadBalancerId: lbID, ListenerName: common.String(ln.Name),
					UpdateListenerDetails: loadbalancer.UpdateListenerDetails{DefaultBackendSetName: d.DefaultBackendSetName, Port: d.Port,
						Protocol: d.Protocol, SslConfiguration: d.SslConfiguration, ConnectionConfiguration: d.ConnectionConfiguration}})
				return r.OpcWorkRequestId, err
			default:
				d := listenerDetails(ln)
				r, err := l.lb.CreateListener(ctx, loadbalancer.CreateListenerRequest{LoadBalancerId: lbID,
					CreateListenerDetails: loadbalancer.CreateListenerDetails{Name: common.String(ln.Name), DefaultBackendSetName: d.DefaultBackendSetName,
						Port: d.Port, Protocol: d.Protocol, SslConfiguration: d.SslConfiguration, ConnectionConfiguration: d.ConnectionConfiguration}})
				return r.OpcWorkRequestId, err
			}
		}); err != nil {
			return h, err
		}
	}
	for _, ln := range h.Spec.Listeners {
		if slices.ContainsFunc(spec.Listeners, func(w lbListener) bool { return w.Name == ln.Name }) {
			continue
		}
		if err := step("delete listener "+ln.Name, func(ctx context.Context) (*string, error) {
			if nlb {
				r, err := l.nlb.DeleteListener(ctx, networkloadbalancer.DeleteListenerRequest{NetworkLoadBalancerId: lbID, ListenerName: common.String(ln.Name)})
				return r.OpcWorkRequestId, err
			}
			r, err := l.lb.DeleteListener(ctx, loadbalancer.DeleteListenerRequest{LoadBalancerId: lbID, ListenerName: common.String(ln.Name)})
			return r.OpcWorkRequestId, err
		}); err != nil {
			return h, err
		}
	}
	for _, s := range h.Spec.BackendSets {
		if slices.ContainsFunc(spec.BackendSets, func(w lbBackendSet) bool { return w.Name == s.Name }) {
			continue
		}
		if err := step("delete backend set "+s.Name, func(ctx context.Context) (*string, error) {
			if nlb {
				r, err := l.nlb.DeleteBackendSet(ctx, networkloadbalancer.DeleteBackendSetRequest{NetworkLoadBalancerId: lbID, BackendSetName: common.String(s.Name)})
				return r.OpcWorkRequestId, err
			}
			r, err := l.lb.DeleteBackendSet(ctx, loadbalancer.DeleteBackendSetRequest{LoadBalancerId: lbID, BackendSetName: common.String(s.Name)})
			return r.OpcWorkRequestId, err
		}); err != nil {
			return h, err
		}
	}
	// The security rules, now that the load balancer is what it should
	// be: the ports it held are those whose rules may go.
	rs := spec.rules
	rs.LBSubnets, rs.Compartment = h.Spec.Subnets, h.Spec.Compartment
	rs.FrontendNSG = h.Spec.tags[tagFrontendNSG]
	held := l.heldRules(h)
	rs.HeldPorts, rs.HeldHealthCheckPort = held.Ports, held.HealthCheckPort
	if held.Mode != "" && held.Mode != rs.Mode && held.Mode != RuleModeNone {
		// The mode changed: the old mode's rules go first.
		if err := l.rules.Remove(ctx, held); err != nil {
			return h, fmt.Errorf("security rules of mode %s: %w", held.Mode, err)
		}
		rs.FrontendNSG = ""
	}
	frontend, err := l.rules.Ensure(ctx, rs)
	if err != nil {
		return h, fmt.Errorf("security rules: %w", err)
	}
	wantNSGs := slices.Clone(spec.NSGs)
	if frontend != "" {
		wantNSGs = append(wantNSGs, frontend)
	}
	haveNSGs := slices.Clone(h.Spec.attached)
	slices.Sort(wantNSGs)
	slices.Sort(haveNSGs)
	if !slices.Equal(wantNSGs, haveNSGs) {
		if err := step("update NSGs", func(ctx context.Context) (*string, error) {
			if nlb {
				r, err := l.nlb.UpdateNetworkSecurityGroups(ctx, networkloadbalancer.UpdateNetworkSecurityGroupsRequest{NetworkLoadBalancerId: lbID,
					UpdateNetworkSecurityGroupsDetails: networkloadbalancer.UpdateNetworkSecurityGroupsDetails{NetworkSecurityGroupIds: wantNSGs}})
				return r.OpcWorkRequestId, err
			}
			r, err := l.lb.UpdateNetworkSecurityGroups(ctx, loadbalancer.UpdateNetworkSecurityGroupsRequest{LoadBalancerId: lbID,
				UpdateNetworkSecurityGroupsDetails: loadbalancer.UpdateNetworkSecurityGroupsDetails{NetworkSecurityGroupIds: wantNSGs}})
			return r.OpcWorkRequestId, err
		}); err != nil {
			return h, err
		}
	}
	if tags := tagsFor(h.Spec.tags, o, spec.Rules, frontend); !maps.Equal(tags, h.Spec.tags) {
		if err := step("update tags", func(ctx context.Context) (*string, error) {
			if nlb {
				r, err := l.nlb.UpdateNetworkLoadBalancer(ctx, networkloadbalancer.UpdateNetworkLoadBalancerRequest{NetworkLoadBalancerId: lbID,
					UpdateNetworkLoadBalancerDetails: networkloadbalancer.UpdateNetworkLoadBalancerDetails{FreeformTags: tags}})
				return r.OpcWorkRequestId, err
			}
			r, err := l.lb.UpdateLoadBalancer(ctx, loadbalancer.UpdateLoadBalancerRequest{LoadBalancerId: lbID,
				UpdateLoadBalancerDetails: loadbalancer.UpdateLoadBalancerDetails{FreeformTags: tags}})
			return r.OpcWorkRequestId, err
		}); err != nil {
			return h, err
		}
	}
	next, ok, err := l.Get(ctx, h.ID)
	if err == nil && !ok {
		err = fmt.Errorf("load balancer %s (%s) is gone", h.Name, h.ID)
	}
	return next, err
}

func nlbCheckDetails(c lbCheck) *networkloadbalancer.HealthCheckerDetails {
	hc := nlbCheck(c)
	return &networkloadbalancer.HealthCheckerDetails{Protocol: hc.Protocol, UrlPath: hc.UrlPath, Port: hc.Port, ReturnCode: hc.ReturnCode,
		Retries: hc.Retries, TimeoutInMillis: hc.TimeoutInMillis, IntervalInMillis: hc.IntervalInMillis}
}

func nlbBackendDetails(s lbBackendSet) []networkloadbalancer.BackendDetails {
	out := []networkloadbalancer.BackendDetails{}
	for _, b := range nlbBackends(s) {
		out = append(out, networkloadbalancer.BackendDetails{IpAddress: b.IpAddress, Port: b.Port, Weight: b.Weight, TargetId: b.TargetId})
	}
	return out
}

// Delete deletes the load balancer and its security rules: a security
// list's before it (they name its ports), mode NSG's after it (its
// frontend NSG cannot go while attached). One already gone is no error.
func (l *lbCloud) Delete(ctx context.Context, h kitlb.Held[lbSpec]) error {
	rs := l.heldRules(h)
	manage := rs.Mode != "" && rs.Mode != RuleModeNone && rs.UID != ""
	if manage && rs.Mode != RuleModeNSG {
		if err := l.rules.Remove(ctx, rs); err != nil {
			return fmt.Errorf("security rules: %w", err)
		}
	}
	kind := TypeLB
	if strings.HasPrefix(h.ID, "ocid1.networkloadbalancer.") {
		kind = TypeNLB
	}
	id, err := l.whenFree(ctx, func(ctx context.Context) (*string, error) {
		if kind == TypeNLB {
			r, err := l.nlb.DeleteNetworkLoadBalancer(ctx, networkloadbalancer.DeleteNetworkLoadBalancerRequest{NetworkLoadBalancerId: common.String(h.ID)})
			return r.OpcWorkRequestId, err
		}
		r, err := l.lb.DeleteLoadBalancer(ctx, loadbalancer.DeleteLoadBalancerRequest{LoadBalancerId: common.String(h.ID)})
		return r.OpcWorkRequestId, err
	})
	switch {
	case notFound(err):
	case err != nil:
		return busy(h.Name, err)
	default:
		if err := l.waitWork(ctx, kind, h.Name, "delete", id); err != nil {
			return err
		}
	}
	if manage && rs.Mode == RuleModeNSG {
		if err := l.rules.Remove(ctx, rs); err != nil {
			return fmt.Errorf("security rules: %w", err)
		}
	}
	return nil
}
