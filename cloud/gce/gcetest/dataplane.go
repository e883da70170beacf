package gcetest

import (
	"net/netip"
	"slices"
	"strconv"
	"time"

	compute "google.golang.org/api/compute/v1"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/local/lb"
)

// DataPlanePrefix holds the addresses of the endpoint's load balancers:
// GCE's loopback prefix of the test endpoints' data planes.
var DataPlanePrefix = netip.MustParsePrefix("127.86.0.0/16")

// The data plane (lb.go's doc): every address the endpoint gives out is a
// load balancer of cloudtest.DataPlane, listening on nothing until a
// forwarding rule uses it.

func (c *Cloud) dataPlaneClose() error {
	c.net.dp.Prefix = DataPlanePrefix
	return c.net.dp.Close()
}

// allocVIP takes a new address of the data plane; under c.net.mu.
func (c *Cloud) allocVIP() (string, error) {
	s := c.lbInit()
	c.net.dp.Prefix = DataPlanePrefix
	id := "vip-" + strconv.FormatUint(c.net.nextID(), 10)
	vip, err := c.net.dp.Serve(id, nil, nil)
	if err != nil {
		return "", err
	}
	s.vips[vip] = id
	return vip, nil
}

// releaseVIP gives an address back; under c.net.mu.
func (c *Cloud) releaseVIP(vip string) {
	s := c.lbInit()
	if id, ok := s.vips[vip]; ok {
		c.net.dp.Remove(id)
		delete(s.vips, vip)
	}
}

// hookRouting lets the backend services' file ask about forwarding rules;
// under c.net.mu.
func (c *Cloud) hookRouting() {
	s := &c.net.lb
	if s.hooked {
		return
	}
	s.hooked = true
	c.rt.init()
	c.rt.ruleUsing = func(link string) string {
		return c.ruleUsing(func(fr *compute.ForwardingRule) bool { return fr.BackendService == link })
	}
	c.rt.backendsChanged = c.syncDataPlane
}

// dataPlaneChanged is an operation's finish that makes the data plane
// follow the resources.
func (c *Cloud) dataPlaneChanged() *OpError {
	c.syncDataPlane()
	return nil
}

// syncDataPlane makes every forwarding rule's load balancer forward to its
// instances; under c.net.mu.
func (c *Cloud) syncDataPlane() {
	s := c.lbInit()
	if c.net.closed {
		return
	}
	c.net.dp.Prefix = DataPlanePrefix
	for _, fr := range s.rules {
		id, ok := s.vips[fr.IPAddress]
		if !ok {
			continue
		}
		if _, err := c.net.dp.Serve(id, c.listeners(fr), nil); err != nil {
			klog.ErrorS(err, "gcetest: data plane of a forwarding rule", "rule", fr.SelfLink, "ip", fr.IPAddress)
		}
	}
}

// targets are the instances a rule forwards to, and its health check.
func (c *Cloud) targets(fr *compute.ForwardingRule) ([]Instance, *lb.HealthCheck) {
	s := &c.net.lb
	var links []string
	var hc *lb.HealthCheck
	if p, ok := s.pools[fr.Target]; ok {
		links = p.Instances
		if len(p.HealthChecks) == 1 && s.checkHealth {
			if h, ok := s.checks[p.HealthChecks[0]]; ok {
				hc = &lb.HealthCheck{Protocol: lb.HTTP, Port: int(h.Port), Path: h.RequestPath,
					Interval: time.Second, Timeout: time.Second, HealthyThreshold: 1, UnhealthyThreshold: int(h.UnhealthyThreshold)}
			}
		}
	}
	var out []Instance
	for _, l := range links {
		if ref, ok := parseRef("", l, "zones", "*", "instances", "*"); ok {
			if in, ok := c.Get(ref.project, ref.parts[1], ref.parts[3]); ok && in.Status == "RUNNING" {
				out = append(out, in)
			}
		}
	}
	if fr.BackendService != "" {
		ref, _ := parseRef("", fr.BackendService, "regions", "*", "backendServices", "*")
		for _, name := range c.backendServiceTargets(fr.BackendService) {
			for _, in := range c.instances.List(func(in *Instance) bool { return in.Name == name && in.Project == ref.project }) {
				if in.Status == "RUNNING" {
					out = append(out, in)
				}
			}
		}
	}
	return out, hc
}

// listeners are a rule's listeners: each of its ports to the nodes' port
// the stand-in for kube-proxy says.
func (c *Cloud) listeners(fr *compute.ForwardingRule) []lb.Listener {
	var ports []int
	switch {
	case fr.PortRange != "":
		ports, _ = portRange(fr.PortRange)
	default:
		for _, p := range fr.Ports {
			if n, err := strconv.Atoi(p); err == nil {
				ports = append(ports, n)
			}
		}
	}
	mapped := c.nodePorts(fr)
	if len(ports) > 64 {
		// A wide range (a Service's ports span it): only the ports
		// kube-proxy serves are listened on.
		ports = slices.DeleteFunc(ports, func(p int) bool { return mapped[p] == 0 })
	}
	ins, hc := c.targets(fr)
	var out []lb.Listener
	for _, p := range ports {
		np := mapped[p]
		if np == 0 {
			np = p
		}
		l := lb.Listener{Port: p, Protocol: lb.Protocol(fr.IPProtocol), HealthCheck: hc}
		for _, in := range ins {
			l.Backends = append(l.Backends, lb.Backend{Address: in.InternalIP, Port: np})
		}
		out = append(out, l)
	}
	return out
}

// nodePorts is the stand-in for kube-proxy's answer for a rule (nil:
// none).
func (c *Cloud) nodePorts(fr *compute.ForwardingRule) map[int]int {
	if f := c.net.lb.kubeProxy; f != nil {
		cp := cloneWire(*fr)
		return f(&cp)
	}
	return nil
}
