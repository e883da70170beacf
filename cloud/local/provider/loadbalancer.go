package provider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	servicehelpers "k8s.io/cloud-provider/service/helpers"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/client"
)

// Service annotations the local cloud's load balancers understand.
// docs/ccm.md documents them.
const (
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

// GetLoadBalancerName is one name per Service UID, stable over renames.
func (c *Cloud) GetLoadBalancerName(_ context.Context, _ string, svc *v1.Service) string {
	return cloudprovider.DefaultLoadBalancerName(svc)
}

// GetLoadBalancer reports the Service's load balancer, if it exists.
func (c *Cloud) GetLoadBalancer(ctx context.Context, clusterName string, svc *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	lb, err := c.client.GetLoadBalancer(ctx, c.GetLoadBalancerName(ctx, clusterName, svc))
	if client.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return status(lb), true, nil
}

// EnsureLoadBalancer creates or updates the Service's load balancer so that
// it forwards each port to the node port on every given node.
func (c *Cloud) EnsureLoadBalancer(ctx context.Context, clusterName string, svc *v1.Service, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
	spec, err := c.DesiredSpec(svc, nodes)
	if err != nil {
		return nil, err
	}
	lb, err := c.client.EnsureLoadBalancer(ctx, c.GetLoadBalancerName(ctx, clusterName, svc), spec)
	if err != nil {
		return nil, err
	}
	return status(lb), nil
}

// UpdateLoadBalancer sets the backends; the API replaces the whole spec.
func (c *Cloud) UpdateLoadBalancer(ctx context.Context, clusterName string, svc *v1.Service, nodes []*v1.Node) error {
	_, err := c.EnsureLoadBalancer(ctx, clusterName, svc, nodes)
	return err
}

// EnsureLoadBalancerDeleted deletes the load balancer; gone already is fine.
func (c *Cloud) EnsureLoadBalancerDeleted(ctx context.Context, clusterName string, svc *v1.Service) error {
	err := c.client.DeleteLoadBalancer(ctx, c.GetLoadBalancerName(ctx, clusterName, svc))
	if client.IsNotFound(err) {
		return nil
	}
	return err
}

func status(lb *api.LoadBalancer) *v1.LoadBalancerStatus {
	mode := v1.LoadBalancerIPModeVIP
	return &v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: lb.VIP, IPMode: &mode}}}
}

// DesiredSpec is the load balancer a Service and its nodes call for, in the
// normal form the cloud stores (so fingerprints compare).
func (c *Cloud) DesiredSpec(svc *v1.Service, nodes []*v1.Node) (api.LoadBalancerSpec, error) {
	spec := api.LoadBalancerSpec{
		Cluster: c.cfg.Cluster,
		Tags: map[string]string{
			TagServiceNamespace: svc.Namespace, TagServiceName: svc.Name, TagServiceUID: string(svc.UID),
		},
	}
	ranges, err := servicehelpers.GetLoadBalancerSourceRanges(svc)
	if err != nil {
		return spec, fmt.Errorf("service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	if !servicehelpers.IsAllowAll(ranges) {
		spec.SourceRanges = ranges.StringSlice()
	}
	var addrs []string
	for _, n := range nodes {
		if a := nodeAddress(n); a != "" {
			addrs = append(addrs, a)
		}
	}
	for _, p := range svc.Spec.Ports {
		proto := api.Protocol(p.Protocol)
		if proto != api.TCP && proto != api.UDP {
			return spec, fmt.Errorf("service %s/%s port %d: protocol %s is not supported (TCP and UDP are)", svc.Namespace, svc.Name, p.Port, p.Protocol)
		}
		if p.NodePort == 0 {
			return spec, fmt.Errorf("service %s/%s port %d has no node port; the local cloud forwards to node ports", svc.Namespace, svc.Name, p.Port)
		}
		l := api.Listener{Port: int(p.Port), Protocol: proto, Backends: []api.Backend{}}
		for _, a := range addrs {
			l.Backends = append(l.Backends, api.Backend{Address: a, Port: int(p.NodePort)})
		}
		hc, err := healthCheck(svc, p)
		if err != nil {
			return spec, err
		}
		l.HealthCheck = hc
		spec.Listeners = append(spec.Listeners, l)
	}
	if len(spec.Listeners) == 0 {
		return spec, fmt.Errorf("service %s/%s has no ports", svc.Namespace, svc.Name)
	}
	return Normalize(spec), nil
}

func healthCheck(svc *v1.Service, p v1.ServicePort) (*api.HealthCheck, error) {
	hc := &api.HealthCheck{Protocol: api.TCP, IntervalSeconds: 2}
	if path, port := servicehelpers.GetServiceHealthCheckPathPort(svc); path != "" {
		// externalTrafficPolicy Local: kube-proxy answers 200 only on nodes
		// with a ready endpoint.
		hc.Protocol, hc.Path, hc.Port = api.HTTP, path, int(port)
	} else {
		a := svc.Annotations
		switch proto := a[AnnotationHealthCheckProtocol]; proto {
		case "", "TCP", "tcp":
		case "HTTP", "http":
			hc.Protocol, hc.Path = api.HTTP, "/healthz"
			if path := a[AnnotationHealthCheckPath]; path != "" {
				hc.Path = path
			}
		default:
			return nil, fmt.Errorf("service %s/%s: annotation %s=%q: want TCP or HTTP", svc.Namespace, svc.Name, AnnotationHealthCheckProtocol, proto)
		}
		if v := a[AnnotationHealthCheckPort]; v != "" {
			port, err := strconv.Atoi(v)
			if err != nil || port < 1 || port > 65535 {
				return nil, fmt.Errorf("service %s/%s: annotation %s=%q: want a port", svc.Namespace, svc.Name, AnnotationHealthCheckPort, v)
			}
			hc.Port = port
		}
	}
	if v := svc.Annotations[AnnotationHealthCheckInterval]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 300 {
			return nil, fmt.Errorf("service %s/%s: annotation %s=%q: want 1-300 seconds", svc.Namespace, svc.Name, AnnotationHealthCheckInterval, v)
		}
		hc.IntervalSeconds = n
	}
	if hc.Port == int(p.NodePort) {
		hc.Port = 0
	}
	if p.Protocol == v1.ProtocolUDP && hc.Protocol == api.TCP && hc.Port == 0 {
		// A TCP probe of a UDP node port proves nothing; without a check
		// port, UDP backends count as healthy.
		return nil, nil
	}
	return hc, nil
}

// nodeAddress is the address a load balancer reaches a node on.
func nodeAddress(n *v1.Node) string {
	for _, t := range []v1.NodeAddressType{v1.NodeInternalIP, v1.NodeExternalIP} {
		for _, a := range n.Status.Addresses {
			if a.Type == t {
				return a.Address
			}
		}
	}
	return ""
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

// Fingerprint hashes a normalized spec, to spot drift between what a
// Service wants and what the cloud holds.
func Fingerprint(spec api.LoadBalancerSpec) string {
	data, _ := json.Marshal(Normalize(spec))
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func compareAddr(a, b string) int {
	pa, errA := netip.ParseAddr(a)
	pb, errB := netip.ParseAddr(b)
	if errA != nil || errB != nil {
		return strings.Compare(a, b)
	}
	return pa.Compare(pb)
}

// ListOwnedLoadBalancers lists the cluster's Service load balancers in one
// paginated sweep, for drift repair and garbage collection.
func (c *Cloud) ListOwnedLoadBalancers(ctx context.Context) ([]cloud.OwnedLoadBalancer, error) {
	lbs, err := c.client.ListAllLoadBalancers(ctx, client.ListOptions{Cluster: c.cfg.Cluster, PageSize: 1000})
	if err != nil {
		return nil, err
	}
	var out []cloud.OwnedLoadBalancer
	for _, lb := range lbs {
		uid := lb.Tags[TagServiceUID]
		if lb.Cluster != c.cfg.Cluster || uid == "" {
			continue
		}
		out = append(out, cloud.OwnedLoadBalancer{
			Name: lb.Name, Namespace: lb.Tags[TagServiceNamespace], Service: lb.Tags[TagServiceName], UID: uid,
			Fingerprint: Fingerprint(lb.LoadBalancerSpec),
		})
	}
	return out, nil
}

// DesiredFingerprint is the fingerprint of the spec a Service calls for.
func (c *Cloud) DesiredFingerprint(svc *v1.Service, nodes []*v1.Node) (string, error) {
	spec, err := c.DesiredSpec(svc, nodes)
	if err != nil {
		return "", err
	}
	return Fingerprint(spec), nil
}
