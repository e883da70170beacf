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
	return v.lookup(ctx, "nodeName", nodeName, maxAge, func(s *snapshot) (int, bool) {
		i, ok := s.byNodeName[key]
		return i, ok
	})
}
