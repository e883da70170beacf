// Command chart packages mooring's Helm chart for a release and pushes it
// to a registry as an OCI artifact (make release, make chart-package, make
// push; docs/release.md).
//
//	go run ./hack/chart package --version V [--app-version A] [--registry R] [--out DIR] [--helm PATH] [--chart DIR]
//	go run ./hack/chart push --registry R FILE.tgz
//
// package writes DIR/mooring-V.tgz: the chart at version V, appVersion A
// (default V: the images' default tag), its images in R (default
// ghcr.io/mooring-dev), file times SOURCE_DATE_EPOCH (else the Unix
// epoch). push sends a packaged chart to R/charts/mooring:<its version>
// with the credentials make push uses for the images. Run it from the
// module root.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/mooring-dev/mooring/hack/chart/helmchart"
	"github.com/mooring-dev/mooring/hack/images/imagebuild"
)

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "package" && os.Args[1] != "push") {
		fmt.Fprintln(os.Stderr, "usage: chart package|push [flags] (chart COMMAND --help lists the flags)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fs := flag.NewFlagSet("chart "+os.Args[1], flag.ExitOnError)
	registry := fs.String("registry", helmchart.DefaultRegistry, "registry and namespace of the images (package) or of the chart (push: REGISTRY/charts/mooring)")
	var err error
	if os.Args[1] == "package" {
		var o helmchart.Options
		fs.StringVar(&o.Version, "version", "", "the chart's version: the release's, a semantic version (hack/version.sh)")
		fs.StringVar(&o.AppVersion, "app-version", "", "the chart's appVersion, the images' default tag (default: --version)")
		fs.StringVar(&o.OutDir, "out", "bin/charts", "directory of the packaged chart")
		fs.StringVar(&o.ChartDir, "chart", "deploy/helm/mooring", "the chart's source")
		fs.StringVar(&o.Helm, "helm", "", "the helm CLI (default: what hack/install-helm.sh prints)")
		_ = fs.Parse(os.Args[2:])
		if fs.NArg() != 0 {
			fail(fmt.Errorf("unexpected arguments: %v", fs.Args()))
		}
		if o.Version == "" {
			fail(fmt.Errorf("--version is required"))
		}
		o.Registry = *registry
		err = pack(ctx, o)
	} else {
		_ = fs.Parse(os.Args[2:])
		if fs.NArg() != 1 {
			fail(fmt.Errorf("want one packaged chart (.tgz), have %v", fs.Args()))
		}
		err = push(ctx, *registry, fs.Arg(0))
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "chart:", err)
	os.Exit(1)
}

func pack(ctx context.Context, o helmchart.Options) error {
	var err error
	if _, o.FileTime, err = imagebuild.TimesFromEnv(time.Now()); err != nil {
		return err
	}
	if o.Helm == "" {
		out, err := exec.CommandContext(ctx, "hack/install-helm.sh").Output()
		if err != nil {
			return fmt.Errorf("hack/install-helm.sh: %w", err)
		}
		o.Helm = strings.TrimSpace(string(out))
	}
	file, err := helmchart.Package(ctx, o)
	if err != nil {
		return err
	}
	fmt.Println(file)
	return nil
}

func push(ctx context.Context, registry, file string) error {
	tgz, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	_, md, err := helmchart.ReadChart(tgz)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	created, _, err := imagebuild.TimesFromEnv(time.Now())
	if err != nil {
		return err
	}
	img, err := helmchart.Artifact(tgz, created)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	ref := helmchart.Ref(registry, md.Version)
	if err := helmchart.Push(ctx, ref, img); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("pushed %s@%s\n", ref, d)
	return nil
}
