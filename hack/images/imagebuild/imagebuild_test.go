package imagebuild

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const hostCABundle = "/etc/ssl/certs/ca-certificates.crt"

// testComponents are the components TestImages builds: mooring-localcloud
// (the cheapest to compile) for both platforms by default; every component
// with MOORING_IMAGES_TEST=all.
func testComponents(t *testing.T) []Component {
	if os.Getenv("MOORING_IMAGES_TEST") == "all" {
		return Components
	}
	for _, c := range Components {
		if c.Name == "mooring-localcloud" {
			return []Component{c}
		}
	}
	t.Fatal("no mooring-localcloud component")
	return nil
}

// TestImages builds images as make images does, writes the layout and its
// tar, pushes the indexes to an in-process registry on loopback, pulls them
// back by tag and checks the platforms, each image's config and labels, its
// files, and that the host's binary runs.
func TestImages(t *testing.T) {
	if _, err := os.Stat(hostCABundle); err != nil {
		t.Skipf("no CA bundle (make deps installs Debian's ca-certificates): %v", err)
	}
	moduleDir, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	comps := testComponents(t)
	tmp := t.TempDir()
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	o := Options{
		ModuleDir: moduleDir,
		LDFlags:   "-s -w",
		Version:   "v9.8.7-test",
		Revision:  "0123456789abcdef0123456789abcdef01234567",
		Created:   created,
		FileTime:  created,
		CACerts:   hostCABundle,
		WorkDir:   filepath.Join(tmp, "work"),
		Log:       testWriter{t},
	}
	start := time.Now()
	idxs, err := Build(ctx, o, comps)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built %d components for %d platforms in %s", len(comps), len(Platforms), time.Since(start).Round(time.Millisecond))

	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(hostCABundle)
	if err != nil {
		t.Fatal(err)
	}

	for _, c := range comps {
		t.Run(c.Name, func(t *testing.T) {
			idx := idxs[c.Name]
			want, err := idx.Digest()
			if err != nil {
				t.Fatal(err)
			}
			ref := u.Host + "/mooring-dev/" + c.Name + ":v9.8.7-test"

			// The layout and its tar hold the same index, named ref.
			dir := filepath.Join(tmp, "images", c.Name)
			if err := WriteLayout(dir, idx, ref); err != nil {
				t.Fatal(err)
			}
			if err := WriteTar(dir, dir+".tar", created); err != nil {
				t.Fatal(err)
			}
			fromLayout, err := ReadLayout(dir)
			if err != nil {
				t.Fatal(err)
			}
			checkDigest(t, "layout", fromLayout, want)
			untarred := filepath.Join(tmp, "untar", c.Name)
			untar(t, dir+".tar", untarred)
			fromTar, err := ReadLayout(untarred)
			if err != nil {
				t.Fatal(err)
			}
			checkDigest(t, "tar", fromTar, want)
			top, err := layout.ImageIndexFromPath(untarred)
			if err != nil {
				t.Fatal(err)
			}
			tm, err := top.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			if got := tm.Manifests[0].Annotations["org.opencontainers.image.ref.name"]; got != ref {
				t.Errorf("ref.name in the tar's index.json = %q, want %q", got, ref)
			}

			// Push what the layout holds, as make push does, and pull it back by tag.
			if err := Push(ctx, ref, fromLayout); err != nil {
				t.Fatal(err)
			}
			tag, err := name.NewTag(ref)
			if err != nil {
				t.Fatal(err)
			}
			pulled, err := remote.Index(tag, remote.WithContext(ctx))
			if err != nil {
				t.Fatal(err)
			}
			checkDigest(t, "pulled", pulled, want)
			m, err := pulled.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			if m.MediaType != types.OCIImageIndex {
				t.Errorf("index media type %s, want %s", m.MediaType, types.OCIImageIndex)
			}
			for k, v := range o.Labels(c) {
				if m.Annotations[k] != v {
					t.Errorf("index annotation %s = %q, want %q", k, m.Annotations[k], v)
				}
			}
			var platforms []string
			for _, d := range m.Manifests {
				if d.Platform == nil {
					t.Fatalf("manifest %s has no platform", d.Digest)
				}
				platforms = append(platforms, d.Platform.String())
				img, err := pulled.Image(d.Digest)
				if err != nil {
					t.Fatal(err)
				}
				checkImage(t, o, c, *d.Platform, img, ca, filepath.Join(tmp, "run", d.Platform.Architecture))
			}
			slices.Sort(platforms)
			if want := []string{"linux/amd64", "linux/arm64"}; !slices.Equal(platforms, want) {
				t.Errorf("index platforms %v, want %v", platforms, want)
			}
		})
	}

	// The same inputs give the same images, byte for byte (layer times are
	// fixed, the go build is reproducible): build again and compare digests.
	if !t.Failed() {
		o.WorkDir = filepath.Join(tmp, "work2")
		again, err := Build(ctx, o, comps)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range comps {
			want, err := idxs[c.Name].Digest()
			if err != nil {
				t.Fatal(err)
			}
			checkDigest(t, c.Name+" rebuilt", again[c.Name], want)
		}
	}
	t.Logf("TestImages took %s", time.Since(start).Round(time.Millisecond))
}

// checkImage checks one platform's image: config, labels, files, and on the
// host's architecture that its binary runs.
func checkImage(t *testing.T, o Options, c Component, p v1.Platform, img v1.Image, ca []byte, runDir string) {
	t.Helper()
	mt, err := img.MediaType()
	if err != nil {
		t.Fatal(err)
	}
	if mt != types.OCIManifestSchema1 {
		t.Errorf("%s: manifest media type %s", p, mt)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	bin := BinDir + "/" + c.Name
	if cf.OS != p.OS || cf.Architecture != p.Architecture {
		t.Errorf("%s: config says %s/%s", p, cf.OS, cf.Architecture)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{bin}) {
		t.Errorf("%s: entrypoint %q, want [%s]", p, cf.Config.Entrypoint, bin)
	}
	if cf.Config.User != "65532:65532" {
		t.Errorf("%s: user %q, want 65532:65532", p, cf.Config.User)
	}
	if cf.Config.WorkingDir != Home {
		t.Errorf("%s: working dir %q, want %s", p, cf.Config.WorkingDir, Home)
	}
	if !slices.Contains(cf.Config.Env, "SSL_CERT_FILE="+CABundle) {
		t.Errorf("%s: env %q has no SSL_CERT_FILE", p, cf.Config.Env)
	}
	if !cf.Created.Time.Equal(o.Created) {
		t.Errorf("%s: created %s, want %s", p, cf.Created.Time, o.Created)
	}
	wantLabels := map[string]string{
		"org.opencontainers.image.title":       c.Name,
		"org.opencontainers.image.description": c.Description,
		"org.opencontainers.image.source":      "https://github.com/mooring-dev/mooring",
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.revision":    o.Revision,
		"org.opencontainers.image.created":     o.Created.Format(time.RFC3339),
		"org.opencontainers.image.licenses":    "Apache-2.0",
	}
	for k, v := range wantLabels {
		if got := cf.Config.Labels[k]; got != v {
			t.Errorf("%s: label %s = %q, want %q", p, k, got, v)
		}
	}
	if n := len(cf.History); n != 3 {
		t.Errorf("%s: %d history entries, want 3", p, n)
	}

	files := extract(t, img)
	want := map[string]func(f file) bool{
		"etc/passwd": func(f file) bool {
			return strings.Contains(string(f.data), "\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")
		},
		"etc/group":     func(f file) bool { return strings.Contains(string(f.data), "\nnonroot:x:65532:\n") },
		CABundle[1:]:    func(f file) bool { return bytes.Equal(f.data, ca) && f.hdr.Mode == 0o644 },
		"home/nonroot":  func(f file) bool { return f.hdr.Typeflag == tar.TypeDir && f.hdr.Uid == 65532 && f.hdr.Gid == 65532 },
		"tmp":           func(f file) bool { return f.hdr.Typeflag == tar.TypeDir && f.hdr.Mode == 0o1777 },
		bin[1:]:         func(f file) bool { return f.hdr.Typeflag == tar.TypeReg && f.hdr.Mode == 0o755 && len(f.data) > 0 },
		"usr/local/bin": func(f file) bool { return f.hdr.Typeflag == tar.TypeDir },
		"etc/ssl/certs": func(f file) bool { return f.hdr.Typeflag == tar.TypeDir },
		"root":          func(f file) bool { return f.hdr.Typeflag == tar.TypeDir && f.hdr.Mode == 0o700 },
		"home":          func(f file) bool { return f.hdr.Typeflag == tar.TypeDir },
		"etc":           func(f file) bool { return f.hdr.Typeflag == tar.TypeDir },
		"etc/ssl":       func(f file) bool { return f.hdr.Typeflag == tar.TypeDir },
		"usr":           func(f file) bool { return f.hdr.Typeflag == tar.TypeDir },
		"usr/local":     func(f file) bool { return f.hdr.Typeflag == tar.TypeDir },
	}
	for n, ok := range want {
		f, found := files[n]
		switch {
		case !found:
			t.Errorf("%s: no %s in the image", p, n)
		case !ok(f):
			t.Errorf("%s: %s is not as expected: mode %o, uid %d, %d bytes", p, n, f.hdr.Mode, f.hdr.Uid, len(f.data))
		case !f.hdr.ModTime.Equal(o.FileTime):
			t.Errorf("%s: %s has time %s, want %s", p, n, f.hdr.ModTime, o.FileTime)
		}
	}
	for n := range files {
		if _, ok := want[n]; !ok {
			t.Errorf("%s: unexpected %s in the image", p, n)
		}
	}

	if p.Architecture != runtime.GOARCH || p.OS != runtime.GOOS {
		return
	}
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(runDir, c.Name)
	if err := os.WriteFile(exe, files[bin[1:]].data, 0o755); err != nil {
		t.Fatal(err)
	}
	// Every binary prints "<name> <version> (commit ..., built ...)"
	// (internal/version).
	out, err := exec.Command(exe, "--version").CombinedOutput()
	if err != nil {
		t.Errorf("%s --version: %v\n%s", c.Name, err, out)
	} else if !strings.HasPrefix(firstLine(out), c.Name+" ") {
		t.Errorf("%s --version printed %q", c.Name, out)
	} else {
		t.Logf("%s --version: %s", c.Name, firstLine(out))
	}
}

type file struct {
	hdr  tar.Header
	data []byte
}

// extract flattens the image's layers and returns its files by path (no
// leading or trailing slash).
func extract(t *testing.T, img v1.Image) map[string]file {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	files := map[string]file{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[strings.Trim(h.Name, "/")] = file{hdr: *h, data: data}
	}
	return files
}

// untar unpacks the tar at file into dir, refusing names outside it.
func untar(t *testing.T, file, dir string) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	root, err := os.OpenRoot(mkdir(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeDir {
			if err := root.MkdirAll(strings.TrimSuffix(h.Name, "/"), 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := root.WriteFile(h.Name, data, fs.FileMode(0o644)); err != nil {
			t.Fatal(err)
		}
	}
}

func mkdir(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func checkDigest(t *testing.T, what string, idx v1.ImageIndex, want v1.Hash) {
	t.Helper()
	got, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("%s index digest %s, want %s", what, got, want)
	}
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}

// testWriter sends Build's log lines to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func TestTimesFromEnv(t *testing.T) {
	now := time.Date(2026, 5, 6, 7, 8, 9, 123, time.UTC)
	t.Setenv("SOURCE_DATE_EPOCH", "")
	created, files, err := TimesFromEnv(now)
	if err != nil || !created.Equal(now.Truncate(time.Second)) || files.Unix() != 0 {
		t.Errorf("unset: %s %s %v; want now and the epoch", created, files, err)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	created, files, err = TimesFromEnv(now)
	if err != nil || created.Unix() != 1700000000 || !files.Equal(created) {
		t.Errorf("set: %s %s %v; want 1700000000 for both", created, files, err)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "yesterday")
	if _, _, err := TimesFromEnv(now); err == nil {
		t.Error("SOURCE_DATE_EPOCH=yesterday accepted")
	}
}
