//go:build !chaosclock

package main

import "time"

// agentClock is the agent's clock: nil, the host's (time.Now). A build with
// the chaosclock tag (clock_chaos.go, test beds only) can skew it.
func agentClock() func() time.Time { return nil }
