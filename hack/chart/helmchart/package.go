// Package helmchart packages mooring's Helm chart for a release and makes
// it the OCI artifact Helm pushes and pulls (helm install
// oci://REGISTRY/charts/mooring --version VERSION). docs/release.md.
package helmchart

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	utilversion "k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/yaml"
)

// DefaultRegistry is where the chart's values.yaml names the images:
// ghcr.io/mooring-dev/mooring-ccm and ghcr.io/mooring-dev/mooring-csr-approver.
const DefaultRegistry = "ghcr.io/mooring-dev"

// Name is the chart's name (Chart.yaml).
const Name = "mooring"

// Options say what Package makes.
type Options struct {
	// Helm is the helm CLI (hack/install-helm.sh prints its path).
	Helm string
	// ChartDir is the chart's source, deploy/helm/mooring.
	ChartDir string
	// Version is the chart's version: the release's version, a semantic
	// version such as v1.2.0 or v0.0.0-69-geba10a7c0ffe (hack/version.sh),
	// without build metadata (+...), which an OCI tag cannot hold.
	Version string
	// AppVersion is the chart's appVersion, the images' default tag;
	// empty means Version.
	AppVersion string
	// Registry is the registry and namespace of the images the chart
	// installs by default; empty means DefaultRegistry.
	Registry string
	// FileTime is every file's time in the package (SOURCE_DATE_EPOCH).
	FileTime time.Time
	// OutDir receives <Name>-<Version>.tgz.
	OutDir string
}

// CheckVersion checks v can be the chart's version and its OCI tag.
func CheckVersion(v string) error {
	if _, err := utilversion.ParseSemantic(v); err != nil {
		return fmt.Errorf("chart version %q: %w", v, err)
	}
	if strings.Contains(v, "+") {
		return fmt.Errorf("chart version %q has build metadata (+...), which an OCI tag cannot hold", v)
	}
	return nil
}

// Package runs helm package on a copy of the chart with the version,
// appVersion and image registry of o, and writes it to
// OutDir/<Name>-<Version>.tgz with every file's time set to FileTime,
// owned by 0:0, gzip without a name or time: the same inputs give the same
// bytes (helm package alone stamps the time of packaging). It returns the
// file's path.
func Package(ctx context.Context, o Options) (string, error) {
	if err := CheckVersion(o.Version); err != nil {
		return "", err
	}
	if o.AppVersion == "" {
		o.AppVersion = o.Version
	}
	work, err := os.MkdirTemp("", "mooring-chart-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	src := filepath.Join(work, Name)
	if err := os.CopyFS(src, os.DirFS(o.ChartDir)); err != nil {
		return "", fmt.Errorf("copy %s: %w", o.ChartDir, err)
	}
	if o.Registry != "" && o.Registry != DefaultRegistry {
		if err := setRegistry(filepath.Join(src, "values.yaml"), o.Registry); err != nil {
			return "", err
		}
	}
	cmd := exec.CommandContext(ctx, o.Helm, "package", src, "--version", o.Version, "--app-version", o.AppVersion,
		"--destination", work)
	// No user's Helm configuration, repositories or plugins.
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+work+"/helm", "HELM_CACHE_HOME="+work+"/helm", "HELM_DATA_HOME="+work+"/helm")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("helm package: %w\n%s", err, out)
	}
	file := Name + "-" + o.Version + ".tgz"
	packaged, err := os.ReadFile(filepath.Join(work, file))
	if err != nil {
		return "", fmt.Errorf("helm package wrote no %s: %w", file, err)
	}
	normalized, err := normalize(packaged, o.FileTime)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(o.OutDir, file)
	return out, os.WriteFile(out, normalized, 0o644)
}

// setRegistry points the image repositories of values.yaml at registry.
func setRegistry(values, registry string) error {
	b, err := os.ReadFile(values)
	if err != nil {
		return err
	}
	old := "repository: " + DefaultRegistry + "/"
	if n := bytes.Count(b, []byte(old)); n != 2 {
		return fmt.Errorf("%s: %d lines %q, want 2 (the two images)", values, n, old)
	}
	b = bytes.ReplaceAll(b, []byte(old), []byte("repository: "+strings.TrimSuffix(registry, "/")+"/"))
	return os.WriteFile(values, b, 0o644)
}

// normalize rewrites a chart archive with fixed times and owners, in the
// same order.
func normalize(tgz []byte, t time.Time) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	tw := tar.NewWriter(zw)
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeDir {
			return nil, fmt.Errorf("chart archive: %s is neither a file nor a directory", h.Name)
		}
		nh := &tar.Header{Name: h.Name, Typeflag: h.Typeflag, Mode: h.Mode, Size: h.Size, ModTime: t.UTC(), Format: tar.FormatPAX}
		if err := tw.WriteHeader(nh); err != nil {
			return nil, err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// Metadata is the part of Chart.yaml this package reads.
type Metadata struct {
	Name        string   `json:"name"`
	Version     string   `json:"version"`
	AppVersion  string   `json:"appVersion"`
	Description string   `json:"description"`
	Home        string   `json:"home"`
	Sources     []string `json:"sources"`
}

// ReadChart returns a chart archive's Chart.yaml, as JSON (what Helm puts
// in the OCI config) and parsed.
func ReadChart(tgz []byte) (configJSON []byte, md Metadata, err error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, md, err
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, md, errors.New("chart archive: no <chart>/Chart.yaml")
		}
		if err != nil {
			return nil, md, err
		}
		dir, file, ok := strings.Cut(h.Name, "/")
		if !ok || file != "Chart.yaml" || dir == "" {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, md, err
		}
		configJSON, err := yaml.YAMLToJSON(b)
		if err != nil {
			return nil, md, fmt.Errorf("%s: %w", h.Name, err)
		}
		if err := yaml.Unmarshal(b, &md); err != nil {
			return nil, md, fmt.Errorf("%s: %w", h.Name, err)
		}
		if md.Name != dir || md.Version == "" {
			return nil, md, fmt.Errorf("%s: name %q, version %q", h.Name, md.Name, md.Version)
		}
		return configJSON, md, nil
	}
}
