package e2e

import (
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/mooring-dev/mooring/cloud/local/attest"
	"github.com/mooring-dev/mooring/cloud/local/client"
	"github.com/mooring-dev/mooring/internal/evidence"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// TestApprovalByAnotherApproverIsReported: kubeadm re-creates its
// auto-approval binding on upgrade, after which kube-controller-manager's
// csrapproving controller approves bootstrap CSRs before mooring's checks
// can refuse them. On the bed, with the binding re-created while the cloud
// is down (so mooring holds the join, deciding nothing), the controller
// manager approves it; mooring-csr-approver reports that approval as
// someone else's: a Warning Event ApprovedElsewhere on the CSR.
func TestApprovalByAnotherApproverIsReported(t *testing.T) {
	ctx, c, lc, in, _ := approverOnLocalCloud(t)

	// What a kubeadm upgrade does.
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: testbed.NodeClientApprovalBinding},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole",
			Name: "system:certificates.k8s.io:certificatesigningrequests:nodeclient"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: testbed.BootstrapTokenGroup}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A real join's evidence, then the cloud goes down before the CSR is
	// filed: mooring cannot check the instance and decides nothing.
	join, err := harness.JoinWith(ctx, c, "node-1", func(binding string) ([]evidence.Block, error) {
		tok, err := client.NewMetadata(in.MetadataURL, nil).IdentityToken(ctx, binding)
		if err != nil {
			return nil, err
		}
		if err := lc.Kill(); err != nil {
			return nil, err
		}
		return []evidence.Block{{Type: attest.Type, Data: []byte(tok)}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	csr, err := harness.WaitForDecision(ctx, c.Client, join.Name)
	if err != nil {
		t.Fatal(err)
	}
	cond := harness.Condition(csr, certificatesv1.CertificateApproved)
	if cond == nil || cond.Reason == "MooringApproved" {
		t.Fatalf("want an approval by kube-controller-manager, got %+v", csr.Status.Conditions)
	}
	t.Logf("approved by another approver: reason %s", cond.Reason)
	harness.WaitUntil(ctx, t, "Event ApprovedElsewhere on "+join.Name, func() (bool, error) {
		events, err := c.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
			FieldSelector: fields.AndSelectors(
				fields.OneTermEqualSelector("involvedObject.name", join.Name),
				fields.OneTermEqualSelector("reason", "ApprovedElsewhere")).String(),
		})
		if err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if e.Type == corev1.EventTypeWarning {
				t.Logf("event: %s", e.Message)
				return true, nil
			}
		}
		return false, nil
	})
}
