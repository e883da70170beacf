package testbed

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

// Apply creates the objects of a multi-document YAML manifest, such as the
// RBAC under deploy/; objects that exist already are left as they are. It
// knows the kinds mooring's manifests use.
func (cp *ControlPlane) Apply(ctx context.Context, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return cp.ApplyYAML(ctx, path, data, nil)
}

// ApplyYAML creates the objects of a multi-document manifest (name is for
// errors); keep, when set, chooses which kinds to create.
func (cp *ControlPlane) ApplyYAML(ctx context.Context, path string, data []byte, keep func(kind string) bool) error {
	r := utilyaml.NewYAMLReader(bufioReader(data))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, gvk, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if keep != nil && !keep(gvk.Kind) {
			continue
		}
		if err := cp.create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
}

func (cp *ControlPlane) create(ctx context.Context, obj any) error {
	c, o := cp.Client, metav1.CreateOptions{}
	var err error
	switch v := obj.(type) {
	case *corev1.ServiceAccount:
		_, err = c.CoreV1().ServiceAccounts(v.Namespace).Create(ctx, v, o)
	case *corev1.Secret:
		_, err = c.CoreV1().Secrets(v.Namespace).Create(ctx, v, o)
	case *corev1.ConfigMap:
		_, err = c.CoreV1().ConfigMaps(v.Namespace).Create(ctx, v, o)
	case *rbacv1.ClusterRole:
		_, err = c.RbacV1().ClusterRoles().Create(ctx, v, o)
	case *rbacv1.ClusterRoleBinding:
		_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, v, o)
	case *rbacv1.Role:
		// A Role may come again with more rules (a component added to
		// what was applied before): the newer one replaces it.
		_, err = c.RbacV1().Roles(v.Namespace).Create(ctx, v, o)
		if apierrors.IsAlreadyExists(err) {
			var cur *rbacv1.Role
			if cur, err = c.RbacV1().Roles(v.Namespace).Get(ctx, v.Name, metav1.GetOptions{}); err == nil {
				v.ResourceVersion = cur.ResourceVersion
				_, err = c.RbacV1().Roles(v.Namespace).Update(ctx, v, metav1.UpdateOptions{})
			}
		}
	case *rbacv1.RoleBinding:
		_, err = c.RbacV1().RoleBindings(v.Namespace).Create(ctx, v, o)
	case *flowcontrolv1.PriorityLevelConfiguration:
		_, err = c.FlowcontrolV1().PriorityLevelConfigurations().Create(ctx, v, o)
	case *flowcontrolv1.FlowSchema:
		_, err = c.FlowcontrolV1().FlowSchemas().Create(ctx, v, o)
	default:
		return fmt.Errorf("testbed cannot apply a %T", obj)
	}
	return err
}

func bufioReader(data []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(data)) }
