package nodeinit

import (
	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	cloudproviderapi "k8s.io/cloud-provider/api"
	cloudnodeutil "k8s.io/cloud-provider/node/helpers"
)

// desiredAddresses is what the library's controller writes into a Node's
// status.addresses: the cloud's addresses, the kubelet's Hostname address
// when the cloud has none, and the address the kubelet was given with
// --node-ip (annotation alpha.kubernetes.io/provided-node-ip) first. It
// returns nil when the cloud has no address (nothing is written then), and
// an error when the provided node IP is not among the cloud's addresses.
func desiredAddresses(node *v1.Node, md *cloudprovider.InstanceMetadata) ([]v1.NodeAddress, error) {
	if len(md.NodeAddresses) == 0 {
		return nil, nil
	}
	addresses := append([]v1.NodeAddress(nil), md.NodeAddresses...)
	hasHostname := false
	for _, a := range addresses {
		if a.Type == v1.NodeHostName {
			hasHostname = true
			break
		}
	}
	if !hasHostname {
		for _, a := range node.Status.Addresses {
			if a.Type == v1.NodeHostName {
				addresses = append(addresses, a)
			}
		}
	}
	return withProvidedNodeIP(node, addresses)
}

// withProvidedNodeIP applies the kubelet's --node-ip, if it was given.
func withProvidedNodeIP(node *v1.Node, addresses []v1.NodeAddress) ([]v1.NodeAddress, error) {
	ip, ok := node.Annotations[cloudproviderapi.AnnotationAlphaProvidedIPAddr]
	if !ok {
		return addresses, nil
	}
	return cloudnodeutil.GetNodeAddressesFromNodeIP(ip, addresses)
}

// addressesChanged: the library's comparison, by type.
func addressesChanged(old, updated []v1.NodeAddress) bool {
	if len(old) != len(updated) {
		return true
	}
	byType := map[v1.NodeAddressType]string{}
	for _, a := range old {
		byType[a.Type] = a.Address
	}
	for _, a := range updated {
		if byType[a.Type] != a.Address {
			return true
		}
	}
	return false
}
