package e2e

import (
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

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/mooring-dev/mooring/hack/chart/helmchart"
	"github.com/mooring-dev/mooring/internal/doctest"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// TestInstallDocExamples runs docs/install.md's command examples as they are
// written (internal/doctest), each way of installing after the other,
// against a real kube-apiserver: kubectl (1.36) and the pinned Helm. What
// only exists on the reader's side is substituted: the repository at
// github.com is a local git repository holding a copy of deploy/ at the
// tag the doc names (v1.2.0), which kustomize fetches as a remote base
// exactly as written; the chart's registry is one on loopback holding the
// chart packaged as a release packages it; the release's rendered overlays
// are rendered by hack/manifests. The bed has no nodes, so nothing waits
// for pods (the doc's rollout step is marked skip; the pod tests run it).
// Each way's uninstall must leave no mooring Deployment behind.
func TestInstallDocExamples(t *testing.T) {
	examples, err := doctest.Parse(filepath.Join(harness.RepoRoot(), "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	c := testbed.Start(t, testbed.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	work := t.TempDir()
	bin := filepath.Join(work, "bin")
	helm, err := harness.HelmBinary()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := c.ControlPlane.Binaries().Kubectl
	if kubectl == "" {
		t.Fatal("kubectl is missing; build it with `make kube-bins`")
	}
	if err := os.MkdirAll(bin, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"helm": helm, "kubectl": kubectl} {
		if err := os.Symlink(target, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}

	repo := doctest.TaggedRepo(t, harness.RepoRoot(), "deploy", filepath.Join(work, "repo"), "v1.2.0",
		func(rel string) bool { return !strings.HasSuffix(rel, ".go") })

	// The chart in a registry on loopback.
	const version = harness.ChartVersion
	tgz, err := harness.PackageChart(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(tgz)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	img, err := helmchart.Artifact(data, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := helmchart.Push(ctx, helmchart.Ref(u.Host+"/mooring-dev", version), img); err != nil {
		t.Fatal(err)
	}

	// The reader's directory: the cloud's config (the overlay's, with its
	// placeholders: no pod runs it) and the release's rendered overlays.
	dir := filepath.Join(work, "operator")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	config, err := os.ReadFile(filepath.Join(harness.RepoRoot(), "deploy", "overlays", "aws", "cloud.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cloud.yaml"), config, 0o600); err != nil {
		t.Fatal(err)
	}
	manifests := exec.CommandContext(ctx, "go", "run", "./hack/manifests", "--version", version, "--out", dir)
	manifests.Dir = harness.RepoRoot()
	if out, err := manifests.CombinedOutput(); err != nil {
		t.Fatalf("hack/manifests: %v\n%s", err, out)
	}

	home := t.TempDir()
	// The demo's local cloud token, where the demo keeps it.
	demoToken := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(demoToken, []byte("demo-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := &doctest.Runner{
		Dir: dir,
		Env: []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"), "KUBECONFIG=" + c.ControlPlane.AdminKubeconfig,
			"VERSION=" + version, "MOORING_LOCALCLOUD_URL=http://127.0.0.1:1", "HELM_CONFIG_HOME=" + home, "HELM_CACHE_HOME=" + home, "HELM_DATA_HOME=" + home},
		Replace: []doctest.Replacement{
			{Old: "https://github.com/mooring-dev/mooring//", New: "file://" + repo + "//"},
			{Old: "oci://ghcr.io/mooring-dev/charts/mooring", New: "--plain-http oci://" + u.Host + "/mooring-dev/charts/mooring"},
			{Old: "$HOME/.local/state/mooring/demo/cloud/token", New: demoToken},
			{Old: " deploy/helm/mooring ", New: " " + filepath.Join(harness.RepoRoot(), harness.ChartDir) + " "},
		},
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, filepath.Join(bin, args[0]), args[1:]...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), r.Env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	gone := func(way string) {
		t.Helper()
		out := run("kubectl", "-n", "kube-system", "get", "deployments,secrets,configmaps", "-o", "name")
		for _, name := range []string{"deployment.apps/mooring-ccm", "deployment.apps/mooring-csr-approver", "secret/mooring-cloud-config"} {
			if strings.Contains(out, name) {
				t.Errorf("%s: %s left after its uninstall:\n%s", way, name, out)
			}
		}
	}
	ran := func(outputs map[string]string, want string) {
		t.Helper()
		for _, out := range outputs {
			if strings.Contains(out, want) {
				return
			}
		}
		t.Errorf("no example printed %q: %q", want, outputs)
	}

	// kustomize: the operator's kustomization over the remote overlay.
	ran(r.Run(t, doctest.Select(examples, "kustomize")), "deployment.apps/mooring-ccm created")
	gone("kustomize")
	out := r.Run(t, doctest.Select(examples, "kustomize-approver"))
	ran(out, "deployment.apps/mooring-csr-approver created")
	if cm := run("kubectl", "-n", "kube-system", "get", "configmaps", "-o", "jsonpath={.items[*].data.provider}"); !strings.Contains(cm, "aws") {
		t.Errorf("the approver's ConfigMap names no aws: %q", cm)
	}
	run("kubectl", "delete", "-k", "my-approver/")
	gone("kustomize, approver only")

	// Helm, from the registry.
	ran(r.Run(t, doctest.Select(examples, "helm")), "STATUS: deployed")
	gone("helm")
	ran(r.Run(t, doctest.Select(examples, "helm-approver")), "STATUS: deployed")
	run("helm", "uninstall", "mooring", "--namespace", "kube-system")
	gone("helm, approver only")

	// The release's rendered overlays.
	ran(r.Run(t, doctest.Select(examples, "rendered")), "deployment.apps/mooring-ccm created")
	gone("rendered")
	ran(r.Run(t, doctest.Select(examples, "rendered-approver")), "deployment.apps/mooring-csr-approver created")
	run("kubectl", "delete", "-f", "mooring_"+version+"_approver-only.yaml")
	run("kubectl", "-n", "kube-system", "delete", "secret", "mooring-cloud-config")
	run("kubectl", "-n", "kube-system", "delete", "configmap", "mooring-cloud")
	gone("rendered, approver only")

	// Step 3 and the uninstall's renewal grant, on kubeadm's two bindings
	// (the bed without MooringApproves has them, as kubeadm makes them).
	run("kubectl", "get", "clusterrolebinding", testbed.NodeClientApprovalBinding, testbed.SelfNodeClientApprovalBinding)
	ran(r.Run(t, doctest.Select(examples, "grants")), "clusterrolebinding.rbac.authorization.k8s.io/kubeadm:node-autoapprove-certificate-rotation created")
	if out := run("kubectl", "get", "clusterrolebindings", "-o", "name"); strings.Contains(out, "kubeadm:node-autoapprove-bootstrap") {
		t.Errorf("the bootstrap grant survived step 3:\n%s", out)
	}

	// The demo's cluster (a control plane as this one): the server-side
	// dry run creates nothing.
	ran(r.Run(t, doctest.Select(examples, "demo")), "STATUS: pending-install")
	if out := run("kubectl", "-n", "kube-system", "get", "deployments,secrets", "-o", "name"); strings.Contains(out, "mooring") {
		t.Errorf("the dry run left objects:\n%s", out)
	}

	r.Run(t, doctest.Select(examples, "")) // the skipped ones: logged
	r.CheckReplacements(t)
	for _, g := range doctest.Groups(examples) {
		switch g {
		case "", "kustomize", "kustomize-approver", "helm", "helm-approver", "rendered", "rendered-approver", "grants", "demo":
		default:
			t.Errorf("docs/install.md has examples of group %q that this test does not run", g)
		}
	}
}
