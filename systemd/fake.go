package systemd

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
)

// FakeConn is an in-memory systemd for unit tests: units become active
// when started. The e2e tests use a real systemd --user instead.
type FakeConn struct {
	mu      sync.Mutex
	Reloads int
	Started []string
	States  map[string]string
	// StartErr, when set, fails every start.
	StartErr error
}

var _ Conn = (*FakeConn)(nil)

// NewFakeConn makes an empty fake.
func NewFakeConn() *FakeConn { return &FakeConn{States: map[string]string{}} }

// ReloadContext counts reloads.
func (f *FakeConn) ReloadContext(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Reloads++
	return nil
}

// StartUnitContext records the start and marks the unit active.
func (f *FakeConn) StartUnitContext(_ context.Context, name, _ string, ch chan<- string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.StartErr != nil {
		return 0, f.StartErr
	}
	f.Started = append(f.Started, name)
	f.States[name] = "active"
	if ch != nil {
		go func() { ch <- "done" }()
	}
	return len(f.Started), nil
}

// GetUnitPropertyContext answers ActiveState.
func (f *FakeConn) GetUnitPropertyContext(_ context.Context, unit, prop string) (*dbus.Property, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if prop != "ActiveState" {
		return nil, fmt.Errorf("fake: property %s", prop)
	}
	state, ok := f.States[unit]
	if !ok {
		state = "inactive"
	}
	return &dbus.Property{Name: prop, Value: godbus.MakeVariant(state)}, nil
}

// Close does nothing.
func (f *FakeConn) Close() {}

// StartedUnits is a copy of the units started so far.
func (f *FakeConn) StartedUnits() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.Started...)
}

// FakeNotifier records notifications.
type FakeNotifier struct {
	mu       sync.Mutex
	Messages []string
}

// Ready records READY=1.
func (f *FakeNotifier) Ready() error { return f.add("READY=1") }

// Status records STATUS=...
func (f *FakeNotifier) Status(format string, args ...any) error {
	return f.add("STATUS=" + fmt.Sprintf(format, args...))
}

// Watchdog records WATCHDOG=1.
func (f *FakeNotifier) Watchdog() error { return f.add("WATCHDOG=1") }

// WatchdogInterval is off.
func (f *FakeNotifier) WatchdogInterval() time.Duration { return 0 }

func (f *FakeNotifier) add(m string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Messages = append(f.Messages, m)
	return nil
}

// Sent is a copy of the messages so far.
func (f *FakeNotifier) Sent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.Messages...)
}
