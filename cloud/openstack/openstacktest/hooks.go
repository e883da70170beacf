package openstacktest

import "github.com/mooring-dev/mooring/cloud/cloudtest"

// ClearFaults drops the faults Fail queued for method that are not used
// up yet.
func (c *Cloud) ClearFaults(method string) { c.faults.Set(method, cloudtest.Fault{}) }

// Unrevoke restores the application credential Revoke deleted: it
// authenticates again (the tokens Revoke dropped stay invalid).
func (c *Cloud) Unrevoke() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.revoked = false
}
