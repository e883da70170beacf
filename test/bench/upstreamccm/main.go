// Command upstreamccm is the benchmarks' stand-in for upstream AWS's
// aws-cloud-controller-manager: k8s.io/cloud-provider's own command (its
// flags, leader election, secure serving and stock controllers, the
// cloud-node controller among them) over the upstream AWS provider
// (k8s.io/cloud-provider-aws/pkg/providers/v1, the version mooring links),
// built by its registered factory from --cloud-config, as upstream's main
// builds it. Upstream's tagging controller is left out: it is off by
// default there. BenchmarkNodeInitAWS (test/bench) builds and runs it
// against awstest; it is no part of any release.
package main

import (
	"fmt"
	"os"

	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app"
	cloudcontrollerconfig "k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	"k8s.io/component-base/cli"
	cliflag "k8s.io/component-base/cli/flag"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/klog/v2"

	"k8s.io/apimachinery/pkg/util/wait"
	awsv1 "k8s.io/cloud-provider-aws/pkg/providers/v1"
)

func main() {
	opts, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		fmt.Fprintln(os.Stderr, "upstreamccm: options:", err)
		os.Exit(1)
	}
	cmd := app.NewCloudControllerManagerCommand(opts, buildProvider, app.DefaultInitFuncConstructors,
		names.CCMControllerAliases(), cliflag.NamedFlagSets{}, wait.NeverStop)
	os.Exit(cli.Run(cmd))
}

// buildProvider builds the upstream AWS provider from --cloud-config, and
// refuses to run without a cluster id, as upstream's command does unless
// --allow-untagged-cloud.
func buildProvider(c *cloudcontrollerconfig.CompletedConfig) cloudprovider.Interface {
	cfg := c.ComponentConfig.KubeCloudShared.CloudProvider
	if cfg.Name != awsv1.ProviderName {
		klog.Fatalf("--cloud-provider=%q: this command runs only the upstream %q provider", cfg.Name, awsv1.ProviderName)
	}
	cp, err := cloudprovider.InitCloudProvider(cfg.Name, cfg.CloudConfigFile)
	if err != nil || cp == nil {
		klog.Fatalf("the upstream AWS provider: %v", err)
	}
	if !cp.HasClusterID() && !c.ComponentConfig.KubeCloudShared.AllowUntaggedCloud {
		klog.Fatal("the upstream AWS provider has no cluster id (KubernetesClusterID in [Global] of --cloud-config)")
	}
	return cp
}
