package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// chartDeployment renders the chart with the aws values and more, and
// returns its Deployment.
func chartDeployment(t *testing.T, extra ...string) *appsv1.Deployment {
	t.Helper()
	var out *appsv1.Deployment
	for _, obj := range renderChart(t, "ci/aws-values.yaml", nil, extra...) {
		if obj["kind"] != "Deployment" {
			continue
		}
		out = new(appsv1.Deployment)
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj, out, true); err != nil {
			t.Fatal(err)
		}
	}
	if out == nil {
		t.Fatal("no Deployment rendered")
	}
	return out
}

func envVar(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// TestChartAPIServerAndBindAddress: apiServer.host and .port become
// KUBERNETES_SERVICE_HOST and _PORT in the container (in-cluster clients
// read them); bindAddress hostIP binds the secure port, and the
// approver's health port, to status.hostIP, and the probes follow; the
// defaults render none of it; bad values are refused.
func TestChartAPIServerAndBindAddress(t *testing.T) {
	for _, mode := range []string{"ccm", "approver-only"} {
		d := chartDeployment(t, "--set", "mode="+mode)
		c := d.Spec.Template.Spec.Containers[0]
		for _, name := range []string{"KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "HOST_IP"} {
			if envVar(c, name) != nil {
				t.Errorf("%s: %s set by default", mode, name)
			}
		}
		if !slices.Contains(c.Args, "--bind-address=0.0.0.0") {
			t.Errorf("%s: default args %v", mode, c.Args)
		}

		d = chartDeployment(t, "--set", "mode="+mode, "--set", "apiServer.host=10.0.0.10", "--set", "apiServer.port=16443",
			"--set", "bindAddress=hostIP")
		c = d.Spec.Template.Spec.Containers[0]
		if e := envVar(c, "KUBERNETES_SERVICE_HOST"); e == nil || e.Value != "10.0.0.10" {
			t.Errorf("%s: KUBERNETES_SERVICE_HOST %+v", mode, e)
		}
		if e := envVar(c, "KUBERNETES_SERVICE_PORT"); e == nil || e.Value != "16443" {
			t.Errorf("%s: KUBERNETES_SERVICE_PORT %+v", mode, e)
		}
		if e := envVar(c, "HOST_IP"); e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "status.hostIP" {
			t.Errorf("%s: HOST_IP %+v", mode, e)
		}
		if !slices.Contains(c.Args, "--bind-address=$(HOST_IP)") {
			t.Errorf("%s: args %v", mode, c.Args)
		}
		if mode == "approver-only" {
			if !slices.Contains(c.Args, "--health-probe-bind-address=$(HOST_IP):10271") {
				t.Errorf("approver-only: args %v", c.Args)
			}
			for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
				if p.HTTPGet.Host != "" {
					t.Errorf("approver-only: a probe still goes to %s, not the pod's (host's) address", p.HTTPGet.Host)
				}
			}
		}
	}
	for _, bad := range [][]string{
		{"--set", "bindAddress=everywhere"},
		{"--set", "apiServer.host=https://10.0.0.10:6443"},
		{"--set", "apiServer.host=10.0.0.10", "--set", "apiServer.port=0"},
		{"--set", "apiServer.host=10.0.0.10", "--set", "apiServer.port=65536"},
	} {
		args := append([]string{"template", "mooring", chartDir, "--kube-version", kubeVersion(), "--values", filepath.Join(chartDir, "ci/aws-values.yaml")}, bad...)
		if out, err := exec.Command(helm(t), args...).CombinedOutput(); err == nil {
			t.Errorf("helm template with %v succeeded:\n%.300s", bad, out)
		}
	}
}

// TestAPIServerEndpointComponent: components/apiserver-endpoint sets
// KUBERNETES_SERVICE_HOST and _PORT in the Deployment an overlay has, from
// the ConfigMap mooring-apiserver that the overlay generates (the
// reference follows the generated, hashed name).
func TestAPIServerEndpointComponent(t *testing.T) {
	for _, overlay := range []string{"overlays/local", "overlays/approver-only"} {
		dir := t.TempDir()
		rel := func(path string) string {
			abs, err := filepath.Abs(path)
			if err != nil {
				t.Fatal(err)
			}
			r, err := filepath.Rel(dir, abs)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		k := "resources:\n- " + rel(overlay) + "\ncomponents:\n- " + rel("components/apiserver-endpoint") + `
configMapGenerator:
- name: mooring-apiserver
  namespace: kube-system
  literals:
  - host=10.0.0.10
  - port=6443
`
		if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o600); err != nil {
			t.Fatal(err)
		}
		m := render(t, dir)
		var cm string
		for _, r := range m.Resources() {
			if r.GetKind() == "ConfigMap" && strings.HasPrefix(r.GetName(), "mooring-apiserver-") {
				cm = r.GetName()
			}
		}
		if cm == "" {
			t.Fatalf("%s: no generated ConfigMap mooring-apiserver: %v", overlay, ids(m))
		}
		deployments := 0
		for _, r := range m.Resources() {
			if r.GetKind() != "Deployment" {
				continue
			}
			deployments++
			d := decode[appsv1.Deployment](t, r)
			c := d.Spec.Template.Spec.Containers[0]
			for name, key := range map[string]string{"KUBERNETES_SERVICE_HOST": "host", "KUBERNETES_SERVICE_PORT": "port"} {
				e := envVar(c, name)
				if e == nil || e.ValueFrom == nil || e.ValueFrom.ConfigMapKeyRef == nil ||
					e.ValueFrom.ConfigMapKeyRef.Name != cm || e.ValueFrom.ConfigMapKeyRef.Key != key {
					t.Errorf("%s: %s: %s is %+v, want from %s key %s", overlay, d.Name, name, e, cm, key)
				}
			}
		}
		if deployments != 1 {
			t.Errorf("%s: %d Deployments", overlay, deployments)
		}
	}
}
