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
// module version (go install module@version; a pseudo-version such as
// v0.0.0-20261123202800-eba10a7c0ffe+dirty when go build stamps VCS
// information), else a pseudo-version made the same way from the VCS
// revision, commit time and modified flag, else Go's "(devel)" (a build
// from a checkout with -buildvcs=false). docs/release.md describes the
// version scheme.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"time"
)

// Set by the linker (-ldflags -X); empty in a plain go build.
var (
	version   string
	commit    string
	buildDate string
)

// Unknown stands for a value neither the linker nor the build info gave.
const Unknown = "unknown"

// devel is the version Go records for a main module built from a checkout
// without VCS information (go build -buildvcs=false, or no git).
const devel = "(devel)"

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
		var revision, vcsTime string
		modified := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.time":
				vcsTime = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if info.Commit == "" {
			info.Commit = revision
		}
		if info.BuildDate == "" {
			info.BuildDate = vcsTime
		}
		if info.Version == "" {
			// Go stamps the module version: a pseudo-version such as
			// v0.0.0-20261123202800-eba10a7c0ffe+dirty when building in a
			// VCS checkout, "(devel)" when it could not tell.
			switch {
			case bi.Main.Version != "" && bi.Main.Version != devel:
				info.Version = bi.Main.Version
			case revision != "":
				info.Version = pseudoVersion(revision, vcsTime, modified)
			case bi.Main.Version == devel:
				info.Version = devel
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

// pseudoVersion is the version Go gives an untagged commit,
// v0.0.0-<commit time as yyyymmddhhmmss UTC>-<12 hex digits of the
// revision>, with +dirty when the checkout was modified; without a commit
// time, v0.0.0-<revision>.
func pseudoVersion(revision, vcsTime string, modified bool) string {
	if len(revision) > 12 {
		revision = revision[:12]
	}
	v := "v0.0.0-" + revision
	if t, err := time.Parse(time.RFC3339Nano, vcsTime); err == nil {
		v = "v0.0.0-" + t.UTC().Format("20060102150405") + "-" + revision
	}
	if modified {
		v += "+dirty"
	}
	return v
}

// String is the one line --version prints after the program's name.
func (i Info) String() string {
	return fmt.Sprintf("%s (commit %s, built %s, %s %s)", i.Version, i.Commit, i.BuildDate, i.GoVersion, i.Platform)
}
