package csrapprover

import (
	"context"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// Another approver of kubelet client CSRs defeats mooring's checks: two
// approvers race, and the first verdict stands, so the one that checks
// nothing wins. kube-controller-manager's csrapproving controller approves
// a client CSR whenever a SubjectAccessReview allows its requester to
// create certificatesigningrequests/nodeclient (joins) or /selfnodeclient
// (renewals); kubeadm grants both. The approver asks the same question for
// the requesters kubeadm's bindings name, and says loudly when the answer
// is yes. It also reports every approval of its signers it did not make.

// competitor is one grant kube-controller-manager approves through.
type competitor struct {
	kind        string // "join" or "renewal"
	subresource string
	user        string
	groups      []string
}

var competitors = []competitor{
	{kind: "join", subresource: "nodeclient", user: "system:bootstrap:mooring-probe",
		groups: []string{"system:bootstrappers", "system:bootstrappers:kubeadm:default-node-token", "system:authenticated"}},
	{kind: "renewal", subresource: "selfnodeclient", user: "system:node:mooring-probe",
		groups: []string{"system:nodes", "system:authenticated"}},
}

// checkCompetitors asks, for each grant, whether kube-controller-manager
// would approve, and records the answer in the competing_approvers gauge.
func (c *Controller) checkCompetitors(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for _, comp := range competitors {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: comp.user, Groups: comp.groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Group: certificatesv1.GroupName, Resource: "certificatesigningrequests", Subresource: comp.subresource,
				Verb: "create", Version: "*",
			},
		}}
		got, err := c.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			logger.Error(err, "Cannot check whether another approver may approve kubelet client CSRs", "kind", comp.kind)
			competingApprovers.WithLabelValues(comp.kind).Set(-1)
			continue
		}
		if !got.Status.Allowed {
			competingApprovers.WithLabelValues(comp.kind).Set(0)
			continue
		}
		competingApprovers.WithLabelValues(comp.kind).Set(1)
		logger.Info("WARNING: kube-controller-manager can approve kubelet client CSRs without mooring's checks; "+
			"remove the grant (kubeadm: delete ClusterRoleBindings kubeadm:node-autoapprove-bootstrap and "+
			"kubeadm:node-autoapprove-certificate-rotation) or run kube-controller-manager with --controllers=*,-csrapproving",
			"kind", comp.kind, "grant", "certificatesigningrequests/"+comp.subresource, "groups", comp.groups, "authorizer", got.Status.Reason)
	}
}

// watchCompetitors checks at start and every period until ctx ends
// (kubeadm re-creates its bindings on upgrade).
func (c *Controller) watchCompetitors(ctx context.Context, period time.Duration) {
	c.checkCompetitors(ctx)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.checkCompetitors(ctx)
		}
	}
}

// approvedElsewhere reports a CSR of our signers that someone else approved.
func (c *Controller) approvedElsewhere(old, cur *certificatesv1.CertificateSigningRequest) {
	if !ours(cur) || approval(old) != nil {
		return
	}
	cond := approval(cur)
	if cond == nil || cond.Reason == ReasonApproved {
		return
	}
	foreignApprovals.WithLabelValues(cur.Spec.SignerName, cond.Reason).Inc()
	klog.InfoS("WARNING: a kubelet CSR was approved by another approver, not by mooring", "csr", cur.Name,
		"signer", cur.Spec.SignerName, "requester", cur.Spec.Username, "reason", cond.Reason, "message", cond.Message)
	c.recorder.Eventf(cur, v1.EventTypeWarning, "ApprovedElsewhere",
		"Approved by another approver (reason %s), without mooring's checks", cond.Reason)
}

func approval(csr *certificatesv1.CertificateSigningRequest) *certificatesv1.CertificateSigningRequestCondition {
	if csr == nil {
		return nil
	}
	for i, cond := range csr.Status.Conditions {
		if cond.Type == certificatesv1.CertificateApproved {
			return &csr.Status.Conditions[i]
		}
	}
	return nil
}
