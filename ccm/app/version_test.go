package app

import (
	"bytes"
	"testing"

	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/mooring-dev/mooring/internal/version"
	"github.com/mooring-dev/mooring/internal/version/component"
)

// --version prints mooring's version (not the library's "Kubernetes ..."),
// and mooring_build_info is in the registry the CCM serves on /metrics.
func TestVersion(t *testing.T) {
	cmd, err := NewCommand()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--version"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if want := "mooring-ccm " + version.Get().String() + "\n"; out.String() != want {
		t.Errorf("--version printed %q, want %q", out.String(), want)
	}

	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() == component.BuildInfoName {
			return
		}
	}
	t.Errorf("no %s in the legacy registry", component.BuildInfoName)
}
