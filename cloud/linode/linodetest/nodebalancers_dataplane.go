package linodetest

import (
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/mooring-dev/mooring/cloud/local/lb"
)

// The NodeBalancers' data plane: a cloudtest.DataPlane serves each
// NodeBalancer's configs on its VIP and forwards them to their nodes.

// DataPlanePrefix holds the NodeBalancers' addresses (their ipv4).
var DataPlanePrefix = netip.MustParsePrefix("127.83.0.0/16")

// Healthy reports, per port of a NodeBalancer, how many of its nodes pass
// their checks in the data plane.
func (c *Cloud) Healthy(id int) map[int]int { return c.nb.plane.Healthy(strconv.Itoa(id)) }

// serveLocked makes the data plane forward n's configs: each port to its
// nodes in mode accept (and backup), with its check; n.IPv4 and Hostname
// are its VIP.
func (c *Cloud) serveLocked(n *NodeBalancer) error {
	var ls []lb.Listener
	for _, cf := range n.Configs {
		l := lb.Listener{Port: cf.Port, Protocol: lb.TCP}
		if cf.Protocol == "udp" {
			l.Protocol = lb.UDP
		}
		for _, nd := range cf.Nodes {
			if nd.Mode == "reject" || nd.Mode == "drain" {
				continue
			}
			ap, err := netip.ParseAddrPort(nd.Address)
			if err != nil {
				return fmt.Errorf("linodetest: NodeBalancer %d: node address %q: %v", n.ID, nd.Address, err)
			}
			l.Backends = append(l.Backends, lb.Backend{Address: ap.Addr().String(), Port: int(ap.Port())})
		}
		hc := &lb.HealthCheck{Interval: time.Duration(cf.CheckInterval) * time.Second, Timeout: time.Duration(cf.CheckTimeout) * time.Second,
			HealthyThreshold: 1, UnhealthyThreshold: cf.CheckAttempts}
		switch cf.Check {
		case "connection":
			hc.Protocol = lb.TCP
		case "http", "http_body":
			hc.Protocol, hc.Path = lb.HTTP, cf.CheckPath
		default:
			hc = nil
		}
		if hc != nil && cf.Protocol == "udp" {
			hc.Port = cf.UDPCheckPort
		}
		l.HealthCheck = hc
		ls = append(ls, l)
	}
	ports := make([]int, 0, len(n.Configs))
	for _, cf := range n.Configs {
		ports = append(ports, cf.Port)
	}
	// An https port's TLS is not ended here: the data plane forwards its
	// bytes as TCP (the certificate is checked and held, not served).
	vip, err := c.nb.plane.Serve(strconv.Itoa(n.ID), ls, c.sourceRanges(n.ID, ports))
	if err != nil {
		return err
	}
	n.IPv4 = vip
	n.Hostname = vip + HostnameSuffix
	return nil
}
