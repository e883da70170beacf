// Package imagebuild assembles mooring's container images without a Docker
// daemon and without a base image: for each component and platform it builds a
// static binary with the go command and stacks three layers by hand (the
// nonroot user's files, the CA bundle, the binary); each component's
// per-platform images go into one multi-arch OCI index. hack/images is its
// command line (make images, make push); docs/images.md describes the result.
package imagebuild

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Component is one image: a main package and what its labels say.
type Component struct {
	// Name is the binary's and the image's name (mooring-ccm).
	Name string
	// Package is the main package, relative to the module root.
	Package string
	// Description is the org.opencontainers.image.description label.
	Description string
}

// Components are the images mooring ships.
var Components = []Component{
	{"mooring-ccm", "./ccm/cmd/mooring-ccm", "mooring's Kubernetes cloud-controller-manager"},
	{"mooring-csr-approver", "./csrapprover/cmd/mooring-csr-approver", "mooring's approver of kubelet client and serving CSRs"},
	{"mooring-localcloud", "./cloud/local/cmd/mooring-localcloud", "mooring's local cloud: instances, metadata, identity, load balancers and routes on loopback"},
}

// Platforms are the platforms every image is built for.
var Platforms = []v1.Platform{
	{OS: "linux", Architecture: "amd64"},
	{OS: "linux", Architecture: "arm64"},
}

// Fixed facts of every image.
const (
	// BinDir is where the binary lives in the image.
	BinDir = "/usr/local/bin"
	// CABundle is the CA certificates' path in the image.
	CABundle = "/etc/ssl/certs/ca-certificates.crt"
	// User is the image's user and group: nonroot, 65532:65532.
	User = "65532:65532"
	// Home is nonroot's home and the image's working directory.
	Home = "/home/nonroot"
	// Source is the org.opencontainers.image.source label.
	Source = "https://github.com/mooring-dev/mooring"
	// Licenses is the org.opencontainers.image.licenses label.
	Licenses = "Apache-2.0"

	uid = 65532
)

// Label keys (OCI image spec, annotations).
const (
	LabelTitle       = "org.opencontainers.image.title"
	LabelDescription = "org.opencontainers.image.description"
	LabelSource      = "org.opencontainers.image.source"
	LabelVersion     = "org.opencontainers.image.version"
	LabelRevision    = "org.opencontainers.image.revision"
	LabelCreated     = "org.opencontainers.image.created"
	LabelLicenses    = "org.opencontainers.image.licenses"
)

// Options say how to build.
type Options struct {
	// ModuleDir is the module root, where the go command runs.
	ModuleDir string
	// Go is the go command; empty: "go" from PATH.
	Go string
	// LDFlags is passed to go build as -ldflags when not empty.
	LDFlags string
	// Version and Revision become the version and revision labels.
	Version, Revision string
	// Created is the images' creation time (config and created label).
	// FileTime is every file's modification time in the layers; the zero
	// time means the Unix epoch. Fixed times make builds reproducible.
	Created, FileTime time.Time
	// CACerts is the CA bundle copied into the images.
	CACerts string
	// Platforms to build; empty: Platforms.
	Platforms []v1.Platform
	// WorkDir receives the binaries (WorkDir/<os>_<arch>/<name>).
	WorkDir string
	// Log, when set, receives a line per step.
	Log io.Writer
}

// TimesFromEnv returns the creation and file times for a build: both
// SOURCE_DATE_EPOCH (seconds since the epoch) when that is set, else now and
// the Unix epoch.
func TimesFromEnv(now time.Time) (created, files time.Time, err error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return now.UTC().Truncate(time.Second), time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a count of seconds", s)
	}
	t := time.Unix(n, 0).UTC()
	return t, t, nil
}

func (o *Options) platforms() []v1.Platform {
	if len(o.Platforms) == 0 {
		return Platforms
	}
	return o.Platforms
}

func (o *Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", args...)
	}
}

// Build builds comps for every platform and returns each component's index,
// by name, in the order of comps.
func Build(ctx context.Context, o Options, comps []Component) (map[string]v1.ImageIndex, error) {
	if len(comps) == 0 {
		return nil, fmt.Errorf("no components to build")
	}
	ca, err := os.ReadFile(o.CACerts)
	if err != nil {
		return nil, fmt.Errorf("CA certificates: %w (Debian: apt-get install ca-certificates)", err)
	}
	users, err := usersLayer(o.fileTime())
	if err != nil {
		return nil, err
	}
	certs, err := certsLayer(ca, o.fileTime())
	if err != nil {
		return nil, err
	}
	images := map[string][]v1.Image{}
	for _, p := range o.platforms() {
		dir, err := o.buildBinaries(ctx, p, comps)
		if err != nil {
			return nil, err
		}
		for _, c := range comps {
			bin, err := os.ReadFile(filepath.Join(dir, c.Name))
			if err != nil {
				return nil, err
			}
			img, err := o.image(c, p, users, certs, bin)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", c.Name, p, err)
			}
			images[c.Name] = append(images[c.Name], img)
		}
	}
	out := map[string]v1.ImageIndex{}
	for _, c := range comps {
		idx, err := o.index(c, images[c.Name])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Name, err)
		}
		out[c.Name] = idx
	}
	return out, nil
}

func (o *Options) fileTime() time.Time {
	if o.FileTime.IsZero() {
		return time.Unix(0, 0).UTC()
	}
	return o.FileTime.UTC()
}

// buildBinaries runs one go build for the platform, all components at once,
// and returns the directory holding the binaries.
func (o *Options) buildBinaries(ctx context.Context, p v1.Platform, comps []Component) (string, error) {
	dir := filepath.Join(o.WorkDir, p.OS+"_"+p.Architecture)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	args := []string{"build", "-trimpath"}
	if o.LDFlags != "" {
		args = append(args, "-ldflags", o.LDFlags)
	}
	args = append(args, "-o", dir+string(filepath.Separator))
	var names []string
	for _, c := range comps {
		args = append(args, c.Package)
		names = append(names, c.Name)
	}
	goCmd := o.Go
	if goCmd == "" {
		goCmd = "go"
	}
	start := time.Now()
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = o.ModuleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go %s for %s: %w\n%s", strings.Join(args, " "), p, err, stderr.String())
	}
	o.logf("built %s for %s in %s", strings.Join(names, ", "), p, time.Since(start).Round(100*time.Millisecond))
	return dir, nil
}

// Labels returns the image labels of c.
func (o *Options) Labels(c Component) map[string]string {
	return map[string]string{
		LabelTitle:       c.Name,
		LabelDescription: c.Description,
		LabelSource:      Source,
		LabelVersion:     o.Version,
		LabelRevision:    o.Revision,
		LabelCreated:     o.Created.UTC().Format(time.RFC3339),
		LabelLicenses:    Licenses,
	}
}

// image stacks the three layers and writes the config for one platform.
func (o *Options) image(c Component, p v1.Platform, users, certs v1.Layer, bin []byte) (v1.Image, error) {
	binLayer, err := layerOf([]entry{
		dirEntry("usr/", 0o755, 0),
		dirEntry("usr/local/", 0o755, 0),
		dirEntry("usr/local/bin/", 0o755, 0),
		fileEntry(path.Join(BinDir, c.Name)[1:], 0o755, 0, bin),
	}, o.fileTime())
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: o.Created.UTC()}
	cfg := &v1.ConfigFile{
		Architecture: p.Architecture,
		OS:           p.OS,
		Variant:      p.Variant,
		Created:      created,
		Config: v1.Config{
			Entrypoint: []string{path.Join(BinDir, c.Name)},
			User:       User,
			WorkingDir: Home,
			Env: []string{
				"PATH=" + BinDir + ":/usr/bin:/bin",
				"SSL_CERT_FILE=" + CABundle,
			},
			Labels: o.Labels(c),
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	base, err = mutate.ConfigFile(base, cfg)
	if err != nil {
		return nil, err
	}
	history := func(what string) v1.History {
		return v1.History{Created: created, CreatedBy: "hack/images: " + what, Comment: "mooring " + o.Version}
	}
	return mutate.Append(base,
		mutate.Addendum{Layer: users, History: history("/etc/passwd, /etc/group, nonroot's home, /tmp"), MediaType: types.OCILayer},
		mutate.Addendum{Layer: certs, History: history(CABundle), MediaType: types.OCILayer},
		mutate.Addendum{Layer: binLayer, History: history(path.Join(BinDir, c.Name)), MediaType: types.OCILayer},
	)
}

// index puts a component's per-platform images into one OCI index, carrying
// the labels as annotations too (registries show an index's annotations).
func (o *Options) index(c Component, imgs []v1.Image) (v1.ImageIndex, error) {
	var adds []mutate.IndexAddendum
	for _, img := range imgs {
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		p := cf.Platform()
		adds = append(adds, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{MediaType: types.OCIManifestSchema1, Platform: p},
		})
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	annotated, ok := mutate.Annotations(idx, o.Labels(c)).(v1.ImageIndex)
	if !ok {
		return nil, fmt.Errorf("annotated index is no index")
	}
	return annotated, nil
}

// The users layer: root and nonroot (65532) in /etc/passwd and /etc/group,
// their homes, and a world-writable /tmp.
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group  = "root:x:0:\nnonroot:x:65532:\n"
)

func usersLayer(t time.Time) (v1.Layer, error) {
	return layerOf([]entry{
		dirEntry("etc/", 0o755, 0),
		fileEntry("etc/group", 0o644, 0, []byte(group)),
		fileEntry("etc/passwd", 0o644, 0, []byte(passwd)),
		dirEntry("home/", 0o755, 0),
		dirEntry("home/nonroot/", 0o700, uid),
		dirEntry("root/", 0o700, 0),
		dirEntry("tmp/", 0o1777, 0),
	}, t)
}

func certsLayer(ca []byte, t time.Time) (v1.Layer, error) {
	return layerOf([]entry{
		dirEntry("etc/", 0o755, 0),
		dirEntry("etc/ssl/", 0o755, 0),
		dirEntry("etc/ssl/certs/", 0o755, 0),
		fileEntry(CABundle[1:], 0o644, 0, ca),
	}, t)
}

// entry is one file or directory of a layer.
type entry struct {
	hdr  tar.Header
	data []byte
}

func dirEntry(name string, mode int64, owner int) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, Uid: owner, Gid: owner}}
}

func fileEntry(name string, mode int64, owner int, data []byte) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Uid: owner, Gid: owner, Size: int64(len(data))}, data: data}
}

// layerOf writes the entries, in order, as an uncompressed tar with every
// time set to t, and returns it as a gzip-compressed OCI layer (compressed
// once and kept).
func layerOf(entries []entry, t time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.hdr
		h.ModTime = t
		if err := tw.WriteHeader(&h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	raw := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(raw)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}
