// Package trim drops from objects what mooring's controllers never read,
// before an informer stores them (cache.TransformFunc): the managed fields
// of every object, which are often larger than the object, and the image
// list of Nodes, which kubelets fill with up to 50 entries. The controllers
// never write these fields back: an update without managedFields keeps the
// stored ones, a Node update ignores its status, and status changes go as
// patches computed between two trimmed copies.
package trim

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"
)

// Object trims obj in place and returns it; what it does not know (a
// deletion tombstone, say) passes unchanged.
func Object(obj any) (any, error) {
	if n, ok := obj.(*corev1.Node); ok {
		n.Status.Images = nil
	}
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// Informer makes inf store trimmed objects. It must be called before the
// informer starts; an informer already trimmed is left as it is.
func Informer(inf cache.SharedIndexInformer) error {
	return inf.SetTransform(Object)
}

var _ cache.TransformFunc = Object
