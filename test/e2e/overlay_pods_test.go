package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// TestOverlayAndApproverOnlyRunAsPods installs mooring the two other ways
// users do, on control-plane nodes that run real pods. First `kubectl
// apply -k` of a copy of deploy/overlays/local filled in as
// docs/install.md says (the cloud's config and token, the image tag, and
// components/apiserver-endpoint with the apiserver's address): its one
// mooring-ccm pod runs as shipped, initializes the nodes and lets a
// machine join and become Ready; `kubectl delete -k` removes it all.
// Then the approver-only layout beside someone else's CCM (mooring-ccm
// without its approver, as a process): two mooring-csr-approver pods from
// the packaged chart (mode approver-only), one leading, let a machine join
// and become Ready; helm uninstall removes them.
func TestOverlayAndApproverOnlyRunAsPods(t *testing.T) {
	im := harness.SharedImages(t, imagesTag, imagesVersion)
	chart := harness.MustPackageChart(t)
	ccmBin := harness.BuildBinary(t, "ccm/cmd/mooring-ccm")
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	c, lc, cps := podBed(t, ctx, 2, im.Tars()...)

	// kubectl apply -k: the local overlay, copied and filled in.
	overlay := localOverlayCopy(t, c, lc, im)
	start := time.Now()
	if _, err := harness.Kubectl(ctx, c.ControlPlane, "apply", "-k", overlay); err != nil {
		t.Fatal(err)
	}
	pods := waitPodsReady(t, ctx, c, ccmApp, im.CCM(), 1)
	t.Logf("kubectl apply -k: the mooring-ccm pod Ready in %v", time.Since(start).Round(100*time.Millisecond))
	checkPodsAsShipped(t, cps, pods)
	waitNodesReady(t, ctx, c, "cp-1", "cp-2")
	if _, err := harness.JoinMachine(ctx, c, lc, e2eCluster, "worker-1"); err != nil {
		t.Fatal(err)
	}
	waitNodesReady(t, ctx, c, "worker-1")
	scrapeMetrics(t, ctx, c, "mooring-ccm-metrics", "mooring_build_info")
	rendered, err := harness.Kubectl(ctx, c.ControlPlane, "kustomize", overlay)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := harness.Kubectl(ctx, c.ControlPlane, "delete", "-k", overlay, "--wait=true"); err != nil {
		t.Fatal(err)
	}
	checkGone(t, ctx, c, chartObjects(t, rendered))

	// The approver-only layout beside another CCM.
	harness.StartCCM(t, c, ccmBin, lc, harness.CCMOptions{Cluster: e2eCluster, Args: []string{"--controllers=*", "--v=2"}})
	logs := harness.FollowPodLogs(c.Client, "kube-system", approverApp)
	t.Cleanup(func() { logs.Stop(); logTailsIfFailed(t, logs) })
	values := chartValues(t, c, lc, im, `mode: approver-only
kubeletConfigRBAC: false
# The bed's workers run the fake runtime: the pods go to the control-plane
# nodes only.
nodeSelector:
  node-role.kubernetes.io/control-plane: ""
`)
	start = time.Now()
	if _, err := harness.Helm(ctx, c.ControlPlane, "install", "mooring", chart, "--namespace", "kube-system",
		"--values", values, "--wait", "--timeout", "3m"); err != nil {
		t.Fatal(err)
	}
	pods = waitPodsReady(t, ctx, c, approverApp, im.Approver(), 2)
	t.Logf("helm install (approver-only): 2 mooring-csr-approver pods Ready in %v", time.Since(start).Round(100*time.Millisecond))
	checkPodsAsShipped(t, cps, pods)
	harness.WaitUntil(ctx, t, "one leader", func() (bool, error) {
		leader, n := leaderContainer(logs, "mooring-csr-approver")
		return leader != "" && n == 1, nil
	})
	if _, err := harness.JoinMachine(ctx, c, lc, e2eCluster, "worker-2"); err != nil {
		t.Fatal(err)
	}
	waitNodesReady(t, ctx, c, "worker-2")
	scrapeMetrics(t, ctx, c, "mooring-csr-approver-metrics", "mooring_build_info")
	manifest, err := harness.Helm(ctx, c.ControlPlane, "get", "manifest", "mooring", "--namespace", "kube-system")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := harness.Helm(ctx, c.ControlPlane, "uninstall", "mooring", "--namespace", "kube-system", "--wait", "--timeout", "2m"); err != nil {
		t.Fatal(err)
	}
	checkGone(t, ctx, c, chartObjects(t, manifest))
	harness.WaitUntil(ctx, t, "the pods gone", func() (bool, error) {
		list, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: approverApp})
		return err == nil && len(list.Items) == 0, err
	})
}

// localOverlayCopy copies deploy/overlays/local into a directory of the
// test and fills it in as docs/install.md tells a user to: the cloud's
// config and token, the images' tag, and components/apiserver-endpoint
// with the ConfigMap it reads. The copy names the checkout's base and
// component by relative paths, as a copy kept beside deploy/ would.
func localOverlayCopy(t *testing.T, c *testbed.Cluster, lc *harness.LocalCloud, im harness.Images) string {
	t.Helper()
	deploy := filepath.Join(harness.RepoRoot(), "deploy")
	dir := filepath.Join(t.TempDir(), "my-mooring")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	rel := func(path string) string {
		r, err := filepath.Rel(dir, path)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	data, err := os.ReadFile(filepath.Join(deploy, "overlays", "local", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k map[string]any
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatal(err)
	}
	resources, _ := k["resources"].([]any)
	for i, r := range resources {
		if r == "../../base" {
			resources[i] = rel(filepath.Join(deploy, "base"))
		}
	}
	host, port := apiServerHostPort(t, c)
	k["components"] = []any{rel(filepath.Join(deploy, "components", "apiserver-endpoint"))}
	gens, _ := k["configMapGenerator"].([]any)
	k["configMapGenerator"] = append(gens, map[string]any{
		"name": "mooring-apiserver", "namespace": "kube-system",
		"literals": []any{"host=" + host, "port=" + port},
	})
	k["images"] = []any{
		map[string]any{"name": harness.ImageRegistry + "/mooring-ccm", "newTag": im.Tag},
		map[string]any{"name": harness.ImageRegistry + "/mooring-csr-approver", "newTag": im.Tag},
	}
	out, err := yaml.Marshal(k)
	if err != nil {
		t.Fatal(err)
	}
	config, token := localCloudConfig(t, lc, e2eCluster)
	for name, content := range map[string]string{"kustomization.yaml": string(out), "cloud.yaml": config, "token": token + "\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(string(out), "apiserver-endpoint") {
		t.Fatalf("kustomization: %s", out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the overlay's copy, kustomization.yaml:\n%s", out)
		}
	})
	return dir
}
