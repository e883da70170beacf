package gcetest

import "net/netip"

// DataPlanePrefix holds the addresses of the endpoint's load balancers:
// GCE's loopback prefix of the test endpoints' data planes.
var DataPlanePrefix = netip.MustParsePrefix("127.86.0.0/16")

func (c *Cloud) dataPlaneClose() error {
	c.net.dp.Prefix = DataPlanePrefix
	return c.net.dp.Close()
}
