package harness

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/mooring-dev/mooring/csrapprover/spent"
	"github.com/mooring-dev/mooring/test/testbed"
)

// ApplyRBAC renders a kustomization under deploy/ (as `kubectl kustomize`
// does) and creates its ServiceAccounts and RBAC objects on the test bed,
// and the spent-ticket ConfigMaps where it ships them (the approver may not
// create them); Deployments, Secrets and other ConfigMaps are left out (the
// test bed runs the programs as processes, with configs of its own).
func ApplyRBAC(ctx context.Context, cp *testbed.ControlPlane, kustomization string) error {
	return applyRendered(ctx, cp, filepath.Join(RepoRoot(), "deploy", kustomization), krusty.MakeDefaultOptions())
}

// ApplyRBACWith is ApplyRBAC of a kustomization under deploy/ with
// components under deploy/ added, as a user composes them (e.g.
// components/join-tickets, which patches the approver's Role).
func ApplyRBACWith(ctx context.Context, cp *testbed.ControlPlane, kustomization string, components ...string) error {
	dir, err := os.MkdirTemp("", "mooring-kustomize-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	// Kustomize takes only relative paths.
	deploy, err := filepath.Rel(dir, filepath.Join(RepoRoot(), "deploy"))
	if err != nil {
		return err
	}
	var k strings.Builder
	k.WriteString("resources:\n- " + filepath.Join(deploy, kustomization) + "\ncomponents:\n")
	for _, c := range components {
		k.WriteString("- " + filepath.Join(deploy, c) + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k.String()), 0o600); err != nil {
		return err
	}
	opts := krusty.MakeDefaultOptions()
	opts.LoadRestrictions = types.LoadRestrictionsNone // the kustomization lives outside deploy/
	return applyRendered(ctx, cp, dir, opts)
}

func applyRendered(ctx context.Context, cp *testbed.ControlPlane, dir string, opts *krusty.Options) error {
	m, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return err
	}
	for _, r := range m.Resources() {
		if r.GetKind() == "ConfigMap" && !strings.HasPrefix(r.GetName(), spent.NamePrefix) {
			if err := m.Remove(r.CurId()); err != nil {
				return err
			}
		}
	}
	data, err := m.AsYaml()
	if err != nil {
		return err
	}
	return cp.ApplyYAML(ctx, dir, data, func(kind string) bool {
		switch kind {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap":
			return true
		}
		return false
	})
}
