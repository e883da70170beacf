// Package ccm holds mooring-ccm, a cloud-controller-manager built on
// k8s.io/cloud-provider: node initialization, node lifecycle, Services of
// type LoadBalancer and routes, over a shared, batched view of the cloud.
// The command is assembled in ccm/app; its main is ccm/cmd/mooring-ccm.
package ccm
