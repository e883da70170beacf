package agent

import (
	"os"

	"github.com/mooring-dev/mooring/internal/atomicfile"
)

// writeAtomic writes data to path so that a crash leaves the old file or
// the new one, never a torn one.
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	return atomicfile.Write(path, data, mode)
}

// syncDir fsyncs a directory, so that a rename in it survives a crash.
func syncDir(dir string) error { return atomicfile.SyncDir(dir) }
