// Package deploy holds mooring's manifests; its test renders them.
package deploy

import (
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// render builds a kustomization as `kubectl kustomize` (1.36 uses kustomize
// api v0.21.1) does.
func render(t *testing.T, dir string) resmap.ResMap {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize %s: %v", dir, err)
	}
	return m
}

func ids(m resmap.ResMap) []string {
	var out []string
	for _, r := range m.Resources() {
		out = append(out, r.GetKind()+"/"+r.GetName())
	}
	slices.Sort(out)
	return out
}

func deploymentArgs(t *testing.T, m resmap.ResMap, name string) []string {
	t.Helper()
	for _, r := range m.Resources() {
		if r.GetKind() != "Deployment" || r.GetName() != name {
			continue
		}
		containers, err := r.GetFieldValue("spec.template.spec.containers")
		if err != nil {
			t.Fatal(err)
		}
		c := containers.([]any)[0].(map[string]any)
		var args []string
		for _, a := range c["args"].([]any) {
			args = append(args, a.(string))
		}
		return args
	}
	t.Fatalf("no Deployment %s", name)
	return nil
}

func configMapData(t *testing.T, m resmap.ResMap, name string) map[string]string {
	t.Helper()
	for _, r := range m.Resources() {
		if r.GetKind() == "ConfigMap" && r.GetName() == name {
			return r.GetDataMap()
		}
	}
	t.Fatalf("no ConfigMap %s", name)
	return nil
}

func TestKustomizationsRender(t *testing.T) {
	base := render(t, "base")
	want := []string{
		"ClusterRole/mooring:cloud-controller-manager", "ClusterRole/mooring:csr-approver",
		"ClusterRoleBinding/mooring:cloud-controller-manager", "ClusterRoleBinding/mooring:cloud-controller-manager:auth-delegator",
		"ClusterRoleBinding/mooring:cloud-controller-manager:csr-approver", "ConfigMap/mooring-cloud",
		"Deployment/mooring-ccm", "Role/mooring:cloud-controller-manager:leader-election", "Role/mooring:kubelet-config",
		"RoleBinding/mooring:cloud-controller-manager:authentication-reader", "RoleBinding/mooring:cloud-controller-manager:leader-election",
		"RoleBinding/mooring:kubelet-config",
		"Secret/mooring-cloud-config", "ServiceAccount/cloud-controller-manager",
	}
	if got := ids(base); !slices.Equal(got, want) {
		t.Fatalf("base renders\n%v\nwant\n%v", got, want)
	}
	if args := deploymentArgs(t, base, "mooring-ccm"); !slices.Contains(args, "--controllers=*,csr-approver") || !slices.Contains(args, "--leader-elect=true") ||
		!slices.Contains(args, "--cloud-provider=$(CLOUD_PROVIDER)") {
		t.Fatalf("base CCM args %v", args)
	}
	// The base names no cloud: the overlay or the operator does.
	if p := configMapData(t, base, "mooring-cloud")["provider"]; p != "REPLACE-WITH-THE-CLOUD" {
		t.Fatalf("base provider %q", p)
	}

	local := render(t, "overlays/local")
	if got := ids(local); !slices.Equal(got, want) {
		t.Fatalf("overlays/local renders %v", got)
	}
	if p := configMapData(t, local, "mooring-cloud")["provider"]; p != "local" {
		t.Fatalf("overlays/local provider %q", p)
	}
	for _, r := range local.Resources() {
		if r.GetKind() == "Deployment" {
			if replicas, err := r.GetFieldValue("spec.replicas"); err != nil || replicas != 1 {
				t.Fatalf("overlays/local replicas %v (%T), %v", replicas, replicas, err)
			}
		}
	}

	aws := render(t, "overlays/aws")
	if got := ids(aws); !slices.Equal(got, want) {
		t.Fatalf("overlays/aws renders %v", got)
	}
	if p := configMapData(t, aws, "mooring-cloud")["provider"]; p != "aws" {
		t.Fatalf("overlays/aws provider %q", p)
	}

	only := render(t, "overlays/approver-only")
	got := ids(only)
	for _, id := range got {
		if strings.Contains(id, "cloud-controller-manager") || id == "Deployment/mooring-ccm" {
			t.Errorf("approver-only renders %s", id)
		}
	}
	for _, id := range []string{"Deployment/mooring-csr-approver", "ClusterRole/mooring:csr-approver", "ConfigMap/mooring-cloud", "Secret/mooring-cloud-config", "ServiceAccount/mooring-csr-approver"} {
		if !slices.Contains(got, id) {
			t.Errorf("approver-only lacks %s: %v", id, got)
		}
	}
}

// The nodes' read of kube-system/kubelet-config: get on that ConfigMap
// only, for system:nodes only.
func TestKubeletConfigRBACIsLeastPrivilege(t *testing.T) {
	found := 0
	for _, r := range render(t, "base").Resources() {
		if r.GetName() != "mooring:kubelet-config" {
			continue
		}
		found++
		if r.GetNamespace() != "kube-system" {
			t.Errorf("%s/%s in namespace %q", r.GetKind(), r.GetName(), r.GetNamespace())
		}
		switch r.GetKind() {
		case "Role":
			rules, err := r.GetFieldValue("rules")
			if err != nil {
				t.Fatal(err)
			}
			list := rules.([]any)
			rule := list[0].(map[string]any)
			if len(list) != 1 || len(rule) != 4 || !equalStrings(rule["apiGroups"], "") || !equalStrings(rule["resources"], "configmaps") ||
				!equalStrings(rule["resourceNames"], "kubelet-config") || !equalStrings(rule["verbs"], "get") {
				t.Errorf("Role rules %v, want get on configmaps/kubelet-config only", rules)
			}
		case "RoleBinding":
			subjects, err := r.GetFieldValue("subjects")
			if err != nil {
				t.Fatal(err)
			}
			list := subjects.([]any)
			s := list[0].(map[string]any)
			if len(list) != 1 || s["kind"] != "Group" || s["name"] != "system:nodes" {
				t.Errorf("RoleBinding subjects %v, want the group system:nodes only", subjects)
			}
			if ref, _ := r.GetFieldValue("roleRef.name"); ref != "mooring:kubelet-config" {
				t.Errorf("RoleBinding refers to %v", ref)
			}
		default:
			t.Errorf("unexpected %s named mooring:kubelet-config", r.GetKind())
		}
	}
	if found != 2 {
		t.Fatalf("%d objects named mooring:kubelet-config, want a Role and a RoleBinding", found)
	}
}

func equalStrings(v any, want ...string) bool {
	list, ok := v.([]any)
	if !ok || len(list) != len(want) {
		return false
	}
	for i, x := range list {
		if x != want[i] {
			return false
		}
	}
	return true
}
