package hetznertest

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/mooring-dev/mooring/cloud/local/lb"
)

// The load balancers' data plane: a cloudtest.DataPlane serves each load
// balancer's services on its VIPs and forwards them to its targets.

// DataPlanePrefix holds the endpoint's load balancers' addresses.
var DataPlanePrefix = netip.MustParsePrefix("127.82.0.0/16")

// LBHealthy reports, per listen port, how many of the load balancer's
// targets pass its health checks on the data plane.
func (c *Cloud) LBHealthy(id int64) map[int]int { return c.lbs.plane.Healthy(fmt.Sprint(id)) }

// DataPlaneErr is the last error the data plane gave serving a load
// balancer (nil: none).
func (c *Cloud) DataPlaneErr() error {
	c.lbs.mu.Lock()
	defer c.lbs.mu.Unlock()
	return c.lbs.err
}

// closeLBs stops the data plane.
func (c *Cloud) closeLBs() error { return c.lbs.plane.Close() }

// serveLB makes the data plane do what l says (s.mu held): its public
// VIP, and its private one while attached to a network.
func (c *Cloud) serveLB(l *LoadBalancer) error {
	s := &c.lbs
	s.plane.Prefix = DataPlanePrefix
	var listeners []lb.Listener
	for _, svc := range l.Services {
		ln := lb.Listener{Port: svc.ListenPort, Protocol: lb.TCP}
		for _, t := range l.Targets {
			if addr := c.targetAddress(l, t); addr != "" {
				ln.Backends = append(ln.Backends, lb.Backend{Address: addr, Port: svc.DestinationPort})
			}
		}
		hc := svc.HealthCheck
		check := &lb.HealthCheck{Protocol: lb.TCP, Port: hc.Port, Interval: time.Duration(max(hc.Interval, 1)) * time.Second,
			Timeout: time.Duration(max(hc.Timeout, 1)) * time.Second, UnhealthyThreshold: max(hc.Retries, 1)}
		if hc.Protocol == "http" {
			check.Protocol = lb.HTTP
			if hc.HTTP != nil {
				check.Path = hc.HTTP.Path
			}
		}
		ln.HealthCheck = check
		listeners = append(listeners, ln)
	}
	id := fmt.Sprint(l.ID)
	var errs []error
	vip, err := s.plane.Serve(id, listeners, nil)
	errs = append(errs, err)
	if err == nil && l.IPv4 == "" {
		l.IPv4 = vip
	}
	if l.Network != 0 {
		pvip, err := s.plane.Serve(id+"/private", listeners, nil)
		errs = append(errs, err)
		if err == nil {
			l.PrivateIP = pvip
		}
	} else {
		s.plane.Remove(id + "/private")
		l.PrivateIP = ""
	}
	s.err = errors.Join(errs...)
	return s.err
}

// targetAddress is where l sends a target's traffic: the server's address
// in l's network, or its public IPv4; "" when it has neither.
func (c *Cloud) targetAddress(l *LoadBalancer, t LBTarget) string {
	srv, ok := c.Get(t.Server)
	if !ok {
		return ""
	}
	if !t.UsePrivateIP {
		return srv.PublicIPv4
	}
	for _, pn := range srv.PrivateNets {
		if pn.Network == l.Network {
			return pn.IP
		}
	}
	return ""
}
