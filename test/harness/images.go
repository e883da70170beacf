package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// ImageRegistry names the images the tests build, as `make images` names
// them by default.
const ImageRegistry = "ghcr.io/mooring-dev"

// Images are mooring-ccm's and mooring-csr-approver's images built by
// hack/images (what `make images` runs) for this machine's platform, as the
// oci-archive tars `make images` writes.
type Images struct {
	// Tag of both images (REGISTRY/NAME:TAG); their version label and
	// the binaries' --version say Version.
	Tag, Version string
	// CCMTar and ApproverTar are the archives, for ctr images import
	// (empty: not built).
	CCMTar, ApproverTar string
}

// CCM is mooring-ccm's image reference.
func (i Images) CCM() string { return ImageRegistry + "/mooring-ccm:" + i.Tag }

// Approver is mooring-csr-approver's image reference.
func (i Images) Approver() string { return ImageRegistry + "/mooring-csr-approver:" + i.Tag }

// Tars are the archives built.
func (i Images) Tars() []string {
	var out []string
	for _, t := range []string{i.CCMTar, i.ApproverTar} {
		if t != "" {
			out = append(out, t)
		}
	}
	return out
}

// BuildImages builds the images of components (mooring-ccm,
// mooring-csr-approver; none named: both) into dir with hack/images, tagged tag,
// version-stamped version (a vMAJOR.MINOR.PATCH[-PRE] that hack/ldflags.sh
// stamps as the Makefile does, so two versions are two different images,
// as two commits' would be), for linux/GOARCH only.
func BuildImages(dir, tag, version string, components ...string) (Images, error) {
	if len(components) == 0 {
		components = []string{"mooring-ccm", "mooring-csr-approver"}
	}
	stamp := exec.Command(filepath.Join(RepoRoot(), "hack", "ldflags.sh"))
	stamp.Dir = RepoRoot()
	stamp.Env = append(os.Environ(), "VERSION="+version)
	ldflags, err := stamp.Output()
	if err != nil {
		return Images{}, fmt.Errorf("hack/ldflags.sh: %w", err)
	}
	cmd := exec.Command("go", "run", "./hack/images", "build", "--out", dir, "--registry", ImageRegistry,
		"--tag", tag, "--version", version, "--platforms", "linux/"+runtime.GOARCH,
		"--components", strings.Join(components, ","), "--ldflags", strings.TrimSpace(string(ldflags))+" -s -w")
	cmd.Dir = RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		return Images{}, fmt.Errorf("hack/images build: %v\n%s", err, out)
	}
	im := Images{Tag: tag, Version: version}
	for _, c := range components {
		switch c {
		case "mooring-ccm":
			im.CCMTar = filepath.Join(dir, c+".tar")
		case "mooring-csr-approver":
			im.ApproverTar = filepath.Join(dir, c+".tar")
		}
	}
	return im, nil
}

var sharedImages struct {
	sync.Mutex
	dir   string
	built map[string]Images
}

// SharedImages is BuildImages once per test binary and arguments: the
// tests of a package share the archives (15-50 s a build with a warm Go
// build cache, as busy as the machine is). TestMain removes them with
// RemoveSharedImages.
func SharedImages(t testing.TB, tag, version string, components ...string) Images {
	t.Helper()
	sharedImages.Lock()
	defer sharedImages.Unlock()
	key := tag + " " + strings.Join(components, ",")
	if im, ok := sharedImages.built[key]; ok {
		if im.Version != version {
			t.Fatalf("images %s were built as version %s, not %s", tag, im.Version, version)
		}
		return im
	}
	if sharedImages.dir == "" {
		dir, err := os.MkdirTemp("", "mooring-images-")
		if err != nil {
			t.Fatal(err)
		}
		sharedImages.dir, sharedImages.built = dir, map[string]Images{}
	}
	start := time.Now()
	dir, err := os.MkdirTemp(sharedImages.dir, tag+"-")
	if err != nil {
		t.Fatal(err)
	}
	im, err := BuildImages(dir, tag, version, components...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("images %s (version %s) built in %v", tag, version, time.Since(start).Round(100*time.Millisecond))
	sharedImages.built[key] = im
	return im
}

// RemoveSharedImages removes what SharedImages built.
func RemoveSharedImages() {
	sharedImages.Lock()
	defer sharedImages.Unlock()
	if sharedImages.dir != "" {
		_ = os.RemoveAll(sharedImages.dir)
		sharedImages.dir, sharedImages.built = "", nil
	}
}
