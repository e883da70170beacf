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
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
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
	// MooringApproves leaves out both bindings through which
	// kube-controller-manager approves kubelet client CSRs (bootstrap tokens'
	// joins and nodes' renewals), so that mooring is their only approver:
	// with either binding in place the two approvers race, and the one that
	// checks nothing can win.
	MooringApproves bool
}

// Names of kubeadm's approval bindings.
const (
	NodeClientApprovalBinding     = "kubeadm:node-autoapprove-bootstrap"
	SelfNodeClientApprovalBinding = "kubeadm:node-autoapprove-certificate-rotation"
)

// ApplyBootstrapRBAC binds what kubeadm binds for node bootstrap: bootstrap
// tokens may create CSRs; kube-controller-manager approves their client CSRs
// and nodes' renewals of their own client certificates, unless mooring
// approves.
func (cp *ControlPlane) ApplyBootstrapRBAC(ctx context.Context, opts BootstrapRBAC) error {
	bindings := []struct{ name, role, kind, subject string }{
		{"kubeadm:kubelet-bootstrap", nodeBootstrapperRole, rbacv1.GroupKind, BootstrapTokenGroup},
	}
	if !opts.MooringApproves {
		bindings = append(bindings,
			struct{ name, role, kind, subject string }{NodeClientApprovalBinding, nodeClientRole, rbacv1.GroupKind, BootstrapTokenGroup},
			struct{ name, role, kind, subject string }{SelfNodeClientApprovalBinding, selfNodeClientRole, rbacv1.GroupKind, "system:nodes"})
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

// ClusterInfoName is the public ConfigMap in kube-public that token
// discovery reads, and clusterInfoRBACName the Role and RoleBinding that let
// anonymous callers get it, named as kubeadm names them.
const (
	ClusterInfoName     = "cluster-info"
	clusterInfoRBACName = "kubeadm:bootstrap-signer-clusterinfo"
)

// PublishClusterInfo publishes the cluster for token discovery as kubeadm
// does: kube-public/cluster-info holds a kubeconfig with one cluster (the
// apiserver's URL and the cluster CA), and system:anonymous may get that one
// ConfigMap. kube-controller-manager's bootstrapsigner then adds a
// jws-kubeconfig-<id> signature for every bootstrap token allowed to sign.
func (cp *ControlPlane) PublishClusterInfo(ctx context.Context) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters[""] = &clientcmdapi.Cluster{Server: cp.URL, CertificateAuthorityData: cp.CA.CertPEM}
	kubeconfig, err := clientcmd.Write(*kc)
	if err != nil {
		return fmt.Errorf("testbed: cluster-info kubeconfig: %w", err)
	}
	cms := cp.Client.CoreV1().ConfigMaps(metav1.NamespacePublic)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: ClusterInfoName, Namespace: metav1.NamespacePublic},
		Data:       map[string]string{"kubeconfig": string(kubeconfig)},
	}
	if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		existing, gerr := cms.Get(ctx, ClusterInfoName, metav1.GetOptions{})
		if gerr != nil {
			return fmt.Errorf("testbed: get ConfigMap %s: %w", ClusterInfoName, gerr)
		}
		if existing.Data == nil {
			existing.Data = map[string]string{}
		}
		existing.Data["kubeconfig"] = string(kubeconfig)
		_, err = cms.Update(ctx, existing, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("testbed: update ConfigMap %s: %w", ClusterInfoName, err)
		}
	} else if err != nil {
		return fmt.Errorf("testbed: create ConfigMap %s: %w", ClusterInfoName, err)
	}

	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: clusterInfoRBACName, Namespace: metav1.NamespacePublic},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"configmaps"},
			ResourceNames: []string{ClusterInfoName}, Verbs: []string{"get"},
		}},
	}
	if _, err := cp.Client.RbacV1().Roles(metav1.NamespacePublic).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("testbed: create Role %s: %w", clusterInfoRBACName, err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: clusterInfoRBACName, Namespace: metav1.NamespacePublic},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: clusterInfoRBACName},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "system:anonymous"}},
	}
	if _, err := cp.Client.RbacV1().RoleBindings(metav1.NamespacePublic).Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("testbed: create RoleBinding %s: %w", clusterInfoRBACName, err)
	}
	return nil
}

// randomToken returns n (at most 26) random characters of [a-z2-7], within
// the alphabet of bootstrap tokens.
func randomToken(n int) string {
	return strings.ToLower(rand.Text())[:n]
}
