package hetzner

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"
	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/cloud/kit/loadbalancer"
)

// Hetzner Cloud Load Balancers for Services of type LoadBalancer, as
// hcloud-cloud-controller-manager makes them (its annotations, its name
// for a Service's load balancer and its service-uid label, so that one it
// made is found and adopted with its addresses): server targets by the
// Nodes' provider IDs, a service per port (listen port to node port), its
// health check, labels for the cluster and Service. Every change is an
// action of the API, waited for (hcloud-go's WaitFor).

// LoadBalancer is the Service load balancers (cloud.LoadBalancerInventory
// too), shadowing kit.InstancesOnly's.
func (c *Cloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return c.lbs, true }

var lbTypeName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)

// lbCloud is loadbalancer.Cloud over the hcloud-go client.
type lbCloud struct {
	c *Cloud

	mu   sync.Mutex
	seen map[string]*hcloud.LoadBalancer // by id, as last read
}

func newLBCloud(c *Cloud) *lbCloud { return &lbCloud{c: c, seen: map[string]*hcloud.LoadBalancer{}} }

var (
	_ loadbalancer.Cloud[lbSpec]         = (*lbCloud)(nil)
	_ loadbalancer.IngressWorder[lbSpec] = (*lbCloud)(nil)
)

// call bounds one API call, its retries and the wait for its action by
// the config's request timeout.
func (l *lbCloud) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, l.c.cfg.RequestTimeout.Duration)
}

// wait waits for an action the API answered with.
func (l *lbCloud) wait(ctx context.Context, what string, a *hcloud.Action, resp *hcloud.Response, err error) error {
	noteRateLimit(resp)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if a == nil {
		return nil
	}
	if err := l.c.client.Action.WaitFor(ctx, a); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// network is the configured network's ID (0: none).
func (l *lbCloud) network(ctx context.Context) (int64, error) {
	if l.c.network == nil {
		return 0, nil
	}
	return l.c.network.ID(ctx)
}

// List lists every load balancer of the project: the cluster's, and the
// untagged ones hcloud-cloud-controller-manager made, adoptable by name.
func (l *lbCloud) List(ctx context.Context) ([]loadbalancer.Held[lbSpec], error) {
	ctx, cancel := l.call(ctx)
	defer cancel()
	network, err := l.network(ctx)
	if err != nil {
		return nil, err
	}
	var out []loadbalancer.Held[lbSpec]
	opts := hcloud.LoadBalancerListOpts{ListOpts: hcloud.ListOpts{PerPage: 50}}
	for page := 1; ; page++ {
		opts.Page = page
		lbs, resp, err := l.c.client.LoadBalancer.List(ctx, opts)
		noteRateLimit(resp)
		if err != nil {
			return nil, err
		}
		for _, lb := range lbs {
			out = append(out, l.held(lb, network))
		}
		if resp == nil || resp.Meta.Pagination == nil || resp.Meta.Pagination.NextPage == 0 {
			return out, nil
		}
	}
}

// Get gets a load balancer by id.
func (l *lbCloud) Get(ctx context.Context, id string) (loadbalancer.Held[lbSpec], bool, error) {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n <= 0 {
		return loadbalancer.Held[lbSpec]{}, false, nil
	}
	ctx, cancel := l.call(ctx)
	defer cancel()
	network, err := l.network(ctx)
	if err != nil {
		return loadbalancer.Held[lbSpec]{}, false, err
	}
	lb, resp, err := l.c.client.LoadBalancer.GetByID(ctx, n)
	noteRateLimit(resp)
	if err != nil || lb == nil {
		return loadbalancer.Held[lbSpec]{}, false, err
	}
	return l.held(lb, network), true, nil
}

// held is a load balancer in normal form (and kept as read, for Update
// and Ingress); network is the configured network's ID.
func (l *lbCloud) held(lb *hcloud.LoadBalancer, network int64) loadbalancer.Held[lbSpec] {
	spec := lbSpec{Algorithm: string(lb.Algorithm.Type), Public: lb.PublicNet.Enabled}
	if lb.LoadBalancerType != nil {
		spec.Type = lb.LoadBalancerType.Name
	}
	spec.Network = len(lb.PrivateNet) > 0
	for _, pn := range lb.PrivateNet {
		if pn.Network == nil || pn.Network.ID != network {
			spec.Network = false
		}
	}
	for _, s := range lb.Services {
		svc := lbService{Protocol: string(s.Protocol), ListenPort: s.ListenPort, Destination: s.DestinationPort, Proxy: s.Proxyprotocol}
		if s.Protocol == hcloud.LoadBalancerServiceProtocolHTTPS {
			for _, c := range s.HTTP.Certificates {
				svc.Certificates = append(svc.Certificates, c.ID)
			}
			slices.Sort(svc.Certificates)
		}
		hc := s.HealthCheck
		svc.Check = lbCheck{Protocol: string(hc.Protocol), Port: hc.Port, Interval: int(hc.Interval / time.Second),
			Timeout: int(hc.Timeout / time.Second), Retries: hc.Retries}
		if hc.HTTP != nil && hc.Protocol != hcloud.LoadBalancerServiceProtocolTCP {
			svc.Check.Path, svc.Check.Domain, svc.Check.TLS = hc.HTTP.Path, hc.HTTP.Domain, hc.HTTP.TLS
			svc.Check.StatusCodes = slices.Clone(hc.HTTP.StatusCodes)
		}
		spec.Services = append(spec.Services, svc)
	}
	slices.SortFunc(spec.Services, func(a, b lbService) int { return cmp.Compare(a.ListenPort, b.ListenPort) })
	for _, t := range lb.Targets {
		if t.Type == hcloud.LoadBalancerTargetTypeServer && t.Server != nil && t.Server.Server != nil {
			spec.Targets = append(spec.Targets, lbTarget{Server: t.Server.Server.ID, Private: t.UsePrivateIP})
		}
	}
	slices.SortFunc(spec.Targets, func(a, b lbTarget) int { return cmp.Compare(a.Server, b.Server) })
	h := loadbalancer.Held[lbSpec]{ID: strconv.FormatInt(lb.ID, 10), Name: lb.Name, Owner: ownerLabels.Owner(lb.Labels), Spec: spec}
	h.Ingress = ingress(lb, lbSpec{})
	l.mu.Lock()
	l.seen[h.ID] = lb
	l.mu.Unlock()
	return h
}

// raw is the load balancer as last read, nil when not read.
func (l *lbCloud) raw(id string) *hcloud.LoadBalancer {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen[id]
}

// ingress is the status of lb for spec: the hostname alone when spec has
// one, else its public IPv4 and IPv6 (unless ipv6-disabled) while the
// public interface is on, and its private IP (unless
// disable-private-ingress), as hcloud-cloud-controller-manager words it;
// ipMode Proxy when it speaks PROXY protocol or ends TLS.
func ingress(lb *hcloud.LoadBalancer, spec lbSpec) []v1.LoadBalancerIngress {
	if spec.Hostname != "" {
		return []v1.LoadBalancerIngress{{Hostname: spec.Hostname}}
	}
	proxy := false
	for _, s := range lb.Services {
		proxy = proxy || s.Proxyprotocol || s.Protocol == hcloud.LoadBalancerServiceProtocolHTTPS
	}
	var out []v1.LoadBalancerIngress
	add := func(ip string) {
		if ip != "" && ip != "<nil>" {
			out = append(out, loadbalancer.Ingress(ip, "", proxy, false)...)
		}
	}
	if lb.PublicNet.Enabled {
		add(lb.PublicNet.IPv4.IP.String())
		if !spec.NoIPv6 && lb.PublicNet.IPv6.IP != nil {
			add(lb.PublicNet.IPv6.IP.String())
		}
	}
	if !spec.NoPrivate {
		for _, pn := range lb.PrivateNet {
			if pn.IP != nil {
				add(pn.IP.String())
			}
		}
	}
	return out
}

// Ingress words h's status for what its Service calls for (hostname,
// ipv6-disabled, disable-private-ingress).
func (l *lbCloud) Ingress(h loadbalancer.Held[lbSpec], spec lbSpec) []v1.LoadBalancerIngress {
	if raw := l.raw(h.ID); raw != nil {
		return ingress(raw, spec)
	}
	if spec.Hostname != "" {
		return []v1.LoadBalancerIngress{{Hostname: spec.Hostname}}
	}
	return h.Ingress
}

// Create makes the load balancer with its services and targets in one
// call, in the location or network zone its Service names, else in the
// location of its first target's server.
func (l *lbCloud) Create(ctx context.Context, name string, o loadbalancer.Owner, spec lbSpec) (loadbalancer.Held[lbSpec], error) {
	ctx, cancel := l.call(ctx)
	defer cancel()
	network, err := l.network(ctx)
	if err != nil {
		return loadbalancer.Held[lbSpec]{}, err
	}
	opts := hcloud.LoadBalancerCreateOpts{Name: name, LoadBalancerType: &hcloud.LoadBalancerType{Name: spec.Type},
		Algorithm: &hcloud.LoadBalancerAlgorithm{Type: hcloud.LoadBalancerAlgorithmType(spec.Algorithm)},
		Labels:    labelsFor(nil, o), PublicInterface: hcloud.Ptr(spec.Public)}
	switch {
	case spec.Location != "":
		opts.Location = &hcloud.Location{Name: spec.Location}
	case spec.NetworkZone != "":
		opts.NetworkZone = hcloud.NetworkZone(spec.NetworkZone)
	default:
		loc, err := l.pick(ctx, spec.Pick)
		if err != nil {
			return loadbalancer.Held[lbSpec]{}, err
		}
		opts.Location = &hcloud.Location{Name: loc}
	}
	if spec.Network {
		opts.Network = &hcloud.Network{ID: network}
	}
	for _, s := range spec.Services {
		a := addOpts(s)
		opts.Services = append(opts.Services, hcloud.LoadBalancerCreateOptsService{Protocol: a.Protocol, ListenPort: a.ListenPort,
			DestinationPort: a.DestinationPort, Proxyprotocol: a.Proxyprotocol, HealthCheck: createCheck(a.HealthCheck),
			HTTP: createHTTP(a.HTTP)})
	}
	for _, t := range spec.Targets {
		opts.Targets = append(opts.Targets, hcloud.LoadBalancerCreateOptsTarget{Type: hcloud.LoadBalancerTargetTypeServer,
			Server: hcloud.LoadBalancerCreateOptsTargetServer{Server: &hcloud.Server{ID: t.Server}}, UsePrivateIP: hcloud.Ptr(t.Private)})
	}
	res, resp, err := l.c.client.LoadBalancer.Create(ctx, opts)
	if err := l.wait(ctx, "create", res.Action, resp, err); err != nil {
		return loadbalancer.Held[lbSpec]{}, err
	}
	return l.reread(ctx, res.LoadBalancer.ID, network)
}

// pick is the location of the first target whose server the view knows.
func (l *lbCloud) pick(ctx context.Context, providerIDs []string) (string, error) {
	for _, pid := range providerIDs {
		if in, err := l.c.view.ByProviderID(ctx, pid, l.c.cfg.InstanceMaxAge.Duration); err == nil && in.Region != "" {
			return in.Region, nil
		}
	}
	return "", fmt.Errorf("no location for the load balancer: set %s or %s (no target server to take it from)", AnnLocation, AnnNetworkZone)
}

// reread reads a load balancer after a change.
func (l *lbCloud) reread(ctx context.Context, id, network int64) (loadbalancer.Held[lbSpec], error) {
	lb, resp, err := l.c.client.LoadBalancer.GetByID(ctx, id)
	noteRateLimit(resp)
	if err == nil && lb == nil {
		err = fmt.Errorf("load balancer %d is gone", id)
	}
	if err != nil {
		return loadbalancer.Held[lbSpec]{}, err
	}
	return l.held(lb, network), nil
}

// Update makes h what spec says, a call (and its action) for each
// difference: its labels (adopting it), type, algorithm, network,
// public interface, services and targets, in the order the API allows
// (a network before targets that use it; targets that use it gone before
// it is left). Its name and location stay.
func (l *lbCloud) Update(ctx context.Context, h loadbalancer.Held[lbSpec], o loadbalancer.Owner, spec lbSpec) (loadbalancer.Held[lbSpec], error) {
	ctx, cancel := l.call(ctx)
	defer cancel()
	network, err := l.network(ctx)
	if err != nil {
		return h, err
	}
	lb := l.raw(h.ID)
	if lb == nil {
		id, _ := strconv.ParseInt(h.ID, 10, 64)
		if h, err = l.reread(ctx, id, network); err != nil {
			return h, err
		}
		lb = l.raw(h.ID)
	}
	client := &l.c.client.LoadBalancer
	if labels := labelsFor(lb.Labels, o); !maps.Equal(labels, lb.Labels) {
		_, resp, err := client.Update(ctx, lb, hcloud.LoadBalancerUpdateOpts{Labels: labels})
		if err := l.wait(ctx, "label", nil, resp, err); err != nil {
			return h, err
		}
	}
	if spec.Type != h.Spec.Type {
		a, resp, err := client.ChangeType(ctx, lb, hcloud.LoadBalancerChangeTypeOpts{LoadBalancerType: &hcloud.LoadBalancerType{Name: spec.Type}})
		if err := l.wait(ctx, "change type", a, resp, err); err != nil {
			return h, err
		}
	}
	if spec.Algorithm != h.Spec.Algorithm {
		a, resp, err := client.ChangeAlgorithm(ctx, lb, hcloud.LoadBalancerChangeAlgorithmOpts{Type: hcloud.LoadBalancerAlgorithmType(spec.Algorithm)})
		if err := l.wait(ctx, "change algorithm", a, resp, err); err != nil {
			return h, err
		}
	}
	want := map[int64]lbTarget{}
	for _, t := range spec.Targets {
		want[t.Server] = t
	}
	// Targets that go (or change how they are reached) go first.
	for _, t := range h.Spec.Targets {
		if w, ok := want[t.Server]; ok && w == t {
			delete(want, t.Server)
			continue
		}
		a, resp, err := client.RemoveServerTarget(ctx, lb, &hcloud.Server{ID: t.Server})
		if err := l.wait(ctx, fmt.Sprintf("remove target %d", t.Server), a, resp, err); err != nil {
			return h, err
		}
	}
	attached := false
	for _, pn := range lb.PrivateNet {
		if pn.Network != nil && pn.Network.ID == network && spec.Network {
			attached = true
			continue
		}
		a, resp, err := client.DetachFromNetwork(ctx, lb, hcloud.LoadBalancerDetachFromNetworkOpts{Network: pn.Network})
		if err := l.wait(ctx, "detach from network", a, resp, err); err != nil {
			return h, err
		}
	}
	if spec.Network && !attached {
		a, resp, err := client.AttachToNetwork(ctx, lb, hcloud.LoadBalancerAttachToNetworkOpts{Network: &hcloud.Network{ID: network}})
		if err := l.wait(ctx, "attach to network", a, resp, err); err != nil {
			return h, err
		}
	}
	if spec.Public != lb.PublicNet.Enabled {
		var a *hcloud.Action
		var resp *hcloud.Response
		if spec.Public {
			a, resp, err = client.EnablePublicInterface(ctx, lb)
		} else {
			a, resp, err = client.DisablePublicInterface(ctx, lb)
		}
		if err := l.wait(ctx, "public interface", a, resp, err); err != nil {
			return h, err
		}
	}
	// Services that go go first (a type takes a number of them).
	have := map[int]lbService{}
	for _, s := range h.Spec.Services {
		have[s.ListenPort] = s
	}
	for _, s := range h.Spec.Services {
		if slices.ContainsFunc(spec.Services, func(w lbService) bool { return w.ListenPort == s.ListenPort }) {
			continue
		}
		a, resp, err := client.DeleteService(ctx, lb, s.ListenPort)
		if err := l.wait(ctx, fmt.Sprintf("delete service %d", s.ListenPort), a, resp, err); err != nil {
			return h, err
		}
	}
	for _, s := range spec.Services {
		old, ok := have[s.ListenPort]
		switch {
		case ok && loadbalancer.Fingerprint(old) == loadbalancer.Fingerprint(s):
		case ok:
			u := addOpts(s)
			a, resp, err := client.UpdateService(ctx, lb, s.ListenPort, hcloud.LoadBalancerUpdateServiceOpts{Protocol: u.Protocol,
				DestinationPort: u.DestinationPort, Proxyprotocol: u.Proxyprotocol, HealthCheck: updateCheck(u.HealthCheck),
				HTTP: updateHTTP(u.HTTP)})
			if err := l.wait(ctx, fmt.Sprintf("update service %d", s.ListenPort), a, resp, err); err != nil {
				return h, err
			}
		default:
			a, resp, err := client.AddService(ctx, lb, addOpts(s))
			if err := l.wait(ctx, fmt.Sprintf("add service %d", s.ListenPort), a, resp, err); err != nil {
				return h, err
			}
		}
	}
	for _, t := range spec.Targets {
		if _, ok := want[t.Server]; !ok {
			continue
		}
		a, resp, err := client.AddServerTarget(ctx, lb, hcloud.LoadBalancerAddServerTargetOpts{Server: &hcloud.Server{ID: t.Server},
			UsePrivateIP: hcloud.Ptr(t.Private)})
		if err := l.wait(ctx, fmt.Sprintf("add target %d", t.Server), a, resp, err); err != nil {
			return h, err
		}
	}
	return l.reread(ctx, lb.ID, network)
}

// Delete deletes the load balancer; one already gone is no error, and one
// protected against deletion stays (as hcloud-cloud-controller-manager
// leaves it).
func (l *lbCloud) Delete(ctx context.Context, h loadbalancer.Held[lbSpec]) error {
	id, err := strconv.ParseInt(h.ID, 10, 64)
	if err != nil {
		return fmt.Errorf("load balancer id %q: %w", h.ID, err)
	}
	if lb := l.raw(h.ID); lb != nil && lb.Protection.Delete {
		return fmt.Errorf("load balancer %s (%d) is protected against deletion: remove the protection, or the Service's finalizer", h.Name, id)
	}
	ctx, cancel := l.call(ctx)
	defer cancel()
	res, resp, err := l.c.client.LoadBalancer.DeleteWithResult(ctx, &hcloud.LoadBalancer{ID: id})
	if hcloud.IsError(err, hcloud.ErrorCodeNotFound) {
		return nil
	}
	if err := l.wait(ctx, "delete", res.Action, resp, err); err != nil {
		return err
	}
	l.mu.Lock()
	delete(l.seen, h.ID)
	l.mu.Unlock()
	return nil
}

// addOpts are a service's options as the API takes them.
func addOpts(s lbService) hcloud.LoadBalancerAddServiceOpts {
	o := hcloud.LoadBalancerAddServiceOpts{Protocol: hcloud.LoadBalancerServiceProtocol(s.Protocol), ListenPort: hcloud.Ptr(s.ListenPort),
		DestinationPort: hcloud.Ptr(s.Destination), Proxyprotocol: hcloud.Ptr(s.Proxy)}
	if s.Protocol == "https" {
		o.HTTP = &hcloud.LoadBalancerAddServiceOptsHTTP{}
		for _, id := range s.Certificates {
			o.HTTP.Certificates = append(o.HTTP.Certificates, &hcloud.Certificate{ID: id})
		}
	}
	c := s.Check
	o.HealthCheck = &hcloud.LoadBalancerAddServiceOptsHealthCheck{Protocol: hcloud.LoadBalancerServiceProtocol(c.Protocol),
		Port: hcloud.Ptr(c.Port), Interval: hcloud.Ptr(time.Duration(c.Interval) * time.Second),
		Timeout: hcloud.Ptr(time.Duration(c.Timeout) * time.Second), Retries: hcloud.Ptr(c.Retries)}
	if c.Protocol != "tcp" {
		o.HealthCheck.HTTP = &hcloud.LoadBalancerAddServiceOptsHealthCheckHTTP{Domain: hcloud.Ptr(c.Domain), Path: hcloud.Ptr(c.Path),
			StatusCodes: slices.Clone(c.StatusCodes), TLS: hcloud.Ptr(c.TLS)}
	}
	return o
}

func createCheck(c *hcloud.LoadBalancerAddServiceOptsHealthCheck) *hcloud.LoadBalancerCreateOptsServiceHealthCheck {
	out := &hcloud.LoadBalancerCreateOptsServiceHealthCheck{Protocol: c.Protocol, Port: c.Port, Interval: c.Interval, Timeout: c.Timeout, Retries: c.Retries}
	if c.HTTP != nil {
		out.HTTP = &hcloud.LoadBalancerCreateOptsServiceHealthCheckHTTP{Domain: c.HTTP.Domain, Path: c.HTTP.Path, StatusCodes: c.HTTP.StatusCodes, TLS: c.HTTP.TLS}
	}
	return out
}

func updateCheck(c *hcloud.LoadBalancerAddServiceOptsHealthCheck) *hcloud.LoadBalancerUpdateServiceOptsHealthCheck {
	out := &hcloud.LoadBalancerUpdateServiceOptsHealthCheck{Protocol: c.Protocol, Port: c.Port, Interval: c.Interval, Timeout: c.Timeout, Retries: c.Retries}
	if c.HTTP != nil {
		out.HTTP = &hcloud.LoadBalancerUpdateServiceOptsHealthCheckHTTP{Domain: c.HTTP.Domain, Path: c.HTTP.Path, StatusCodes: c.HTTP.StatusCodes, TLS: c.HTTP.TLS}
	}
	return out
}

func createHTTP(h *hcloud.LoadBalancerAddServiceOptsHTTP) *hcloud.LoadBalancerCreateOptsServiceHTTP {
	if h == nil {
		return nil
	}
	return &hcloud.LoadBalancerCreateOptsServiceHTTP{Certificates: h.Certificates}
}

func updateHTTP(h *hcloud.LoadBalancerAddServiceOptsHTTP) *hcloud.LoadBalancerUpdateServiceOptsHTTP {
	if h == nil {
		return nil
	}
	return &hcloud.LoadBalancerUpdateServiceOptsHTTP{Certificates: h.Certificates}
}
