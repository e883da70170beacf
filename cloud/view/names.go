package view

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// NamePolicy says which Node name an instance's kubelet registers with. The
// CCM finds Nodes without a providerID by it, and the CSR approver derives
// the only node name an instance may claim from it.
type NamePolicy string

// Node name policies.
const (
	// NameFromInstanceName: the Node is named like the instance (default).
	NameFromInstanceName NamePolicy = "InstanceName"
	// NameFromInstanceID: the Node is named by the instance id.
	NameFromInstanceID NamePolicy = "InstanceID"
)

// Validate refuses unknown policies; the empty policy means the default.
func (p NamePolicy) Validate() error {
	switch p {
	case "", NameFromInstanceName, NameFromInstanceID:
		return nil
	}
	return fmt.Errorf("node name policy %q: want %s or %s", p, NameFromInstanceName, NameFromInstanceID)
}

// NodeName is the Node name of the instance under the policy, lower-cased
// as Kubernetes object names are.
func (p NamePolicy) NodeName(in Instance) string {
	if p == NameFromInstanceID {
		return strings.ToLower(in.ID)
	}
	return strings.ToLower(in.Name)
}

// ByNodeName finds the instance whose Node, under the policy, is nodeName.
func (v *View) ByNodeName(ctx context.Context, p NamePolicy, nodeName string, maxAge time.Duration) (Instance, error) {
	if p == NameFromInstanceID {
		// A Node name is always lower case; instance ids may not be.
		return v.lookup(ctx, "nodeName", nodeName, maxAge, func(s *snapshot) (int, bool) {
			i, ok := s.byLowerID[strings.ToLower(nodeName)]
			return i, ok
		})
	}
	return v.ByName(ctx, nodeName, maxAge)
}
