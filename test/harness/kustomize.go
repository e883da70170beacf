package harness

import (
	"context"
	"path/filepath"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/mooring-dev/mooring/test/testbed"
)

// ApplyRBAC renders a kustomization under deploy/ (as `kubectl kustomize`
// does) and creates its ServiceAccounts and RBAC objects on the test bed;
// Deployments and Secrets are left out (the test bed runs the programs as
// processes, with configs of its own).
func ApplyRBAC(ctx context.Context, cp *testbed.ControlPlane, kustomization string) error {
	dir := filepath.Join(RepoRoot(), "deploy", kustomization)
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return err
	}
	data, err := m.AsYaml()
	if err != nil {
		return err
	}
	return cp.ApplyYAML(ctx, dir, data, func(kind string) bool {
		switch kind {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			return true
		}
		return false
	})
}
