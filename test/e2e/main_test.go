package e2e

import (
	"os"
	"testing"

	"github.com/mooring-dev/mooring/test/harness"
)

// TestMain removes the images the pod tests built (harness.SharedImages).
func TestMain(m *testing.M) {
	code := m.Run()
	harness.RemoveSharedImages()
	os.Exit(code)
}
