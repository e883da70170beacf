package e2e

import (
	"fmt"
	"os"
	"testing"

	"github.com/mooring-dev/mooring/test/harness"
)

// TestMain builds each of mooring's commands once for every test
// (harness.ShareBuilds) and removes them, and the images the pod tests
// built (harness.SharedImages), after the tests.
func TestMain(m *testing.M) {
	removeBins, err := harness.ShareBuilds()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	removeBins()
	harness.RemoveSharedImages()
	os.Exit(code)
}
