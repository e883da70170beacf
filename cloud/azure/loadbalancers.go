package azure

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/kit/loadbalancer"
)

// Azure's load balancers for Services of type LoadBalancer, in Azure's
// model and cloud-provider-azure's names, so that what it made is found
// and adopted with its addresses: one Standard load balancer for the
// cluster (loadBalancerName, default kubernetes) and one for internal
// Services (its name and "-internal"), each with one backend pool of the
// cluster's name holding the nodes' NIC IP configurations; a Service has
// a frontend IP configuration on it ("a" and its UID), on a public IP
// (<loadBalancerName>-<frontend>, or the azure-pip-name annotation's) or
// a subnet's private address, a rule and a probe per port (to the node
// port) and security rules for its ports and source ranges.
//
// The kit sees one load balancer per Service: its frontend (Held.ID is
// the frontend's id) with its rules, probes, pool members and security
// rules. Every write of the shared load balancer, security group or NIC
// reads it, changes the Service's share and writes it whole under its
// etag (If-Match; 412: read again), one at a time per load balancer in
// this process. Azure builds asynchronously: while the load balancer's
// provisioningState is not Succeeded, the Service's share is Pending and
// nothing is written to it (the kit asks again).

// ownerTagPrefix starts the tag on the load balancer naming a frontend's
// owner: mooring-owner_<frontend> = cluster=<id>,uid=<uid>,service=<ns>/<name>.
const ownerTagPrefix = "mooring-owner_"

// cloud-provider-azure's public IP tags: the Services using it
// (namespace/name) and its cluster name (the load balancer's).
const (
	tagService     = "k8s-azure-service"
	tagClusterName = "k8s-azure-cluster-name"
)

// A public IP whose frontend went is deleted again after pipDeleteWait
// while Azure says it is in use, pipDeleteTries more times at most.
var (
	pipDeleteWait  = 2 * time.Second
	pipDeleteTries = 5
)

// lbWrites bounds the read-modify-write rounds of one change that other
// writers' etags keep refusing (412).
const lbWrites = 4

// LoadBalancer is the Service load balancers (cloud.LoadBalancerInventory
// too), shadowing kit.InstancesOnly's; none with disableLoadBalancers.
func (c *Cloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) {
	if c.lbs == nil {
		return nil, false
	}
	return c.lbs, true
}

// lbCloud is loadbalancer.Cloud over ARM.
type lbCloud struct {
	c       *Cloud
	lbs     *armnetwork.LoadBalancersClient
	nsgs    *armnetwork.SecurityGroupsClient
	pips    *armnetwork.PublicIPAddressesClient
	nicsAPI *armnetwork.InterfacesClient

	locks sync.Map // lower load balancer id -> *sync.Mutex

	mu       sync.Mutex
	nicIndex *nicIndex
}

// newLoadBalancers makes the provider's load balancers; nil with
// disableLoadBalancers.
func newLoadBalancers(c *Cloud, cred azcore.TokenCredential, opts *arm.ClientOptions) (*loadbalancer.Balancers[lbSpec], error) {
	if c.cfg.DisableLoadBalancers {
		return nil, nil
	}
	l := &lbCloud{c: c}
	var err error
	sub := c.cfg.SubscriptionID
	if l.lbs, err = armnetwork.NewLoadBalancersClient(sub, cred, opts); err != nil {
		return nil, err
	}
	if l.nsgs, err = armnetwork.NewSecurityGroupsClient(sub, cred, opts); err != nil {
		return nil, err
	}
	if l.pips, err = armnetwork.NewPublicIPAddressesClient(sub, cred, opts); err != nil {
		return nil, err
	}
	if l.nicsAPI, err = armnetwork.NewInterfacesClient(sub, cred, opts); err != nil {
		return nil, err
	}
	return loadbalancer.New[lbSpec](l, loadbalancer.Options{Cluster: c.cfg.ClusterID})
}

// lbName is the name of the public or the internal load balancer.
func (l *lbCloud) lbName(internal bool) string {
	if internal {
		return l.c.cfg.LoadBalancerName + "-internal"
	}
	return l.c.cfg.LoadBalancerName
}

func (l *lbCloud) lbID(internal bool) string {
	return "/subscriptions/" + l.c.cfg.SubscriptionID + "/resourceGroups/" + l.c.cfg.lbGroup() +
		"/providers/Microsoft.Network/loadBalancers/" + l.lbName(internal)
}

// poolID is the cluster's backend pool on the load balancer of lbID.
func (l *lbCloud) poolID(lbID string) string {
	return lbID + "/backendAddressPools/" + l.c.cfg.LoadBalancerName
}

func (l *lbCloud) lock(lbID string) func() {
	mu, _ := l.locks.LoadOrStore(strings.ToLower(lbID), &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	return mu.(*sync.Mutex).Unlock
}

// Name is the frontend's name, cloud-provider-azure's.
func (l *lbCloud) Name(svc *v1.Service) string {
	subnet := ""
	if internal, _ := strconv.ParseBool(svc.Annotations[AnnotationInternal]); internal {
		subnet = svc.Annotations[AnnotationInternalSubnet]
	}
	return frontendName(svc, subnet)
}

// ID: no annotation names a frontend.
func (l *lbCloud) ID(*v1.Service) string { return "" }

func (l *lbCloud) Desired(ctx context.Context, svc *v1.Service, nodes []*v1.Node) (lbSpec, error) {
	return l.desired(ctx, svc, nodes)
}

// pending is the kit's "still building" for a load balancer.
func pending(name, state string) error {
	return &cloud.PendingError{LoadBalancer: name, State: "provisioning state " + state, After: 2 * time.Second}
}

// respErr is err's ARM answer, if it is one.
func respErr(err error) (*azcore.ResponseError, bool) {
	var re *azcore.ResponseError
	ok := errors.As(err, &re)
	return re, ok
}

func isNotFound(err error) bool {
	re, ok := respErr(err)
	return ok && re.StatusCode == http.StatusNotFound
}

// isBusy: ARM refused a write while another runs on the resource.
func isBusy(err error) bool {
	re, ok := respErr(err)
	return ok && (re.ErrorCode == "AnotherOperationInProgress" || re.ErrorCode == "RetryableError" || re.StatusCode == http.StatusConflict)
}

func isStale(err error) bool {
	re, ok := respErr(err)
	return ok && re.StatusCode == http.StatusPreconditionFailed
}

// ifMatch is ctx with If-Match: etag (a new resource: If-None-Match: *).
func ifMatch(ctx context.Context, etag *string) context.Context {
	h := http.Header{}
	if etag != nil && *etag != "" {
		h.Set("If-Match", *etag)
	} else {
		h.Set("If-None-Match", "*")
	}
	return policy.WithHTTPHeader(ctx, h)
}

// getLB reads a load balancer; nil when there is none.
func (l *lbCloud) getLB(ctx context.Context, internal bool) (*armnetwork.LoadBalancer, error) {
	resp, err := l.lbs.Get(ctx, l.c.cfg.lbGroup(), l.lbName(internal), nil)
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &resp.LoadBalancer, nil
}

// putLB writes lb under its etag and answers it as ARM does at once
// (Updating), without waiting for the operation.
func (l *lbCloud) putLB(ctx context.Context, lb *armnetwork.LoadBalancer) (*armnetwork.LoadBalancer, error) {
	var raw *http.Response
	etag := lb.Etag
	lb.Etag = nil
	_, err := l.lbs.BeginCreateOrUpdate(policy.WithCaptureResponse(ifMatch(ctx, etag), &raw), l.c.cfg.lbGroup(), *lb.Name, *lb, nil)
	if err != nil {
		return nil, err
	}
	var out armnetwork.LoadBalancer
	if raw == nil {
		return lb, nil
	}
	if err := runtime.UnmarshalAsJSON(raw, &out); err != nil {
		return nil, fmt.Errorf("load balancer %s: the answer: %w", *lb.Name, err)
	}
	return &out, nil
}

func state(p *armnetwork.ProvisioningState) string {
	if p == nil {
		return ""
	}
	return string(*p)
}

func lbState(lb *armnetwork.LoadBalancer) string {
	if lb == nil || lb.Properties == nil {
		return ""
	}
	return state(lb.Properties.ProvisioningState)
}

// lastSegment is the name an ARM id ends with.
func lastSegment(id string) string { return id[strings.LastIndex(id, "/")+1:] }

// groupOf is the resource group an ARM id names.
func groupOf(id string) string {
	f := strings.Split(id, "/")
	for i := 0; i+1 < len(f); i++ {
		if strings.EqualFold(f[i], "resourceGroups") {
			return f[i+1]
		}
	}
	return ""
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// ownerTag writes o for the load balancer's tags.
func ownerTag(o loadbalancer.Owner) string {
	return "cluster=" + o.Cluster + ",uid=" + o.UID + ",service=" + o.Namespace + "/" + o.Service
}

func parseOwner(v string) loadbalancer.Owner {
	var o loadbalancer.Owner
	for _, kv := range strings.Split(v, ",") {
		k, val, _ := strings.Cut(kv, "=")
		switch k {
		case "cluster":
			o.Cluster = val
		case "uid":
			o.UID = val
		case "service":
			o.Namespace, o.Service, _ = strings.Cut(val, "/")
		}
	}
	return o
}

// lbView is what the held shares are read from: the load balancers, the
// security group and the public IPs' addresses.
type lbView struct {
	lbs  []*armnetwork.LoadBalancer
	nsg  *armnetwork.SecurityGroup
	pips map[string]string // lower public IP id -> address
}

// held reads the share of frontend f of lb.
func (l *lbCloud) held(lb *armnetwork.LoadBalancer, f *armnetwork.FrontendIPConfiguration, v *lbView) loadbalancer.Held[lbSpec] {
	name := deref(f.Name)
	h := loadbalancer.Held[lbSpec]{ID: deref(f.ID), Name: name}
	if t := lb.Tags[ownerTagPrefix+name]; t != nil {
		h.Owner = parseOwner(*t)
	}
	if st := lbState(lb); st != string(armnetwork.ProvisioningStateSucceeded) {
		h.Pending = st
		if st == string(armnetwork.ProvisioningStateFailed) {
			h.Pending, h.Failed = "", st
		}
	}
	s := lbSpec{Members: []string{}}
	addr := ""
	if fp := f.Properties; fp != nil {
		switch {
		case fp.Subnet != nil:
			s.Internal, s.Subnet = true, lastSegment(deref(fp.Subnet.ID))
			addr = deref(fp.PrivateIPAddress)
		case fp.PublicIPAddress != nil:
			pip := deref(fp.PublicIPAddress.ID)
			s.PIP, s.PIPGroup = lastSegment(pip), strings.ToLower(groupOf(pip))
			addr = v.pips[strings.ToLower(pip)]
		}
	}
	probes := map[string]*armnetwork.ProbePropertiesFormat{}
	var pools []string
	if p := lb.Properties; p != nil {
		for _, pr := range p.Probes {
			if pr != nil && pr.Properties != nil {
				probes[strings.ToLower(deref(pr.ID))] = pr.Properties
			}
		}
		for _, r := range p.LoadBalancingRules {
			if r == nil || r.Properties == nil || r.Properties.FrontendIPConfiguration == nil ||
				!strings.EqualFold(deref(r.Properties.FrontendIPConfiguration.ID), deref(f.ID)) {
				continue
			}
			rp := r.Properties
			probe := ""
			if rp.Probe != nil {
				if pp := probes[strings.ToLower(deref(rp.Probe.ID))]; pp != nil {
					probe = fmt.Sprintf("%s:%d:%s:%d:%d", state2(pp.Protocol), i32(pp.Port), deref(pp.RequestPath), i32(pp.IntervalInSeconds), probeCount(pp))
				}
			}
			if rp.EnableFloatingIP != nil && *rp.EnableFloatingIP {
				probe += ":floating"
			}
			s.Rules = append(s.Rules, fmt.Sprintf("%s/%d/%d/%s", state2(rp.Protocol), i32(rp.FrontendPort), i32(rp.BackendPort), probe))
			if rp.IdleTimeoutInMinutes != nil && *rp.IdleTimeoutInMinutes != 4 {
				s.Idle = int(*rp.IdleTimeoutInMinutes)
			}
			if rp.BackendAddressPool != nil {
				pools = append(pools, deref(rp.BackendAddressPool.ID))
			}
		}
		for _, pool := range p.BackendAddressPools {
			if pool == nil || pool.Properties == nil || !slices.ContainsFunc(pools, func(id string) bool { return strings.EqualFold(id, deref(pool.ID)) }) {
				continue
			}
			for _, ipc := range pool.Properties.BackendIPConfigurations {
				if ipc != nil {
					s.Members = append(s.Members, strings.ToLower(deref(ipc.ID)))
				}
			}
		}
	}
	slices.Sort(s.Rules)
	slices.Sort(s.Members)
	s.Members = slices.Compact(s.Members)
	if l.c.cfg.SecurityGroupName != "" {
		s.Ranges = securityRanges(v.nsg, name)
	}
	h.Spec = s
	if addr != "" {
		h.Ingress = loadbalancer.Ingress(addr, "", false, false)
	}
	return h
}

// state2 is an SDK enum's text.
func state2[T ~string](p *T) string {
	if p == nil {
		return ""
	}
	return string(*p)
}

func i32(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

func probeCount(pp *armnetwork.ProbePropertiesFormat) int32 {
	if pp.ProbeThreshold != nil {
		return *pp.ProbeThreshold
	}
	return i32(pp.NumberOfProbes)
}

// view reads the load balancers (both, or one), the security group and
// the addresses of the public IPs their frontends use.
func (l *lbCloud) view(ctx context.Context, which ...bool) (*lbView, error) {
	if len(which) == 0 {
		which = []bool{false, true}
	}
	v := &lbView{pips: map[string]string{}}
	for _, internal := range which {
		lb, err := l.getLB(ctx, internal)
		if err != nil {
			return nil, err
		}
		if lb != nil {
			v.lbs = append(v.lbs, lb)
		}
	}
	if len(v.lbs) == 0 {
		return v, nil
	}
	if l.c.cfg.SecurityGroupName != "" {
		resp, err := l.nsgs.Get(ctx, l.c.cfg.nsgGroup(), l.c.cfg.SecurityGroupName, nil)
		if err != nil {
			return nil, fmt.Errorf("security group %s: %w", l.c.cfg.SecurityGroupName, err)
		}
		v.nsg = &resp.SecurityGroup
	}
	groups := map[string]bool{}
	for _, lb := range v.lbs {
		for _, f := range frontends(lb) {
			if f.Properties != nil && f.Properties.PublicIPAddress != nil {
				groups[groupOf(deref(f.Properties.PublicIPAddress.ID))] = true
			}
		}
	}
	for _, g := range sortedKeys(groups) {
		pager := l.pips.NewListPager(g, nil)
		for pager.More() {
			page, err := pager.NextPage(ctx)
			if err != nil {
				return nil, fmt.Errorf("public IPs of %s: %w", g, err)
			}
			for _, p := range page.Value {
				if p != nil && p.Properties != nil {
					v.pips[strings.ToLower(deref(p.ID))] = deref(p.Properties.IPAddress)
				}
			}
		}
	}
	return v, nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func frontends(lb *armnetwork.LoadBalancer) []*armnetwork.FrontendIPConfiguration {
	if lb == nil || lb.Properties == nil {
		return nil
	}
	var out []*armnetwork.FrontendIPConfiguration
	for _, f := range lb.Properties.FrontendIPConfigurations {
		if f != nil {
			out = append(out, f)
		}
	}
	return out
}

// List lists every frontend of the cluster's load balancers.
func (l *lbCloud) List(ctx context.Context) ([]loadbalancer.Held[lbSpec], error) {
	v, err := l.view(ctx)
	if err != nil {
		return nil, err
	}
	var out []loadbalancer.Held[lbSpec]
	for _, lb := range v.lbs {
		for _, f := range frontends(lb) {
			out = append(out, l.held(lb, f, v))
		}
	}
	return out, nil
}

// internalOf says which load balancer a frontend id is on; ok false for
// an id of neither.
func (l *lbCloud) internalOf(id string) (internal, ok bool) {
	for _, in := range []bool{false, true} {
		if strings.HasPrefix(strings.ToLower(id), strings.ToLower(l.lbID(in))+"/frontendipconfigurations/") {
			return in, true
		}
	}
	return false, false
}

// Get reads the share of the frontend of id.
func (l *lbCloud) Get(ctx context.Context, id string) (loadbalancer.Held[lbSpec], bool, error) {
	internal, ok := l.internalOf(id)
	if !ok {
		return loadbalancer.Held[lbSpec]{}, false, nil
	}
	v, err := l.view(ctx, internal)
	if err != nil {
		return loadbalancer.Held[lbSpec]{}, false, err
	}
	for _, lb := range v.lbs {
		for _, f := range frontends(lb) {
			if strings.EqualFold(deref(f.ID), id) {
				return l.held(lb, f, v), true, nil
			}
		}
	}
	return loadbalancer.Held[lbSpec]{}, false, nil
}

func (l *lbCloud) Create(ctx context.Context, name string, o loadbalancer.Owner, spec lbSpec) (loadbalancer.Held[lbSpec], error) {
	return l.write(ctx, name, o, spec, nil)
}

func (l *lbCloud) Update(ctx context.Context, h loadbalancer.Held[lbSpec], o loadbalancer.Owner, spec lbSpec) (loadbalancer.Held[lbSpec], error) {
	if h.Spec.Internal != spec.Internal {
		// A frontend moves between the load balancers: the old one goes.
		if err := l.Delete(ctx, h); err != nil {
			return h, err
		}
	}
	next, err := l.write(ctx, h.Name, o, spec, &h)
	if err == nil && !h.Spec.Internal && h.Spec.PIP != "" && !spec.Internal && (h.Spec.PIP != spec.PIP || h.Spec.PIPGroup != spec.PIPGroup) {
		// The frontend moved to another public IP: the old one goes if
		// it was made for the Service.
		if err := l.dropPIP(ctx, h); err != nil {
			klog.FromContext(ctx).Error(err, "Could not delete the public IP the frontend left", "publicIP", h.Spec.PIP)
		}
	}
	return next, err
}

// write makes frontend name of the load balancer do spec for o: its
// public IP, its part of the load balancer, its security rules and the
// pool's members, each a read-modify-write under the etag.
func (l *lbCloud) write(ctx context.Context, name string, o loadbalancer.Owner, spec lbSpec, _ *loadbalancer.Held[lbSpec]) (loadbalancer.Held[lbSpec], error) {
	lbID := l.lbID(spec.Internal)
	defer l.lock(lbID)()
	logger := klog.FromContext(ctx).WithValues("loadBalancer", l.lbName(spec.Internal), "frontend", name)
	pipID, addr := "", ""
	if !spec.Internal {
		var err error
		if pipID, addr, err = l.ensurePIP(ctx, spec, o); err != nil {
			return loadbalancer.Held[lbSpec]{}, err
		}
	}
	var lb *armnetwork.LoadBalancer
	for try := 0; ; try++ {
		cur, err := l.getLB(ctx, spec.Internal)
		if err != nil {
			return loadbalancer.Held[lbSpec]{}, err
		}
		if st := lbState(cur); cur != nil && st != string(armnetwork.ProvisioningStateSucceeded) && st != string(armnetwork.ProvisioningStateFailed) {
			return loadbalancer.Held[lbSpec]{}, pending(name, st)
		}
		location := ""
		if cur == nil {
			if location, err = l.location(ctx); err != nil {
				return loadbalancer.Held[lbSpec]{}, err
			}
		}
		if l.holds(cur, name, spec, o) {
			lb = cur // its part is as called for: only pool members or security rules differ
			break
		}
		next := l.withFrontend(cur, spec, name, pipID, location, o)
		lb, err = l.putLB(ctx, next)
		if isStale(err) && try < lbWrites {
			logger.V(2).Info("Load balancer changed since read; reading it again")
			continue
		}
		if isBusy(err) {
			return loadbalancer.Held[lbSpec]{}, pending(name, "Updating")
		}
		if err != nil {
			return loadbalancer.Held[lbSpec]{}, err
		}
		break
	}
	var f *armnetwork.FrontendIPConfiguration
	for _, fr := range frontends(lb) {
		if strings.EqualFold(deref(fr.Name), name) {
			f = fr
		}
	}
	if f == nil {
		return loadbalancer.Held[lbSpec]{}, fmt.Errorf("load balancer %s answered without frontend %s", l.lbName(spec.Internal), name)
	}
	if spec.Internal && f.Properties != nil {
		addr = deref(f.Properties.PrivateIPAddress)
	}
	if err := l.writeSecurityRules(ctx, name, addr, spec); err != nil {
		return loadbalancer.Held[lbSpec]{}, err
	}
	if err := l.writeMembers(ctx, l.poolID(deref(lb.ID)), spec.Members); err != nil {
		return loadbalancer.Held[lbSpec]{}, err
	}
	v := &lbView{pips: map[string]string{strings.ToLower(pipID): addr}}
	h := l.held(lb, f, v)
	h.Spec.Members, h.Spec.Ranges = spec.Members, spec.Ranges // as just written
	return h, nil
}

// withFrontend is cur (nil: a new load balancer) with frontend name's
// share as spec says, its old rules and probes replaced, o's tag set.
func (l *lbCloud) withFrontend(cur *armnetwork.LoadBalancer, spec lbSpec, name, pipID, location string, o loadbalancer.Owner) *armnetwork.LoadBalancer {
	lbID := l.lbID(spec.Internal)
	lb := cur
	if lb == nil {
		lb = &armnetwork.LoadBalancer{Name: to.Ptr(l.lbName(spec.Internal)), Location: to.Ptr(location),
			SKU:        &armnetwork.LoadBalancerSKU{Name: to.Ptr(armnetwork.LoadBalancerSKUNameStandard), Tier: to.Ptr(armnetwork.LoadBalancerSKUTierRegional)},
			Properties: &armnetwork.LoadBalancerPropertiesFormat{}, Tags: map[string]*string{}}
	}
	if lb.Properties == nil {
		lb.Properties = &armnetwork.LoadBalancerPropertiesFormat{}
	}
	if lb.Tags == nil {
		lb.Tags = map[string]*string{}
	}
	p := lb.Properties
	poolID := l.poolID(lbID)
	if !slices.ContainsFunc(p.BackendAddressPools, func(b *armnetwork.BackendAddressPool) bool {
		return b != nil && strings.EqualFold(deref(b.Name), l.c.cfg.LoadBalancerName)
	}) {
		p.BackendAddressPools = append(p.BackendAddressPools, &armnetwork.BackendAddressPool{Name: to.Ptr(l.c.cfg.LoadBalancerName)})
	}
	for _, b := range p.BackendAddressPools {
		if b != nil && strings.EqualFold(deref(b.Name), l.c.cfg.LoadBalancerName) {
			poolID = lbID + "/backendAddressPools/" + deref(b.Name)
		}
	}
	frontendID := lbID + "/frontendIPConfigurations/" + name
	fp := &armnetwork.FrontendIPConfigurationPropertiesFormat{}
	if spec.Internal {
		fp.Subnet = &armnetwork.Subnet{ID: to.Ptr(l.subnetID(spec.Subnet))}
		fp.PrivateIPAllocationMethod = to.Ptr(armnetwork.IPAllocationMethodDynamic)
		for _, f := range p.FrontendIPConfigurations {
			// A private address stays.
			if f != nil && strings.EqualFold(deref(f.Name), name) && f.Properties != nil && f.Properties.PrivateIPAddress != nil {
				fp.PrivateIPAddress = f.Properties.PrivateIPAddress
				fp.PrivateIPAllocationMethod = f.Properties.PrivateIPAllocationMethod
			}
		}
	} else {
		fp.PublicIPAddress = &armnetwork.PublicIPAddress{ID: to.Ptr(pipID)}
	}
	p.FrontendIPConfigurations = slices.DeleteFunc(p.FrontendIPConfigurations, func(f *armnetwork.FrontendIPConfiguration) bool {
		return f == nil || strings.EqualFold(deref(f.Name), name)
	})
	p.FrontendIPConfigurations = append(p.FrontendIPConfigurations, &armnetwork.FrontendIPConfiguration{Name: to.Ptr(name), Properties: fp})
	p.LoadBalancingRules, p.Probes = withoutFrontend(p.LoadBalancingRules, p.Probes, frontendID)
	for _, r := range spec.Rules {
		proto, port, nodePort, probe := parseRule(r)
		ruleName := fmt.Sprintf("%s-%s-%d", name, strings.ToUpper(proto), port)
		rp := &armnetwork.LoadBalancingRulePropertiesFormat{
			FrontendIPConfiguration: &armnetwork.SubResource{ID: to.Ptr(frontendID)},
			BackendAddressPool:      &armnetwork.SubResource{ID: to.Ptr(poolID)},
			Protocol:                to.Ptr(armnetwork.TransportProtocol(proto)),
			FrontendPort:            to.Ptr(port), BackendPort: to.Ptr(nodePort),
			EnableFloatingIP: to.Ptr(false),
			LoadDistribution: to.Ptr(armnetwork.LoadDistributionDefault),
		}
		if probe != "" {
			p.Probes = append(p.Probes, &armnetwork.Probe{Name: to.Ptr(ruleName), Properties: probeProps(probe)})
			rp.Probe = &armnetwork.SubResource{ID: to.Ptr(lbID + "/probes/" + ruleName)}
		}
		if proto == "Tcp" {
			rp.EnableTCPReset = to.Ptr(true)
			rp.IdleTimeoutInMinutes = to.Ptr(int32(4))
			if spec.Idle != 0 {
				rp.IdleTimeoutInMinutes = to.Ptr(int32(spec.Idle))
			}
		}
		p.LoadBalancingRules = append(p.LoadBalancingRules, &armnetwork.LoadBalancingRule{Name: to.Ptr(ruleName), Properties: rp})
	}
	lb.Tags[ownerTagPrefix+name] = to.Ptr(ownerTag(o))
	return lb
}

// withoutFrontend drops the rules on frontend and the probes only they
// used.
func withoutFrontend(rules []*armnetwork.LoadBalancingRule, probes []*armnetwork.Probe, frontend string) ([]*armnetwork.LoadBalancingRule, []*armnetwork.Probe) {
	dropped := map[string]bool{}
	rules = slices.DeleteFunc(rules, func(r *armnetwork.LoadBalancingRule) bool {
		if r == nil || r.Properties == nil {
			return true
		}
		if r.Properties.FrontendIPConfiguration != nil && strings.EqualFold(deref(r.Properties.FrontendIPConfiguration.ID), frontend) {
			if r.Properties.Probe != nil {
				dropped[strings.ToLower(deref(r.Properties.Probe.ID))] = true
			}
			return true
		}
		return false
	})
	for _, r := range rules {
		if r.Properties.Probe != nil {
			delete(dropped, strings.ToLower(deref(r.Properties.Probe.ID)))
		}
	}
	probes = slices.DeleteFunc(probes, func(p *armnetwork.Probe) bool { return p == nil || dropped[strings.ToLower(deref(p.ID))] })
	return rules, probes
}

// parseRule reads a spec's rule: "Tcp/80/30080/<probe>".
func parseRule(r string) (proto string, port, nodePort int32, probe string) {
	f := strings.SplitN(r, "/", 4)
	a, _ := strconv.Atoi(f[1])
	b, _ := strconv.Atoi(f[2])
	return f[0], int32(a), int32(b), f[3]
}

// probeProps writes a spec's probe: "<proto>:<port>:<path>:<interval>:<count>".
func probeProps(probe string) *armnetwork.ProbePropertiesFormat {
	f := strings.SplitN(probe, ":", 5)
	port, _ := strconv.Atoi(f[1])
	interval, _ := strconv.Atoi(f[3])
	count, _ := strconv.Atoi(f[4])
	pp := &armnetwork.ProbePropertiesFormat{Protocol: to.Ptr(armnetwork.ProbeProtocol(f[0])), Port: to.Ptr(int32(port)),
		IntervalInSeconds: to.Ptr(int32(interval)), ProbeThreshold: to.Ptr(int32(count))}
	if f[2] != "" {
		pp.RequestPath = to.Ptr(f[2])
	}
	return pp
}

func (l *lbCloud) subnetID(subnet string) string {
	cfg := l.c.cfg
	return "/subscriptions/" + cfg.SubscriptionID + "/resourceGroups/" + cfg.vnetGroup() + "/providers/Microsoft.Network/virtualNetworks/" +
		cfg.VnetName + "/subnets/" + subnet
}

// ensurePIP makes the Service's public IP when there is none (tagged as
// cloud-provider-azure tags its own), and answers its id and address.
func (l *lbCloud) ensurePIP(ctx context.Context, spec lbSpec, o loadbalancer.Owner) (id, addr string, err error) {
	rg := l.pipGroup(spec)
	resp, err := l.pips.Get(ctx, rg, spec.PIP, nil)
	switch {
	case err == nil:
		p := resp.PublicIPAddress
		if p.Properties == nil || p.Properties.IPAddress == nil {
			return "", "", pending(spec.PIP, "without an address")
		}
		return deref(p.ID), *p.Properties.IPAddress, nil
	case !isNotFound(err):
		return "", "", fmt.Errorf("public IP %s: %w", spec.PIP, err)
	}
	location, err := l.location(ctx)
	if err != nil {
		return "", "", err
	}
	pip := armnetwork.PublicIPAddress{Location: to.Ptr(location),
		SKU: &armnetwork.PublicIPAddressSKU{Name: to.Ptr(armnetwork.PublicIPAddressSKUNameStandard), Tier: to.Ptr(armnetwork.PublicIPAddressSKUTierRegional)},
		Properties: &armnetwork.PublicIPAddressPropertiesFormat{PublicIPAllocationMethod: to.Ptr(armnetwork.IPAllocationMethodStatic),
			PublicIPAddressVersion: to.Ptr(armnetwork.IPVersionIPv4)},
		Tags: map[string]*string{tagService: to.Ptr(o.Namespace + "/" + o.Service), tagClusterName: to.Ptr(l.c.cfg.LoadBalancerName)}}
	var raw *http.Response
	if _, err := l.pips.BeginCreateOrUpdate(policy.WithCaptureResponse(ifMatch(ctx, nil), &raw), rg, spec.PIP, pip, nil); err != nil {
		if isBusy(err) || isStale(err) {
			return "", "", pending(spec.PIP, "being made")
		}
		return "", "", fmt.Errorf("create public IP %s: %w", spec.PIP, err)
	}
	var made armnetwork.PublicIPAddress
	if raw == nil || runtime.UnmarshalAsJSON(raw, &made) != nil || made.Properties == nil || made.Properties.IPAddress == nil {
		return "", "", pending(spec.PIP, "without an address")
	}
	klog.FromContext(ctx).Info("Created a public IP", "publicIP", spec.PIP, "resourceGroup", rg, "address", *made.Properties.IPAddress)
	return deref(made.ID), *made.Properties.IPAddress, nil
}

func (l *lbCloud) pipGroup(spec lbSpec) string {
	if strings.EqualFold(spec.PIPGroup, l.c.cfg.lbGroup()) || spec.PIPGroup == "" {
		return l.c.cfg.lbGroup()
	}
	return spec.PIPGroup
}

// Delete drops the frontend's share: its rules, probes and frontend (the
// whole load balancer with its last frontend, its pool emptied first), its
// security rules, and its public IP when cloud-provider-azure's tags say
// it was made for the Service.
func (l *lbCloud) Delete(ctx context.Context, h loadbalancer.Held[lbSpec]) error {
	internal, ok := l.internalOf(h.ID)
	if !ok {
		return nil
	}
	lbID := l.lbID(internal)
	defer l.lock(lbID)()
	for try := 0; ; try++ {
		cur, err := l.getLB(ctx, internal)
		if err != nil {
			return err
		}
		if cur == nil {
			break
		}
		if st := lbState(cur); st != string(armnetwork.ProvisioningStateSucceeded) && st != string(armnetwork.ProvisioningStateFailed) {
			return pending(h.Name, st)
		}
		p := cur.Properties
		if p == nil {
			break
		}
		before := len(p.FrontendIPConfigurations)
		p.LoadBalancingRules, p.Probes = withoutFrontend(p.LoadBalancingRules, p.Probes, h.ID)
		p.FrontendIPConfigurations = slices.DeleteFunc(p.FrontendIPConfigurations, func(f *armnetwork.FrontendIPConfiguration) bool {
			return f == nil || strings.EqualFold(deref(f.ID), h.ID)
		})
		delete(cur.Tags, ownerTagPrefix+h.Name)
		if len(p.FrontendIPConfigurations) == 0 {
			if err := l.dropLB(ctx, cur); err != nil {
				return err
			}
			break
		}
		if len(p.FrontendIPConfigurations) == before {
			break // nothing of it on the load balancer
		}
		_, err = l.putLB(ctx, cur)
		if isStale(err) && try < lbWrites {
			continue
		}
		if isBusy(err) {
			return pending(h.Name, "Updating")
		}
		if err != nil {
			return err
		}
		break
	}
	if err := l.writeSecurityRules(ctx, h.Name, "", lbSpec{}); err != nil {
		return err
	}
	if h.Spec.PIP != "" {
		return l.dropPIP(ctx, h)
	}
	return nil
}

// dropLB deletes a load balancer left without frontends: the NICs leave
// its pool first.
func (l *lbCloud) dropLB(ctx context.Context, lb *armnetwork.LoadBalancer) error {
	if err := l.writeMembers(ctx, l.poolID(deref(lb.ID)), nil); err != nil {
		return err
	}
	_, err := l.lbs.BeginDelete(ifMatch(ctx, lb.Etag), l.c.cfg.lbGroup(), deref(lb.Name), nil)
	if isBusy(err) || isStale(err) {
		return pending(deref(lb.Name), "Updating")
	}
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("delete load balancer %s: %w", deref(lb.Name), err)
	}
	klog.FromContext(ctx).Info("Deleted the load balancer: its last frontend went", "loadBalancer", deref(lb.Name))
	return nil
}

// dropPIP deletes the Service's public IP if it was made for it
// (cloud-provider-azure's tags naming the Service and the cluster).
func (l *lbCloud) dropPIP(ctx context.Context, h loadbalancer.Held[lbSpec]) error {
	rg := l.pipGroup(h.Spec)
	resp, err := l.pips.Get(ctx, rg, h.Spec.PIP, nil)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("public IP %s: %w", h.Spec.PIP, err)
	}
	tags := resp.Tags
	if deref(tags[tagClusterName]) != l.c.cfg.LoadBalancerName || !slices.Contains(strings.Split(deref(tags[tagService]), ","), h.Owner.Namespace+"/"+h.Owner.Service) {
		klog.FromContext(ctx).Info("Keeping a public IP not made for the Service", "publicIP", h.Spec.PIP)
		return nil
	}
	// The frontend that used it is gone from the load balancer, whose
	// update may still run: Azure refuses the deletion meanwhile. Asked
	// again a few times here, since once the frontend is gone nothing
	// would find this public IP again.
	for try := 0; ; try++ {
		_, err = l.pips.BeginDelete(ifMatch(ctx, resp.Etag), rg, h.Spec.PIP, nil)
		re, ok := respErr(err)
		if !ok || !(re.ErrorCode == "PublicIPAddressCannotBeDeleted" || isBusy(err)) || try == pipDeleteTries {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pipDeleteWait):
		}
	}
	if re, ok := respErr(err); ok && (re.ErrorCode == "PublicIPAddressCannotBeDeleted" || isBusy(err)) {
		return fmt.Errorf("public IP %s is still in use after its frontend went; delete it by hand: %w", h.Spec.PIP, err)
	}
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("delete public IP %s: %w", h.Spec.PIP, err)
	}
	return nil
}

// location is the cluster's region, where its load balancers and public
// IPs are made: its VMs' (the instance view's).
func (l *lbCloud) location(ctx context.Context) (string, error) {
	all, err := l.c.view.List(ctx, l.c.cfg.InstanceMaxAge.Duration)
	if err != nil {
		return "", fmt.Errorf("the cluster's region, from its VMs: %w", err)
	}
	for _, in := range all {
		if in.Region != "" {
			return in.Region, nil
		}
	}
	return "", errors.New("the cluster's region: no VM of the cluster to read it from")
}

// holds reports whether lb's part for frontend name already does what
// spec says, tagged for o.
func (l *lbCloud) holds(lb *armnetwork.LoadBalancer, name string, spec lbSpec, o loadbalancer.Owner) bool {
	for _, f := range frontends(lb) {
		if deref(f.Name) != name {
			continue
		}
		h := l.held(lb, f, &lbView{pips: map[string]string{}})
		got := h.Spec
		return h.Owner == o && got.Internal == spec.Internal && got.Subnet == spec.Subnet && got.PIP == spec.PIP &&
			got.PIPGroup == spec.PIPGroup && got.Idle == spec.Idle && slices.Equal(got.Rules, spec.Rules)
	}
	return false
}
