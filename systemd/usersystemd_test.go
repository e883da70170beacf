package systemd_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/systemd/systemdtest"
)

func TestUnitsOverUserSystemd(t *testing.T) {
	us := systemdtest.Start(t, t.TempDir())
	unit := "[Unit]\nDescription=mooring test unit\n\n[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/bin/true\n"
	if err := os.WriteFile(filepath.Join(us.UnitDir, "trivial.service"), []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	u := systemdtest.Units(ctx, t)
	if state, err := u.ActiveState(ctx, "trivial.service"); err != nil || state != "inactive" {
		t.Fatalf("before start: %q, %v", state, err)
	}
	if err := u.Start(ctx, "trivial.service"); err != nil {
		t.Fatal(err)
	}
	state := systemdtest.WaitSettled(ctx, t, u, "trivial.service")
	if state != "active" {
		t.Fatalf("trivial.service is %s", state)
	}
	if err := u.Start(ctx, "missing.service"); err == nil {
		t.Fatal("starting a unit that does not exist succeeded")
	}
}
