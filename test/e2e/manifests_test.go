package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// TestManifestsDryRun applies every manifest set mooring ships (each
// kustomize overlay, with and without the ServiceMonitor component, and the
// Helm chart with the values of each overlay and with every optional object
// on) to the real kube-apiserver with server-side dry run (dryRun=All,
// fieldValidation=Strict), as an installer bound to cluster-admin (not
// system:masters, so RBAC's escalation checks run): schema errors, unknown
// or duplicate fields and RBAC the installer may not grant fail here. Kinds
// whose CRD the bed lacks (ServiceMonitor) are skipped, and said so.
func TestManifestsDryRun(t *testing.T) {
	c := testbed.Start(t, testbed.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root := harness.RepoRoot()

	sets := map[string][]byte{}
	for _, overlay := range []string{"local", "aws", "gce", "azure", "digitalocean", "hetzner", "linode", "vsphere", "openstack", "approver-only"} {
		sets["kustomize overlays/"+overlay] = kustomize(t, filepath.Join(root, "deploy", "overlays", overlay))
		// The overlay with the ServiceMonitor component.
		dir := t.TempDir()
		// kustomize takes other roots by relative paths only.
		rel := func(path string) string {
			r, err := filepath.Rel(dir, path)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		k := fmt.Sprintf("resources:\n- %s\ncomponents:\n- %s\n", rel(filepath.Join(root, "deploy", "overlays", overlay)),
			rel(filepath.Join(root, "deploy", "components", "servicemonitor")))
		if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o600); err != nil {
			t.Fatal(err)
		}
		sets["kustomize overlays/"+overlay+" + components/servicemonitor"] = kustomize(t, dir)
	}
	helm := installHelm(t)
	chart := filepath.Join(root, "deploy", "helm", "mooring")
	everything := []string{"--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.serviceMonitor.interval=30s",
		"--set", "metrics.readerRole.subjects[0].kind=ServiceAccount", "--set", "metrics.readerRole.subjects[0].name=prometheus",
		"--set", "metrics.readerRole.subjects[0].namespace=monitoring", "--set", "podAnnotations.example\\.com/a=b",
		"--set", "extraArgs={--v=2}", "--set", "imagePullSecrets[0].name=registry", "--set", "tickets.enabled=true"}
	for _, values := range []string{"local", "aws", "digitalocean", "hetzner", "linode", "vsphere", "openstack", "approver-only"} {
		args := []string{"template", "mooring", chart, "--namespace", "kube-system", "--values", filepath.Join(chart, "ci", values+"-values.yaml")}
		sets["helm "+values] = helmTemplate(t, helm, args...)
		sets["helm "+values+" with every option"] = helmTemplate(t, helm, append(args, everything...)...)
	}
	// Another namespace: the Lease and ConfigMap move, the authentication
	// reader binding stays in kube-system.
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mooring"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sets["helm aws in namespace mooring"] = helmTemplate(t, helm, "template", "mooring", chart, "--namespace", "mooring",
		"--values", filepath.Join(chart, "ci", "aws-values.yaml"))

	client, mapper := installer(ctx, t, c)
	for name, data := range sets {
		t.Run(strings.NewReplacer(" ", "_", "/", "-").Replace(name), func(t *testing.T) {
			objs := decodeObjects(t, data)
			if len(objs) == 0 {
				t.Fatal("renders nothing")
			}
			applied := 0
			for _, obj := range objs {
				gvk := obj.GroupVersionKind()
				m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
				if meta.IsNoMatchError(err) {
					t.Logf("skipped %s %s: the test bed has no %s (its CRD is not installed)", gvk.Kind, obj.GetName(), gvk.GroupVersion())
					continue
				}
				if err != nil {
					t.Fatalf("%s %s: %v", gvk.Kind, obj.GetName(), err)
				}
				var ri dynamic.ResourceInterface = client.Resource(m.Resource)
				if m.Scope.Name() == meta.RESTScopeNameNamespace {
					if obj.GetNamespace() == "" {
						t.Errorf("%s %s has no namespace", gvk.Kind, obj.GetName())
						continue
					}
					ri = client.Resource(m.Resource).Namespace(obj.GetNamespace())
				} else if obj.GetNamespace() != "" {
					t.Errorf("cluster-scoped %s %s has namespace %q", gvk.Kind, obj.GetName(), obj.GetNamespace())
				}
				body, err := json.Marshal(obj.Object)
				if err != nil {
					t.Fatal(err)
				}
				_, err = ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{
					DryRun: []string{metav1.DryRunAll}, FieldManager: "mooring-manifests-test", Force: ptrTo(true),
					FieldValidation: metav1.FieldValidationStrict,
				})
				if err != nil {
					t.Errorf("%s %s/%s: %v", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
					continue
				}
				applied++
			}
			t.Logf("%d of %d objects accepted by server-side dry run", applied, len(objs))
		})
	}
}

func ptrTo[T any](v T) *T { return &v }

// installer is a dynamic client and REST mapper for a user bound to
// cluster-admin, as an operator installing mooring is.
func installer(ctx context.Context, t *testing.T, c *testbed.Cluster) (*dynamic.DynamicClient, meta.RESTMapper) {
	t.Helper()
	_, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "mooring-e2e-installer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "mooring-installer"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	path, err := c.WriteKubeconfig("installer", "mooring-installer")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	// client-go's default limit (5 requests a second, bursts of 10) would
	// make this test wait about 7 s per manifest set: the bed's apiserver
	// is the only thing it protects, and it takes them all.
	cfg.QPS, cfg.Burst = -1, 0
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client, restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
}

func kustomize(t *testing.T, dir string) []byte {
	t.Helper()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize %s: %v", dir, err)
	}
	data, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// installHelm is the Helm CLI hack/install-helm.sh pins (built into the
// cache on first use).
func installHelm(t *testing.T) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(harness.RepoRoot(), "hack", "install-helm.sh"))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/install-helm.sh: %v\n%s", err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

func helmTemplate(t *testing.T, helm string, args ...string) []byte {
	t.Helper()
	// Helm built from source assumes an old cluster; this one is the bed's.
	args = append(args, "--kube-version", "v1.36.3")
	if v := os.Getenv("KUBE_VERSION"); v != "" {
		args[len(args)-1] = v
	}
	cmd := exec.Command(helm, args...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

func decodeObjects(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var obj map[string]any
		if err := d.Decode(&obj); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatal(err)
		}
		if obj != nil {
			out = append(out, &unstructured.Unstructured{Object: obj})
		}
	}
}
