package deploy

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/mooring-dev/mooring/internal/doctest"
)

// TestOverlaysAsRemoteBases: every overlay works as docs/install.md tells an
// operator to use it, as a remote base at a release's tag in a
// kustomization of their own (fetched with git by the kustomize kubectl
// 1.36 uses, from a local repository tagged as a release is), with its
// generated Secret replaced by the operator's files (approver-only: the
// backend's name merged into its ConfigMap) and components/apiserver-endpoint
// added from the same tag. The Secret then holds the operator's files only,
// and the Deployment mounts it by its new, hashed name.
func TestOverlaysAsRemoteBases(t *testing.T) {
	repo := doctest.TaggedRepo(t, "..", "deploy", t.TempDir(), "v1.2.0", func(rel string) bool { return !strings.HasSuffix(rel, ".go") })
	url := func(path string) string { return "file://" + repo + "//deploy/" + path + "?ref=v1.2.0" }
	for _, overlay := range overlays {
		t.Run(strings.TrimPrefix(overlay, "overlays/"), func(t *testing.T) {
			// The files the overlay's Secret is made of, which the
			// operator's replace lists again, with their own content.
			data, err := os.ReadFile(filepath.Join(overlay, "kustomization.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			var k struct {
				SecretGenerator []struct {
					Name  string   `json:"name"`
					Files []string `json:"files"`
				} `json:"secretGenerator"`
			}
			if err := yaml.Unmarshal(data, &k); err != nil {
				t.Fatal(err)
			}
			if len(k.SecretGenerator) != 1 || k.SecretGenerator[0].Name != "mooring-cloud-config" {
				t.Fatalf("secretGenerator %+v", k.SecretGenerator)
			}
			files := k.SecretGenerator[0].Files
			dir := t.TempDir()
			kust := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- " + url(overlay) + "\n" +
				"components:\n- " + url("components/apiserver-endpoint") + "\n" +
				"configMapGenerator:\n- name: mooring-apiserver\n  namespace: kube-system\n  literals:\n  - host=10.0.0.10\n  - port=6443\n"
			if overlay == "overlays/approver-only" {
				kust += "- name: mooring-cloud\n  namespace: kube-system\n  behavior: merge\n  literals:\n  - provider=aws\n"
			}
			kust += "secretGenerator:\n- name: mooring-cloud-config\n  namespace: kube-system\n  behavior: replace\n  files:\n"
			want := map[string]string{}
			for _, f := range files {
				kust += "  - " + f + "\n"
				want[f] = "the operator's " + f + "\n"
				if err := os.WriteFile(filepath.Join(dir, f), []byte(want[f]), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kust), 0o600); err != nil {
				t.Fatal(err)
			}
			m := render(t, dir)

			secret := find(t, m, "Secret", "mooring-cloud-config")
			got := secret.GetDataMap()
			if len(got) != len(want) {
				t.Errorf("the Secret holds %d files, want the operator's %d", len(got), len(want))
			}
			for f, content := range want {
				// GetDataMap decodes nothing: a Secret's data is base64.
				if dec := decodeSecretValue(t, got[f]); dec != content {
					t.Errorf("the Secret's %s is %q, want the operator's", f, dec)
				}
			}
			name := "mooring-ccm"
			if overlay == "overlays/approver-only" {
				name = "mooring-csr-approver"
				if p := configMapData(t, m, "mooring-cloud")["provider"]; p != "aws" {
					t.Errorf("provider %q, want the operator's aws", p)
				}
			}
			spec := decode[appsv1.Deployment](t, find(t, m, "Deployment", name)).Spec.Template.Spec
			var mounted []string
			for _, v := range spec.Volumes {
				if v.Secret != nil {
					mounted = append(mounted, v.Secret.SecretName)
				}
			}
			if !slices.Contains(mounted, secret.GetName()) {
				t.Errorf("the Deployment mounts %v, not the Secret %s", mounted, secret.GetName())
			}
			var env []string
			for _, e := range spec.Containers[0].Env {
				if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
					env = append(env, e.Name+"="+e.ValueFrom.ConfigMapKeyRef.Name)
				}
			}
			if !slices.Contains(env, "KUBERNETES_SERVICE_HOST="+find(t, m, "ConfigMap", "mooring-apiserver").GetName()) {
				t.Errorf("the remote component set no KUBERNETES_SERVICE_HOST from mooring-apiserver: %v", env)
			}
		})
	}
}

func decodeSecretValue(t *testing.T, v string) string {
	t.Helper()
	dec, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(v), ""))
	if err != nil {
		t.Fatalf("a Secret's value: %v", err)
	}
	return string(dec)
}
