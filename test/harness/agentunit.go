package harness

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coreos/go-systemd/v22/dbus"
)

// AgentUnit is a machine's mooring-agent.service, as systemd runs it.
type AgentUnit struct {
	Unit, LogFile string
	fleet         *Fleet
}

// AgentState is what systemd says of the agent unit.
type AgentState struct {
	ActiveState, SubState, Result string
	// Exited: the main process has ended, with ExitStatus, at ExitedAt.
	Exited     bool
	ExitStatus int
	ExitedAt   time.Time
	// StatusText is the agent's last STATUS= notification.
	StatusText string
	NRestarts  uint32
}

// Failed: the agent ended badly, or systemd gave up on it.
func (s AgentState) Failed() bool {
	return s.ActiveState == "failed" || (s.Exited && s.ExitStatus != 0) || (s.Result != "" && s.Result != "success")
}

func (s AgentState) String() string {
	return fmt.Sprintf("%s/%s result=%s exited=%v status=%d restarts=%d: %q",
		s.ActiveState, s.SubState, s.Result, s.Exited, s.ExitStatus, s.NRestarts, s.StatusText)
}

// State reads the unit's state.
func (a *AgentUnit) State(ctx context.Context) (AgentState, error) {
	return a.fleet.unitState(ctx, a.Unit)
}

// unitState reads a service unit's state (the kubelet's as well as the
// agent's).
func (f *Fleet) unitState(ctx context.Context, unit string) (AgentState, error) {
	var s AgentState
	err := f.withUnits(ctx, func(ctx context.Context, conn *dbus.Conn) error {
		props, err := conn.GetAllPropertiesContext(ctx, unit)
		if err != nil {
			return err
		}
		svc, err := conn.GetUnitTypePropertiesContext(ctx, unit, "Service")
		if err != nil {
			return err
		}
		s.ActiveState, _ = props["ActiveState"].(string)
		s.SubState, _ = props["SubState"].(string)
		s.Result, _ = svc["Result"].(string)
		s.StatusText, _ = svc["StatusText"].(string)
		s.NRestarts, _ = svc["NRestarts"].(uint32)
		exitedAt, _ := svc["ExecMainExitTimestampMonotonic"].(uint64)
		s.Exited = exitedAt != 0
		if at, _ := svc["ExecMainExitTimestamp"].(uint64); at != 0 {
			s.ExitedAt = time.UnixMicro(int64(at))
		}
		status, _ := svc["ExecMainStatus"].(int32)
		s.ExitStatus = int(status)
		return nil
	})
	return s, err
}

// Wait waits until the agent's main process has ended (it ends once the
// kubelet runs; the unit stays active) or systemd gave up on it, and
// returns its exit status. An agent that fails and is restarted counts as
// failed.
func (a *AgentUnit) Wait(timeout time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		s, err := a.State(ctx)
		switch {
		case err == nil && s.Failed():
			return s.ExitStatus, fmt.Errorf("%s failed: %s", a.Unit, s)
		case err == nil && s.Exited:
			return s.ExitStatus, nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("%s: agent still running after %v: %s (%v)", a.Unit, timeout, s, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Exited reports whether the agent's main process has ended, and an error
// when it failed.
func (a *AgentUnit) Exited() (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := a.State(ctx)
	if err != nil {
		return false, err
	}
	if s.Failed() {
		return true, errors.New(s.String())
	}
	return s.Exited, nil
}

// LogTail is the end of the agent's output.
func (a *AgentUnit) LogTail(lines int) string { return tail(a.LogFile, lines) }

// Restart restarts the agent unit, as a reboot runs it again, and waits
// for the restart job.
func (a *AgentUnit) Restart(ctx context.Context) error {
	return a.fleet.withUnits(ctx, func(ctx context.Context, conn *dbus.Conn) error {
		return runJob(ctx, a.Unit, func(ch chan<- string) (int, error) {
			return conn.RestartUnitContext(ctx, a.Unit, "replace", ch)
		})
	})
}
