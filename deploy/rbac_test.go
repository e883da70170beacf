package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/kustomize/api/resmap"

	"github.com/mooring-dev/mooring/csrapprover/spent"
)

// grant is one verb on one resource (with a subresource, as RBAC writes
// it), in one namespace ("" for the cluster), for one object name ("" for
// any).
type grant struct {
	group, resource, verb, namespace, name string
}

func (g grant) String() string {
	s := g.verb + " " + g.resource
	if g.group != "" {
		s += "." + g.group
	}
	if g.name != "" {
		s += "/" + g.name
	}
	if g.namespace != "" {
		s += " in " + g.namespace
	}
	return s
}

// need is a grant the code uses, with where: a file (in this repository, or
// module@version/path in the module cache) and a string that occurs in it,
// the call that needs the grant. The test checks the string is there, so a
// call that moves or goes makes this list fail rather than rot.
type need struct {
	grant
	file, call string
}

const (
	cloudProvider    = "k8s.io/cloud-provider@v0.36.3/"
	clientGo         = "k8s.io/client-go@v0.36.3/"
	componentHelpers = "k8s.io/component-helpers@v0.36.3/"
)

// ccmNeeds: what mooring-ccm's controllers call (cloud-node,
// cloud-node-lifecycle, route from k8s.io/cloud-provider; service-lb and
// node-init-retry from ccm/), and its leader election.
var ccmNeeds = []need{
	// The shared informers of Nodes and Services (list and watch).
	{grant{"", "nodes", "list", "", ""}, cloudProvider + "app/core.go", "SharedInformers.Core().V1().Nodes()"},
	{grant{"", "nodes", "watch", "", ""}, cloudProvider + "app/core.go", "SharedInformers.Core().V1().Nodes()"},
	{grant{"", "services", "list", "", ""}, "ccm/app/app.go", "Core().V1().Services()"},
	{grant{"", "services", "watch", "", ""}, "ccm/app/app.go", "Core().V1().Services()"},
	// Taints and labels: a fresh Get, then a strategic merge patch.
	{grant{"", "nodes", "get", "", ""}, cloudProvider + "node/helpers/taints.go", "c.CoreV1().Nodes().Get("},
	{grant{"", "nodes", "patch", "", ""}, cloudProvider + "node/helpers/taints.go", "c.CoreV1().Nodes().Patch("},
	{grant{"", "nodes", "patch", "", ""}, "ccm/initretry/controller.go", "c.client.CoreV1().Nodes().Patch("},
	// cloud-node-controller: the initialized Node (providerID, labels, taint).
	{grant{"", "nodes", "update", "", ""}, cloudProvider + "controllers/node/node_controller.go", "kubeClient.CoreV1().Nodes().Update("},
	// cloud-node-lifecycle: the Node of an instance that is gone.
	{grant{"", "nodes", "delete", "", ""}, cloudProvider + "controllers/nodelifecycle/node_lifecycle_controller.go", "kubeClient.CoreV1().Nodes().Delete("},
	// Addresses (cloud-node-controller) and the route controller's
	// NetworkUnavailable condition.
	{grant{"", "nodes/status", "patch", "", ""}, componentHelpers + "node/util/status.go", `metav1.PatchOptions{}, "status")`},
	{grant{"", "nodes/status", "patch", "", ""}, componentHelpers + "node/util/conditions.go", "Nodes().PatchStatus("},
	// service-lb: finalizer and status, both through the status subresource.
	{grant{"", "services/status", "patch", "", ""}, cloudProvider + "service/helpers/helper.go", `metav1.PatchOptions{}, "status")`},
	{grant{"", "services/status", "patch", "", ""}, "ccm/servicelb/controller.go", "servicehelpers.PatchService("},
	// Events: client-go's recorder creates an Event and patches repeats.
	{grant{"", "events", "create", "", ""}, clientGo + "tools/record/event.go", "sink.Create(event)"},
	{grant{"", "events", "patch", "", ""}, clientGo + "tools/record/event.go", "sink.Patch(event, patch)"},
	// Leader election on the Lease kube-system/cloud-controller-manager.
	{grant{"coordination.k8s.io", "leases", "create", "kube-system", ""}, clientGo + "tools/leaderelection/resourcelock/leaselock.go", ".Create(ctx, lease"},
	{grant{"coordination.k8s.io", "leases", "get", "kube-system", "cloud-controller-manager"}, clientGo + "tools/leaderelection/resourcelock/leaselock.go", ".Get(ctx, ll.LeaseMeta.Name"},
	{grant{"coordination.k8s.io", "leases", "update", "kube-system", "cloud-controller-manager"}, clientGo + "tools/leaderelection/resourcelock/leaselock.go", ".Update(ctx, ll.lease"},
	{grant{"coordination.k8s.io", "leases", "get", "kube-system", "cloud-controller-manager"}, cloudProvider + "options/options.go", `LeaderElection.ResourceName = "cloud-controller-manager"`},
}

// approverNeeds: the CSR approver's, inside mooring-ccm or alone.
var approverNeeds = []need{
	// Informers of CSRs and Nodes.
	{grant{"certificates.k8s.io", "certificatesigningrequests", "list", "", ""}, "csrapprover/options.go", "factory.Certificates().V1().CertificateSigningRequests()"},
	{grant{"certificates.k8s.io", "certificatesigningrequests", "watch", "", ""}, "csrapprover/options.go", "factory.Certificates().V1().CertificateSigningRequests()"},
	{grant{"", "nodes", "list", "", ""}, "csrapprover/options.go", "factory.Core().V1().Nodes()"},
	{grant{"", "nodes", "watch", "", ""}, "csrapprover/options.go", "factory.Core().V1().Nodes()"},
	// The TPM credential activation challenge, written on a join CSR
	// (its metadata) before the CSR is denied.
	{grant{"certificates.k8s.io", "certificatesigningrequests", "patch", "", ""}, "csrapprover/controller.go", "CertificateSigningRequests().Patch("},
	// The decision: an update of the approval subresource ...
	{grant{"certificates.k8s.io", "certificatesigningrequests/approval", "update", "", ""}, "csrapprover/controller.go", ".UpdateApproval("},
	// ... which the apiserver's CertificateApproval admission allows only
	// with `approve` on the CSR's signer: no client call, a check of the
	// approver's rights, for exactly the two kubelet signers.
	{grant{"certificates.k8s.io", "signers", "approve", "", "kubernetes.io/kube-apiserver-client-kubelet"}, "csrapprover/controller.go", "UpdateApproval"},
	{grant{"certificates.k8s.io", "signers", "approve", "", "kubernetes.io/kubelet-serving"}, "csrapprover/controller.go", "UpdateApproval"},
	// Events on CSRs.
	{grant{"", "events", "create", "", ""}, "csrapprover/controller.go", "typedcorev1.EventSinkImpl{"},
	{grant{"", "events", "patch", "", ""}, "csrapprover/controller.go", "typedcorev1.EventSinkImpl{"},
	// Whether kube-controller-manager may approve too.
	{grant{"authorization.k8s.io", "subjectaccessreviews", "create", "", ""}, "csrapprover/competitors.go", "SubjectAccessReviews().Create("},
}

// tlsSecretsNeeds: what components/linode-tls-secrets (the chart's
// ccm.tlsSecrets) grants: the GET of the Secret a Linode https port or an
// OCI LB listener (ssl-ports) names.
var tlsSecretsNeeds = []need{
	{grant{"", "secrets", "get", "", ""}, "cloud/linode/tls.go", "Secrets(svc.Namespace).Get("},
	{grant{"", "secrets", "get", "", ""}, "cloud/oci/loadbalancers.go", "CoreV1().Secrets(ns).Get("},
}

// gceUpstreamNeeds: what components/gce-upstream-load-balancers grants:
// the upstream GCE provider's informer of its cluster id ConfigMap and its
// internal load balancers' finalizer (its code, in the module cache).
var gceUpstreamNeeds = []need{
	// Every ConfigMap of kube-system: the field selector it sets is
	// replaced by NewListWatchFromClient's (fields.Everything()).
	{grant{"", "configmaps", "list", "kube-system", ""}, gceUpstreamFile("gce_clusterid.go"), `"configmaps", UIDNamespace, fields.Everything())`},
	{grant{"", "configmaps", "watch", "kube-system", ""}, gceUpstreamFile("gce_clusterid.go"), `"configmaps", UIDNamespace, fields.Everything())`},
	{grant{"", "services", "patch", "", ""}, gceUpstreamFile("gce_util.go"), "servicehelper.PatchService(kubeClient, service, updated)"},
}

// gceUpstreamFile is a file of the upstream GCE provider in the module cache.
func gceUpstreamFile(name string) string {
	return "k8s.io/cloud-provider-gcp/providers@v0.28.2/gce/" + name
}

// standaloneNeeds: mooring-csr-approver's own leader election.
var standaloneNeeds = []need{
	{grant{"coordination.k8s.io", "leases", "create", "kube-system", ""}, "csrapprover/cmd/mooring-csr-approver/main.go", "resourcelock.LeasesResourceLock"},
	{grant{"coordination.k8s.io", "leases", "get", "kube-system", "mooring-csr-approver"}, "csrapprover/cmd/mooring-csr-approver/main.go", `"leader-elect-resource-name", "mooring-csr-approver"`},
	{grant{"coordination.k8s.io", "leases", "update", "kube-system", "mooring-csr-approver"}, "csrapprover/cmd/mooring-csr-approver/main.go", `"leader-elect-resource-name", "mooring-csr-approver"`},
}

// ticketNeeds: the approver's record of spent join tickets
// (csrapprover/spent), where join tickets are accepted: get and update on
// the shards, in kube-system. No create: the manifests ship the shards
// (a create of ConfigMaps in kube-system could plant ones the cluster
// reads when present, such as coredns-custom or aws-auth).
var ticketNeeds = func() []need {
	var out []need
	for _, n := range spent.ShardNames() {
		out = append(out,
			need{grant{"", "configmaps", "get", "kube-system", n}, "csrapprover/spent/spent.go", "ConfigMaps(s.namespace).Get(ctx, name"},
			need{grant{"", "configmaps", "update", "kube-system", n}, "csrapprover/spent/spent.go", "ConfigMaps(s.namespace).Update(ctx, next"})
	}
	return out
}()

// Roles of the cluster's own that the secure ports' delegated
// authentication and authorization need (TokenReview, SubjectAccessReview,
// the apiserver's client CA in kube-system/extension-apiserver-authentication);
// the cluster defines them, the manifests only bind them.
var delegation = []rbacv1.RoleRef{
	{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"},
	{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "extension-apiserver-authentication-reader"},
}

// TestRBACIsWhatTheCodeUses: in each overlay, each ServiceAccount is granted
// exactly the verbs the code uses (every grant used, every use granted), on
// the listed call sites, plus bindings of the delegation roles.
func TestRBACIsWhatTheCodeUses(t *testing.T) {
	checkCallSites(t, slices.Concat(ccmNeeds, approverNeeds, standaloneNeeds, ticketNeeds, tlsSecretsNeeds, gceUpstreamNeeds))
	ccm := slices.Concat(ccmNeeds, approverNeeds)
	ccmTickets := slices.Concat(ccm, ticketNeeds)
	for _, tc := range []struct {
		dir        string
		components []string
		sa         string
		needs      []need
	}{
		{"overlays/local", nil, "cloud-controller-manager", ccm},
		{"overlays/aws", nil, "cloud-controller-manager", ccm},
		{"overlays/gce", nil, "cloud-controller-manager", ccm},
		{"overlays/azure", nil, "cloud-controller-manager", ccm},
		{"overlays/digitalocean", nil, "cloud-controller-manager", ccmTickets},
		{"overlays/hetzner", nil, "cloud-controller-manager", ccmTickets},
		{"overlays/linode", nil, "cloud-controller-manager", ccmTickets},
		{"overlays/vsphere", nil, "cloud-controller-manager", ccmTickets},
		{"overlays/openstack", nil, "cloud-controller-manager", ccmTickets},
		{"overlays/oci", nil, "cloud-controller-manager", ccm},
		{"overlays/approver-only", nil, "mooring-csr-approver", slices.Concat(approverNeeds, standaloneNeeds)},
		{"ccm", nil, "cloud-controller-manager", ccmNeeds},
		// The ticket keys are mounted: no read of Secrets is granted; the
		// spent tickets are recorded in ConfigMaps.
		{"overlays/aws", []string{"components/join-tickets"}, "cloud-controller-manager", ccmTickets},
		{"overlays/approver-only", []string{"components/join-tickets"}, "mooring-csr-approver", slices.Concat(approverNeeds, standaloneNeeds, ticketNeeds)},
		// Reading Secrets is opt-in: only with this component.
		{"overlays/linode", []string{"components/linode-tls-secrets"}, "cloud-controller-manager", slices.Concat(ccmTickets, tlsSecretsNeeds)},
		// The upstream GCE provider's load balancers: opt-in.
		{"overlays/gce", []string{"components/gce-upstream-load-balancers"}, "cloud-controller-manager", slices.Concat(ccm, gceUpstreamNeeds)},
	} {
		name := strings.Join(append([]string{tc.dir}, tc.components...), " + ")
		t.Run(strings.NewReplacer("/", "-", " ", "").Replace(name), func(t *testing.T) {
			m := render(t, tc.dir)
			if len(tc.components) > 0 {
				m = renderComposed(t, tc.dir, tc.components...)
			}
			checkGrants(t, name, m, tc.sa, tc.needs)
		})
	}
}

// checkGrants compares what a ServiceAccount is granted in m with needs.
func checkGrants(t *testing.T, where string, m resmap.ResMap, sa string, needs []need) {
	t.Helper()
	granted, builtins := grantsOf(t, m, "kube-system", sa)
	want := map[grant]bool{}
	for _, n := range needs {
		want[n.grant] = true
	}
	for g := range granted {
		if !want[g] {
			t.Errorf("%s: %s is granted %s, which no call listed in deploy/rbac_test.go uses", where, sa, g)
		}
	}
	for g := range want {
		if !granted[g] {
			t.Errorf("%s: %s uses %s, which is not granted", where, sa, g)
		}
	}
	for _, ref := range delegation {
		if !slices.Contains(builtins, ref) {
			t.Errorf("%s: %s lacks a binding of %s %s (delegated authentication of its secure port)", where, sa, ref.Kind, ref.Name)
		}
	}
	for _, ref := range builtins {
		if !slices.Contains(delegation, ref) {
			t.Errorf("%s: %s is bound to %s %s, defined neither here nor among the delegation roles", where, sa, ref.Kind, ref.Name)
		}
	}
}

// grantsOf expands the rules of every Role and ClusterRole bound (in m) to
// the ServiceAccount ns/name; builtins are the bound roles m does not define.
func grantsOf(t *testing.T, m resmap.ResMap, ns, name string) (map[grant]bool, []rbacv1.RoleRef) {
	t.Helper()
	roles := map[string][]rbacv1.PolicyRule{} // kind/namespace/name
	for _, r := range m.Resources() {
		switch r.GetKind() {
		case "ClusterRole":
			roles["ClusterRole//"+r.GetName()] = decode[rbacv1.ClusterRole](t, r).Rules
		case "Role":
			roles["Role/"+r.GetNamespace()+"/"+r.GetName()] = decode[rbacv1.Role](t, r).Rules
		}
	}
	granted := map[grant]bool{}
	var builtins []rbacv1.RoleRef
	for _, r := range m.Resources() {
		var subjects []rbacv1.Subject
		var ref rbacv1.RoleRef
		bindingNS := ""
		switch r.GetKind() {
		case "ClusterRoleBinding":
			b := decode[rbacv1.ClusterRoleBinding](t, r)
			subjects, ref = b.Subjects, b.RoleRef
		case "RoleBinding":
			b := decode[rbacv1.RoleBinding](t, r)
			subjects, ref, bindingNS = b.Subjects, b.RoleRef, b.Namespace
		default:
			continue
		}
		if !slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
			return s.Kind == "ServiceAccount" && s.Namespace == ns && s.Name == name
		}) {
			continue
		}
		key := ref.Kind + "//" + ref.Name
		if ref.Kind == "Role" {
			key = "Role/" + bindingNS + "/" + ref.Name
		}
		rules, ok := roles[key]
		if !ok {
			builtins = append(builtins, ref)
			continue
		}
		for _, rule := range rules {
			if len(rule.NonResourceURLs) > 0 {
				t.Errorf("%s %s grants non-resource URLs %v to a controller", ref.Kind, ref.Name, rule.NonResourceURLs)
			}
			names := rule.ResourceNames
			if len(names) == 0 {
				names = []string{""}
			}
			for _, group := range rule.APIGroups {
				for _, res := range rule.Resources {
					for _, verb := range rule.Verbs {
						if group == "*" || res == "*" || verb == "*" {
							t.Errorf("%s %s grants a wildcard: %+v", ref.Kind, ref.Name, rule)
						}
						for _, n := range names {
							granted[grant{group, res, verb, bindingNS, n}] = true
						}
					}
				}
			}
		}
	}
	return granted, builtins
}

// checkCallSites: each need's call is in its file.
func checkCallSites(t *testing.T, needs []need) {
	t.Helper()
	modCache := ""
	files := map[string]string{}
	for _, n := range needs {
		path := filepath.Join("..", n.file)
		if strings.HasPrefix(n.file, "k8s.io/") {
			if modCache == "" {
				out, err := exec.Command("go", "env", "GOMODCACHE").Output()
				if err != nil {
					t.Fatalf("go env GOMODCACHE: %v", err)
				}
				modCache = strings.TrimSpace(string(out))
			}
			path = filepath.Join(modCache, n.file)
		}
		text, ok := files[path]
		if !ok {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Errorf("call site of %s: %v", n.grant, err)
				continue
			}
			text = string(data)
			files[path] = text
		}
		if !strings.Contains(text, n.call) {
			t.Errorf("%s: %q not found in %s: update deploy/rbac_test.go and the manifests' RBAC", n.grant, n.call, n.file)
		}
	}
}

// The metrics reader grants exactly GET /metrics and is bound to nothing
// (the operator binds it to the scraper).
func TestMetricsReaderRole(t *testing.T) {
	for dir, m := range renderings(t) {
		role := decode[rbacv1.ClusterRole](t, find(t, m, "ClusterRole", "mooring:metrics-reader"))
		got, _ := json.Marshal(role.Rules)
		if want := `[{"verbs":["get"],"nonResourceURLs":["/metrics"]}]`; string(got) != want {
			t.Errorf("%s: mooring:metrics-reader rules %s, want %s", dir, got, want)
		}
		for _, r := range m.Resources() {
			if r.GetKind() == "ClusterRoleBinding" {
				if b := decode[rbacv1.ClusterRoleBinding](t, r); b.RoleRef.Name == role.Name {
					t.Errorf("%s: %s binds the metrics reader", dir, fmt.Sprint(b.Subjects))
				}
			}
		}
	}
}
