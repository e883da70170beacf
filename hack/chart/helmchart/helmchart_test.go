package helmchart

import (
	"bytes"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"sigs.k8s.io/yaml"
)

// helmCLI is the Helm CLI hack/install-helm.sh pins (built into the cache
// on first use; make unit builds it first). The test never skips for want
// of it.
func helmCLI(t *testing.T) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command("../../install-helm.sh")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/install-helm.sh: %v\n%s", err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// runHelm runs helm with no user configuration and returns its stdout.
func runHelm(t *testing.T, helm string, args ...string) string {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(helm, args...)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// images are the container images of rendered manifests.
func images(t *testing.T, manifests string) []string {
	t.Helper()
	var out []string
	for _, doc := range strings.Split(manifests, "\n---") {
		var obj struct {
			Kind string `json:"kind"`
			Spec struct {
				Template struct {
					Spec struct {
						Containers []struct {
							Image string `json:"image"`
						} `json:"containers"`
					} `json:"spec"`
				} `json:"template"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		for _, c := range obj.Spec.Template.Spec.Containers {
			out = append(out, c.Image)
		}
	}
	return out
}

// TestPackageAndPull packages the chart as make release does (another
// registry, a development version), checks its Chart.yaml, that packaging
// is reproducible and that the images default to the version; then pushes
// it as make push does to an in-process registry on loopback and checks
// the Helm CLI finds it there: helm show chart, helm pull (the same bytes),
// helm template from oci://.
func TestPackageAndPull(t *testing.T) {
	helm := helmCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const version = "v0.0.0-69-geba10a7c0ffe-dirty"
	fileTime := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	o := Options{Helm: helm, ChartDir: "../../../deploy/helm/mooring", Version: version,
		Registry: "registry.example:5000/team", FileTime: fileTime, OutDir: t.TempDir()}
	file, err := Package(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(file) != "mooring-"+version+".tgz" {
		t.Errorf("packaged as %s", file)
	}
	tgz, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	_, md, err := ReadChart(tgz)
	if err != nil {
		t.Fatal(err)
	}
	if md.Name != "mooring" || md.Version != version || md.AppVersion != version {
		t.Errorf("Chart.yaml: name %q version %q appVersion %q; want mooring, %s, %s", md.Name, md.Version, md.AppVersion, version, version)
	}
	o.OutDir = t.TempDir()
	again, err := Package(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(again); err != nil || !bytes.Equal(b, tgz) {
		t.Errorf("packaging twice gave different bytes (%v)", err)
	}

	wantImages := map[string]bool{
		"registry.example:5000/team/mooring-ccm:" + version:          true,
		"registry.example:5000/team/mooring-csr-approver:" + version: true,
	}
	checkImages := func(what, manifests string, want ...string) {
		t.Helper()
		got := images(t, manifests)
		if len(got) != len(want) {
			t.Errorf("%s: images %v, want %v", what, got, want)
		}
		for i := range got {
			if i >= len(want) || got[i] != want[i] || !wantImages[got[i]] {
				t.Errorf("%s: images %v, want %v", what, got, want)
				break
			}
		}
	}
	checkImages("helm template of the .tgz", runHelm(t, helm, "template", "mooring", file, "--namespace", "kube-system", "--kube-version", "v1.36.3",
		"--values", ciValues+"aws-values.yaml"), "registry.example:5000/team/mooring-ccm:"+version)
	checkImages("helm template of the .tgz, approver-only", runHelm(t, helm, "template", "mooring", file, "--namespace", "kube-system", "--kube-version", "v1.36.3",
		"--values", ciValues+"approver-only-values.yaml"), "registry.example:5000/team/mooring-csr-approver:"+version)

	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	img, err := Artifact(tgz, created)
	if err != nil {
		t.Fatal(err)
	}
	ref := Ref(u.Host, version)
	if err := Push(ctx, ref, img); err != nil {
		t.Fatal(err)
	}
	// What is in the registry: Helm's media types and annotations.
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Image(tag, remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	m, err := pulled.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.Config.MediaType != ConfigMediaType || len(m.Layers) != 1 || m.Layers[0].MediaType != ChartLayerMediaType {
		t.Errorf("manifest: config %s, layers %v", m.Config.MediaType, m.Layers)
	}
	for k, v := range map[string]string{"org.opencontainers.image.title": "mooring", "org.opencontainers.image.version": version,
		"org.opencontainers.image.created": "2026-03-04T05:06:07Z", "org.opencontainers.image.source": "https://github.com/mooring-dev/mooring"} {
		if m.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, m.Annotations[k], v)
		}
	}
	again2, err := Artifact(tgz, created)
	if err != nil {
		t.Fatal(err)
	}
	if d1, _ := img.Digest(); func() bool { d2, _ := again2.Digest(); return d1 != d2 }() {
		t.Error("the artifact's digest is not reproducible")
	}

	// The Helm CLI reads it back.
	oci := "oci://" + u.Host + "/charts/mooring"
	show := runHelm(t, helm, "show", "chart", oci, "--version", version, "--plain-http")
	if !strings.Contains(show, "version: "+version) || !strings.Contains(show, "appVersion: "+version) {
		t.Errorf("helm show chart:\n%s", show)
	}
	dest := t.TempDir()
	runHelm(t, helm, "pull", oci, "--version", version, "--plain-http", "--destination", dest)
	if b, err := os.ReadFile(filepath.Join(dest, "mooring-"+version+".tgz")); err != nil || !bytes.Equal(b, tgz) {
		t.Errorf("helm pull: not the packaged bytes (%v)", err)
	}
	checkImages("helm template from oci://", runHelm(t, helm, "template", "mooring", oci, "--version", version, "--plain-http",
		"--namespace", "kube-system", "--kube-version", "v1.36.3", "--values", ciValues+"aws-values.yaml"), "registry.example:5000/team/mooring-ccm:"+version)
}

// ciValues are the chart's test values, one per overlay.
const ciValues = "../../../deploy/helm/mooring/ci/"

func TestCheckVersion(t *testing.T) {
	for _, v := range []string{"v1.2.3", "v0.0.0-69-geba10a7c0ffe", "v1.3.0-rc.1", "v0.0.0-2-g0123456789ab-dirty", "1.2.3"} {
		if err := CheckVersion(v); err != nil {
			t.Errorf("%s: %v", v, err)
		}
	}
	for _, v := range []string{"", "dev", "latest", "v1.2", "v1.2.3+build.1"} {
		if err := CheckVersion(v); err == nil {
			t.Errorf("%q accepted", v)
		}
	}
}

func TestSetRegistryNeedsBothImages(t *testing.T) {
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte("image:\n  ccm:\n    repository: ghcr.io/mooring-dev/mooring-ccm\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := setRegistry(f, "registry.example"); err == nil {
		t.Error("a values.yaml with one image repository was accepted")
	}
}
