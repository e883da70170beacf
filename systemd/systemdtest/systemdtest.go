// Package systemdtest runs a real systemd --user for the tests of mooring's
// systemd wrapper and units, the test bed's safe way (a private mount
// namespace and cgroup; see test/testbed.StartUserSystemd).
package systemdtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/systemd"
	"github.com/mooring-dev/mooring/test/testbed"
)

// Start runs a systemd --user under dir, points the test's environment (and
// so systemd.DialUser and systemctl --user) at it, and stops it when the
// test ends. It skips the test when systemd is not installed.
func Start(t testing.TB, dir string) *testbed.UserSystemd {
	t.Helper()
	if _, err := exec.LookPath("systemd"); err != nil {
		t.Skip("systemd not installed (hack/install-deps.sh installs it)")
	}
	us, err := testbed.StartUserSystemd(dir, fmt.Sprintf("mooring-systemd-test-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := us.Stop(); err != nil {
			t.Errorf("stop systemd --user: %v", err)
		}
	})
	for _, kv := range us.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	return us
}

// Units connects to the systemd --user that Start pointed the test at,
// reloads its units, and closes the connection when the test ends.
func Units(ctx context.Context, t testing.TB) *systemd.Units {
	t.Helper()
	conn, err := systemd.DialUser(ctx)
	if err != nil {
		t.Fatal(err)
	}
	u := systemd.NewUnits(conn)
	t.Cleanup(u.Close)
	if err := u.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	return u
}

// WaitSettled polls the unit's ActiveState until it is active or failed,
// and returns it.
func WaitSettled(ctx context.Context, t testing.TB, u *systemd.Units, name string) string {
	t.Helper()
	for {
		state, err := u.ActiveState(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if state == "active" || state == "failed" {
			return state
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s still %s: %v", name, state, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
