package systemd

import (
	"context"
	"fmt"

	"github.com/coreos/go-systemd/v22/dbus"
)

// Conn is the part of a D-Bus connection to systemd that mooring uses;
// *dbus.Conn from go-systemd is one, FakeConn another.
type Conn interface {
	ReloadContext(ctx context.Context) error
	StartUnitContext(ctx context.Context, name, mode string, ch chan<- string) (int, error)
	GetUnitPropertyContext(ctx context.Context, unit, propertyName string) (*dbus.Property, error)
	Close()
}

var _ Conn = (*dbus.Conn)(nil)

// DialSystem connects to the system instance of systemd.
func DialSystem(ctx context.Context) (Conn, error) { return dbus.NewSystemConnectionContext(ctx) }

// DialUser connects to the user instance over the session bus, as
// go-systemd's NewUserConnectionContext does: $DBUS_SESSION_BUS_ADDRESS,
// else $XDG_RUNTIME_DIR/bus (tests run a systemd --user with a private
// runtime dir).
func DialUser(ctx context.Context) (Conn, error) { return dbus.NewUserConnectionContext(ctx) }

// Units starts and inspects units.
type Units struct{ conn Conn }

// NewUnits manages units over conn.
func NewUnits(conn Conn) *Units { return &Units{conn: conn} }

// Reload makes systemd read changed unit files (daemon-reload).
func (u *Units) Reload(ctx context.Context) error {
	if err := u.conn.ReloadContext(ctx); err != nil {
		return fmt.Errorf("systemd daemon-reload: %w", err)
	}
	return nil
}

// Start queues a start job for the unit and returns without waiting for
// it: a unit ordered after the caller (kubelet after mooring-agent) would
// otherwise wait for the caller while the caller waits for it.
func (u *Units) Start(ctx context.Context, name string) error {
	if _, err := u.conn.StartUnitContext(ctx, name, "replace", nil); err != nil {
		return fmt.Errorf("systemd start %s: %w", name, err)
	}
	return nil
}

// ActiveState is the unit's ActiveState (active, activating, failed, ...).
func (u *Units) ActiveState(ctx context.Context, name string) (string, error) {
	p, err := u.conn.GetUnitPropertyContext(ctx, name, "ActiveState")
	if err != nil {
		return "", fmt.Errorf("systemd %s ActiveState: %w", name, err)
	}
	s, ok := p.Value.Value().(string)
	if !ok {
		return "", fmt.Errorf("systemd %s ActiveState: unexpected %v", name, p.Value)
	}
	return s, nil
}

// Close closes the connection.
func (u *Units) Close() { u.conn.Close() }
