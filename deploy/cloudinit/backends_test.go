package cloudinit

// The rendered config names a backend, which must be registered: the
// binaries import cloud/all, the tests the local cloud.
import _ "github.com/mooring-dev/mooring/cloud/local"
