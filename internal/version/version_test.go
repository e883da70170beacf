package version

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestLinkerValuesWin(t *testing.T) {
	bi := &debug.BuildInfo{Main: debug.Module{Version: "v9.9.9"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "ffff"}, {Key: "vcs.time", Value: "2000-01-01T00:00:00Z"},
	}}
	got := get("v1.2.3", "abc", "2026-01-02T03:04:05Z", bi)
	want := Info{Version: "v1.2.3", Commit: "abc", BuildDate: "2026-01-02T03:04:05Z",
		GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestBuildInfoFallback(t *testing.T) {
	bi := &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261123202800-eba10a7c0ffe+dirty"}, Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "eba10a7c0ffe00"},
		{Key: "vcs.time", Value: "2026-11-23T20:28:00Z"}, {Key: "vcs.modified", Value: "true"},
	}}
	got := get("", "", "", bi)
	if got.Version != bi.Main.Version || got.Commit != "eba10a7c0ffe00" || got.BuildDate != "2026-11-23T20:28:00Z" {
		t.Errorf("got %+v", got)
	}
	// Only what the linker left empty is filled in.
	if got := get("v1.0.0", "", "", bi); got.Version != "v1.0.0" || got.Commit != "eba10a7c0ffe00" {
		t.Errorf("got %+v", got)
	}
}

// With VCS information but no module version (Go before 1.24, or a
// version Go could not work out), the version is made from the revision
// the way Go makes a pseudo-version.
func TestRevisionFallback(t *testing.T) {
	for _, c := range []struct {
		settings []debug.BuildSetting
		want     string
	}{
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: "eba10a7c0ffe0123456789"}, {Key: "vcs.time", Value: "2026-11-23T20:28:00Z"},
			{Key: "vcs.modified", Value: "false"}}, "v0.0.0-20261123202800-eba10a7c0ffe"},
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: "eba10a7c0ffe0123456789"}, {Key: "vcs.time", Value: "2026-11-23T21:28:00+01:00"},
			{Key: "vcs.modified", Value: "true"}}, "v0.0.0-20261123202800-eba10a7c0ffe+dirty"},
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: "eba10a7"}}, "v0.0.0-eba10a7"},
	} {
		got := get("", "", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: c.settings})
		if got.Version != c.want {
			t.Errorf("%v: version %q, want %q", c.settings, got.Version, c.want)
		}
		if got.Commit != c.settings[0].Value {
			t.Errorf("%v: commit %q", c.settings, got.Commit)
		}
	}
}

// A build from a checkout without VCS information (-buildvcs=false) says
// so, as Go does: "(devel)". Only without any build information is the
// version unknown.
func TestNothingKnown(t *testing.T) {
	got := get("", "", "", &debug.BuildInfo{Main: debug.Module{Path: "github.com/mooring-dev/mooring", Version: "(devel)"}})
	if got.Version != "(devel)" || got.Commit != Unknown || got.BuildDate != Unknown {
		t.Errorf("(devel): got %+v", got)
	}
	got = get("", "", "", nil)
	if got.Version != Unknown || got.Commit != Unknown || got.BuildDate != Unknown {
		t.Errorf("no build info: got %+v", got)
	}
}

func TestString(t *testing.T) {
	s := Info{Version: "v1.2.3", Commit: "abc", BuildDate: "2026-01-02T03:04:05Z", GoVersion: "go1.26.8", Platform: "linux/arm64"}.String()
	if want := "v1.2.3 (commit abc, built 2026-01-02T03:04:05Z, go1.26.8 linux/arm64)"; s != want {
		t.Errorf("%q, want %q", s, want)
	}
	// What this test binary reports: never an empty field.
	if s := Get().String(); strings.Contains(s, "  ") || strings.Contains(s, " ,") {
		t.Errorf("Get: %q", s)
	}
}
