package deploy

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/resmap"

	"github.com/mooring-dev/mooring/cloud"
	_ "github.com/mooring-dev/mooring/cloud/all"
)

const chartDir = "helm/mooring"

// kubeVersion is the cluster version the chart renders for, the test
// bed's; `make` exports KUBE_VERSION. (Helm's own default is the
// Kubernetes of its client-go, v1.37 for the pinned Helm:
// TestHelmDefaultKubeVersion.)
func kubeVersion() string {
	if v := os.Getenv("KUBE_VERSION"); v != "" {
		return v
	}
	return "v1.36.3"
}

// chartCases: the chart's values (ci/) that install what an overlay does,
// with the overlay's own files for the cloud's config; and, with further
// values, what the overlay does with components added.
var chartCases = []struct {
	overlay, values string
	files           []string // --set-file
	components      []string
	set             []string // --set
}{
	{"overlays/local", "ci/local-values.yaml", []string{"cloud.config=overlays/local/cloud.yaml", "cloud.files.token=overlays/local/token"}, nil, nil},
	{"overlays/aws", "ci/aws-values.yaml", []string{"cloud.config=overlays/aws/cloud.yaml"}, nil, nil},
	{"overlays/digitalocean", "ci/digitalocean-values.yaml", []string{"cloud.config=overlays/digitalocean/cloud.yaml", "cloud.files.token=overlays/digitalocean/token"}, nil, nil},
	{"overlays/linode", "ci/linode-values.yaml", []string{"cloud.config=overlays/linode/cloud.yaml", "cloud.files.token=overlays/linode/token"}, nil, nil},
	{"overlays/hetzner", "ci/hetzner-values.yaml", []string{"cloud.config=overlays/hetzner/cloud.yaml", "cloud.files.token=overlays/hetzner/token"}, nil, nil},
	{"overlays/vsphere", "ci/vsphere-values.yaml", []string{"cloud.config=overlays/vsphere/cloud.yaml", "cloud.files.password=overlays/vsphere/password"}, nil, nil},
	{"overlays/oci", "ci/oci-values.yaml", []string{"cloud.config=overlays/oci/cloud.yaml", "cloud.files.oci_config=overlays/oci/oci_config",
		"cloud.files.oci_api_key=overlays/oci/oci_api_key", "cloud.files.oci_roots=overlays/oci/oci_roots"}, nil, nil},
	{"overlays/openstack", "ci/openstack-values.yaml", []string{"cloud.config=overlays/openstack/cloud.yaml", "cloud.files.secret=overlays/openstack/secret"}, nil, nil},
	{"overlays/approver-only", "ci/approver-only-values.yaml", []string{"cloud.config=overlays/approver-only/cloud.yaml"}, nil, nil},
	{"overlays/approver-only", "ci/approver-only-values.yaml", []string{"cloud.config=overlays/approver-only/cloud.yaml"},
		[]string{"components/join-tickets"}, []string{"tickets.enabled=true"}},
	{"overlays/aws", "ci/aws-values.yaml", []string{"cloud.config=overlays/aws/cloud.yaml"},
		[]string{"components/join-tickets"}, []string{"tickets.enabled=true"}},
	{"overlays/linode", "ci/linode-values.yaml", []string{"cloud.config=overlays/linode/cloud.yaml", "cloud.files.token=overlays/linode/token"},
		[]string{"components/linode-tls-secrets"}, []string{"ccm.tlsSecrets=true"}},
}

// approverProvider names the backend of overlays/approver-only as
// ci/approver-only-values.yaml does, the way docs/install.md tells an
// operator to.
const approverProvider = `configMapGenerator:
- name: mooring-cloud
  namespace: kube-system
  behavior: merge
  literals:
  - provider=aws
`

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// helm is the Helm CLI at the version hack/install-helm.sh pins, built
// into the cache on first use. The test never skips for want of it.
func helm(t *testing.T) string {
	t.Helper()
	helmOnce.Do(func() {
		var stderr bytes.Buffer
		cmd := exec.Command("../hack/install-helm.sh")
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		helmPath = strings.TrimSpace(string(out))
		if err != nil {
			helmErr = fmt.Errorf("hack/install-helm.sh: %v\n%s", err, stderr.String())
		}
	})
	if helmErr != nil {
		t.Fatal(helmErr)
	}
	return helmPath
}

func runHelm(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(helm(t), args...)
	// No user's Helm configuration or repositories.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return out
}

// renderChart is `helm template` of the chart in kube-system with a values
// file and --set-file arguments, as objects.
func renderChart(t *testing.T, values string, setFiles []string, extra ...string) []map[string]any {
	t.Helper()
	args := []string{"template", "mooring", chartDir, "--kube-version", kubeVersion(), "--namespace", "kube-system", "--values", filepath.Join(chartDir, values)}
	for _, f := range setFiles {
		args = append(args, "--set-file", f)
	}
	return decodeAll(t, runHelm(t, append(args, extra...)...))
}

func decodeAll(t *testing.T, data []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	d := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var obj map[string]any
		if err := d.Decode(&obj); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("helm template output: %v", err)
		}
		if obj != nil {
			out = append(out, normalize(t, obj))
		}
	}
}

// normalize turns an object into plain JSON types (numbers float64), so that
// renderings compare with reflect.DeepEqual.
func normalize(t *testing.T, obj any) map[string]any {
	t.Helper()
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func key(obj map[string]any) string {
	meta, _ := obj["metadata"].(map[string]any)
	return fmt.Sprintf("%s %v/%v", obj["kind"], meta["namespace"], meta["name"])
}

// Labels that only say who installed an object: Helm's, and the part-of
// label the chart puts on every object (the overlays on workloads only).
var installerLabels = []string{"app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "helm.sh/chart", "app.kubernetes.io/part-of"}

// substance removes the documented differences between a chart rendering
// and an overlay's: installer labels, the chart's checksum annotation on the
// pod template (the overlays roll pods by renaming the Secret instead),
// Helm's resource policy (the spent-ticket ConfigMaps outlive helm
// uninstall; kubectl has no such annotation), and the overlays'
// hash-suffixed generated names (renamed to their base names, in the
// objects and wherever they are referred to).
func substance(obj map[string]any, generated map[string]string) map[string]any {
	// A Secret's data by content (kustomize wraps its base64 lines).
	if data, ok := obj["data"].(map[string]any); ok && obj["kind"] == "Secret" {
		for k, v := range data {
			if enc, ok := v.(string); ok {
				if dec, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(enc), "")); err == nil {
					data[k] = string(dec)
				}
			}
		}
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				v[k] = walk(x)
			}
			if labels, ok := v["labels"].(map[string]any); ok {
				for _, l := range installerLabels {
					delete(labels, l)
				}
				if len(labels) == 0 {
					delete(v, "labels")
				}
			}
			if ann, ok := v["annotations"].(map[string]any); ok {
				delete(ann, "checksum/cloud")
				delete(ann, "helm.sh/resource-policy")
				if len(ann) == 0 {
					delete(v, "annotations")
				}
			}
			return v
		case []any:
			for i, x := range v {
				v[i] = walk(x)
			}
			return v
		case string:
			if base, ok := generated[v]; ok {
				return base
			}
			return v
		}
		return v
	}
	return walk(obj).(map[string]any)
}

func kustomizeObjects(t *testing.T, m resmap.ResMap) ([]map[string]any, map[string]string) {
	t.Helper()
	generated := map[string]string{}
	var out []map[string]any
	for _, r := range m.Resources() {
		if base := origName(r); base != r.GetName() {
			generated[r.GetName()] = base
		}
		obj, err := r.Map()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, normalize(t, obj))
	}
	return out, generated
}

// TestChartMatchesOverlays: `helm lint` passes, and the chart, with the values
// of each overlay, renders the same objects as the overlay (kind, namespace
// and name; containers, args, probes, security contexts, RBAC rules and
// bindings, the config's content), but for the differences substance
// removes.
func TestChartMatchesOverlays(t *testing.T) {
	for _, tc := range chartCases {
		name := strings.Join(append([]string{strings.TrimPrefix(tc.overlay, "overlays/")}, tc.components...), "+")
		t.Run(strings.ReplaceAll(name, "/", "-"), func(t *testing.T) {
			var set []string
			for _, s := range tc.set {
				set = append(set, "--set", s)
			}
			runHelm(t, append([]string{"lint", "--strict", chartDir, "--kube-version", kubeVersion(), "--namespace", "kube-system", "--values", filepath.Join(chartDir, tc.values)}, set...)...)
			chart := renderChart(t, tc.values, tc.files, set...)
			m := render(t, tc.overlay)
			switch {
			case tc.overlay == "overlays/approver-only":
				// Its backend's name is a placeholder the operator's
				// kustomization replaces (docs/install.md); the chart's
				// schema takes only real ones.
				m = renderWith(t, tc.overlay, approverProvider, tc.components...)
			case len(tc.components) > 0:
				m = renderComposed(t, tc.overlay, tc.components...)
			}
			kust, generated := kustomizeObjects(t, m)
			byKey := map[string]map[string]any{}
			for _, obj := range chart {
				byKey[key(obj)] = substance(obj, nil)
			}
			var chartKeys, kustKeys []string
			for k := range byKey {
				chartKeys = append(chartKeys, k)
			}
			for _, obj := range kust {
				obj = substance(obj, generated)
				k := key(obj)
				kustKeys = append(kustKeys, k)
				c, ok := byKey[k]
				if !ok {
					continue
				}
				if !reflect.DeepEqual(c, obj) {
					cj, _ := json.MarshalIndent(c, "", "  ")
					kj, _ := json.MarshalIndent(obj, "", "  ")
					t.Errorf("%s differs:\nchart:\n%s\n%s:\n%s", k, cj, tc.overlay, kj)
				}
			}
			slices.Sort(chartKeys)
			slices.Sort(kustKeys)
			if !slices.Equal(chartKeys, kustKeys) {
				t.Errorf("the chart renders\n%s\n%s renders\n%s", strings.Join(chartKeys, "\n"), tc.overlay, strings.Join(kustKeys, "\n"))
			}
		})
	}
}

// TestChartValues: the values a user sets show up, and values that cannot
// run are refused.
func TestChartValues(t *testing.T) {
	objs := renderChart(t, "ci/aws-values.yaml", nil,
		"--set", "ccm.controllers={cloud-node,cloud-node-lifecycle}", "--set", "extraArgs={--v=4}",
		"--set", "podAnnotations.example\\.com/a=b", "--set", "image.ccm.tag=v9.9.9", "--set", "replicas=3",
		"--set", "metrics.serviceMonitor.enabled=true", "--set", "cloud.existingSecret=mine",
		"--set", "ccm.clusterCIDR=10.244.0.0/16", "--set", "ccm.loadBalancerClass=example.com/lb",
		"--namespace", "mooring")
	var deployment map[string]any
	kinds := map[string]bool{}
	for _, obj := range objs {
		kinds[key(obj)] = true
		if obj["kind"] == "Deployment" {
			deployment = obj
		}
	}
	if kinds["ClusterRole <nil>/mooring:csr-approver"] || kinds["ClusterRoleBinding <nil>/mooring:cloud-controller-manager:csr-approver"] {
		t.Errorf("the approver's role is installed though no controller runs it")
	}
	if kinds["Secret mooring/mooring-cloud-config"] || !kinds["ServiceMonitor mooring/mooring"] {
		t.Errorf("existingSecret or serviceMonitor ignored: %v", kinds)
	}
	data, _ := json.Marshal(deployment)
	for _, want := range []string{`"--controllers=cloud-node,cloud-node-lifecycle"`, `"--v=4"`, `"example.com/a":"b"`,
		`"ghcr.io/mooring-dev/mooring-ccm:v9.9.9"`, `"replicas":3`, `"secretName":"mine"`, `"--leader-elect-resource-namespace=mooring"`,
		`"--cluster-cidr=10.244.0.0/16"`, `"--load-balancer-class=example.com/lb"`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("the Deployment lacks %s:\n%s", want, data)
		}
	}

	for _, bad := range [][]string{
		{"--set", "mode=both"},
		{"--set", "cloud.provider="},
		{"--set", "cloud.config="},
		// Ticket keys for no approver, or from no Secret.
		{"--set", "tickets.enabled=true", "--set", "ccm.controllers={*}"},
		{"--set", "tickets.enabled=true", "--set", "tickets.keysSecret="},
		// Clouds whose nodes join with tickets only, without them.
		{"--set", "cloud.provider=digitalocean"},
		{"--set", "cloud.provider=hetzner", "--set", "mode=approver-only"},
		{"--set", "cloud.provider=linode"},
		{"--set", "cloud.provider=vsphere"},
		{"--set", "cloud.provider=openstack"},
	} {
		args := append([]string{"template", "mooring", chartDir, "--kube-version", kubeVersion(), "--values", filepath.Join(chartDir, "ci/aws-values.yaml")}, bad...)
		if out, err := exec.Command(helm(t), args...).CombinedOutput(); err == nil {
			t.Errorf("helm template with %v succeeded:\n%.300s", bad, out)
		}
	}
}

// TestChartTickets: the chart with tickets mounts the Secret named by
// tickets.keysSecret, in the mode's Deployment, as checkTickets wants; a
// ticket-only cloud without the approver needs no tickets.
func TestChartTickets(t *testing.T) {
	for _, mode := range []string{"ccm", "approver-only"} {
		var ds []*appsv1.Deployment
		for _, obj := range renderChart(t, "ci/aws-values.yaml", nil, "--set", "mode="+mode, "--set", "tickets.enabled=true") {
			if obj["kind"] != "Deployment" {
				continue
			}
			d := new(appsv1.Deployment)
			if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj, d, true); err != nil {
				t.Fatal(err)
			}
			ds = append(ds, d)
		}
		if len(ds) != 1 {
			t.Fatalf("mode %s renders %d Deployments", mode, len(ds))
		}
		checkTickets(t, "chart, mode "+mode, ds, true)
	}
	objs := renderChart(t, "ci/aws-values.yaml", nil, "--set", "tickets.enabled=true", "--set", "tickets.keysSecret=other-keys")
	data, _ := json.Marshal(objs)
	if !strings.Contains(string(data), `"secretName":"other-keys"`) {
		t.Errorf("tickets.keysSecret ignored")
	}
	renderChart(t, "ci/digitalocean-values.yaml", nil, "--set", "tickets.enabled=false", "--set", "ccm.controllers={*}")
}

// TestChartSchema: values.schema.json takes every ci/ values file (helm
// lint --strict and template) and refuses, with Helm's schema error naming
// the value, an unknown backend, a backend's credential file missing, values
// of the wrong type and unknown keys. Its providers are the backends
// cloud/all registers.
func TestChartSchema(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Cloud struct {
				Properties struct {
					Provider struct {
						Enum []string `json:"enum"`
					} `json:"provider"`
				} `json:"properties"`
			} `json:"cloud"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatal(err)
	}
	providers := slices.Sorted(slices.Values(schema.Properties.Cloud.Properties.Provider.Enum))
	if backends := cloud.Backends(); !slices.Equal(providers, backends) {
		t.Errorf("the schema's providers %v, the backends %v", providers, backends)
	}

	ci, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil || len(ci) == 0 {
		t.Fatalf("ci values: %v %v", ci, err)
	}
	for _, values := range ci {
		runHelm(t, "lint", "--strict", chartDir, "--namespace", "kube-system", "--values", values)
		runHelm(t, "template", "mooring", chartDir, "--namespace", "kube-system", "--values", values)
	}

	for _, bad := range []struct {
		values string
		args   []string
		want   string // in Helm's schema error
	}{
		{"ci/aws-values.yaml", []string{"--set", "cloud.provider=amazon"}, "at '/cloud/provider': value must be one of"},
		{"ci/aws-values.yaml", []string{"--set", "cloud.provider="}, "at '/cloud/provider': value must be one of"},
		{"ci/aws-values.yaml", []string{"--set", "cloud.provider=local"}, "missing property 'token'"},
		{"ci/aws-values.yaml", []string{"--set", "cloud.provider=linode", "--set", "tickets.enabled=true"}, "missing property 'token'"},
		{"ci/aws-values.yaml", []string{"--set", "cloud.provider=vsphere", "--set", "tickets.enabled=true"}, "missing property 'password'"},
		{"ci/aws-values.yaml", []string{"--set", "cloud.provider=openstack", "--set", "tickets.enabled=true"}, "missing property 'secret'"},
		{"ci/digitalocean-values.yaml", []string{"--set", "cloud.files.token=null"}, "at '/cloud/files/token': got null, want string"},
		{"ci/aws-values.yaml", []string{"--set", "cloud.files.cloud\\.yaml=x"}, "invalid propertyName 'cloud.yaml'"},
		{"ci/aws-values.yaml", []string{"--set", "replicas=two"}, "at '/replicas': got string, want integer"},
		{"ci/aws-values.yaml", []string{"--set-string", "tickets.enabled=true"}, "at '/tickets/enabled': got string, want boolean"},
		{"ci/aws-values.yaml", []string{"--set", "apiServer.port=70000"}, "at '/apiServer/port'"},
		{"ci/aws-values.yaml", []string{"--set", "mode=both"}, "at '/mode': value must be one of"},
		{"ci/aws-values.yaml", []string{"--set", "image.pullPolicy=Sometimes"}, "at '/image/pullPolicy'"},
		{"ci/aws-values.yaml", []string{"--set", "cloud.provder=aws"}, "additional properties 'provder' not allowed"},
	} {
		args := append([]string{"template", "mooring", chartDir, "--namespace", "kube-system", "--values", filepath.Join(chartDir, bad.values)}, bad.args...)
		out, err := exec.Command(helm(t), args...).CombinedOutput()
		if err == nil {
			t.Errorf("helm template with %v succeeded", bad.args)
			continue
		}
		if !strings.Contains(string(out), "values don't meet the specifications of the schema") || !strings.Contains(string(out), bad.want) {
			t.Errorf("helm template with %v: want the schema's error %q, got:\n%s", bad.args, bad.want, out)
		}
	}
	// A Secret of the operator's needs no files.
	renderChart(t, "ci/aws-values.yaml", nil, "--set", "cloud.provider=local", "--set", "cloud.existingSecret=mine")
}

// TestHelmDefaultKubeVersion: the pinned Helm, as hack/install-helm.sh
// builds it, renders for a current Kubernetes without --kube-version, as
// Helm's released binaries do: the chart's kubeVersion (>=1.30) passes.
// A Helm 3 built by a bare `go install` assumed v1.20 and failed here.
func TestHelmDefaultKubeVersion(t *testing.T) {
	out := runHelm(t, "template", "mooring", chartDir, "--namespace", "kube-system", "--values", filepath.Join(chartDir, "ci/aws-values.yaml"),
		"--show-only", "templates/cloud.yaml", "--set", "podAnnotations.v=x")
	if !strings.Contains(string(out), "kind: ConfigMap") {
		t.Fatalf("helm template:\n%s", out)
	}
	script, err := os.ReadFile("../hack/install-helm.sh")
	if err != nil {
		t.Fatal(err)
	}
	version := regexp.MustCompile(`HELM_VERSION:-(v[0-9.]+)`).FindSubmatch(script)
	if version == nil {
		t.Fatal("hack/install-helm.sh pins no HELM_VERSION")
	}
	if got := strings.TrimSpace(string(runHelm(t, "version", "--template", "{{.Version}}"))); os.Getenv("HELM_VERSION") == "" && got != string(version[1]) {
		t.Errorf("helm version %s, pinned %s", got, version[1])
	}
	doc, err := os.ReadFile("../docs/install.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "tested with Helm "+string(version[1])) {
		t.Errorf("docs/install.md does not say the chart is tested with Helm %s", version[1])
	}
}
