package e2e

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/mooring-dev/mooring/csrapprover/spent"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// approverIdentity is a ServiceAccount the approver runs as, with the
// RBAC that grants it its rights.
type approverIdentity struct {
	what      string // the rendering, for messages
	namespace string // the approver's (its Role's, its shards')
	user      string
	groups    []string
}

// spentTicketIdentities applies, on c, the RBAC and spent-ticket
// ConfigMaps of each rendering that accepts join tickets (the kustomize
// component added to mooring-ccm's and to mooring-csr-approver's RBAC, and
// the chart with tickets.enabled in its own namespace), and returns the
// ServiceAccounts they grant.
func spentTicketIdentities(ctx context.Context, t *testing.T, c *testbed.Cluster) []approverIdentity {
	t.Helper()
	for _, k := range []string{"ccm", "csrapprover"} {
		if err := harness.ApplyRBACWith(ctx, c.ControlPlane, k, "components/join-tickets"); err != nil {
			t.Fatal(err)
		}
	}
	// The chart, in a namespace of its own, as mooring-csr-approver.
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mooring"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	chart := filepath.Join(harness.RepoRoot(), "deploy", "helm", "mooring")
	rendered := helmTemplate(t, installHelm(t), "template", "mooring", chart, "--namespace", "mooring",
		"--values", filepath.Join(chart, "ci", "approver-only-values.yaml"), "--set", "tickets.enabled=true")
	if err := c.ApplyYAML(ctx, "helm template", rendered, func(kind string) bool {
		switch kind {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap":
			return true
		}
		return false
	}); err != nil {
		t.Fatal(err)
	}
	return []approverIdentity{
		{"deploy/ccm + components/join-tickets", "kube-system", harness.CCMUser, harness.CCMGroups},
		{"deploy/csrapprover + components/join-tickets", "kube-system", "system:serviceaccount:kube-system:mooring-csr-approver",
			[]string{"system:serviceaccounts", "system:serviceaccounts:kube-system"}},
		{"the chart, mode approver-only, tickets.enabled", "mooring", "system:serviceaccount:mooring:mooring-csr-approver",
			[]string{"system:serviceaccounts", "system:serviceaccounts:mooring"}},
	}
}

// TestApproverCannotCreateConfigMaps: with join tickets, the approver's
// RBAC granted create on ConfigMaps in its namespace (kube-system), for its
// spent-ticket record. A create cannot overwrite, but it can plant a
// ConfigMap that the cluster reads when present and does not have:
// CoreDNS's coredns-custom on k3s, aws-auth where it is absent. On a real
// apiserver, with the RBAC each rendering applies, the approver's
// ServiceAccount (impersonated) may not create any ConfigMap (those two,
// nor one named like a shard), nor list or delete them; it may get and
// update the spent-ticket ConfigMaps the manifests ship, and records a
// ticket in them.
func TestApproverCannotCreateConfigMaps(t *testing.T) {
	c := testbed.Start(t, testbed.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, id := range spentTicketIdentities(ctx, t, c) {
		cs, err := harness.UnthrottledClientAs(c, id.user, id.groups...)
		if err != nil {
			t.Fatal(err)
		}
		cms := cs.CoreV1().ConfigMaps(id.namespace)
		for _, name := range []string{"coredns-custom", "aws-auth", spent.NamePrefix + "g"} {
			for _, ns := range slices.Compact([]string{id.namespace, "kube-system"}) {
				_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
					Data:       map[string]string{"planted.server": "example.org:53 { forward . 192.0.2.1 }"},
				}, metav1.CreateOptions{})
				if !apierrors.IsForbidden(err) {
					t.Errorf("%s: %s created ConfigMap %s/%s: %v, want Forbidden", id.what, id.user, ns, name, err)
				}
			}
		}
		if _, err := cms.List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("%s: %s listed the ConfigMaps of %s: %v, want Forbidden", id.what, id.user, id.namespace, err)
		}
		shard := spent.ShardNames()[0]
		if err := cms.Delete(ctx, shard, metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("%s: %s deleted %s: %v, want Forbidden", id.what, id.user, shard, err)
		}
		// Get and update of every shard work.
		for _, name := range spent.ShardNames() {
			cm, err := cms.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Errorf("%s: %s cannot get %s/%s: %v", id.what, id.user, id.namespace, name, err)
				continue
			}
			if cm.Data == nil {
				cm.Data = map[string]string{}
			}
			cm.Data["e2e"] = "1"
			if cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
				t.Errorf("%s: %s cannot update %s/%s: %v", id.what, id.user, id.namespace, name, err)
				continue
			}
			delete(cm.Data, "e2e")
			if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
				t.Errorf("%s: %s cannot update %s/%s: %v", id.what, id.user, id.namespace, name, err)
			}
		}
		// The approver's record, as that ServiceAccount.
		spendAs(ctx, t, id, cs)
	}
	// None of the attempts planted anything.
	for _, ns := range []string{"kube-system", "mooring"} {
		for _, name := range []string{"coredns-custom", "aws-auth"} {
			if _, err := c.Client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("ConfigMap %s/%s: %v, want none", ns, name, err)
			}
		}
	}
}

// spendAs records tickets in every shard with the spent-ticket store as
// the approver's ServiceAccount, and finds them spent.
func spendAs(ctx context.Context, t *testing.T, id approverIdentity, cs kubernetes.Interface) {
	t.Helper()
	store := spent.New(cs.CoreV1(), id.namespace, time.Minute)
	exp := time.Now().Add(time.Hour)
	for i := range 64 {
		key := fmt.Sprintf("e2e/%s/%d", id.user, i)
		who := spent.Spender{Name: fmt.Sprintf("node-csr-%d", i), UID: types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i))}
		if _, spentBefore, err := store.Spend(ctx, key, exp, who); err != nil || spentBefore {
			t.Fatalf("%s: record ticket %d as %s: spent before %v, %v", id.what, i, id.user, spentBefore, err)
		}
		if _, spentBefore, err := store.Spend(ctx, key, exp, spent.Spender{Name: "thief", UID: "00000000-0000-4000-8000-ffffffffffff"}); err != nil || !spentBefore {
			t.Fatalf("%s: ticket %d again, by another CSR: spent %v, %v", id.what, i, spentBefore, err)
		}
	}
}

// TestSpentTicketRecordWithoutItsShard: a spent-ticket ConfigMap deleted
// (or never installed) is not made again by the approver, which may not:
// its tickets are not recorded (ErrMissing, so not approved) until the
// installer makes it again.
func TestSpentTicketRecordWithoutItsShard(t *testing.T) {
	c := testbed.Start(t, testbed.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := harness.ApplyRBACWith(ctx, c.ControlPlane, "csrapprover", "components/join-tickets"); err != nil {
		t.Fatal(err)
	}
	cs, err := harness.UnthrottledClientAs(c, "system:serviceaccount:kube-system:mooring-csr-approver", "system:serviceaccounts", "system:serviceaccounts:kube-system")
	if err != nil {
		t.Fatal(err)
	}
	gone := spent.ShardNames()[5]
	if err := c.Client.CoreV1().ConfigMaps("kube-system").Delete(ctx, gone, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	store := spent.New(cs.CoreV1(), "kube-system", time.Minute)
	missing := 0
	for i := range 64 {
		_, spentBefore, err := store.Spend(ctx, fmt.Sprintf("e2e/missing/%d", i), time.Now().Add(time.Hour), spent.Spender{Name: "c", UID: types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i))})
		switch {
		case errors.Is(err, spent.ErrMissing):
			missing++
		case err != nil || spentBefore:
			t.Fatalf("ticket %d: spent before %v, %v", i, spentBefore, err)
		}
	}
	if missing == 0 {
		t.Fatalf("no ticket of 64 fell in %s", gone)
	}
	if _, err := c.Client.CoreV1().ConfigMaps("kube-system").Get(ctx, gone, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("%s: %v, want it still gone", gone, err)
	}
	// Applied again, as the installer does: recorded.
	if err := harness.ApplyRBACWith(ctx, c.ControlPlane, "csrapprover", "components/join-tickets"); err != nil {
		t.Fatal(err)
	}
	for i := range 64 {
		if _, _, err := store.Spend(ctx, fmt.Sprintf("e2e/missing/%d", i), time.Now().Add(time.Hour), spent.Spender{Name: "c", UID: types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i))}); err != nil {
			t.Fatalf("ticket %d once the shard is back: %v", i, err)
		}
	}
}
