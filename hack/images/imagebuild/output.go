package imagebuild

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Annotations naming the image in an OCI layout: the OCI one, read by skopeo
// and podman, and containerd's, read by ctr import.
const (
	annotationRefName        = "org.opencontainers.image.ref.name"
	annotationContainerdName = "io.containerd.image.name"
)

// WriteLayout writes idx as the only entry of a new OCI image layout in dir
// (dir is removed first), named ref (registry/name:tag) in its index.json.
func WriteLayout(dir string, idx v1.ImageIndex, ref string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		annotationRefName:        ref,
		annotationContainerdName: ref,
	}))
}

// ReadLayout returns the index that WriteLayout wrote to dir.
func ReadLayout(dir string) (v1.ImageIndex, error) {
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, err
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) != 1 || !m.Manifests[0].MediaType.IsIndex() {
		return nil, fmt.Errorf("%s: want one image index in index.json, have %d entries", dir, len(m.Manifests))
	}
	return top.ImageIndex(m.Manifests[0].Digest)
}

// WriteTar writes the OCI layout in dir as an uncompressed tar at file (an
// "oci-archive"): names relative to dir, sorted, owned by 0:0, times set to t.
func WriteTar(dir, file string, t time.Time) (err error) {
	var names []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			names = append(names, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(names)
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	tw := tar.NewWriter(f)
	for _, p := range names {
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: t.UTC(), Mode: 0o644, Typeflag: tar.TypeReg, Size: fi.Size()}
		switch {
		case fi.IsDir():
			h.Name += "/"
			h.Mode, h.Typeflag, h.Size = 0o755, tar.TypeDir, 0
		case !fi.Mode().IsRegular():
			return fmt.Errorf("%s: not a file or directory", p)
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.IsDir() {
			continue
		}
		if err := copyFile(tw, p); err != nil {
			return err
		}
	}
	return tw.Close()
}

func copyFile(w io.Writer, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// Push writes idx, its images and their blobs to ref (registry/name:tag)
// with credentials from go-containerregistry's default keychain: Docker's
// config.json (~/.docker or $DOCKER_CONFIG, as `docker login` or `crane auth
// login` write it), else Podman's auth.json ($REGISTRY_AUTH_FILE or
// containers/auth.json under $XDG_RUNTIME_DIR or ~/.config), else anonymous.
func Push(ctx context.Context, ref string, idx v1.ImageIndex, opts ...remote.Option) error {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return err
	}
	opts = append([]remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}, opts...)
	return remote.WriteIndex(tag, idx, opts...)
}
