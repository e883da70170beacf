// Package release holds the tests of mooring's release tooling:
// hack/version.sh, hack/ldflags.sh and hack/release.sh (make release). They
// run with make release-test, apart from the unit tests, since making a
// release cross-compiles every binary. See docs/release.md.
package release
