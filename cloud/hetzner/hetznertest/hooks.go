package hetznertest

import "github.com/mooring-dev/mooring/cloud/cloudtest"

// ClearFaults drops what Fail and FailPage left of method's faults, so a
// test can make a method fail until it says otherwise (Fail with a large n)
// and then answer again.
func (c *Cloud) ClearFaults(method string) { c.faults.Add(method, cloudtest.Fault{}) }
