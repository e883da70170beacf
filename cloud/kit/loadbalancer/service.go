package loadbalancer

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	servicehelpers "k8s.io/cloud-provider/service/helpers"
)

// Port is one port of a Service, as a load balancer forwards it: Port on
// the load balancer to NodePort on the nodes.
type Port struct {
	Name     string
	Protocol v1.Protocol
	Port     int32
	NodePort int32
}

// Ports are svc's ports, by port and protocol, checked: there is one,
// each has a node port (the clouds here forward to node ports) and a
// protocol in supported (all when none is named).
func Ports(svc *v1.Service, supported ...v1.Protocol) ([]Port, error) {
	if len(svc.Spec.Ports) == 0 {
		return nil, fmt.Errorf("service %s/%s has no ports", svc.Namespace, svc.Name)
	}
	out := make([]Port, 0, len(svc.Spec.Ports))
	for _, p := range svc.Spec.Ports {
		proto := cmp.Or(p.Protocol, v1.ProtocolTCP)
		if len(supported) > 0 && !slices.Contains(supported, proto) {
			return nil, fmt.Errorf("service %s/%s port %d: protocol %s is not supported by this cloud's load balancers (%s are)",
				svc.Namespace, svc.Name, p.Port, proto, protocols(supported))
		}
		if p.NodePort == 0 {
			return nil, fmt.Errorf("service %s/%s port %d has no node port (spec.allocateLoadBalancerNodePorts is false?); this cloud's load balancers forward to node ports",
				svc.Namespace, svc.Name, p.Port)
		}
		out = append(out, Port{Name: p.Name, Protocol: proto, Port: p.Port, NodePort: p.NodePort})
	}
	slices.SortFunc(out, func(a, b Port) int {
		return cmp.Or(cmp.Compare(a.Port, b.Port), strings.Compare(string(a.Protocol), string(b.Protocol)))
	})
	return out, nil
}

func protocols(ps []v1.Protocol) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = string(p)
	}
	return strings.Join(s, ", ")
}

// HealthCheckNodePort is the check of a Service with externalTrafficPolicy
// Local: kube-proxy answers 200 on path at port only on nodes with a ready
// endpoint. ok is false for policy Cluster.
func HealthCheckNodePort(svc *v1.Service) (path string, port int32, ok bool) {
	path, port = servicehelpers.GetServiceHealthCheckPathPort(svc)
	return path, port, path != ""
}

// SourceRanges are the client ranges svc allows (spec.
// loadBalancerSourceRanges, or its annotation), masked and sorted; nil
// when it allows every address.
func SourceRanges(svc *v1.Service) ([]string, error) {
	ranges, err := servicehelpers.GetLoadBalancerSourceRanges(svc)
	if err != nil {
		return nil, fmt.Errorf("service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	if servicehelpers.IsAllowAll(ranges) {
		return nil, nil
	}
	var out []string
	for _, r := range ranges.StringSlice() {
		if p, err := netip.ParsePrefix(r); err == nil {
			r = p.Masked().String()
		}
		out = append(out, r)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Target is a node a load balancer forwards to.
type Target struct {
	Node, ProviderID       string
	InternalIP, ExternalIP string
}

// Address is the target's InternalIP, else its ExternalIP.
func (t Target) Address() string { return cmp.Or(t.InternalIP, t.ExternalIP) }

// Targets are the nodes as targets, by node name.
func Targets(nodes []*v1.Node) []Target {
	out := make([]Target, 0, len(nodes))
	for _, n := range nodes {
		t := Target{Node: n.Name, ProviderID: n.Spec.ProviderID}
		for _, a := range n.Status.Addresses {
			switch {
			case a.Type == v1.NodeInternalIP && t.InternalIP == "":
				t.InternalIP = a.Address
			case a.Type == v1.NodeExternalIP && t.ExternalIP == "":
				t.ExternalIP = a.Address
			}
		}
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b Target) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// Ingress is a load balancer's status entry: its IP (ipMode VIP, or Proxy
// when it speaks PROXY protocol or ends TLS, so that kube-proxy does not
// short-circuit traffic meant to pass through it) and hostname.
// hostnameOnly leaves the IP out (the clouds' annotation for that).
func Ingress(ip, hostname string, proxy, hostnameOnly bool) []v1.LoadBalancerIngress {
	if hostnameOnly && hostname != "" {
		return []v1.LoadBalancerIngress{{Hostname: hostname}}
	}
	if ip == "" {
		if hostname == "" {
			return nil
		}
		return []v1.LoadBalancerIngress{{Hostname: hostname}}
	}
	mode := v1.LoadBalancerIPModeVIP
	if proxy {
		mode = v1.LoadBalancerIPModeProxy
	}
	return []v1.LoadBalancerIngress{{IP: ip, Hostname: hostname, IPMode: &mode}}
}
