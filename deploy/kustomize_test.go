// Package deploy holds mooring's manifests; its test renders them.
package deploy

import (
	"bytes"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/mooring-dev/mooring/cloud/digitalocean"
	"github.com/mooring-dev/mooring/cloud/hetzner"
	"github.com/mooring-dev/mooring/cloud/linode"
	"github.com/mooring-dev/mooring/cloud/oci"
	"github.com/mooring-dev/mooring/cloud/openstack"
	"github.com/mooring-dev/mooring/cloud/vsphere"
	"github.com/mooring-dev/mooring/csrapprover/spent"
)

// cloudConfigDir is where the Deployments mount the Secret
// mooring-cloud-config.
const cloudConfigDir = "/etc/mooring/cloud"

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

// ids are the kind/name of each object; generated ConfigMaps and Secrets by
// the name before kustomize's hash suffix.
func ids(m resmap.ResMap) []string {
	var out []string
	for _, r := range m.Resources() {
		out = append(out, r.GetKind()+"/"+origName(r))
	}
	slices.Sort(out)
	return out
}

// hashSuffix is what kustomize appends to a generated name.
var hashSuffix = regexp.MustCompile(`-[a-z0-9]{10}$`)

func origName(r *resource.Resource) string {
	if r.GetKind() == "ConfigMap" || r.GetKind() == "Secret" {
		return hashSuffix.ReplaceAllString(r.GetName(), "")
	}
	return r.GetName()
}

func find(t *testing.T, m resmap.ResMap, kind, name string) *resource.Resource {
	t.Helper()
	for _, r := range m.Resources() {
		if r.GetKind() == kind && origName(r) == name {
			return r
		}
	}
	t.Fatalf("no %s %s", kind, name)
	return nil
}

func deploymentArgs(t *testing.T, m resmap.ResMap, name string) []string {
	t.Helper()
	return decode[appsv1.Deployment](t, find(t, m, "Deployment", name)).Spec.Template.Spec.Containers[0].Args
}

func configMapData(t *testing.T, m resmap.ResMap, name string) map[string]string {
	t.Helper()
	return find(t, m, "ConfigMap", name).GetDataMap()
}

// decode converts a rendered object to its API type.
func decode[T any](t *testing.T, r *resource.Resource) *T {
	t.Helper()
	obj, err := r.Map()
	if err != nil {
		t.Fatal(err)
	}
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj, out, true); err != nil {
		t.Fatalf("%s/%s: %v", r.GetKind(), r.GetName(), err)
	}
	return out
}

// The overlays users apply; base and the pieces are not applicable alone.
var overlays = []string{"overlays/local", "overlays/aws", "overlays/gce", "overlays/azure", "overlays/digitalocean", "overlays/hetzner", "overlays/linode", "overlays/vsphere", "overlays/openstack", "overlays/oci", "overlays/approver-only"}

// ticketOnly are the overlays of clouds that sign no instance identity:
// their nodes join with join tickets only, so they include
// components/join-tickets.
var ticketOnly = []string{"overlays/digitalocean", "overlays/hetzner", "overlays/linode", "overlays/vsphere", "overlays/openstack"}

// composed are overlays with a component added, as an operator adds it
// (components: [...] in a kustomization of their own), by overlay and
// component.
var composed = [][2]string{
	{"overlays/approver-only", "components/join-tickets"},
	{"overlays/aws", "components/join-tickets"},
	{"overlays/linode", "components/linode-tls-secrets"},
	{"overlays/gce", "components/gce-upstream-load-balancers"},
}

// renderComposed renders overlay with components added, from a
// kustomization in a directory of its own that names them (kustomize takes
// other roots by relative paths only).
func renderComposed(t *testing.T, overlay string, components ...string) resmap.ResMap {
	t.Helper()
	return renderWith(t, overlay, "", components...)
}

// renderWith is renderComposed with more kustomization text (an operator's
// generators, say) appended.
func renderWith(t *testing.T, overlay, extra string, components ...string) resmap.ResMap {
	t.Helper()
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
	k := "resources:\n- " + rel(overlay) + "\ncomponents:\n"
	for _, c := range components {
		k += "- " + rel(c) + "\n"
	}
	k += extra
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o600); err != nil {
		t.Fatal(err)
	}
	return render(t, dir)
}

// renderings are every overlay and every composed overlay, by name.
func renderings(t *testing.T) map[string]resmap.ResMap {
	t.Helper()
	out := map[string]resmap.ResMap{}
	for _, dir := range overlays {
		out[dir] = render(t, dir)
	}
	for _, c := range composed {
		out[c[0]+" + "+c[1]] = renderComposed(t, c[0], c[1])
	}
	return out
}

func TestKustomizationsRender(t *testing.T) {
	base := render(t, "base")
	want := []string{
		"ClusterRole/mooring:cloud-controller-manager", "ClusterRole/mooring:csr-approver", "ClusterRole/mooring:metrics-reader",
		"ClusterRoleBinding/mooring:cloud-controller-manager", "ClusterRoleBinding/mooring:cloud-controller-manager:auth-delegator",
		"ClusterRoleBinding/mooring:cloud-controller-manager:csr-approver",
		"Deployment/mooring-ccm", "FlowSchema/mooring", "FlowSchema/mooring-leader-election", "PodDisruptionBudget/mooring-ccm", "PriorityLevelConfiguration/mooring",
		"Role/mooring:cloud-controller-manager:leader-election", "Role/mooring:kubelet-config",
		"RoleBinding/mooring:cloud-controller-manager:authentication-reader", "RoleBinding/mooring:cloud-controller-manager:leader-election",
		"RoleBinding/mooring:kubelet-config",
		"Service/mooring-ccm-metrics", "ServiceAccount/cloud-controller-manager",
	}
	if got := ids(base); !slices.Equal(got, want) {
		t.Fatalf("base renders\n%v\nwant\n%v", got, want)
	}
	if args := deploymentArgs(t, base, "mooring-ccm"); !slices.Contains(args, "--controllers=*,csr-approver") || !slices.Contains(args, "--leader-elect=true") ||
		!slices.Contains(args, "--cloud-provider=$(CLOUD_PROVIDER)") {
		t.Fatalf("base CCM args %v", args)
	}
	// The base names no cloud and holds no config: applying it (or an
	// overlay) never overwrites a Secret the operator made.
	for _, dir := range []string{"base", "ccm", "csrapprover", "metrics"} {
		for _, r := range render(t, dir).Resources() {
			if r.GetKind() == "Secret" || r.GetKind() == "ConfigMap" {
				t.Errorf("%s renders %s/%s: the cloud's config belongs to an overlay", dir, r.GetKind(), r.GetName())
			}
		}
	}
	withCloud := append(slices.Clone(want), "ConfigMap/mooring-cloud", "Secret/mooring-cloud-config")
	slices.Sort(withCloud)
	// The ticket-only clouds' overlays ship the spent-ticket ConfigMaps
	// too (components/join-tickets).
	withTickets := slices.Clone(withCloud)
	for _, name := range spent.ShardNames() {
		withTickets = append(withTickets, "ConfigMap/"+name)
	}
	slices.Sort(withTickets)

	for dir, provider := range map[string]string{"overlays/local": "local", "overlays/aws": "aws", "overlays/gce": "gce", "overlays/azure": "azure",
		"overlays/digitalocean": "digitalocean", "overlays/hetzner": "hetzner", "overlays/linode": "linode", "overlays/vsphere": "vsphere",
		"overlays/openstack": "openstack", "overlays/oci": "oci"} {
		m := render(t, dir)
		wantIDs := withCloud
		if slices.Contains(ticketOnly, dir) {
			wantIDs = withTickets
		}
		if got := ids(m); !slices.Equal(got, wantIDs) {
			t.Fatalf("%s renders %v", dir, got)
		}
		if p := configMapData(t, m, "mooring-cloud")["provider"]; p != provider {
			t.Fatalf("%s provider %q", dir, p)
		}
		// The generated names (hash suffixed) are the ones the
		// Deployment reads.
		cm, secret := find(t, m, "ConfigMap", "mooring-cloud"), find(t, m, "Secret", "mooring-cloud-config")
		if cm.GetName() == "mooring-cloud" || secret.GetName() == "mooring-cloud-config" {
			t.Errorf("%s: generated names without a content hash: %s, %s", dir, cm.GetName(), secret.GetName())
		}
		pod := decode[appsv1.Deployment](t, find(t, m, "Deployment", "mooring-ccm")).Spec.Template.Spec
		if pod.Volumes[0].Secret.SecretName != secret.GetName() || pod.Containers[0].Env[0].ValueFrom.ConfigMapKeyRef.Name != cm.GetName() {
			t.Errorf("%s: the Deployment reads %s and %s, the overlay makes %s and %s", dir, pod.Volumes[0].Secret.SecretName,
				pod.Containers[0].Env[0].ValueFrom.ConfigMapKeyRef.Name, secret.GetName(), cm.GetName())
		}
		config, ok := decode[corev1.Secret](t, secret).Data["cloud.yaml"]
		if !ok {
			t.Errorf("%s: the Secret has no cloud.yaml", dir)
		}
		// A token file the config names in the Secret's mount is in the
		// Secret.
		var c struct {
			TokenFile  string `json:"tokenFile"`
			SecretFile string `json:"secretFile"`
		}
		if err := yaml.Unmarshal(config, &c); err != nil {
			t.Errorf("%s: cloud.yaml: %v", dir, err)
		}
		for _, file := range []string{c.TokenFile, c.SecretFile} {
			if name, ok := strings.CutPrefix(file, cloudConfigDir+"/"); ok {
				if _, ok := secret.GetDataMap()[name]; !ok {
					t.Errorf("%s: cloud.yaml names %s, and the Secret has no %s", dir, file, name)
				}
			}
		}
	}
	local := render(t, "overlays/local")
	if replicas := decode[appsv1.Deployment](t, find(t, local, "Deployment", "mooring-ccm")).Spec.Replicas; replicas == nil || *replicas != 1 {
		t.Fatalf("overlays/local replicas %v", replicas)
	}
	// The backends' own strict parsers take the configs of the overlays
	// of ticket-only clouds as they are (their placeholders are valid
	// values), and both read the token from the Secret.
	for dir, parse := range map[string]func(io.Reader) error{
		"overlays/digitalocean": func(r io.Reader) error { _, err := digitalocean.ParseConfig(r); return err },
		"overlays/hetzner":      func(r io.Reader) error { _, err := hetzner.ParseConfig(r); return err },
		"overlays/linode":       func(r io.Reader) error { _, err := linode.ParseConfig(r); return err },
	} {
		m := render(t, dir)
		secret := decode[corev1.Secret](t, find(t, m, "Secret", "mooring-cloud-config"))
		if err := parse(bytes.NewReader(secret.Data["cloud.yaml"])); err != nil {
			t.Errorf("%s: cloud.yaml: %v", dir, err)
		}
		if !bytes.Contains(secret.Data["cloud.yaml"], []byte("tokenFile: "+cloudConfigDir+"/token")) || len(bytes.TrimSpace(secret.Data["token"])) == 0 {
			t.Errorf("%s: the token is not the Secret's file token", dir)
		}
	}
	// vSphere's config takes the password from the Secret's file.
	vs := decode[corev1.Secret](t, find(t, render(t, "overlays/vsphere"), "Secret", "mooring-cloud-config"))
	if _, err := vsphere.ParseConfig(bytes.NewReader(vs.Data["cloud.yaml"])); err != nil {
		t.Errorf("overlays/vsphere: cloud.yaml: %v", err)
	}
	if !bytes.Contains(vs.Data["cloud.yaml"], []byte("passwordFile: "+cloudConfigDir+"/password")) || len(bytes.TrimSpace(vs.Data["password"])) == 0 {
		t.Errorf("overlays/vsphere: the password is not the Secret's file password")
	}
	// OpenStack's: the application credential's secret is the Secret's
	// file secret.
	{
		secret := decode[corev1.Secret](t, find(t, render(t, "overlays/openstack"), "Secret", "mooring-cloud-config"))
		if _, err := openstack.ParseConfig(bytes.NewReader(secret.Data["cloud.yaml"])); err != nil {
			t.Errorf("overlays/openstack: cloud.yaml: %v", err)
		}
		if !bytes.Contains(secret.Data["cloud.yaml"], []byte("secretFile: "+cloudConfigDir+"/secret")) || len(bytes.TrimSpace(secret.Data["secret"])) == 0 {
			t.Errorf("overlays/openstack: the application credential secret is not the Secret's file secret")
		}
	}

	// OCI's: the config file, API key and roots are the Secret's files,
	// and the config file names the key there.
	{
		secret := decode[corev1.Secret](t, find(t, render(t, "overlays/oci"), "Secret", "mooring-cloud-config"))
		if _, err := oci.ParseConfig(bytes.NewReader(secret.Data["cloud.yaml"])); err != nil {
			t.Errorf("overlays/oci: cloud.yaml: %v", err)
		}
		for _, f := range []string{"oci_config", "oci_roots"} {
			if !bytes.Contains(secret.Data["cloud.yaml"], []byte(": "+cloudConfigDir+"/"+f+"\n")) || len(bytes.TrimSpace(secret.Data[f])) == 0 {
				t.Errorf("overlays/oci: cloud.yaml does not name the Secret's file %s", f)
			}
		}
		if !bytes.Contains(secret.Data["oci_config"], []byte("key_file="+cloudConfigDir+"/oci_api_key\n")) || len(bytes.TrimSpace(secret.Data["oci_api_key"])) == 0 {
			t.Errorf("overlays/oci: oci_config does not name the Secret's file oci_api_key")
		}
	}

	only := render(t, "overlays/approver-only")
	got := ids(only)
	for _, id := range got {
		if strings.Contains(id, "cloud-controller-manager") || strings.Contains(id, "mooring-ccm") {
			t.Errorf("approver-only renders %s", id)
		}
	}
	for _, id := range []string{"Deployment/mooring-csr-approver", "ClusterRole/mooring:csr-approver", "ConfigMap/mooring-cloud",
		"Secret/mooring-cloud-config", "ServiceAccount/mooring-csr-approver", "PodDisruptionBudget/mooring-csr-approver",
		"Service/mooring-csr-approver-metrics", "ClusterRole/mooring:metrics-reader", "ClusterRoleBinding/mooring:csr-approver:auth-delegator"} {
		if !slices.Contains(got, id) {
			t.Errorf("approver-only lacks %s: %v", id, got)
		}
	}
}

// TestDeploymentsSurviveARealControlPlane: each Deployment runs with the
// host network, so its ports are the node's: they are declared (host ports
// the scheduler accounts for), two replicas never share a node (required
// anti-affinity by hostname), a rollout never needs a spare node (maxSurge
// 0), a PodDisruptionBudget bounds evictions, probes use declared ports, and
// the container runs confined.
func TestDeploymentsSurviveARealControlPlane(t *testing.T) {
	for dir, m := range renderings(t) {
		n := 0
		for _, r := range m.Resources() {
			if r.GetKind() != "Deployment" {
				continue
			}
			n++
			d := decode[appsv1.Deployment](t, r)
			checkDeployment(t, dir, d)
			var pdb *policyv1.PodDisruptionBudget
			for _, p := range m.Resources() {
				if p.GetKind() == "PodDisruptionBudget" && p.GetName() == d.Name {
					pdb = decode[policyv1.PodDisruptionBudget](t, p)
				}
			}
			if pdb == nil || pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil ||
				!equality.Semantic.DeepEqual(pdb.Spec.Selector, d.Spec.Selector) || pdb.Namespace != d.Namespace {
				t.Errorf("%s: %s: PodDisruptionBudget %+v, want maxUnavailable 1 over the Deployment's selector", dir, d.Name, pdb)
			}
		}
		if n == 0 {
			t.Errorf("%s renders no Deployment", dir)
		}
	}
}

func checkDeployment(t *testing.T, dir string, d *appsv1.Deployment) {
	t.Helper()
	where := dir + ": " + d.Name
	ru := d.Spec.Strategy.RollingUpdate
	if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ru == nil || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 0 ||
		ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 1 {
		t.Errorf("%s: strategy %+v, want RollingUpdate maxSurge 0 maxUnavailable 1", where, d.Spec.Strategy)
	}
	pod := d.Spec.Template.Spec
	if !pod.HostNetwork || pod.PriorityClassName != "system-cluster-critical" {
		t.Errorf("%s: hostNetwork %v, priorityClassName %q", where, pod.HostNetwork, pod.PriorityClassName)
	}
	anti := pod.Affinity
	if anti == nil || anti.PodAntiAffinity == nil || len(anti.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Fatalf("%s: no required pod anti-affinity", where)
	}
	term := anti.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0]
	if term.TopologyKey != "kubernetes.io/hostname" || term.LabelSelector == nil ||
		!equality.Semantic.DeepEqual(term.LabelSelector.MatchLabels, d.Spec.Selector.MatchLabels) {
		t.Errorf("%s: anti-affinity %+v, want the Deployment's own pods by hostname", where, term)
	}
	tolerated := false
	for _, tol := range pod.Tolerations {
		tolerated = tolerated || tol.Key == "node-role.kubernetes.io/control-plane"
	}
	if !tolerated {
		t.Errorf("%s: does not tolerate control-plane nodes", where)
	}
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 65532 ||
		psc.RunAsGroup == nil || *psc.RunAsGroup != 65532 || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: pod securityContext %+v", where, psc)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%s: %d containers", where, len(pod.Containers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 ||
		(sc.Privileged != nil && *sc.Privileged) {
		t.Errorf("%s: container securityContext %+v", where, sc)
	}
	if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("%s: resources %+v, want memory requests and limits", where, c.Resources)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if _, ok := ports["https-metrics"]; !ok {
		t.Errorf("%s: no https-metrics port declared: %+v", where, c.Ports)
	}
	// Every port the program binds is declared.
	for _, a := range c.Args {
		for _, flag := range []string{"--secure-port=", "--health-probe-bind-address="} {
			v, ok := strings.CutPrefix(a, flag)
			if !ok {
				continue
			}
			if _, port, err := net.SplitHostPort(v); err == nil {
				v = port
			}
			if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return strconv.Itoa(int(p.ContainerPort)) == v }) {
				t.Errorf("%s: %s binds a port it does not declare", where, a)
			}
		}
	}
	// Every mount names a volume of the pod (the apiserver refuses the
	// Deployment otherwise), and Secrets are mounted read-only.
	for _, vm := range c.VolumeMounts {
		i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == vm.Name })
		if i < 0 {
			t.Errorf("%s: volume mount %s names no volume of the pod", where, vm.Name)
		} else if pod.Volumes[i].Secret != nil && !vm.ReadOnly {
			t.Errorf("%s: Secret volume %s mounted writable", where, vm.Name)
		}
	}
	for name, probe := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if probe == nil || probe.HTTPGet == nil {
			t.Errorf("%s: no HTTP %s probe", where, name)
			continue
		}
		if _, ok := ports[probe.HTTPGet.Port.String()]; !ok {
			t.Errorf("%s: %s probe on %s, not a declared port", where, name, probe.HTTPGet.Port.String())
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

// The FlowSchema puts the workload's own ServiceAccount at mooring's
// priority level, in each layout.
func TestFlowSchemaNamesTheWorkload(t *testing.T) {
	for dir, deployment := range map[string]string{"base": "mooring-ccm", "overlays/approver-only": "mooring-csr-approver"} {
		m := render(t, dir)
		fs := decode[flowcontrolv1.FlowSchema](t, find(t, m, "FlowSchema", "mooring"))
		d := decode[appsv1.Deployment](t, find(t, m, "Deployment", deployment))
		sa := fs.Spec.Rules[0].Subjects[0].ServiceAccount
		if fs.Spec.PriorityLevelConfiguration.Name != "mooring" || sa == nil || sa.Name != d.Spec.Template.Spec.ServiceAccountName || sa.Namespace != d.Namespace {
			t.Errorf("%s: FlowSchema %+v does not name %s/%s", dir, fs.Spec, d.Namespace, d.Spec.Template.Spec.ServiceAccountName)
		}
		find(t, m, "PriorityLevelConfiguration", "mooring")
	}
}
