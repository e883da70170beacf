// Package cloud holds what every cloud backend gives mooring beyond
// k8s.io/cloud-provider's interfaces, so that the CCM's controllers and the
// CSR approver work with any backend. The backends live below it: the local
// cloud (cloud/local: a real process on loopback, the default for the demo
// and the tests) first, real clouds next. The shared instance view is
// cloud/view.
package cloud
