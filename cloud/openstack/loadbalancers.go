package openstack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	gopenstack "github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/listeners"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/monitors"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/pools"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/kit/loadbalancer"
)

// Octavia load balancers for Services of type LoadBalancer, as
// cloud-provider-openstack makes them (its name for a Service's load
// balancer, kube_service_<cluster>_<namespace>_<name>, its
// load-balancer-id annotation, its annotations), so that one it made is
// found and adopted with its VIP and floating IP: a listener per port,
// each with a default pool of the nodes as members on the node port and a
// health monitor, made in one request (Octavia's fully populated create);
// a floating IP from the configured external network on the VIP's port
// for a public one. Octavia builds asynchronously: a load balancer is
// PENDING_* (the kit answers "still building") until ACTIVE, and refuses
// changes meanwhile (409, which is a wait here, not a failure). A change
// of several calls waits for ACTIVE between them, as the upstream CCM does.

// ownerTags are the cluster's tags on its load balancers: mooring:cluster:,
// mooring:uid:, mooring:service: (never kube_service_, which the upstream
// CCM reads as another Service sharing the load balancer).
var ownerTags = loadbalancer.StringTags{Prefix: "mooring", Max: 255}

// keepFIPTag marks a load balancer whose floating IP stays when it goes
// (the keep-floatingip annotation, read back).
const keepFIPTag = "mooring:keep-floatingip"

// fipDescription starts the description of the floating IPs made for load
// balancers, the upstream CCM's words, by which it (and mooring) knows a
// floating IP it may delete.
const fipDescription = "Floating IP for Kubernetes external service"

// Waiting for Octavia: the first look after activePoll, then twice as long
// each time up to activePollMax, for at most activeWait in one call of the
// kit (then the controller is told to ask again).
var (
	activePoll    = 250 * time.Millisecond
	activePollMax = 2 * time.Second
	activeWait    = 2 * time.Minute
)

// LoadBalancer is the Service load balancers (cloud.LoadBalancerInventory
// too), shadowing kit.InstancesOnly's; none with loadBalancer.disabled.
func (c *Cloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) {
	if c.lbs == nil {
		return nil, false
	}
	return c.lbs, true
}

// loadBalancerClient is Octavia's client, at the catalog's load-balancer
// endpoint for the region and interface, over the provider's one
// authentication.
func (c *Cloud) loadBalancerClient(ctx context.Context) (*gophercloud.ServiceClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.octavia != nil {
		return c.octavia, nil
	}
	provider, err := c.authenticated(ctx)
	if err != nil {
		return nil, err
	}
	lb, err := gopenstack.NewLoadBalancerV2(provider, gophercloud.EndpointOpts{
		Region: c.cfg.Region, Availability: gophercloud.Availability(c.cfg.Interface),
	})
	if err != nil {
		return nil, fmt.Errorf("openstack: no %s load-balancer (Octavia) endpoint in region %s in the catalog: %w", c.cfg.Interface, c.cfg.Region, err)
	}
	if err := kit.CheckEndpoint(lb.Endpoint, true); err != nil {
		return nil, fmt.Errorf("openstack: the catalog's load-balancer endpoint: %w", err)
	}
	klog.InfoS("Using Octavia", "loadBalancerEndpoint", lb.Endpoint)
	c.octavia = lb
	return lb, nil
}

// newLoadBalancers makes the provider's load balancers (nil when
// disabled).
func newLoadBalancers(c *Cloud) (*loadbalancer.Balancers[lbSpec], error) {
	if c.cfg.LoadBalancer.Disabled {
		return nil, nil
	}
	return loadbalancer.New[lbSpec](&lbCloud{c: c, seen: map[string]*lbTree{}}, loadbalancer.Options{Cluster: c.cfg.ClusterID})
}

// lbCloud is loadbalancer.Cloud over gophercloud's loadbalancer/v2.
type lbCloud struct {
	c *Cloud

	mu   sync.Mutex
	seen map[string]*lbTree // by id, as last read
}

// lbTree is a load balancer as read: the ids its changes need.
type lbTree struct {
	lb        loadbalancers.LoadBalancer
	listeners map[string]listeners.Listener // by key
	pools     map[string]pools.Pool         // by listener key
	fip       *floatingips.FloatingIP
}

var (
	_ loadbalancer.Cloud[lbSpec]         = (*lbCloud)(nil)
	_ loadbalancer.Indexer[lbSpec]       = (*lbCloud)(nil)
	_ loadbalancer.IngressWorder[lbSpec] = (*lbCloud)(nil)
)

// clients are Octavia's and Neutron's, within the request timeout.
func (l *lbCloud) clients(ctx context.Context) (octavia, neutron *gophercloud.ServiceClient, err error) {
	if octavia, err = l.c.loadBalancerClient(ctx); err != nil {
		return nil, nil, err
	}
	if neutron, err = l.c.networkClient(ctx); err != nil {
		return nil, nil, err
	}
	return octavia, neutron, nil
}

func (l *lbCloud) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, l.c.cfg.RequestTimeout.Duration)
}

// Name is the upstream CCM's name of svc's load balancer.
func (l *lbCloud) Name(svc *v1.Service) string { return l.name(svc.Namespace, svc.Name) }

func (l *lbCloud) name(namespace, service string) string {
	name := "kube_service_" + l.c.cfg.LoadBalancer.ClusterName + "_" + namespace + "_" + service
	if len(name) > 255 {
		name = name[:255]
	}
	return name
}

// ID is the load-balancer-id annotation.
func (l *lbCloud) ID(svc *v1.Service) string {
	return strings.TrimSpace(svc.Annotations[AnnotationLoadBalancerID])
}

// Index lists the project's load balancers (one paged call), with their
// owners but no specs; those being deleted are left out, as the upstream
// CCM leaves them.
func (l *lbCloud) Index(ctx context.Context) ([]loadbalancer.Held[lbSpec], error) {
	ctx, cancel := l.call(ctx)
	defer cancel()
	octavia, err := l.c.loadBalancerClient(ctx)
	if err != nil {
		return nil, err
	}
	pages, err := loadbalancers.List(octavia, loadbalancers.ListOpts{}).AllPages(ctx)
	if err != nil {
		return nil, fmt.Errorf("openstack: list load balancers: %w", err)
	}
	all, err := loadbalancers.ExtractLoadBalancers(pages)
	if err != nil {
		return nil, fmt.Errorf("openstack: list load balancers: %w", err)
	}
	var out []loadbalancer.Held[lbSpec]
	for _, lb := range all {
		if lb.ProvisioningStatus == "PENDING_DELETE" || lb.ProvisioningStatus == "DELETED" {
			continue
		}
		out = append(out, loadbalancer.Held[lbSpec]{ID: lb.ID, Name: lb.Name, Owner: ownerTags.Owner(lb.Tags),
			Pending: pending(lb.ProvisioningStatus), Failed: failed(lb.ProvisioningStatus)})
	}
	return out, nil
}

// List is Index, with the specs of the cluster's load balancers read.
func (l *lbCloud) List(ctx context.Context) ([]loadbalancer.Held[lbSpec], error) {
	idx, err := l.Index(ctx)
	if err != nil {
		return nil, err
	}
	for i, h := range idx {
		if h.Owner.Cluster != l.c.cfg.ClusterID {
			continue
		}
		full, ok, err := l.Get(ctx, h.ID)
		if err != nil {
			return nil, err
		}
		if ok {
			idx[i] = full
		}
	}
	return idx, nil
}

// pending is the kit's Held.Pending of a provisioning status: a load
// balancer being made. One being changed (PENDING_UPDATE) serves as it
// did and counts as built: a change of it waits for Octavia in Update, so
// that no sync's change is put off (the stock service controller takes a
// wait from a node sync for done, and would not come back).
func pending(status string) string {
	if status == "PENDING_CREATE" {
		return status
	}
	return ""
}

func failed(status string) string {
	if status == "ERROR" {
		return status
	}
	return ""
}

// Get reads a load balancer: itself, its listeners, its pools, each
// pool's members and monitor, and the floating IP on its VIP port.
func (l *lbCloud) Get(ctx context.Context, id string) (loadbalancer.Held[lbSpec], bool, error) {
	ctx, cancel := l.call(ctx)
	defer cancel()
	octavia, neutron, err := l.clients(ctx)
	if err != nil {
		return loadbalancer.Held[lbSpec]{}, false, err
	}
	lb, err := loadbalancers.Get(ctx, octavia, id).Extract()
	if gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		return loadbalancer.Held[lbSpec]{}, false, nil
	}
	if err != nil {
		return loadbalancer.Held[lbSpec]{}, false, fmt.Errorf("openstack: get load balancer %s: %w", id, err)
	}
	if lb.ProvisioningStatus == "PENDING_DELETE" || lb.ProvisioningStatus == "DELETED" {
		return loadbalancer.Held[lbSpec]{}, false, nil
	}
	t := &lbTree{lb: *lb, listeners: map[string]listeners.Listener{}, pools: map[string]pools.Pool{}}
	lnPages, err := listeners.List(octavia, listeners.ListOpts{LoadbalancerID: id}).AllPages(ctx)
	if err != nil {
		return loadbalancer.Held[lbSpec]{}, false, fmt.Errorf("openstack: list listeners of %s: %w", id, err)
	}
	lns, err := listeners.ExtractListeners(lnPages)
	if err != nil {
		return loadbalancer.Held[lbSpec]{}, false, err
	}
	poolPages, err := pools.List(octavia, pools.ListOpts{LoadbalancerID: id}).AllPages(ctx)
	if err != nil {
		return loadbalancer.Held[lbSpec]{}, false, fmt.Errorf("openstack: list pools of %s: %w", id, err)
	}
	ps, err := pools.ExtractPools(poolPages)
	if err != nil {
		return loadbalancer.Held[lbSpec]{}, false, err
	}
	spec := lbSpec{}
	for _, ln := range lns {
		sl := lbListener{Protocol: ln.Protocol, Port: ln.ProtocolPort, ConnectionLimit: ln.ConnLimit,
			Timeouts: [4]int{ln.TimeoutClientData, ln.TimeoutMemberConnect, ln.TimeoutMemberData, ln.TimeoutTCPInspect}}
		if len(ln.AllowedCIDRs) > 0 {
			sl.AllowedCIDRs = slices.Sorted(slices.Values(ln.AllowedCIDRs))
		}
		k := key(sl)
		t.listeners[k] = ln
		for _, p := range ps {
			if p.ID != ln.DefaultPoolID {
				continue
			}
			t.pools[k] = p
			sl.PoolProtocol, sl.Algorithm, sl.Persistence = p.Protocol, p.LBMethod, p.Persistence.Type
			mPages, err := pools.ListMembers(octavia, p.ID, pools.ListMembersOpts{}).AllPages(ctx)
			if err != nil {
				return loadbalancer.Held[lbSpec]{}, false, fmt.Errorf("openstack: list members of pool %s: %w", p.ID, err)
			}
			ms, err := pools.ExtractMembers(mPages)
			if err != nil {
				return loadbalancer.Held[lbSpec]{}, false, err
			}
			for _, m := range ms {
				sl.Members = append(sl.Members, lbMember{Name: m.Name, Address: m.Address, Port: m.ProtocolPort, SubnetID: m.SubnetID, MonitorPort: m.MonitorPort})
			}
			sortMembers(sl.Members)
			if p.MonitorID != "" {
				mon, err := monitors.Get(ctx, octavia, p.MonitorID).Extract()
				if err != nil && !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
					return loadbalancer.Held[lbSpec]{}, false, fmt.Errorf("openstack: get health monitor %s: %w", p.MonitorID, err)
				}
				if mon != nil {
					sl.Monitor = &lbMonitor{Type: mon.Type, Delay: mon.Delay, Timeout: mon.Timeout, MaxRetries: mon.MaxRetries,
						MaxRetriesDown: mon.MaxRetriesDown}
					if mon.Type == "HTTP" || mon.Type == "HTTPS" {
						sl.Monitor.HTTPMethod, sl.Monitor.URLPath, sl.Monitor.ExpectedCodes = mon.HTTPMethod, mon.URLPath, mon.ExpectedCodes
					}
				}
			}
		}
		spec.Listeners = append(spec.Listeners, sl)
	}
	slices.SortFunc(spec.Listeners, func(a, b lbListener) int {
		if a.Port != b.Port {
			return a.Port - b.Port
		}
		return strings.Compare(a.Protocol, b.Protocol)
	})
	if lb.VipPortID != "" {
		fPages, err := floatingips.List(neutron, floatingips.ListOpts{PortID: lb.VipPortID}).AllPages(ctx)
		if err != nil {
			return loadbalancer.Held[lbSpec]{}, false, fmt.Errorf("openstack: list the floating IPs of load balancer %s: %w", id, err)
		}
		fips, err := floatingips.ExtractFloatingIPs(fPages)
		if err != nil {
			return loadbalancer.Held[lbSpec]{}, false, err
		}
		if len(fips) > 0 {
			t.fip = &fips[0]
			spec.Public = true
		}
	}
	spec.KeepFIP = slices.Contains(lb.Tags, keepFIPTag)
	l.mu.Lock()
	l.seen[id] = t
	l.mu.Unlock()
	return l.held(t, spec), true, nil
}

// held is a read load balancer as the kit holds it.
func (l *lbCloud) held(t *lbTree, spec lbSpec) loadbalancer.Held[lbSpec] {
	h := loadbalancer.Held[lbSpec]{ID: t.lb.ID, Name: t.lb.Name, Owner: ownerTags.Owner(t.lb.Tags), Spec: spec,
		Pending: pending(t.lb.ProvisioningStatus), Failed: failed(t.lb.ProvisioningStatus)}
	h.Ingress = ingress(t, spec)
	return h
}

// address is where clients reach the load balancer: its floating IP, else
// its VIP.
func (t *lbTree) address() string {
	if t.fip != nil && t.fip.FloatingIP != "" {
		return t.fip.FloatingIP
	}
	return t.lb.VipAddress
}

// ingress is the status of a load balancer for spec: the hostname alone
// when spec has one (the hostname annotation), else its address, ipMode
// Proxy when it speaks PROXY protocol.
func ingress(t *lbTree, spec lbSpec) []v1.LoadBalancerIngress {
	proxy := false
	for _, ln := range spec.Listeners {
		proxy = proxy || strings.HasPrefix(ln.PoolProtocol, "PROXY")
	}
	return loadbalancer.Ingress(t.address(), spec.create.Hostname, proxy, spec.create.Hostname != "")
}

// Ingress words h's status for what its Service calls for (the hostname
// annotation).
func (l *lbCloud) Ingress(h loadbalancer.Held[lbSpec], spec lbSpec) []v1.LoadBalancerIngress {
	l.mu.Lock()
	t := l.seen[h.ID]
	l.mu.Unlock()
	if t == nil {
		return h.Ingress
	}
	spec.Listeners = h.Spec.Listeners
	return ingress(t, spec)
}

// tags are a load balancer's tags for o and spec: its own that are not
// mooring's, the upstream CCM's name tag, the owner's and keep-floatingip.
func tags(old []string, name string, o loadbalancer.Owner, spec lbSpec) []string {
	var out []string
	for _, t := range old {
		if !strings.HasPrefix(t, ownerTags.Prefix+":") {
			out = append(out, t)
		}
	}
	if strings.HasPrefix(name, "kube_service_") && !slices.Contains(out, name) {
		out = append(out, name)
	}
	out = append(out, ownerTags.Tags(o)...)
	if spec.KeepFIP {
		out = append(out, keepFIPTag)
	}
	return out
}

// busy turns Octavia's 409 (the load balancer is immutable while another
// change is pending) into a wait.
func busy(name string, err error) error {
	var code gophercloud.ErrUnexpectedResponseCode
	if errors.As(err, &code) && code.Actual == http.StatusConflict &&
		(strings.Contains(string(code.Body), "immutable") || strings.Contains(string(code.Body), "Invalid state")) {
		return fmt.Errorf("%w (%v)", &cloud.PendingError{LoadBalancer: name, State: "busy (Octavia: immutable while a change is pending)", After: 2 * time.Second}, err)
	}
	return err
}

// listenerOpts, poolOpts, memberOpts and monitorOpts are a spec's as
// gophercloud sends them.
func listenerCreate(i int, name string, ln lbListener) listeners.CreateOpts {
	pool := poolCreate(i, name, ln)
	return listeners.CreateOpts{Name: cut(fmt.Sprintf("listener_%d_%s", i, name)), Protocol: listeners.Protocol(ln.Protocol), ProtocolPort: ln.Port,
		ConnLimit: &ln.ConnectionLimit, TimeoutClientData: &ln.Timeouts[0], TimeoutMemberConnect: &ln.Timeouts[1],
		TimeoutMemberData: &ln.Timeouts[2], TimeoutTCPInspect: &ln.Timeouts[3], AllowedCIDRs: ln.AllowedCIDRs,
		Tags: tagsOf(name), DefaultPool: &pool}
}

func tagsOf(name string) []string {
	if strings.HasPrefix(name, "kube_service_") {
		return []string{name}
	}
	return nil
}

func cut(s string) string {
	if len(s) > 255 {
		return s[:255]
	}
	return s
}

func poolCreate(i int, name string, ln lbListener) pools.CreateOpts {
	p := pools.CreateOpts{Name: cut(fmt.Sprintf("pool_%d_%s", i, name)), Protocol: pools.Protocol(ln.PoolProtocol), LBMethod: pools.LBMethod(ln.Algorithm)}
	if ln.Persistence != "" {
		p.Persistence = &pools.SessionPersistence{Type: ln.Persistence}
	}
	for _, m := range ln.Members {
		cm := pools.CreateMemberOpts{Name: m.Name, Address: m.Address, ProtocolPort: m.Port, SubnetID: m.SubnetID}
		if m.MonitorPort != 0 {
			cm.MonitorPort = &m.MonitorPort
		}
		p.Members = append(p.Members, cm)
	}
	if ln.Monitor != nil {
		p.Monitor = monitorCreate(i, name, "", *ln.Monitor)
	}
	return p
}

func monitorCreate(i int, name, poolID string, m lbMonitor) monitors.CreateOpts {
	return monitors.CreateOpts{PoolID: poolID, Name: cut(fmt.Sprintf("monitor_%d_%s", i, name)), Type: m.Type, Delay: m.Delay, Timeout: m.Timeout,
		MaxRetries: m.MaxRetries, MaxRetriesDown: m.MaxRetriesDown, URLPath: m.URLPath, HTTPMethod: m.HTTPMethod, ExpectedCodes: m.ExpectedCodes}
}

// Create makes the load balancer with its listeners, pools, members and
// monitors in one request, then (public) its floating IP on the VIP port,
// which Octavia gives in its answer, before the build is done.
func (l *lbCloud) Create(ctx context.Context, name string, o loadbalancer.Owner, spec lbSpec) (loadbalancer.Held[lbSpec], error) {
	ctx, cancel := l.call(ctx)
	defer cancel()
	octavia, neutron, err := l.clients(ctx)
	if err != nil {
		return loadbalancer.Held[lbSpec]{}, err
	}
	cr := spec.create
	opts := loadbalancers.CreateOpts{Name: name, Description: cut(fmt.Sprintf("Kubernetes external service %s/%s from cluster %s", cr.Namespace, cr.Service, l.c.cfg.LoadBalancer.ClusterName)),
		VipSubnetID: cr.SubnetID, FlavorID: cr.FlavorID, AvailabilityZone: cr.AvailabilityZone, Provider: cr.Provider, Tags: tags(nil, name, o, spec)}
	if cr.SubnetID == "" {
		opts.VipNetworkID = cr.NetworkID
	}
	for i, ln := range spec.Listeners {
		opts.Listeners = append(opts.Listeners, listenerCreate(i, name, ln))
	}
	lb, err := loadbalancers.Create(ctx, octavia, opts).Extract()
	if err != nil {
		return loadbalancer.Held[lbSpec]{}, busy(name, err)
	}
	t := &lbTree{lb: *lb}
	if spec.Public {
		if t.fip, err = l.attachFIP(ctx, neutron, t, spec); err != nil {
			return loadbalancer.Held[lbSpec]{}, fmt.Errorf("load balancer %s (%s) made, but its floating IP: %w", name, lb.ID, err)
		}
	}
	l.mu.Lock()
	l.seen[lb.ID] = t
	l.mu.Unlock()
	h := l.held(t, spec)
	h.Owner = o
	return h, nil
}

// attachFIP puts a floating IP on t's VIP port: spec.loadBalancerIP's, an
// existing one not in use, else a new one of the floating network.
func (l *lbCloud) attachFIP(ctx context.Context, neutron *gophercloud.ServiceClient, t *lbTree, spec lbSpec) (*floatingips.FloatingIP, error) {
	cr := spec.create
	if cr.FloatingIP != "" {
		pages, err := floatingips.List(neutron, floatingips.ListOpts{FloatingIP: cr.FloatingIP}).AllPages(ctx)
		if err != nil {
			return nil, err
		}
		fips, err := floatingips.ExtractFloatingIPs(pages)
		if err != nil {
			return nil, err
		}
		if len(fips) == 0 {
			return nil, fmt.Errorf("spec.loadBalancerIP %s is no floating IP of the project", cr.FloatingIP)
		}
		if fips[0].PortID != "" && fips[0].PortID != t.lb.VipPortID {
			return nil, fmt.Errorf("floating IP %s (spec.loadBalancerIP) is in use by port %s", cr.FloatingIP, fips[0].PortID)
		}
		port := t.lb.VipPortID
		return floatingips.Update(ctx, neutron, fips[0].ID, floatingips.UpdateOpts{PortID: &port}).Extract()
	}
	return floatingips.Create(ctx, neutron, floatingips.CreateOpts{FloatingNetworkID: cr.FloatingNetworkID, SubnetID: cr.FloatingSubnetID,
		PortID:      t.lb.VipPortID,
		Description: cut(fmt.Sprintf("%s %s/%s from cluster %s", fipDescription, cr.Namespace, cr.Service, l.c.cfg.LoadBalancer.ClusterName))}).Extract()
}

// dropFIP deletes the floating IP of t when one of the upstream CCM's
// words and not kept, else detaches it (it stays the project's).
func (l *lbCloud) dropFIP(ctx context.Context, neutron *gophercloud.ServiceClient, t *lbTree, keep bool) error {
	f := t.fip
	if f == nil {
		return nil
	}
	if !keep && strings.HasPrefix(f.Description, fipDescription) {
		err := floatingips.Delete(ctx, neutron, f.ID).ExtractErr()
		if gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			err = nil
		}
		return err
	}
	none := ""
	_, err := floatingips.Update(ctx, neutron, f.ID, floatingips.UpdateOpts{PortID: &none}).Extract()
	return err
}

// waitActive waits until Octavia has built the last change: nil once
// ACTIVE, a *cloud.PendingError when it takes longer than activeWait (the
// controller asks again), an error on ERROR or when it is gone.
func (l *lbCloud) waitActive(ctx context.Context, octavia *gophercloud.ServiceClient, id, name string) error {
	deadline := time.Now().Add(activeWait)
	wait := activePoll
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (waiting: %v)", &cloud.PendingError{LoadBalancer: name, State: "still being changed", After: 2 * time.Second}, ctx.Err())
		case <-time.After(wait):
		}
		lb, err := loadbalancers.Get(ctx, octavia, id).Extract()
		if err != nil {
			return fmt.Errorf("openstack: get load balancer %s: %w", id, err)
		}
		switch lb.ProvisioningStatus {
		case "ACTIVE":
			return nil
		case "ERROR":
			return fmt.Errorf("load balancer %s (%s) is ERROR: Octavia could not make the change (delete it to have it made again)", name, id)
		}
		if time.Now().After(deadline) {
			return &cloud.PendingError{LoadBalancer: name, State: lb.ProvisioningStatus, After: 2 * time.Second}
		}
		wait = min(wait*2, activePollMax)
	}
}

// Update makes the load balancer do spec and carry o's tags: each change
// a call of its own (tags; listeners gone, new and changed; pools, members,
// monitors; the floating IP), waiting for ACTIVE before each Octavia call
// while a change is being built, but not after the last (no worker of the
// service controller is held while Octavia builds it).
func (l *lbCloud) Update(ctx context.Context, h loadbalancer.Held[lbSpec], o loadbalancer.Owner, spec lbSpec) (loadbalancer.Held[lbSpec], error) {
	octavia, neutron, err := l.clients(ctx)
	if err != nil {
		return h, err
	}
	l.mu.Lock()
	t := l.seen[h.ID]
	l.mu.Unlock()
	if t == nil {
		if _, _, err := l.Get(ctx, h.ID); err != nil {
			return h, err
		}
		l.mu.Lock()
		t = l.seen[h.ID]
		l.mu.Unlock()
		if t == nil {
			return h, fmt.Errorf("load balancer %s (%s) is gone", h.Name, h.ID)
		}
	}
	id, name := h.ID, h.Name
	if h.Owner.Zero() {
		// Adopting: not a load balancer the upstream CCM made for another
		// Service, or shares between Services (its load-balancer-id on a
		// second Service): mooring does not share them.
		own := l.name(spec.create.Namespace, spec.create.Service)
		for _, tag := range append([]string{name}, t.lb.Tags...) {
			if strings.HasPrefix(tag, "kube_service_") && tag != own {
				return h, fmt.Errorf("load balancer %s (%s) is the upstream CCM's for another Service (%s): mooring does not share load balancers between Services (or loadBalancer.clusterName is not the upstream CCM's --cluster-name)", name, id, tag)
			}
		}
	}
	// step makes one Octavia call, after the last one's change is built
	// (Octavia refuses a change while one is pending); the last one's is
	// not waited for: the kit asks again while it is pending.
	changed := t.lb.ProvisioningStatus != "ACTIVE" // another change is being built: wait for it first
	step := func(what string, f func(ctx context.Context) error) error {
		cctx, cancel := l.call(ctx)
		defer cancel()
		if changed {
			if err := l.waitActive(cctx, octavia, id, name); err != nil {
				return err
			}
		}
		if err := f(cctx); err != nil {
			return fmt.Errorf("%s: %w", what, busy(name, err))
		}
		changed = true
		return nil
	}
	run := func(f func(ctx context.Context) error) error {
		cctx, cancel := l.call(ctx)
		defer cancel()
		return f(cctx)
	}
	want := tags(t.lb.Tags, name, o, spec)
	if !slices.Equal(want, t.lb.Tags) {
		if err := step("tag it", func(ctx context.Context) error {
			_, err := loadbalancers.Update(ctx, octavia, id, loadbalancers.UpdateOpts{Tags: &want}).Extract()
			return err
		}); err != nil {
			return h, err
		}
	}
	held := map[string]lbListener{}
	for _, ln := range h.Spec.Listeners {
		held[key(ln)] = ln
	}
	desired := map[string]bool{}
	for _, ln := range spec.Listeners {
		desired[key(ln)] = true
	}
	// Listeners of ports gone: their pool (with members and monitor), then
	// themselves.
	for _, ln := range h.Spec.Listeners {
		k := key(ln)
		if desired[k] {
			continue
		}
		if p, ok := t.pools[k]; ok {
			if err := step("delete pool "+p.ID, func(ctx context.Context) error { return notGone(pools.Delete(ctx, octavia, p.ID).ExtractErr()) }); err != nil {
				return h, err
			}
		}
		lid := t.listeners[k].ID
		if err := step("delete listener "+lid, func(ctx context.Context) error { return notGone(listeners.Delete(ctx, octavia, lid).ExtractErr()) }); err != nil {
			return h, err
		}
	}
	for i, ln := range spec.Listeners {
		k := key(ln)
		old, ok := held[k]
		if !ok {
			opts := listenerCreate(i, name, ln)
			opts.LoadbalancerID = id
			if err := step("create listener "+k, func(ctx context.Context) error { _, err := listeners.Create(ctx, octavia, opts).Extract(); return err }); err != nil {
				return h, err
			}
			continue
		}
		lid := t.listeners[k].ID
		if old.ConnectionLimit != ln.ConnectionLimit || old.Timeouts != ln.Timeouts || !slices.Equal(old.AllowedCIDRs, ln.AllowedCIDRs) {
			cidrs := ln.AllowedCIDRs
			if cidrs == nil {
				cidrs = []string{}
			}
			opts := listeners.UpdateOpts{ConnLimit: &ln.ConnectionLimit, TimeoutClientData: &ln.Timeouts[0], TimeoutMemberConnect: &ln.Timeouts[1],
				TimeoutMemberData: &ln.Timeouts[2], TimeoutTCPInspect: &ln.Timeouts[3], AllowedCIDRs: &cidrs}
			if err := step("update listener "+lid, func(ctx context.Context) error {
				_, err := listeners.Update(ctx, octavia, lid, opts).Extract()
				return err
			}); err != nil {
				return h, err
			}
		}
		p, hasPool := t.pools[k]
		if !hasPool || old.PoolProtocol != ln.PoolProtocol || old.Persistence != "" && ln.Persistence == "" {
			// A pool's protocol is fixed, and gophercloud cannot send a
			// null session persistence: a new pool.
			if hasPool {
				if err := step("delete pool "+p.ID, func(ctx context.Context) error { return notGone(pools.Delete(ctx, octavia, p.ID).ExtractErr()) }); err != nil {
					return h, err
				}
			}
			opts := poolCreate(i, name, ln)
			opts.ListenerID = lid
			if err := step("create pool for "+k, func(ctx context.Context) error { _, err := pools.Create(ctx, octavia, opts).Extract(); return err }); err != nil {
				return h, err
			}
			continue
		}
		if old.Algorithm != ln.Algorithm || old.Persistence != ln.Persistence {
			opts := pools.UpdateOpts{LBMethod: pools.LBMethod(ln.Algorithm)}
			if ln.Persistence != "" {
				opts.Persistence = &pools.SessionPersistence{Type: ln.Persistence}
			}
			if err := step("update pool "+p.ID, func(ctx context.Context) error {
				_, err := pools.Update(ctx, octavia, p.ID, opts).Extract()
				return err
			}); err != nil {
				return h, err
			}
		}
		if !slices.Equal(old.Members, ln.Members) {
			batch := make([]pools.BatchUpdateMemberOpts, 0, len(ln.Members))
			for _, m := range ln.Members {
				bm := pools.BatchUpdateMemberOpts{Address: m.Address, ProtocolPort: m.Port, Name: &m.Name}
				if m.SubnetID != "" {
					bm.SubnetID = &m.SubnetID
				}
				if m.MonitorPort != 0 {
					bm.MonitorPort = &m.MonitorPort
				}
				batch = append(batch, bm)
			}
			if err := step("update the members of pool "+p.ID, func(ctx context.Context) error {
				return pools.BatchUpdateMembers(ctx, octavia, p.ID, batch).ExtractErr()
			}); err != nil {
				return h, err
			}
		}
		if err := l.updateMonitor(octavia, step, i, name, p, old.Monitor, ln.Monitor); err != nil {
			return h, err
		}
	}
	switch {
	case spec.Public && t.fip == nil:
		err := run(func(ctx context.Context) error {
			f, err := l.attachFIP(ctx, neutron, t, spec)
			t.fip = f
			return err
		})
		if err != nil {
			return h, fmt.Errorf("floating IP: %w", err)
		}
	case !spec.Public && t.fip != nil:
		if err := run(func(ctx context.Context) error { return l.dropFIP(ctx, neutron, t, spec.KeepFIP) }); err != nil {
			return h, fmt.Errorf("floating IP %s: %w", t.fip.FloatingIP, err)
		}
	}
	if changed {
		// Octavia is building the last change: the load balancer as it
		// will be (read again at the next sync).
		next := loadbalancer.Held[lbSpec]{ID: id, Name: name, Owner: o, Spec: spec}
		next.Spec.create = lbCreate{}
		next.Ingress = ingress(t, spec)
		return next, nil
	}
	next, ok, err := l.Get(ctx, id)
	if err != nil {
		return h, err
	}
	if !ok {
		return h, fmt.Errorf("load balancer %s (%s) is gone", name, id)
	}
	return next, nil
}

// updateMonitor makes a pool's monitor m (nil: none).
func (l *lbCloud) updateMonitor(octavia *gophercloud.ServiceClient, step func(string, func(context.Context) error) error,
	i int, name string, p pools.Pool, old, m *lbMonitor) error {
	switch {
	case old == nil && m == nil, old != nil && m != nil && *old == *m:
		return nil
	case old != nil && (m == nil || old.Type != m.Type):
		if err := step("delete health monitor "+p.MonitorID, func(ctx context.Context) error {
			return notGone(monitors.Delete(ctx, octavia, p.MonitorID).ExtractErr())
		}); err != nil {
			return err
		}
		if m == nil {
			return nil
		}
		fallthrough
	case old == nil:
		opts := monitorCreate(i, name, p.ID, *m)
		return step("create a health monitor of pool "+p.ID, func(ctx context.Context) error {
			_, err := monitors.Create(ctx, octavia, opts).Extract()
			return err
		})
	}
	opts := monitors.UpdateOpts{Delay: m.Delay, Timeout: m.Timeout, MaxRetries: m.MaxRetries, MaxRetriesDown: m.MaxRetriesDown,
		URLPath: m.URLPath, HTTPMethod: m.HTTPMethod, ExpectedCodes: m.ExpectedCodes}
	return step("update health monitor "+p.MonitorID, func(ctx context.Context) error {
		_, err := monitors.Update(ctx, octavia, p.MonitorID, opts).Extract()
		return err
	})
}

func notGone(err error) error {
	if gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		return nil
	}
	return err
}

// Delete deletes the load balancer's floating IP (one the upstream CCM's
// words mark as made for it, unless kept), then the load balancer with
// everything in it (cascade), and waits until it is gone.
func (l *lbCloud) Delete(ctx context.Context, h loadbalancer.Held[lbSpec]) error {
	octavia, neutron, err := l.clients(ctx)
	if err != nil {
		return err
	}
	if h.Pending != "" {
		return &cloud.PendingError{LoadBalancer: h.Name, State: h.Pending, After: 2 * time.Second}
	}
	l.mu.Lock()
	t := l.seen[h.ID]
	l.mu.Unlock()
	cctx, cancel := l.call(ctx)
	defer cancel()
	if t != nil && t.fip != nil && !h.Spec.KeepFIP && strings.HasPrefix(t.fip.Description, fipDescription) {
		if err := l.dropFIP(cctx, neutron, t, false); err != nil {
			return fmt.Errorf("delete floating IP %s: %w", t.fip.FloatingIP, err)
		}
	}
	err = loadbalancers.Delete(cctx, octavia, h.ID, loadbalancers.DeleteOpts{Cascade: true}).ExtractErr()
	if cloud.IsPending(busy(h.Name, err)) {
		// A change still being built (PENDING_UPDATE): once it is, delete.
		if werr := l.waitActive(cctx, octavia, h.ID, h.Name); cloud.IsPending(werr) {
			return werr
		}
		err = loadbalancers.Delete(cctx, octavia, h.ID, loadbalancers.DeleteOpts{Cascade: true}).ExtractErr()
	}
	if gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		l.forget(h.ID)
		return nil
	}
	if err != nil {
		return busy(h.Name, err)
	}
	deadline := time.Now().Add(activeWait)
	for wait := activePoll; ; wait = min(wait*2, activePollMax) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		gctx, cancel := l.call(ctx)
		_, err := loadbalancers.Get(gctx, octavia, h.ID).Extract()
		cancel()
		if gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			l.forget(h.ID)
			return nil
		}
		if err != nil {
			return fmt.Errorf("openstack: get load balancer %s: %w", h.ID, err)
		}
		if time.Now().After(deadline) {
			return &cloud.PendingError{LoadBalancer: h.Name, State: "PENDING_DELETE", After: 2 * time.Second}
		}
	}
}

func (l *lbCloud) forget(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.seen, id)
}
