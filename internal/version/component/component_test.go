package component

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/mooring-dev/mooring/internal/version"
)

// mooring_build_info is in the registry the components serve on /metrics,
// with the binary's version as its labels.
func TestBuildInfoInLegacyRegistry(t *testing.T) {
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	v := version.Get()
	want := map[string]string{"version": v.Version, "commit": v.Commit, "build_date": v.BuildDate, "go_version": v.GoVersion}
	for _, mf := range families {
		if mf.GetName() != BuildInfoName {
			continue
		}
		if len(mf.GetMetric()) != 1 {
			t.Fatalf("%d series, want 1", len(mf.GetMetric()))
		}
		m := mf.GetMetric()[0]
		if m.GetGauge().GetValue() != 1 {
			t.Errorf("value %v, want 1", m.GetGauge().GetValue())
		}
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if len(got) != len(want) {
			t.Errorf("labels %v, want %v", got, want)
		}
		for k, w := range want {
			if got[k] != w {
				t.Errorf("label %s=%q, want %q", k, got[k], w)
			}
		}
		return
	}
	t.Fatalf("no %s in the legacy registry", BuildInfoName)
}

// newCommand is a command with component-base's --version whose RunE
// records that it ran.
func newCommand(ran *bool) (*cobra.Command, *bytes.Buffer) {
	cmd := &cobra.Command{Use: "mooring-test", SilenceUsage: true, SilenceErrors: true, RunE: func(*cobra.Command, []string) error {
		*ran = true
		return errors.New("ran")
	}}
	AddFlags(cmd.Flags())
	HandleVersionFlag(cmd)
	var out bytes.Buffer
	cmd.SetOut(&out)
	return cmd, &out
}

// The flag's value is component-base's global: the case without it runs
// first.
func TestVersionFlag(t *testing.T) {
	ran := false
	cmd, out := newCommand(&ran)
	cmd.SetArgs(nil)
	if err := cmd.Execute(); err == nil || !ran || out.Len() != 0 {
		t.Errorf("no flag: err %v, ran %v, printed %q", err, ran, out.String())
	}
	if !strings.Contains(cmd.Flags().Lookup("version").Usage, "--version=raw") {
		t.Errorf("--version is not component-base's: %q", cmd.Flags().Lookup("version").Usage)
	}

	ran = false
	cmd, out = newCommand(&ran)
	cmd.SetArgs([]string{"--version"})
	if err := cmd.Execute(); err != nil || ran {
		t.Fatalf("--version: err %v, ran %v", err, ran)
	}
	if want := "mooring-test " + version.Get().String() + "\n"; out.String() != want {
		t.Errorf("--version printed %q, want %q", out.String(), want)
	}
}
