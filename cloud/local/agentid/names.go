package agentid

import (
	"fmt"
	"strings"
)

// NamePolicy says which Node name a local cloud instance's kubelet
// registers with: the agent's nodeNamePolicy, and the provider's
// (cloud/local/provider Config.NodeNamePolicy), which must be the same.
type NamePolicy string

// Node name policies.
const (
	// NameFromInstanceName: the Node is named like the instance (default).
	NameFromInstanceName NamePolicy = "InstanceName"
	// NameFromInstanceID: the Node is named by the instance id.
	NameFromInstanceID NamePolicy = "InstanceID"
)

// ParseNamePolicy reads a policy; "" is the default.
func ParseNamePolicy(s string) (NamePolicy, error) {
	switch p := NamePolicy(s); p {
	case "":
		return NameFromInstanceName, nil
	case NameFromInstanceName, NameFromInstanceID:
		return p, nil
	}
	return "", fmt.Errorf("node name policy %q: want %s or %s", s, NameFromInstanceName, NameFromInstanceID)
}

// NodeName is the Node name of the instance of that id and name under the
// policy, lower-cased as Kubernetes object names are.
func (p NamePolicy) NodeName(id, name string) string {
	if p == NameFromInstanceID {
		return strings.ToLower(id)
	}
	return strings.ToLower(name)
}
