package helmchart

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The media types Helm gives a chart in a registry (helm.sh/helm/v3
// pkg/registry): the config is Chart.yaml as JSON, the one layer the
// packaged chart.
const (
	ConfigMediaType     types.MediaType = "application/vnd.cncf.helm.config.v1+json"
	ChartLayerMediaType types.MediaType = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
)

// Ref is where a chart of this version lives in registry:
// <registry>/charts/mooring:<version>, as helm install
// oci://<registry>/charts/mooring --version <version> finds it.
func Ref(registry, version string) string {
	return registry + "/charts/" + Name + ":" + version
}

// Artifact is a packaged chart as the OCI manifest helm push makes: config
// and layer of Helm's media types, and the annotations Helm writes
// (org.opencontainers.image.title, version, description, url, source from
// Chart.yaml; created from created, so the digest is reproducible).
func Artifact(tgz []byte, created time.Time) (v1.Image, error) {
	config, md, err := ReadChart(tgz)
	if err != nil {
		return nil, err
	}
	if err := CheckVersion(md.Version); err != nil {
		return nil, err
	}
	a := &artifact{rawConfig: config, config: static.NewLayer(config, ConfigMediaType), chart: static.NewLayer(tgz, ChartLayerMediaType)}
	cd, err := partial.Descriptor(a.config)
	if err != nil {
		return nil, err
	}
	ld, err := partial.Descriptor(a.chart)
	if err != nil {
		return nil, err
	}
	ann := map[string]string{
		"org.opencontainers.image.title":   md.Name,
		"org.opencontainers.image.version": md.Version,
		"org.opencontainers.image.created": created.UTC().Format(time.RFC3339),
	}
	for k, v := range map[string]string{"org.opencontainers.image.description": md.Description, "org.opencontainers.image.url": md.Home} {
		if v != "" {
			ann[k] = v
		}
	}
	if len(md.Sources) > 0 {
		ann["org.opencontainers.image.source"] = md.Sources[0]
	}
	a.manifest, err = json.Marshal(v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config:        *cd,
		Layers:        []v1.Descriptor{*ld},
		Annotations:   ann,
	})
	if err != nil {
		return nil, err
	}
	return partial.CompressedToImage(a)
}

// artifact is the image core of Artifact: raw config and manifest, two
// blobs.
type artifact struct {
	config, chart       v1.Layer
	rawConfig, manifest []byte
}

func (a *artifact) RawConfigFile() ([]byte, error) { return a.rawConfig, nil }

func (a *artifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }

func (a *artifact) RawManifest() ([]byte, error) { return a.manifest, nil }

func (a *artifact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	for _, l := range []v1.Layer{a.chart, a.config} {
		if d, err := l.Digest(); err == nil && d == h {
			return l, nil
		}
	}
	return nil, fmt.Errorf("chart artifact has no blob %s", h)
}

// Push writes the chart artifact to ref with the credentials of
// go-containerregistry's default keychain, as hack/images pushes the
// images (docs/images.md).
func Push(ctx context.Context, ref string, img v1.Image, opts ...remote.Option) error {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return err
	}
	opts = append([]remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}, opts...)
	return remote.Write(tag, img, opts...)
}
