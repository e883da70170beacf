// Command manifests renders each kustomize overlay of deploy/overlays into
// one YAML file for kubectl apply -f, for a release (make release;
// docs/release.md, docs/install.md):
//
//	go run ./hack/manifests --version V [--registry R] [--tag T] [--out DIR]
//
// writes DIR/mooring_<V>_<overlay>.yaml for every overlay: what kubectl
// kustomize (kustomize api v0.21.1, as kubectl 1.36) renders, with the
// images R/mooring-ccm:T and R/mooring-csr-approver:T (kustomize's images
// transformer; T defaults to V), and the cloud's config left to the user:
// the Secret mooring-cloud-config, which the overlays generate from
// placeholder files, is not in it, and the Deployments name it and the
// ConfigMap mooring-cloud without kustomize's hash, so that kubectl create
// secret makes what they mount. Run it from the module root.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
	"sigs.k8s.io/yaml"
)

// defaultRegistry is where the overlays name the images.
const defaultRegistry = "ghcr.io/mooring-dev"

// images are the components' images as the overlays name them, without a
// tag.
var images = []string{"mooring-ccm", "mooring-csr-approver"}

func main() {
	version := flag.String("version", "", "the release's version, in the file names and headers (hack/version.sh)")
	registry := flag.String("registry", defaultRegistry, "registry and namespace of the images")
	tag := flag.String("tag", "", "the images' tag (default: --version)")
	out := flag.String("out", "bin/manifests", "directory of the rendered files")
	overlays := flag.String("overlays", "deploy/overlays", "directory of the overlays, one per subdirectory")
	flag.Parse()
	if flag.NArg() != 0 {
		fail(fmt.Errorf("unexpected arguments: %v", flag.Args()))
	}
	if *version == "" {
		fail(fmt.Errorf("--version is required"))
	}
	if *tag == "" {
		*tag = *version
	}
	files, err := renderAll(*overlays, *out, *registry, *tag, *version)
	if err != nil {
		fail(err)
	}
	for _, f := range files {
		fmt.Println(f)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "manifests:", err)
	os.Exit(1)
}

// fileName is the rendered file of an overlay.
func fileName(version, overlay string) string {
	return "mooring_" + version + "_" + overlay + ".yaml"
}

// renderAll renders every overlay under dir into out and returns the
// files' paths.
func renderAll(dir, out, registry, tag, version string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		b, err := render(filepath.Join(dir, e.Name()), registry, tag)
		if err != nil {
			return nil, fmt.Errorf("overlay %s: %w", e.Name(), err)
		}
		f := filepath.Join(out, fileName(version, e.Name()))
		head := header(version, e.Name(), b)
		if err := os.WriteFile(f, append([]byte(head), b...), 0o644); err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no overlays in %s", dir)
	}
	return files, nil
}

// header says what the file is and what to create before applying it.
func header(version, overlay string, rendered []byte) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# mooring %s: deploy/overlays/%s rendered for kubectl apply -f (docs/install.md).\n", version, overlay)
	b.WriteString("# Create first, in kube-system, the Secret mooring-cloud-config with the cloud's config\n")
	b.WriteString("# (kubectl -n kube-system create secret generic mooring-cloud-config --from-file=cloud.yaml,\n")
	b.WriteString("# plus --from-file=token where cloud.yaml names one)")
	if !strings.Contains(string(rendered), "\nkind: ConfigMap\n") {
		b.WriteString(",\n# the ConfigMap mooring-cloud naming the backend\n")
		b.WriteString("# (kubectl -n kube-system create configmap mooring-cloud --from-literal=provider=<backend>)")
	}
	if strings.Contains(string(rendered), "mooring-join-ticket-keys") {
		b.WriteString(",\n# and the join ticket keys (mooring-csr-approver ticket keys add --keys-secret\n")
		b.WriteString("# kube-system/mooring-join-ticket-keys; docs/tickets.md)")
	}
	b.WriteString(".\n")
	return b.String()
}

// hashed is a generated object's name with kustomize's hash suffix.
var hashed = regexp.MustCompile(`^(mooring-cloud|mooring-cloud-config)-[a-z0-9]{10}$`)

// render builds the overlay in dir as kubectl kustomize does, with the
// images set to registry/<name>:tag, and leaves the cloud's config out
// (see the command's doc).
func render(dir, registry, tag string) ([]byte, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	top, err := os.MkdirTemp("", "mooring-manifests-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(top)
	// A kustomization of our own on top: the overlay as its one resource
	// (by a relative path: kustomize refuses absolute ones), kustomize's
	// images transformer for the tags.
	rel, err := filepath.Rel(top, abs)
	if err != nil {
		return nil, err
	}
	k := map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1beta1",
		"kind":       "Kustomization",
		"resources":  []string{rel},
	}
	var imgs []map[string]string
	for _, name := range images {
		imgs = append(imgs, map[string]string{"name": defaultRegistry + "/" + name, "newName": registry + "/" + name, "newTag": tag})
	}
	k["images"] = imgs
	kb, err := yaml.Marshal(k)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(top, "kustomization.yaml"), kb, 0o644); err != nil {
		return nil, err
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), top)
	if err != nil {
		return nil, err
	}
	if err := leaveConfigToUser(m); err != nil {
		return nil, err
	}
	return m.AsYaml()
}

// leaveConfigToUser drops the generated Secret mooring-cloud-config and,
// where its provider is a placeholder, the ConfigMap mooring-cloud; the
// names of both lose kustomize's hash, in the objects and in every
// reference to them.
func leaveConfigToUser(m resmap.ResMap) error {
	renamed := map[string]string{}
	for _, r := range m.Resources() {
		match := hashed.FindStringSubmatch(r.GetName())
		if match == nil || (r.GetKind() != "Secret" && r.GetKind() != "ConfigMap") {
			continue
		}
		renamed[r.GetName()] = match[1]
		drop := r.GetKind() == "Secret"
		if r.GetKind() == "ConfigMap" {
			provider := r.GetDataMap()["provider"]
			drop = provider == "" || strings.Contains(provider, "REPLACE")
		}
		if drop {
			if err := m.Remove(r.CurId()); err != nil {
				return err
			}
			continue
		}
		if err := r.SetName(match[1]); err != nil {
			return err
		}
	}
	if len(renamed) == 0 {
		return fmt.Errorf("no generated mooring-cloud or mooring-cloud-config")
	}
	for _, r := range m.Resources() {
		rename(r.YNode(), renamed)
	}
	// What is left names no hashed object.
	b, err := m.AsYaml()
	if err != nil {
		return err
	}
	var left []string
	for old := range renamed {
		if strings.Contains(string(b), old) {
			left = append(left, old)
		}
	}
	sort.Strings(left)
	if len(left) > 0 {
		return fmt.Errorf("still named after renaming: %v", left)
	}
	return nil
}

// rename replaces every scalar that is a key of renamed.
func rename(n *kyaml.Node, renamed map[string]string) {
	if n == nil {
		return
	}
	if n.Kind == kyaml.ScalarNode {
		if to, ok := renamed[n.Value]; ok {
			n.Value = to
		}
		return
	}
	for _, c := range n.Content {
		rename(c, renamed)
	}
}
