package provider

import (
	"context"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/cloud/kit/loadbalancer"
	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/client"
)

// Service annotations the local cloud's load balancers understand, all
// under annotationPrefix (another under it is refused). docs/ccm.md
// documents them.
const (
	annotationPrefix = "lb.mooring.dev/"

	// AnnotationHealthCheckProtocol is TCP (default) or HTTP, for Services
	// with externalTrafficPolicy Cluster; Local always checks the
	// HealthCheckNodePort over HTTP.
	AnnotationHealthCheckProtocol = "lb.mooring.dev/health-check-protocol"
	// AnnotationHealthCheckPath is the HTTP check's path (default /healthz).
	AnnotationHealthCheckPath = "lb.mooring.dev/health-check-path"
	// AnnotationHealthCheckPort is the port the check probes on each node
	// (default: the listener's node port).
	AnnotationHealthCheckPort = "lb.mooring.dev/health-check-port"
	// AnnotationHealthCheckInterval is seconds between checks (default 2).
	AnnotationHealthCheckInterval = "lb.mooring.dev/health-check-interval-seconds"
)

// Tags on a load balancer that tie it to its Service.
const (
	TagServiceNamespace = "kubernetes.io/service-namespace"
	TagServiceName      = "kubernetes.io/service-name"
	TagServiceUID       = "kubernetes.io/service-uid"
)

// lbCloud is the local cloud's load balancer API as the kit's
// loadbalancer.Cloud: a load balancer's id is its name, and one PUT makes
// or changes it.
type lbCloud struct{ c *Cloud }

// Name is one name per Service UID, stable over renames.
func (l lbCloud) Name(svc *v1.Service) string { return cloudprovider.DefaultLoadBalancerName(svc) }

// ID: no annotation names a load balancer here.
func (lbCloud) ID(*v1.Service) string { return "" }

func (l lbCloud) Desired(_ context.Context, svc *v1.Service, nodes []*v1.Node) (api.LoadBalancerSpec, error) {
	return l.c.DesiredSpec(svc, nodes)
}

func (l lbCloud) List(ctx context.Context) ([]loadbalancer.Held[api.LoadBalancerSpec], error) {
	all, err := l.c.client.ListAllLoadBalancers(ctx, client.ListOptions{PageSize: 1000})
	if err != nil {
		return nil, err
	}
	out := make([]loadbalancer.Held[api.LoadBalancerSpec], len(all))
	for i := range all {
		out[i] = held(&all[i])
	}
	return out, nil
}

func (l lbCloud) Get(ctx context.Context, name string) (loadbalancer.Held[api.LoadBalancerSpec], bool, error) {
	lb, err := l.c.client.GetLoadBalancer(ctx, name)
	if client.IsNotFound(err) {
		return loadbalancer.Held[api.LoadBalancerSpec]{}, false, nil
	}
	if err != nil {
		return loadbalancer.Held[api.LoadBalancerSpec]{}, false, err
	}
	return held(lb), true, nil
}

func (l lbCloud) Create(ctx context.Context, name string, o loadbalancer.Owner, spec api.LoadBalancerSpec) (loadbalancer.Held[api.LoadBalancerSpec], error) {
	return l.put(ctx, name, o, spec)
}

func (l lbCloud) Update(ctx context.Context, h loadbalancer.Held[api.LoadBalancerSpec], o loadbalancer.Owner, spec api.LoadBalancerSpec) (loadbalancer.Held[api.LoadBalancerSpec], error) {
	return l.put(ctx, h.Name, o, spec)
}

func (l lbCloud) put(ctx context.Context, name string, o loadbalancer.Owner, spec api.LoadBalancerSpec) (loadbalancer.Held[api.LoadBalancerSpec], error) {
	spec.Cluster = o.Cluster
	spec.Tags = map[string]string{TagServiceNamespace: o.Namespace, TagServiceName: o.Service, TagServiceUID: o.UID}
	lb, err := l.c.client.EnsureLoadBalancer(ctx, name, spec)
	if err != nil {
		return loadbalancer.Held[api.LoadBalancerSpec]{}, err
	}
	return held(lb), nil
}

func (l lbCloud) Delete(ctx context.Context, h loadbalancer.Held[api.LoadBalancerSpec]) error {
	err := l.c.client.DeleteLoadBalancer(ctx, h.Name)
	if client.IsNotFound(err) {
		return nil
	}
	return err
}

// held is a load balancer as the kit sees it: its spec without the
// owner's cluster and tags, normalized.
func held(lb *api.LoadBalancer) loadbalancer.Held[api.LoadBalancerSpec] {
	spec := lb.LoadBalancerSpec
	spec.Cluster, spec.Tags = "", nil
	return loadbalancer.Held[api.LoadBalancerSpec]{ID: lb.Name, Name: lb.Name, Spec: Normalize(spec),
		Owner: loadbalancer.Owner{Cluster: lb.Cluster, UID: lb.Tags[TagServiceUID],
			Namespace: lb.Tags[TagServiceNamespace], Service: lb.Tags[TagServiceName]},
		Ingress: loadbalancer.Ingress(lb.VIP, "", false, false)}
}

// DesiredSpec is the load balancer a Service and its nodes call for, in the
// normal form the cloud stores (so fingerprints compare), without its
// owner (the cluster and the Service's tags: the kit adds them).
func (c *Cloud) DesiredSpec(svc *v1.Service, nodes []*v1.Node) (api.LoadBalancerSpec, error) {
	var spec api.LoadBalancerSpec
	a := loadbalancer.Read(svc, annotationPrefix)
	ranges, err := loadbalancer.SourceRanges(svc)
	if err != nil {
		return spec, err
	}
	spec.SourceRanges = ranges
	ports, err := loadbalancer.Ports(svc, v1.ProtocolTCP, v1.ProtocolUDP)
	if err != nil {
		return spec, err
	}
	targets := loadbalancer.Targets(nodes)
	for _, p := range ports {
		l := api.Listener{Port: int(p.Port), Protocol: api.Protocol(p.Protocol), Backends: []api.Backend{}}
		for _, t := range targets {
			if addr := t.Address(); addr != "" {
				l.Backends = append(l.Backends, api.Backend{Address: addr, Port: int(p.NodePort)})
			}
		}
		l.HealthCheck = healthCheck(svc, a, p)
		spec.Listeners = append(spec.Listeners, l)
	}
	if err := a.Err(); err != nil {
		return spec, err
	}
	return Normalize(spec), nil
}

func healthCheck(svc *v1.Service, a *loadbalancer.Annotations, p loadbalancer.Port) *api.HealthCheck {
	hc := &api.HealthCheck{Protocol: api.TCP}
	if path, port, ok := loadbalancer.HealthCheckNodePort(svc); ok {
		// externalTrafficPolicy Local: kube-proxy answers 200 only on nodes
		// with a ready endpoint.
		hc.Protocol, hc.Path, hc.Port = api.HTTP, path, int(port)
		a.Known(AnnotationHealthCheckProtocol, AnnotationHealthCheckPath, AnnotationHealthCheckPort)
	} else {
		if a.OneOf(AnnotationHealthCheckProtocol, "TCP", "TCP", "HTTP") == "HTTP" {
			hc.Protocol, hc.Path = api.HTTP, a.String(AnnotationHealthCheckPath, "/healthz")
		}
		a.Known(AnnotationHealthCheckPath)
		hc.Port = a.Int(AnnotationHealthCheckPort, 0, 1, 65535)
	}
	hc.IntervalSeconds = a.Int(AnnotationHealthCheckInterval, 2, 1, 300)
	if hc.Port == int(p.NodePort) {
		hc.Port = 0
	}
	if p.Protocol == v1.ProtocolUDP && hc.Protocol == api.TCP && hc.Port == 0 {
		// A TCP probe of a UDP node port proves nothing; without a check
		// port, UDP backends count as healthy.
		return nil
	}
	return hc
}

// Normalize puts a spec in the form the cloud stores it: listeners by port
// and protocol, backends sorted, ranges masked and sorted, health-check
// defaults filled, read-only health dropped.
func Normalize(spec api.LoadBalancerSpec) api.LoadBalancerSpec {
	out := spec
	out.Listeners = make([]api.Listener, len(spec.Listeners))
	for i, l := range spec.Listeners {
		l.Backends = slices.Clone(l.Backends)
		for j := range l.Backends {
			l.Backends[j].Healthy = nil
		}
		slices.SortFunc(l.Backends, func(a, b api.Backend) int {
			if c := compareAddr(a.Address, b.Address); c != 0 {
				return c
			}
			return a.Port - b.Port
		})
		if l.HealthCheck != nil {
			hc := *l.HealthCheck
			if hc.IntervalSeconds == 0 {
				hc.IntervalSeconds = 2
			}
			if hc.Protocol == api.HTTP && hc.Path == "" {
				hc.Path = "/"
			}
			l.HealthCheck = &hc
		}
		out.Listeners[i] = l
	}
	slices.SortFunc(out.Listeners, func(a, b api.Listener) int {
		if a.Port != b.Port {
			return a.Port - b.Port
		}
		return strings.Compare(string(a.Protocol), string(b.Protocol))
	})
	out.SourceRanges = nil
	for _, r := range spec.SourceRanges {
		if p, err := netip.ParsePrefix(r); err == nil {
			r = p.Masked().String()
		}
		out.SourceRanges = append(out.SourceRanges, r)
	}
	slices.Sort(out.SourceRanges)
	return out
}

func compareAddr(a, b string) int {
	pa, errA := netip.ParseAddr(a)
	pb, errB := netip.ParseAddr(b)
	if errA != nil || errB != nil {
		return strings.Compare(a, b)
	}
	return pa.Compare(pb)
}
