package harness

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/hack/chart/helmchart"
	"github.com/mooring-dev/mooring/test/testbed"
)

// ChartDir is mooring's Helm chart, relative to the checkout.
const ChartDir = "deploy/helm/mooring"

var helmBin struct {
	once sync.Once
	path string
	err  error
}

// HelmBinary is the Helm CLI at the version hack/install-helm.sh pins,
// built into the cache on first use.
func HelmBinary() (string, error) {
	helmBin.once.Do(func() {
		var stderr bytes.Buffer
		cmd := exec.Command(filepath.Join(RepoRoot(), "hack", "install-helm.sh"))
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		helmBin.path = strings.TrimSpace(string(out))
		if err != nil {
			helmBin.err = fmt.Errorf("hack/install-helm.sh: %v\n%s", err, stderr.String())
		}
	})
	return helmBin.path, helmBin.err
}

// ChartVersion is the version the tests package the chart as.
const ChartVersion = "v0.0.0-e2e"

// PackageChart packages the chart into dir as a release packages it
// (hack/chart/helmchart: helm package of a copy with the version set,
// reproducible), version ChartVersion, and returns the .tgz's path.
func PackageChart(dir string) (string, error) {
	helm, err := HelmBinary()
	if err != nil {
		return "", err
	}
	return helmchart.Package(context.Background(), helmchart.Options{
		Helm:     helm,
		ChartDir: filepath.Join(RepoRoot(), ChartDir),
		Version:  ChartVersion,
		FileTime: time.Unix(0, 0),
		OutDir:   dir,
	})
}

// Helm runs the Helm CLI against the cluster as its admin and returns its
// output; an error carries the output.
func Helm(ctx context.Context, c *testbed.ControlPlane, args ...string) (string, error) {
	helm, err := HelmBinary()
	if err != nil {
		return "", err
	}
	return run(ctx, helm, append([]string{"--kubeconfig", c.AdminKubeconfig}, args...)...)
}

// Kubectl runs kubectl (built by `make kube-bins`) against the cluster as
// its admin and returns its output; an error carries the output.
func Kubectl(ctx context.Context, c *testbed.ControlPlane, args ...string) (string, error) {
	bin := c.Binaries().Kubectl
	if bin == "" {
		return "", fmt.Errorf("kubectl is missing; build it with `make kube-bins` (hack/build-k8s.sh)")
	}
	return run(ctx, bin, append([]string{"--kubeconfig", c.AdminKubeconfig}, args...)...)
}

func run(ctx context.Context, bin string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// MustPackageChart is PackageChart into the test's temporary directory.
func MustPackageChart(t testing.TB) string {
	t.Helper()
	path, err := PackageChart(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return path
}
