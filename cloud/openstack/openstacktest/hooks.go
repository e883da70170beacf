package openstacktest

// ClearFaults drops the faults Fail queued for method that are not used
// up yet.
func (c *Cloud) ClearFaults(method string) { c.Faults.Clear(method) }

// Unrevoke restores the application credential Revoke deleted: it
// authenticates again (the tokens Revoke dropped stay invalid).
func (c *Cloud) Unrevoke() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.revoked = false
}
