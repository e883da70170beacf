// Package version is the version of mooring's binaries: one set of values,
// stamped at build time, that every command prints for --version and the
// components export as the mooring_build_info metric.
//
// A release build (make build, make release) sets the values with the
// linker, from hack/ldflags.sh:
//
//	-X github.com/mooring-dev/mooring/internal/version.version=v0.0.0-69-geba10a7
//	-X github.com/mooring-dev/mooring/internal/version.commit=<full commit hash>
//	-X github.com/mooring-dev/mooring/internal/version.buildDate=2026-11-23T20:28:00Z
//
// A binary built without them (go build, go run, go install) falls back to
// what the Go toolchain recorded in it (runtime/debug.ReadBuildInfo): the
// module version and the VCS revision and commit time, when the build
// stamped them. docs/release.md describes the version scheme.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set by the linker (-ldflags -X); empty in a plain go build.
var (
	version   string
	commit    string
	buildDate string
)

// Unknown stands for a value neither the linker nor the build info gave.
const Unknown = "unknown"

// Info is a binary's version.
type Info struct {
	// Version is the release version, e.g. v1.2.0, v1.2.0-3-g1a2b3c4 or
	// v0.0.0-69-geba10a7-dirty (see docs/release.md).
	Version string
	// Commit is the full hash of the commit built.
	Commit string
	// BuildDate is when the source was committed (or SOURCE_DATE_EPOCH),
	// in RFC 3339 UTC: release builds are reproducible, so it is not the
	// time the compiler ran.
	BuildDate string
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string
	// Platform is GOOS/GOARCH.
	Platform string
}

// Get returns the version of the running binary.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return get(version, commit, buildDate, bi)
}

// get fills in what the linker did not set from the build info (nil when
// the binary has none).
func get(version, commit, buildDate string, bi *debug.BuildInfo) Info {
	info := Info{Version: version, Commit: commit, BuildDate: buildDate,
		GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		// Go stamps the module version (a pseudo-version such as
		// v0.0.0-20261123202800-eba10a7c0ffe+dirty when building in a VCS
		// checkout; "(devel)" when it could not tell).
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && info.Commit == "":
				info.Commit = s.Value
			case s.Key == "vcs.time" && info.BuildDate == "":
				info.BuildDate = s.Value
			}
		}
	}
	for _, v := range []*string{&info.Version, &info.Commit, &info.BuildDate} {
		if *v == "" {
			*v = Unknown
		}
	}
	return info
}

// String is the one line --version prints after the program's name.
func (i Info) String() string {
	return fmt.Sprintf("%s (commit %s, built %s, %s %s)", i.Version, i.Commit, i.BuildDate, i.GoVersion, i.Platform)
}
