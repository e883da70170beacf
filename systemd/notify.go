package systemd

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

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
	return n.send("STATUS=" + StatusLine(fmt.Sprintf(format, args...)))
}

// MaxStatus bounds a STATUS line in bytes: systemd ignores a notification
// datagram longer than its buffer (4096 bytes, PIPE_BUF).
const MaxStatus = 2048

// StatusLine makes msg fit STATUS=: one line (a notification is one
// assignment a line, so a newline would end the status and start another
// assignment; errors.Join's lines become "; "), valid UTF-8 (systemd drops a
// status that is not), at most MaxStatus bytes (cut at a character, "...").
func StatusLine(msg string) string {
	msg = strings.ToValidUTF8(msg, "\uFFFD")
	msg = strings.Join(strings.FieldsFunc(msg, func(r rune) bool { return r == '\n' || r == '\r' }), "; ")
	if len(msg) <= MaxStatus {
		return msg
	}
	cut := MaxStatus - len("...")
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "..."
}
func (n sdNotifier) WatchdogInterval() time.Duration { return n.watchdog / 2 }
