// Package ccm will hold mooring-ccm, a cloud-controller-manager built on
// k8s.io/cloud-provider: node initialization, node lifecycle, Services of type
// LoadBalancer and routes, over a shared, batched view of the cloud. Its main
// will live in ccm/cmd/mooring-ccm.
package ccm
