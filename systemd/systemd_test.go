package systemd

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestNotifierSendsToNotifySocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	t.Setenv("WATCHDOG_USEC", "4000000")
	t.Setenv("WATCHDOG_PID", "")
	n := NewNotifier()
	if n.WatchdogInterval() != 2*time.Second {
		t.Fatalf("watchdog interval %v, want half of WATCHDOG_USEC", n.WatchdogInterval())
	}
	for _, send := range []func() error{
		func() error { return n.Status("joining as %s", "node-1") },
		n.Ready,
		n.Watchdog,
	} {
		if err := send(); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	buf := make([]byte, 512)
	for range 3 {
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		k, err := conn.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(buf[:k]))
	}
	want := []string{"STATUS=joining as node-1", "READY=1", "WATCHDOG=1"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestNotifierWithoutSocketIsSilent(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	t.Setenv("WATCHDOG_USEC", "")
	n := NewNotifier()
	if err := n.Ready(); err != nil || n.WatchdogInterval() != 0 {
		t.Fatalf("outside systemd: %v, %v", err, n.WatchdogInterval())
	}
}

func TestUnitsOverFakeConn(t *testing.T) {
	f := NewFakeConn()
	u := NewUnits(f)
	ctx := context.Background()
	if err := u.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if err := u.Start(ctx, "kubelet.service"); err != nil {
		t.Fatal(err)
	}
	state, err := u.ActiveState(ctx, "kubelet.service")
	if err != nil || state != "active" || f.Reloads != 1 {
		t.Fatalf("state %q, %v, reloads %d", state, err, f.Reloads)
	}
}

// A STATUS value is one line of valid UTF-8 that fits systemd's
// notification buffer: a multi-line error (errors.Join) must not end the
// status early and start other assignments.
func TestStatusLine(t *testing.T) {
	long := strings.Repeat("é", MaxStatus) // 2 bytes each
	for _, c := range []struct{ in, want string }{
		{"joining", "joining"},
		{"bad configuration: a\nb\r\n\nREADY=1", "bad configuration: a; b; READY=1"},
		{"not \xff UTF-8", "not \uFFFD UTF-8"},
		{long, strings.Repeat("é", (MaxStatus-3)/2) + "..."},
	} {
		if got := StatusLine(c.in); got != c.want {
			t.Errorf("StatusLine(%.40q) = %.60q, want %.60q", c.in, got, c.want)
		}
		if got := StatusLine(c.in); len(got) > MaxStatus || !utf8.ValidString(got) {
			t.Errorf("StatusLine(%.40q): %d bytes, valid UTF-8 %v", c.in, len(got), utf8.ValidString(got))
		}
	}
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	if err := NewNotifier().Status("bad configuration: %v", errors.Join(errors.New("apiServer: x"), errors.New("cloud: y"))); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	k, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(buf[:k]); got != "STATUS=bad configuration: apiServer: x; cloud: y" {
		t.Fatalf("sent %q", got)
	}
}
