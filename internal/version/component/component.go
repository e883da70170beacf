// Package component gives mooring's Kubernetes components (mooring-ccm and
// mooring-csr-approver) their version the way Kubernetes components show
// theirs: importing it registers the mooring_build_info gauge with
// component-base's legacy registry (served on their /metrics), and
// HandleVersionFlag answers component-base's --version flag.
//
// The same linker flags that stamp package version also stamp
// k8s.io/component-base/version (gitVersion, gitCommit, gitTreeState,
// buildDate, gitMajor, gitMinor; see hack/ldflags.sh), so what
// --version=raw, /version and kubernetes_build_info report agrees with
// --version and mooring_build_info.
package component

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/version/verflag"

	"github.com/mooring-dev/mooring/internal/version"
)

// BuildInfoName is the gauge's full name.
const BuildInfoName = "mooring_build_info"

func newBuildInfo() *metrics.GaugeVec {
	return metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      "mooring",
		Name:           "build_info",
		Help:           "A metric with a constant '1' value labeled by the version, commit, build date (the commit's date) and Go version mooring was built from.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"version", "commit", "build_date", "go_version"})
}

func init() { RegisterBuildInfo(legacyregistry.MustRegister) }

// RegisterBuildInfo registers a mooring_build_info gauge with register
// (legacyregistry.MustRegister, or a KubeRegistry's MustRegister for a
// program with a registry of its own, as the local cloud has) and sets it.
func RegisterBuildInfo(register func(...metrics.Registerable)) {
	g := newBuildInfo()
	register(g)
	v := version.Get()
	g.WithLabelValues(v.Version, v.Commit, v.BuildDate, v.GoVersion).Set(1)
}

// AddFlags registers component-base's --version flag on fs, for a command
// that does not get it from a library already (mooring-ccm does, from
// k8s.io/cloud-provider's command).
func AddFlags(fs *pflag.FlagSet) {
	verflag.AddFlags(fs)
}

// HandleVersionFlag makes cmd answer --version before it runs: plain
// --version prints "<command> <version.Info>" and succeeds; the flag's
// other forms (--version=raw, --version=vX.Y.Z) are left to component-base's
// verflag. cmd must have a RunE and the --version flag.
func HandleVersionFlag(cmd *cobra.Command) {
	run := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if f := c.Flags().Lookup("version"); f != nil && f.Value.String() == "true" {
			_, err := fmt.Fprintf(c.OutOrStdout(), "%s %s\n", c.Name(), version.Get())
			return err
		}
		verflag.PrintAndExitIfRequested()
		return run(c, args)
	}
}
