package systemd

import (
	"fmt"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// Notifier tells systemd how a Type=notify service is doing (sd_notify).
type Notifier interface {
	// Ready says start-up is complete (READY=1).
	Ready() error
	// Status sets the one-line status systemctl shows (STATUS=...).
	Status(format string, args ...any) error
	// Watchdog pets the watchdog (WATCHDOG=1).
	Watchdog() error
	// WatchdogInterval is how often to pet it; 0 when the unit has none.
	WatchdogInterval() time.Duration
}

// NewNotifier talks to $NOTIFY_SOCKET; outside systemd (no socket) every
// call is a no-op.
func NewNotifier() Notifier {
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		interval = 0
	}
	return sdNotifier{watchdog: interval}
}

type sdNotifier struct{ watchdog time.Duration }

func (n sdNotifier) send(state string) error {
	_, err := daemon.SdNotify(false, state)
	if err != nil {
		return fmt.Errorf("sd_notify %q: %w", state, err)
	}
	return nil
}

func (n sdNotifier) Ready() error    { return n.send(daemon.SdNotifyReady) }
func (n sdNotifier) Watchdog() error { return n.send(daemon.SdNotifyWatchdog) }
func (n sdNotifier) Status(format string, args ...any) error {
	return n.send("STATUS=" + fmt.Sprintf(format, args...))
}
func (n sdNotifier) WatchdogInterval() time.Duration { return n.watchdog / 2 }
