package testbed

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Groups and roles of node bootstrap, named as kubeadm names them.
const (
	// BootstrapTokenGroup is the extra group of the test bed's bootstrap tokens.
	BootstrapTokenGroup = "system:bootstrappers:kubeadm:default-node-token"

	nodeBootstrapperRole = "system:node-bootstrapper"
	nodeClientRole       = "system:certificates.k8s.io:certificatesigningrequests:nodeclient"
	selfNodeClientRole   = "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"
)

// BootstrapRBAC says which kubeadm-equivalent bindings to create.
type BootstrapRBAC struct {
	// WithoutNodeClientApproval leaves out the binding that lets
	// kube-controller-manager approve client CSRs of bootstrap tokens, so that
	// another approver (mooring's) owns join approval.
	WithoutNodeClientApproval bool
}

// ApplyBootstrapRBAC binds what kubeadm binds for node bootstrap: bootstrap
// tokens may create CSRs; kube-controller-manager approves their client CSRs
// (unless left out) and nodes' renewals of their own client certificates.
func (cp *ControlPlane) ApplyBootstrapRBAC(ctx context.Context, opts BootstrapRBAC) error {
	bindings := []struct{ name, role, kind, subject string }{
		{"kubeadm:kubelet-bootstrap", nodeBootstrapperRole, rbacv1.GroupKind, BootstrapTokenGroup},
		{"kubeadm:node-autoapprove-certificate-rotation", selfNodeClientRole, rbacv1.GroupKind, "system:nodes"},
	}
	if !opts.WithoutNodeClientApproval {
		bindings = append(bindings, struct{ name, role, kind, subject string }{
			"kubeadm:node-autoapprove-bootstrap", nodeClientRole, rbacv1.GroupKind, BootstrapTokenGroup})
	}
	for _, b := range bindings {
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: b.name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: b.role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: b.kind, Name: b.subject}},
		}
		_, err := cp.Client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("testbed: create ClusterRoleBinding %s: %w", b.name, err)
		}
	}
	return nil
}

// CreateBootstrapToken creates a bootstrap token valid for ttl that
// authenticates as system:bootstrap:<id> in groups system:bootstrappers and
// BootstrapTokenGroup, and returns it as "<id>.<secret>".
func (cp *ControlPlane) CreateBootstrapToken(ctx context.Context, ttl time.Duration) (string, error) {
	id, secret := randomToken(6), randomToken(16)
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id, Namespace: metav1.NamespaceSystem},
		Type:       corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"token-id":                       id,
			"token-secret":                   secret,
			"expiration":                     time.Now().Add(ttl).UTC().Format(time.RFC3339),
			"usage-bootstrap-authentication": "true",
			"usage-bootstrap-signing":        "true",
			"auth-extra-groups":              BootstrapTokenGroup,
			"description":                    "mooring test bed node bootstrap token",
		},
	}
	if _, err := cp.Client.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("testbed: create bootstrap token: %w", err)
	}
	return id + "." + secret, nil
}

// randomToken returns n (at most 26) random characters of [a-z2-7], within
// the alphabet of bootstrap tokens.
func randomToken(n int) string {
	return strings.ToLower(rand.Text())[:n]
}
