package harness

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/client"
)

// A fleet's machines follow their instances' power, as machines of a real
// cloud do: the fleet reads the instances' states every PowerPoll, and when
// an instance is stopped or terminated (by the CLI, the API or a test) its
// machine is cut off: its kubelet unit is killed with SIGKILL and stopped,
// and so is its agent unit. When a stopped instance runs again, the machine
// "boots": its kubelet unit starts again, and with it the agent unit,
// which finds the credentials it left on disk. A terminated instance stays
// off.

// DefaultPowerPoll is how often a fleet reads its instances' states.
const DefaultPowerPoll = time.Second

// PowerEvent is what a fleet did to a machine because its instance changed
// state.
type PowerEvent struct {
	At       time.Time
	Machine  string
	Instance string
	// State is the instance state that caused it.
	State api.InstanceState
	// On: the kubelet was started again; else the machine was cut off.
	On bool
	// Err is set when systemd did not do it.
	Err error
}

func (e PowerEvent) String() string {
	what := "its kubelet was stopped, as a powered-off machine's"
	if e.On {
		what = "its kubelet was started again, as a booting machine's"
	}
	if e.Err != nil {
		return fmt.Sprintf("%s: instance %s %s: %s: failed: %v", e.Machine, e.Instance, e.State, what, e.Err)
	}
	return fmt.Sprintf("%s: instance %s %s: %s", e.Machine, e.Instance, e.State, what)
}

// power is a machine's power as the fleet last set it.
type power struct {
	mu     sync.Mutex
	off    bool
	state  api.InstanceState // the state that turned it off
	events []PowerEvent
}

// PowerEvents is what the fleet did to the machine so far.
func (m *Machine) PowerEvents() []PowerEvent {
	m.power.mu.Lock()
	defer m.power.mu.Unlock()
	return append([]PowerEvent(nil), m.power.events...)
}

// WaitPowerEvents returns the machine's power events once there are at
// least n, or what there is after timeout. An event is recorded when
// systemd has finished the job, which can be after the kubelet is already
// gone.
func (m *Machine) WaitPowerEvents(n int, timeout time.Duration) []PowerEvent {
	deadline := time.Now().Add(timeout)
	for {
		ev := m.PowerEvents()
		if len(ev) >= n || time.Now().After(deadline) {
			return ev
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// watchPower polls the instances every interval until ctx ends.
func (f *Fleet) watchPower(ctx context.Context, lc *LocalCloud, interval time.Duration, logf func(string, ...any)) {
	defer close(f.watchDone)
	ids := make([]string, 0, len(f.Machines))
	for _, m := range f.Machines {
		ids = append(ids, m.Instance.ID)
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, e := range f.syncPower(ctx, lc, ids) {
			if logf != nil {
				logf("%s", e)
			}
		}
	}
}

// syncPower reads the instances' states once and powers machines off or on
// to match. A failed read changes nothing: a cloud that cannot be reached
// says nothing about its machines.
func (f *Fleet) syncPower(ctx context.Context, lc *LocalCloud, ids []string) []PowerEvent {
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	list, err := lc.Client.ListAllInstances(lctx, client.ListOptions{IDs: ids})
	if err != nil {
		return nil
	}
	states := map[string]api.InstanceState{}
	for _, in := range list {
		states[in.ID] = in.State
	}
	var events []PowerEvent
	for _, m := range f.Machines {
		state, ok := states[m.Instance.ID]
		if !ok {
			// Gone from the list after its retention: terminated.
			state = api.StateTerminated
		}
		m.power.mu.Lock()
		off, offBy := m.power.off, m.power.state
		m.power.mu.Unlock()
		var e PowerEvent
		switch {
		case !off && (state == api.StateStopped || state == api.StateTerminated):
			e = f.powerOff(ctx, m, state)
		case off && offBy == api.StateStopped && state == api.StateTerminated:
			// Already off; it stays off.
			m.power.mu.Lock()
			m.power.state = state
			m.power.mu.Unlock()
			continue
		case off && offBy == api.StateStopped && state == api.StateRunning:
			e = f.powerOn(ctx, m, state)
		default:
			continue
		}
		events = append(events, e)
	}
	return events
}

// powerOff cuts a machine off: its kubelet unit gets SIGKILL, and it and
// the agent unit (which may still be joining) are stopped.
func (f *Fleet) powerOff(ctx context.Context, m *Machine, state api.InstanceState) PowerEvent {
	err := f.withUnits(ctx, func(ctx context.Context, conn *dbus.Conn) error {
		unit := kubeletUnitName(m.Name)
		// Fails when nothing runs (the agent never started the unit): the
		// stop below is what matters.
		_ = conn.KillUnitWithTarget(ctx, unit, dbus.All, int32(syscall.SIGKILL))
		var errs []error
		for _, u := range []string{unit, agentUnitName(m.Name)} {
			errs = append(errs, runJob(ctx, u, func(ch chan<- string) (int, error) { return conn.StopUnitContext(ctx, u, "replace", ch) }))
			_ = conn.ResetFailedUnitContext(ctx, u)
		}
		return errors.Join(errs...)
	})
	return m.record(PowerEvent{State: state}, err, true)
}

// powerOn starts a machine's kubelet unit again, as a booting machine
// does; mooring's drop-in makes it want the agent unit and start after it.
func (f *Fleet) powerOn(ctx context.Context, m *Machine, state api.InstanceState) PowerEvent {
	err := f.withUnits(ctx, func(ctx context.Context, conn *dbus.Conn) error {
		unit := kubeletUnitName(m.Name)
		return runJob(ctx, unit, func(ch chan<- string) (int, error) { return conn.StartUnitContext(ctx, unit, "replace", ch) })
	})
	return m.record(PowerEvent{State: state, On: true}, err, false)
}

// record notes an event and the machine's new power. A failed attempt
// counts as done, so that it is reported once, not retried every poll.
func (m *Machine) record(e PowerEvent, err error, off bool) PowerEvent {
	e.At, e.Machine, e.Instance, e.Err = time.Now(), m.Instance.Name, m.Instance.ID, err
	m.power.mu.Lock()
	defer m.power.mu.Unlock()
	m.power.off, m.power.state = off, e.State
	m.power.events = append(m.power.events, e)
	return e
}

// withUnits runs fn on a connection to the fleet's systemd --user (over
// its private session bus), bounded to 30 s.
func (f *Fleet) withUnits(ctx context.Context, fn func(context.Context, *dbus.Conn) error) error {
	if f.Systemd == nil {
		return errors.New("the fleet's systemd is not running")
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	bus := "unix:path=" + filepath.Join(f.Systemd.RuntimeDir, "bus")
	conn, err := dbus.NewConnection(func() (*godbus.Conn, error) {
		c, err := godbus.Dial(bus, godbus.WithContext(ctx))
		if err != nil {
			return nil, err
		}
		if err := c.Auth([]godbus.Auth{godbus.AuthExternal(strconv.Itoa(syscall.Getuid()))}); err != nil {
			c.Close()
			return nil, err
		}
		if err := c.Hello(); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	})
	if err != nil {
		return fmt.Errorf("systemd --user at %s: %w", bus, err)
	}
	defer conn.Close()
	return fn(ctx, conn)
}

// runJob queues a systemd job and waits for its result.
func runJob(ctx context.Context, unit string, queue func(chan<- string) (int, error)) error {
	ch := make(chan string, 1)
	if _, err := queue(ch); err != nil {
		return fmt.Errorf("systemd %s: %w", unit, err)
	}
	select {
	case res := <-ch:
		if res != "done" {
			return fmt.Errorf("systemd %s: job %s", unit, res)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("systemd %s: %w", unit, ctx.Err())
	}
}
