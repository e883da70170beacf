package agentid

import (
	"fmt"
	"strings"
)

// ProviderIDPrefix starts the providerID of an EC2 instance's Node,
// aws:///<zone>/<instance-id>, as the upstream AWS CCM writes it.
const ProviderIDPrefix = "aws:///"

// ProviderID is the providerID of the instance id in zone:
// aws:///<zone>/<instance-id>.
func ProviderID(zone, id string) string { return ProviderIDPrefix + zone + "/" + id }

// NamePolicy says which Node name an EC2 instance's kubelet registers with.
// The CCM's cloud-config (nodeNamePolicy) and the agent's config must name
// the same policy.
type NamePolicy struct {
	kind string
	tag  string
}

// Node name policies, as written in configs.
const (
	// PolicyPrivateDNSName: the instance's private DNS name, as kubelets on
	// EC2 register by default (ip-10-0-0-1.ec2.internal). The default.
	PolicyPrivateDNSName = "PrivateDNSName"
	// PolicyInstanceID: the instance id (i-0123456789abcdef0).
	PolicyInstanceID = "InstanceID"
	// PolicyTagPrefix: "Tag:<key>", the value of the instance's tag <key>
	// (the agent reads it from instance metadata, whose tag access must be
	// enabled).
	PolicyTagPrefix = "Tag:"
)

// ParseNamePolicy reads a policy; "" is PrivateDNSName.
func ParseNamePolicy(s string) (NamePolicy, error) {
	switch {
	case s == "" || s == PolicyPrivateDNSName:
		return NamePolicy{kind: PolicyPrivateDNSName}, nil
	case s == PolicyInstanceID:
		return NamePolicy{kind: PolicyInstanceID}, nil
	case strings.HasPrefix(s, PolicyTagPrefix):
		key := strings.TrimPrefix(s, PolicyTagPrefix)
		// EC2 tag keys are 1-128 characters; instance metadata cannot serve
		// keys with a slash, or the keys AWS reserves.
		if key == "" || len(key) > 128 || strings.ContainsAny(key, "/ ") || strings.HasPrefix(strings.ToLower(key), "aws:") {
			return NamePolicy{}, fmt.Errorf("node name policy %q: want Tag:<key>, a key of 1-128 characters without '/', spaces or the aws: prefix", s)
		}
		return NamePolicy{kind: PolicyTagPrefix, tag: key}, nil
	}
	return NamePolicy{}, fmt.Errorf("node name policy %q: want %s, %s or %s<key>", s, PolicyPrivateDNSName, PolicyInstanceID, PolicyTagPrefix)
}

// String is the policy as configs write it.
func (p NamePolicy) String() string {
	if p.kind == PolicyTagPrefix {
		return PolicyTagPrefix + p.tag
	}
	if p.kind == "" {
		return PolicyPrivateDNSName
	}
	return p.kind
}

// TagKey is the tag the policy reads, if it reads one.
func (p NamePolicy) TagKey() (string, bool) { return p.tag, p.kind == PolicyTagPrefix }

// NodeName is the Node name of an instance under the policy, lower-cased
// as Kubernetes object names are; "" when the instance has none (no private
// DNS name yet, or no such tag).
func (p NamePolicy) NodeName(id, privateDNSName string, tags map[string]string) string {
	switch p.kind {
	case PolicyInstanceID:
		return strings.ToLower(id)
	case PolicyTagPrefix:
		return strings.ToLower(tags[p.tag])
	}
	return strings.ToLower(privateDNSName)
}
