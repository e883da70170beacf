// Command images builds mooring's container images and pushes them
// (make images, make push; docs/images.md).
//
//	go run ./hack/images build [--out bin/images] [--registry R] [--tag T] [--version V] [--revision REV] [--ldflags FLAGS]
//	go run ./hack/images push  [--out bin/images] --registry R --tag T
//
// build writes, for each component, an OCI image layout OUT/<name>/ holding
// one multi-arch index (linux/amd64, linux/arm64) named R/<name>:T, and the
// same layout as a tar, OUT/<name>.tar. push sends each layout's index to
// R/<name>:T. Run it from the module root.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/mooring-dev/mooring/hack/images/imagebuild"
)

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "build" && os.Args[1] != "push") {
		fmt.Fprintln(os.Stderr, "usage: images build|push [flags] (images COMMAND --help lists the flags)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fs := flag.NewFlagSet("images "+os.Args[1], flag.ExitOnError)
	out := fs.String("out", "bin/images", "directory of the layouts and tars")
	registry := fs.String("registry", "ghcr.io/mooring-dev", "registry and namespace the images are named in")
	tag := fs.String("tag", "dev", "tag of the images")
	only := fs.String("components", "", "comma-separated components to build or push (default: all)")
	var o imagebuild.Options
	if os.Args[1] == "build" {
		fs.StringVar(&o.Version, "version", "dev", "the org.opencontainers.image.version label")
		fs.StringVar(&o.Revision, "revision", "", "the org.opencontainers.image.revision label (a commit)")
		fs.StringVar(&o.LDFlags, "ldflags", os.Getenv("LDFLAGS"), "go build -ldflags (default $LDFLAGS)")
		fs.StringVar(&o.CACerts, "ca-certificates", "/etc/ssl/certs/ca-certificates.crt", "CA bundle put in the images (Debian's ca-certificates)")
		platforms := fs.String("platforms", "linux/amd64,linux/arm64", "comma-separated platforms")
		_ = fs.Parse(os.Args[2:])
		for _, s := range strings.Split(*platforms, ",") {
			p, err := v1.ParsePlatform(s)
			if err != nil {
				fail(err)
			}
			o.Platforms = append(o.Platforms, *p)
		}
	} else {
		_ = fs.Parse(os.Args[2:])
	}
	if fs.NArg() != 0 {
		fail(fmt.Errorf("unexpected arguments: %v", fs.Args()))
	}
	comps, err := pick(*only)
	if err != nil {
		fail(err)
	}
	if os.Args[1] == "build" {
		err = build(ctx, o, comps, *out, *registry, *tag)
	} else {
		err = push(ctx, comps, *out, *registry, *tag)
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "images:", err)
	os.Exit(1)
}

func pick(only string) ([]imagebuild.Component, error) {
	if only == "" {
		return imagebuild.Components, nil
	}
	var comps []imagebuild.Component
	for _, n := range strings.Split(only, ",") {
		found := false
		for _, c := range imagebuild.Components {
			if c.Name == n {
				comps, found = append(comps, c), true
			}
		}
		if !found {
			return nil, fmt.Errorf("no component %q", n)
		}
	}
	return comps, nil
}

func build(ctx context.Context, o imagebuild.Options, comps []imagebuild.Component, out, registry, tag string) error {
	start := time.Now()
	var err error
	if o.Created, o.FileTime, err = imagebuild.TimesFromEnv(start); err != nil {
		return err
	}
	if o.ModuleDir, err = os.Getwd(); err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp(out, ".work-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	o.WorkDir, o.Log = work, os.Stderr
	idxs, err := imagebuild.Build(ctx, o, comps)
	if err != nil {
		return err
	}
	for _, c := range comps {
		ref := registry + "/" + c.Name + ":" + tag
		dir := filepath.Join(out, c.Name)
		if err := imagebuild.WriteLayout(dir, idxs[c.Name], ref); err != nil {
			return fmt.Errorf("%s: %w", c.Name, err)
		}
		if err := imagebuild.WriteTar(dir, dir+".tar", o.FileTime); err != nil {
			return fmt.Errorf("%s: %w", c.Name, err)
		}
		d, err := idxs[c.Name].Digest()
		if err != nil {
			return err
		}
		fmt.Printf("%s %s@%s\n", dir+".tar", ref, d)
	}
	fmt.Fprintf(os.Stderr, "images built in %s\n", time.Since(start).Round(100*time.Millisecond))
	return nil
}

func push(ctx context.Context, comps []imagebuild.Component, out, registry, tag string) error {
	for _, c := range comps {
		idx, err := imagebuild.ReadLayout(filepath.Join(out, c.Name))
		if err != nil {
			return fmt.Errorf("%s: %w (run make images first)", c.Name, err)
		}
		ref := registry + "/" + c.Name + ":" + tag
		if err := imagebuild.Push(ctx, ref, idx); err != nil {
			return fmt.Errorf("push %s: %w", ref, err)
		}
		d, err := idx.Digest()
		if err != nil {
			return err
		}
		fmt.Printf("pushed %s@%s\n", ref, d)
	}
	return nil
}
