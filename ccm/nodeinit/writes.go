package nodeinit

import (
	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
)

// Writes are the two writes that initialize a Node, built as the controller
// builds them from the Node it read and the cloud's metadata: the JSON patch
// of its metadata and spec (nil when there is nothing to write) and the
// merge patch of its status addresses (nil when they are the cloud's
// already). The scale benchmark has an unthrottled client make exactly
// these, to measure what the apiserver alone takes for them.
func Writes(node *v1.Node, md *cloudprovider.InstanceMetadata) (meta, status []byte, err error) {
	if meta, err = initPatch(node, md); err != nil {
		return nil, nil, err
	}
	status, err = statusPatch(node, md)
	return meta, status, err
}
