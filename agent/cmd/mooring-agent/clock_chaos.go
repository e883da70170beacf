//go:build chaosclock

package main

import (
	"fmt"
	"os"
	"time"

	"k8s.io/klog/v2"
)

// ClockOffsetEnv skews the agent's clock in a chaosclock build: a Go
// duration such as "4m" or "-4m" added to the host's time. The reliability
// scenarios (test/chaos) build the agent with -tags chaosclock to give a
// machine a clock that is off, which no release binary can be told to do.
const ClockOffsetEnv = "MOORING_AGENT_CLOCK_OFFSET"

// agentClock is the host's clock moved by $MOORING_AGENT_CLOCK_OFFSET. A
// value that does not parse stops the agent: a test bed asked for a skew it
// would not get.
func agentClock() func() time.Time {
	v := os.Getenv(ClockOffsetEnv)
	if v == "" {
		return nil
	}
	off, err := time.ParseDuration(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s=%q: %v\n", ClockOffsetEnv, v, err)
		os.Exit(exitBadConfig)
	}
	klog.InfoS("Test build: the agent's clock is skewed", "offset", off)
	return func() time.Time { return time.Now().Add(off) }
}
