package view

import (
	"context"
	"strings"
	"time"
)

// ByNodeName finds the instance whose kubelet registers the Node nodeName
// (Instance.NodeName, which the backend's node name policy derived),
// case-insensitively; a live instance wins over terminated ones. The CCM
// finds Nodes without a providerID by it.
func (v *View) ByNodeName(ctx context.Context, nodeName string, maxAge time.Duration) (Instance, error) {
	key := strings.ToLower(nodeName)
	return v.lookup(ctx, "nodeName", nodeName, maxAge, false, func(s *snapshot) (int, bool) {
		i, ok := s.byNodeName[key]
		return i, ok
	})
}

// Named returns every instance of that name, case-insensitively, in the
// order the cloud listed them, terminated ones included: a join ticket names
// its instance by name and holds only for the one instance of it. An
// instance in none of the snapshot's names is not found as in the other
// lookups: only a List that began after the question says ErrNotFound.
func (v *View) Named(ctx context.Context, name string, maxAge time.Duration) ([]Instance, error) {
	return named(ctx, v, name, maxAge, false)
}
