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

	"github.com/mooring-dev/mooring/internal/doctest"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// TestOverlayAndApproverOnlyRunAsPods installs mooring the two other ways
// users do, on control-plane nodes that run real pods. First `kubectl
// apply -k` of a kustomization over deploy/overlays/local as a remote base
// at a tag, as docs/install.md says (the cloud's config and token in place
// of the overlay's Secret, the image tag, and components/apiserver-endpoint
// with the apiserver's address): its one
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

	// kubectl apply -k: the operator's kustomization over the local overlay.
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

// localOverlayCopy writes the operator's kustomization of docs/install.md
// for deploy/overlays/local into a directory of the test: the overlay as a
// remote base at a release's tag (a local git repository holding the
// checkout's deploy/ tagged v1.2.0, fetched by kubectl's kustomize with
// git), components/apiserver-endpoint from the same tag with the ConfigMap
// it reads, the images' tag, and the Secret replaced by the cloud's config
// and token written beside it.
func localOverlayCopy(t *testing.T, c *testbed.Cluster, lc *harness.LocalCloud, im harness.Images) string {
	t.Helper()
	repo := doctest.TaggedRepo(t, harness.RepoRoot(), "deploy", filepath.Join(t.TempDir(), "repo"), "v1.2.0",
		func(rel string) bool { return !strings.HasSuffix(rel, ".go") })
	remote := func(path string) string { return "file://" + repo + "//deploy/" + path + "?ref=v1.2.0" }
	dir := filepath.Join(t.TempDir(), "my-mooring")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	host, port := apiServerHostPort(t, c)
	k := map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1beta1",
		"kind":       "Kustomization",
		"resources":  []any{remote("overlays/local")},
		"components": []any{remote("components/apiserver-endpoint")},
		"images": []any{
			map[string]any{"name": harness.ImageRegistry + "/mooring-ccm", "newTag": im.Tag},
			map[string]any{"name": harness.ImageRegistry + "/mooring-csr-approver", "newTag": im.Tag},
		},
		"configMapGenerator": []any{map[string]any{
			"name": "mooring-apiserver", "namespace": "kube-system",
			"literals": []any{"host=" + host, "port=" + port},
		}},
		"secretGenerator": []any{map[string]any{
			"name": "mooring-cloud-config", "namespace": "kube-system", "behavior": "replace",
			"files": []any{"cloud.yaml", "token"},
		}},
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
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the operator's kustomization.yaml:\n%s", out)
		}
	})
	return dir
}
