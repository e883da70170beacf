// Command mooring-ccm is mooring's cloud-controller-manager. docs/ccm.md
// documents its flags, cloud config and annotations.
package main

import (
	"fmt"
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"

	"github.com/mooring-dev/mooring/ccm/app"
)

func main() {
	cmd, err := app.NewCommand()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(cli.Run(cmd))
}
