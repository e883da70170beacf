package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/mooring-dev/mooring/csrapprover"
	"github.com/mooring-dev/mooring/csrapprover/spent"
	"github.com/mooring-dev/mooring/internal/ticket"
)

// What components/join-tickets mounts: the Secret `mooring-csr-approver
// ticket keys add --keys-secret kube-system/mooring-join-ticket-keys`
// makes, in this directory.
const (
	ticketKeysSecret = "mooring-join-ticket-keys"
	ticketKeysDir    = "/etc/mooring/ticket-keys"
)

// ccmApproverPrefix is the prefix of the approver's flags in mooring-ccm.
const ccmApproverPrefix = "csr-approver-"

// ticketFlags: the flag naming the keys file, by Deployment.
var ticketFlags = map[string]string{
	"mooring-ccm":          ccmApproverPrefix + "ticket-keys-file",
	"mooring-csr-approver": "ticket-keys-file",
}

// TestTicketFlagsExist: the flags the manifests pass are the ones the
// programs register.
func TestTicketFlagsExist(t *testing.T) {
	for _, prefix := range []string{"", ccmApproverPrefix} {
		fs := pflag.NewFlagSet("approver", pflag.ContinueOnError)
		new(csrapprover.Flags).AddFlags(fs, prefix)
		if fs.Lookup(prefix+"ticket-keys-file") == nil {
			t.Errorf("the approver registers no --%sticket-keys-file", prefix)
		}
	}
	src, err := os.ReadFile("../ccm/app/app.go")
	if err != nil {
		t.Fatal(err)
	}
	if call := `mo.Approver.AddFlags(fss.FlagSet("CSR approver"), "` + ccmApproverPrefix + `")`; !strings.Contains(string(src), call) {
		t.Errorf("ccm/app/app.go no longer calls %s: update ccmApproverPrefix and the manifests", call)
	}
}

// wantsTickets: the renderings whose approver accepts join tickets.
func wantsTickets(name string) bool {
	overlay, _, _ := strings.Cut(name, " + ") // an overlay with a component added keeps its overlay's tickets
	return strings.Contains(name, "components/join-tickets") || slices.Contains(ticketOnly, overlay)
}

// TestJoinTickets: where components/join-tickets is, each Deployment mounts
// the keys Secret's public-keys.json read-only, not optional, and names it with its
// approver's flag, once; a key set as the ticket CLI writes it, projected
// as the kubelet would, reads at that path. Elsewhere nothing of it
// appears.
func TestJoinTickets(t *testing.T) {
	for name, m := range renderings(t) {
		var ds []*appsv1.Deployment
		for _, r := range m.Resources() {
			if r.GetKind() == "Deployment" {
				ds = append(ds, decode[appsv1.Deployment](t, r))
			}
		}
		checkTickets(t, name, ds, wantsTickets(name))
	}
}

func checkTickets(t *testing.T, where string, deployments []*appsv1.Deployment, want bool) {
	t.Helper()
	for _, d := range deployments {
		pod := d.Spec.Template.Spec
		c := pod.Containers[0]
		flag, ok := ticketFlags[d.Name]
		if !ok {
			t.Fatalf("%s: Deployment %s: which flag names its ticket keys?", where, d.Name)
		}
		var files []string
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--"+flag+"="); ok {
				files = append(files, v)
			} else if strings.Contains(a, "ticket-keys-file") {
				t.Errorf("%s: %s: %s is not %s's flag", where, d.Name, a, d.Name)
			}
		}
		vol := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool {
			return v.Secret != nil && v.Secret.SecretName == ticketKeysSecret
		})
		mount := slices.IndexFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm.MountPath == ticketKeysDir })
		if !want {
			if len(files) > 0 || vol >= 0 || mount >= 0 {
				t.Errorf("%s: %s has ticket keys (args %v) without components/join-tickets", where, d.Name, c.Args)
			}
			continue
		}
		if len(files) != 1 || vol < 0 || mount < 0 {
			t.Errorf("%s: %s: --%s %v, Secret volume %v, mount at %s %v: want each once", where, d.Name, flag, files, vol >= 0, ticketKeysDir, mount >= 0)
			continue
		}
		v, vm := pod.Volumes[vol], c.VolumeMounts[mount]
		if vm.Name != v.Name || !vm.ReadOnly || vm.SubPath != "" {
			t.Errorf("%s: %s: mount %+v of volume %s, want it read-only, whole (a subPath is never updated)", where, d.Name, vm, v.Name)
		}
		// A missing Secret must stop the pod at the mount, where the Event
		// names it, rather than mount empty.
		if v.Secret.Optional != nil && *v.Secret.Optional {
			t.Errorf("%s: %s: the ticket keys volume is optional", where, d.Name)
		}
		file := files[0]
		if path.Dir(file) != ticketKeysDir {
			t.Errorf("%s: %s: --%s=%s is not in the mount %s", where, d.Name, flag, file, ticketKeysDir)
		}
		readProjected(t, where+": "+d.Name, v.Secret, file)
	}
}

// readProjected writes a key set as the ticket CLI stores it in the Secret
// into a directory as the kubelet projects volume into ticketKeysDir, and
// reads file there as the approver does.
func readProjected(t *testing.T, where string, volume *corev1.SecretVolumeSource, file string) {
	t.Helper()
	var keys ticket.KeySet
	for range 2 { // a rotation under way: both keys verify
		if _, err := keys.AddKey(); err != nil {
			t.Fatal(err)
		}
	}
	data, err := keys.Data()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	dir := filepath.Join(root, filepath.FromSlash(ticketKeysDir))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	items := volume.Items
	if len(items) == 0 {
		for k := range data {
			items = append(items, corev1.KeyToPath{Key: k, Path: k})
		}
	}
	for _, it := range items {
		content, ok := data[it.Key]
		if !ok {
			t.Errorf("%s: the volume projects key %s, which the ticket CLI's Secret does not have (the mount would fail)", where, it.Key)
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(it.Path)), content, 0o644); err != nil {
			t.Fatal(err)
		}
		if it.Key != ticket.PublicKeysFile {
			t.Errorf("%s: the volume projects %s; the approver needs only %s (least privilege: no private keys)", where, it.Key, ticket.PublicKeysFile)
		}
	}
	got, err := (&ticket.KeyFile{Path: filepath.Join(root, filepath.FromSlash(file))}).Keys()
	if err != nil {
		t.Fatalf("%s: the approver cannot read its keys: %v", where, err)
	}
	want := keys.PublicKeys()
	if len(got) != len(want) {
		t.Fatalf("%s: the approver reads %d keys, the Secret holds %d", where, len(got), len(want))
	}
	for kid, k := range want {
		if g, ok := got[kid]; !ok || !g.Equal(k) {
			t.Errorf("%s: the approver reads no key %s, or another", where, kid)
		}
	}
}

// TestSpentTicketShardsShipped: where join tickets are accepted, the
// manifests ship the spent-ticket ConfigMaps (spent.ShardNames) in the
// approver's namespace, empty, and the chart keeps them on helm uninstall;
// the approver's Role grants on ConfigMaps get and update of exactly those
// names, nothing else (no create: it could plant ConfigMaps the cluster
// reads when present). Elsewhere neither appears.
func TestSpentTicketShardsShipped(t *testing.T) {
	for name, m := range renderings(t) {
		var cms []map[string]any
		var roles []*rbacv1.Role
		for _, r := range m.Resources() {
			obj, err := r.Map()
			if err != nil {
				t.Fatal(err)
			}
			switch r.GetKind() {
			case "ConfigMap":
				cms = append(cms, obj)
			case "Role":
				roles = append(roles, decode[rbacv1.Role](t, r))
			}
		}
		checkShards(t, name, cms, roles, "kube-system", wantsTickets(name), false)
	}
	for _, mode := range []string{"ccm", "approver-only"} {
		for _, tickets := range []bool{false, true} {
			where := fmt.Sprintf("chart, mode %s, tickets.enabled=%v", mode, tickets)
			objs := renderChart(t, "ci/aws-values.yaml", nil, "--namespace", "mooring", "--set", "mode="+mode, "--set", fmt.Sprintf("tickets.enabled=%v", tickets))
			var cms []map[string]any
			var roles []*rbacv1.Role
			for _, obj := range objs {
				switch obj["kind"] {
				case "ConfigMap":
					cms = append(cms, obj)
				case "Role":
					role := new(rbacv1.Role)
					if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj, role, true); err != nil {
						t.Fatal(err)
					}
					roles = append(roles, role)
				case "Deployment":
					// The approver records in the namespace the chart
					// ships the ConfigMaps in.
					data, _ := json.Marshal(obj)
					if arg := "spent-tickets-namespace=mooring"; strings.Contains(string(data), arg) != tickets {
						t.Errorf("%s: the Deployment's --...%s: %v, want %v", where, arg, !tickets, tickets)
					}
				}
			}
			checkShards(t, where, cms, roles, "mooring", tickets, true)
		}
	}
}

// checkShards checks the spent-ticket ConfigMaps among cms and the rules
// on ConfigMaps of the workload's roles (all but the nodes'), which must be
// in the approver's namespace ns.
func checkShards(t *testing.T, where string, cms []map[string]any, roles []*rbacv1.Role, ns string, want, helm bool) {
	t.Helper()
	var got []string
	for _, obj := range cms {
		meta, _ := obj["metadata"].(map[string]any)
		name, _ := meta["name"].(string)
		if !strings.HasPrefix(name, spent.NamePrefix) {
			continue
		}
		got = append(got, name)
		if meta["namespace"] != ns {
			t.Errorf("%s: ConfigMap %s in namespace %v, want %s (the approver's)", where, name, meta["namespace"], ns)
		}
		for _, field := range []string{"data", "binaryData", "immutable"} {
			if _, ok := obj[field]; ok {
				t.Errorf("%s: ConfigMap %s ships %s: an apply or upgrade would overwrite the approver's record", where, name, field)
			}
		}
		ann, _ := meta["annotations"].(map[string]any)
		if helm && ann["helm.sh/resource-policy"] != "keep" {
			t.Errorf("%s: ConfigMap %s: annotations %v, want helm.sh/resource-policy: keep (helm uninstall must not forget spent tickets)", where, name, ann)
		}
	}
	slices.Sort(got)
	if want && !slices.Equal(got, spent.ShardNames()) {
		t.Errorf("%s ships the spent-ticket ConfigMaps %v, want %v", where, got, spent.ShardNames())
	}
	if !want && len(got) > 0 {
		t.Errorf("%s ships spent-ticket ConfigMaps %v without join tickets", where, got)
	}
	var rules []rbacv1.PolicyRule
	for _, r := range roles {
		if r.Name == "mooring:kubelet-config" {
			continue // the nodes' (TestKubeletConfigRBACIsLeastPrivilege)
		}
		if r.Name == "mooring:cloud-controller-manager:gce-cluster-id" {
			continue // the upstream GCE provider's list and watch (TestRBACIsWhatTheCodeUses)
		}
		for _, rule := range r.Rules {
			if slices.Contains(rule.Resources, "configmaps") || slices.Contains(rule.Resources, "*") {
				if r.Namespace != ns {
					t.Errorf("%s: Role %s/%s grants on ConfigMaps outside the approver's namespace %s", where, r.Namespace, r.Name, ns)
				}
				rules = append(rules, rule)
			}
		}
	}
	if !want {
		if len(rules) > 0 {
			t.Errorf("%s grants on ConfigMaps without join tickets: %+v", where, rules)
		}
		return
	}
	for _, rule := range rules {
		names := slices.Sorted(slices.Values(rule.ResourceNames))
		verbs := slices.Sorted(slices.Values(rule.Verbs))
		if !slices.Equal(rule.APIGroups, []string{""}) || !slices.Equal(rule.Resources, []string{"configmaps"}) ||
			!slices.Equal(names, spent.ShardNames()) || !slices.Equal(verbs, []string{"get", "update"}) {
			t.Errorf("%s: a Role grants %+v; on ConfigMaps the approver may get and update the spent-ticket ConfigMaps only", where, rule)
		}
	}
	if len(rules) == 0 {
		t.Errorf("%s: no Role lets the approver get and update the spent-ticket ConfigMaps", where)
	}
}
