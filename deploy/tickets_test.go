package deploy

import (
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/mooring-dev/mooring/csrapprover"
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
	return strings.Contains(name, "components/join-tickets") || slices.Contains(ticketOnly, name)
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
